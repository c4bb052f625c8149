package connectors

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/logbook/logbook/session"
)

// TokenStore keeps the sealed OAuth tokens, one per (server, channel), and the connects
// begun and not yet finished, by the hash of their state (*session.Store has it). MCPTokenOf
// answers session.ErrNotFound for a server never connected for the channel; TakeMCPConnect
// for a state unknown, taken, someone else's or expired.
type TokenStore interface {
	ConnectMCP(ctx context.Context, t session.MCPToken) error
	// RefreshMCPLocked runs refresh on the stored token under a lock held across the fleet and
	// stores what it returns (nil: the stored token stands) by compare-and-swap.
	RefreshMCPLocked(ctx context.Context, server, channel string, at time.Time,
		refresh func(ctx context.Context, sealed []byte) ([]byte, error)) ([]byte, error)
	MCPTokenOf(ctx context.Context, server, channel string) (session.MCPToken, error)
	PutMCPConnect(ctx context.Context, c session.MCPConnect, now time.Time) error
	TakeMCPConnect(ctx context.Context, stateHash []byte, who string, now time.Time) (session.MCPConnect, error)
}

// SecretKey seals the stored tokens with AES-256-GCM (LOGBOOK_SECRET_KEY).
type SecretKey struct{ aead cipher.AEAD }

// ParseSecretKey reads LOGBOOK_SECRET_KEY: 32 random bytes, base64 or hex (openssl rand
// -base64 32). The error never quotes the value.
func ParseSecretKey(s string) (*SecretKey, error) {
	s = strings.TrimSpace(s)
	var key []byte
	for _, dec := range []func(string) ([]byte, error){base64.StdEncoding.DecodeString, base64.RawStdEncoding.DecodeString,
		base64.URLEncoding.DecodeString, base64.RawURLEncoding.DecodeString, hex.DecodeString} {
		if k, err := dec(s); err == nil && len(k) == 32 {
			key = k
			break
		}
	}
	if key == nil {
		return nil, errors.New("want 32 random bytes, base64 or hex encoded (openssl rand -base64 32)")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &SecretKey{aead: aead}, nil
}

// seal is the token as JSON sealed under the key, bound to its server and channel: the nonce,
// then the ciphertext.
func (k *SecretKey) seal(tok *oauth2.Token, server, channel string) ([]byte, error) {
	return k.sealJSON(tok, server+"\x00"+channel)
}

// sealJSON is v as JSON sealed under the key, bound to aad: the nonce, then the ciphertext.
func (k *SecretKey) sealJSON(v any, aad string) ([]byte, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return k.aead.Seal(nonce, nonce, plain, []byte(aad)), nil
}

// openBytes opens what sealJSON sealed under aad.
func (k *SecretKey) openBytes(sealed []byte, aad string) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("the sealed value is truncated")
	}
	return k.aead.Open(nil, sealed[:n], sealed[n:], []byte(aad))
}

func (k *SecretKey) open(sealed []byte, server, channel string) (*oauth2.Token, error) {
	plain, err := k.openBytes(sealed, server+"\x00"+channel)
	if err != nil {
		return nil, errors.New("the stored token does not open with LOGBOOK_SECRET_KEY (was the key changed?): connect the server again")
	}
	var tok oauth2.Token
	if err := json.Unmarshal(plain, &tok); err != nil {
		return nil, fmt.Errorf("the stored token: %w", err)
	}
	return &tok, nil
}

func (o *OAuth) config(ep endpoints, redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, Scopes: ep.Scopes, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: ep.AuthURL, TokenURL: ep.TokenURL}}
}

// oauthServer is the named server with oauth that is offered in the channel.
func (c *Connectors) oauthServer(server, channelID, channelName string) (Server, error) {
	for _, s := range c.cfg.Servers {
		if s.Name != server {
			continue
		}
		if s.OAuth == nil {
			return Server{}, fmt.Errorf("MCP server %s has no oauth in LOGBOOK_MCP_CONFIG", server)
		}
		if !s.inChannel(channelID, channelName) {
			return Server{}, fmt.Errorf("MCP server %s is not offered in %s", server, channelID)
		}
		if c.opts.Tokens == nil || c.opts.Key == nil {
			return Server{}, errors.New("OAuth needs LOGBOOK_SECRET_KEY and the database")
		}
		return s, nil
	}
	return Server{}, fmt.Errorf("no MCP server %s in LOGBOOK_MCP_CONFIG", server)
}

// OAuthServers is the names of the servers with oauth.
func (c *Connectors) OAuthServers() []string {
	var out []string
	for _, s := range c.cfg.Servers {
		if s.OAuth != nil {
			out = append(out, s.Name)
		}
	}
	return out
}

// ConnectAge is how long an admin has to finish a connect at the authorization server.
const ConnectAge = 10 * time.Minute

// ErrUnknownConnect is TakeOAuth's answer for a state that is unknown, already used, begun by
// someone else, or expired.
var ErrUnknownConnect = errors.New("this connect is unknown, expired or someone else's: start it again")

// PendingConnect is a connect begun by StartOAuth, taken back by its state (TakeOAuth) to be
// finished (FinishOAuth).
type PendingConnect struct {
	Server, Channel, Who string
	pending
}

// pending is what a connect keeps sealed in the database until its callback.
type pending struct {
	Verifier  string    `json:"verifier"`
	Endpoints endpoints `json:"endpoints"`
}

func stateHash(state string) []byte {
	sum := sha256.Sum256([]byte(state))
	return sum[:]
}

func connectAAD(hash []byte, server, channel, who string) string {
	return "mcp_connect\x00" + hex.EncodeToString(hash) + "\x00" + server + "\x00" + channel + "\x00" + who
}

// StartOAuth begins connecting server for a channel on behalf of who: the authorization URL
// to send the admin's browser to, with a fresh state, the S256 challenge of a PKCE verifier
// and the resource parameter (RFC 8707). The endpoints are the file's or discovered. The
// verifier and endpoints are stored sealed with LOGBOOK_SECRET_KEY under the state's hash
// for ConnectAge, so the callback may land on any replica. redirect is the pages' callback
// URL.
func (c *Connectors) StartOAuth(ctx context.Context, server, channelID, channelName, redirect, who string) (string, error) {
	s, err := c.oauthServer(server, channelID, channelName)
	if err != nil {
		return "", err
	}
	ep, err := c.endpoints(ctx, s)
	if err != nil {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	state := base64.RawURLEncoding.EncodeToString(b)
	p := pending{Verifier: oauth2.GenerateVerifier(), Endpoints: ep}
	hash := stateHash(state)
	sealed, err := c.opts.Key.sealJSON(p, connectAAD(hash, server, channelID, who))
	if err != nil {
		return "", err
	}
	now := c.opts.Now()
	if err := c.opts.Tokens.PutMCPConnect(ctx, session.MCPConnect{StateHash: hash, Server: server, Channel: channelID, Who: who,
		Sealed: sealed, Expires: now.Add(ConnectAge)}, now); err != nil {
		return "", err
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(p.Verifier)}
	if ep.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", ep.Resource))
	}
	return s.OAuth.config(ep, redirect).AuthCodeURL(state, opts...), nil
}

// TakeOAuth takes back the connect begun with state by who, once, on any replica: an
// unknown, used, someone else's or expired state is ErrUnknownConnect.
func (c *Connectors) TakeOAuth(ctx context.Context, state, who string) (PendingConnect, error) {
	if c.opts.Tokens == nil || c.opts.Key == nil || state == "" {
		return PendingConnect{}, ErrUnknownConnect
	}
	hash := stateHash(state)
	row, err := c.opts.Tokens.TakeMCPConnect(ctx, hash, who, c.opts.Now())
	if errors.Is(err, session.ErrNotFound) {
		return PendingConnect{}, ErrUnknownConnect
	}
	if err != nil {
		return PendingConnect{}, err
	}
	plain, err := c.opts.Key.openBytes(row.Sealed, connectAAD(hash, row.Server, row.Channel, who))
	if err != nil {
		return PendingConnect{}, errors.New("the connect does not open with LOGBOOK_SECRET_KEY (was the key changed?): start it again")
	}
	p := PendingConnect{Server: row.Server, Channel: row.Channel, Who: who}
	if err := json.Unmarshal(plain, &p.pending); err != nil {
		return PendingConnect{}, fmt.Errorf("the pending connect: %w", err)
	}
	return p, nil
}

// FinishOAuth exchanges the authorization code (with the connect's PKCE verifier and
// resource) for a token at the endpoint the connect began with, and stores it sealed,
// connected by the connect's admin at now. The error never holds the token.
func (c *Connectors) FinishOAuth(ctx context.Context, p PendingConnect, channelName, redirect, code string) error {
	s, err := c.oauthServer(p.Server, p.Channel, channelName)
	if err != nil {
		return err
	}
	hc, done := c.tokenClient()
	defer done()
	opts := []oauth2.AuthCodeOption{oauth2.VerifierOption(p.Verifier)}
	if p.Endpoints.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", p.Endpoints.Resource))
	}
	tok, err := s.OAuth.config(p.Endpoints, redirect).Exchange(context.WithValue(ctx, oauth2.HTTPClient, hc), code, opts...)
	if err != nil {
		return fmt.Errorf("MCP server %s: exchange the authorization code: %s", p.Server, c.redact(err.Error()))
	}
	stamp(tok, c.opts.Now())
	sealed, err := c.opts.Key.seal(tok, p.Server, p.Channel)
	if err != nil {
		return err
	}
	return c.opts.Tokens.ConnectMCP(ctx, session.MCPToken{Server: p.Server, Channel: p.Channel, Sealed: sealed, ConnectedBy: p.Who, ConnectedAt: c.opts.Now()})
}

// tokenClient is the HTTP client of the token endpoint, and the func that closes its
// connections.
func (c *Connectors) tokenClient() (*http.Client, func()) {
	if c.opts.Transport != nil {
		return &http.Client{Transport: c.opts.Transport}, func() {}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{Transport: t}, t.CloseIdleConnections
}

// stamp sets the token's expiry by logbook's clock (oauth2 sets it by the real one).
func stamp(tok *oauth2.Token, now time.Time) {
	if tok.ExpiresIn > 0 {
		tok.Expiry = now.Add(time.Duration(tok.ExpiresIn) * time.Second)
	}
}

// valid reports whether tok is in force at now, by expiryDelta.
func valid(tok *oauth2.Token, now time.Time) bool {
	return tok.AccessToken != "" && (tok.Expiry.IsZero() || now.Add(expiryDelta).Before(tok.Expiry))
}

// resourceTransport adds the resource parameter (RFC 8707) to the refresh_token grants it
// carries: the MCP authorization spec asks for it in every token request, and oauth2's
// TokenSource sends only the grant type and the refresh token. Any other request passes as it is.
type resourceTransport struct {
	base     http.RoundTripper // nil: http.DefaultTransport
	resource string
}

func (t resourceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if r.Method != http.MethodPost || r.Body == nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body) // oauth2's own form: a few hundred bytes
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(body))
	if err == nil && form.Get("grant_type") == "refresh_token" && !form.Has("resource") {
		form.Set("resource", t.resource)
		body = []byte(form.Encode())
	}
	out := r.Clone(r.Context())
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return base.RoundTrip(out)
}

// expiryDelta is how long before its expiry a token is refreshed.
const expiryDelta = 30 * time.Second

// storedToken is a (server, channel)'s token source: the stored token, refreshed at the
// token endpoint when it expires by the clock, and the refreshed one stored sealed again.
type storedToken struct {
	c               *Connectors
	srv             Server          // its token endpoint is found (discovered) only when a refresh needs it
	ctx             context.Context // carries the token endpoint's HTTP client
	hc              *http.Client    // the token endpoint's HTTP client
	server, channel string

	mu  sync.Mutex
	tok *oauth2.Token
}

// tokenSource loads the server's token for the channel.
func (s *Session) tokenSource(ctx context.Context, srv Server, hc *http.Client) (*storedToken, error) {
	if s.c.opts.Tokens == nil || s.c.opts.Key == nil {
		return nil, errors.New("OAuth needs LOGBOOK_SECRET_KEY and the database")
	}
	row, err := s.c.opts.Tokens.MCPTokenOf(ctx, srv.Name, s.channel)
	if errors.Is(err, session.ErrNotFound) {
		return nil, fmt.Errorf("MCP server %s is not connected for this channel: an admin connects it on the web pages (/mcp)", srv.Name)
	}
	if err != nil {
		return nil, err
	}
	tok, err := s.c.opts.Key.open(row.Sealed, srv.Name, s.channel)
	if err != nil {
		return nil, err
	}
	return &storedToken{c: s.c, srv: srv, ctx: context.WithValue(context.WithoutCancel(ctx), oauth2.HTTPClient, hc), hc: hc,
		server: srv.Name, channel: s.channel, tok: tok}, nil
}

// Token is the current access token, refreshed first when it has expired. One refresh per
// (server, channel) runs at a time across the fleet: under the token's row lock in
// PostgreSQL (TokenStore.RefreshMCPLocked), the stored token is read again and refreshed only
// if it too has expired, so a rotating refresh token is never spent twice. The whole of it —
// the wait for the lock, discovery and the token request — is bounded by ConnectTimeout: a
// token endpoint that stalls fails the call, abandons its request and releases the lock.
func (t *storedToken) Token() (*oauth2.Token, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.c.opts.Now()
	if valid(t.tok, now) {
		return t.tok, nil
	}
	// Another session of the channel may have refreshed it already (and the server may have
	// rotated the refresh token): take the stored one when it is in force, without a lock.
	if row, err := t.c.opts.Tokens.MCPTokenOf(t.ctx, t.server, t.channel); err == nil {
		if stored, err := t.c.opts.Key.open(row.Sealed, t.server, t.channel); err == nil {
			t.tok = stored
			if valid(stored, now) {
				return stored, nil
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.c.opts.ConnectTimeout)
	defer cancel()
	var tok *oauth2.Token
	refreshed := false
	_, err := t.c.opts.Tokens.RefreshMCPLocked(ctx, t.server, t.channel, now, func(ctx context.Context, sealed []byte) ([]byte, error) {
		stored, err := t.c.opts.Key.open(sealed, t.server, t.channel)
		if err != nil {
			return nil, err
		}
		if valid(stored, now) { // the winner of the lock refreshed it
			tok = stored
			return nil, nil
		}
		fresh, err := t.refresh(ctx, stored, now)
		if err != nil {
			return nil, err
		}
		tok, refreshed = fresh, true
		return t.c.opts.Key.seal(fresh, t.server, t.channel)
	})
	if errors.Is(err, session.ErrNotFound) {
		return nil, fmt.Errorf("MCP server %s is not connected for this channel: an admin connects it on the web pages (/mcp)", t.server)
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return nil, fmt.Errorf("refresh the token of MCP server %s: the token endpoint did not answer within %v", t.server, t.c.opts.ConnectTimeout)
	}
	if err != nil {
		return nil, err
	}
	t.tok = tok
	if refreshed {
		t.c.log.Info().Str("server", t.server).Str("channel", t.channel).Msg("MCP server's OAuth token refreshed")
	}
	return tok, nil
}

// refresh spends stored's refresh token at the token endpoint (found now, discovered if
// need be) for a fresh token, stamped at now; ctx bounds it.
func (t *storedToken) refresh(ctx context.Context, stored *oauth2.Token, now time.Time) (*oauth2.Token, error) {
	if stored.RefreshToken == "" {
		return nil, fmt.Errorf("the token of MCP server %s has expired and has no refresh token: connect the server again", t.server)
	}
	ep, err := t.c.endpoints(ctx, t.srv)
	if err != nil {
		return nil, err
	}
	var hc *http.Client = t.hc
	if ep.Resource != "" {
		hc = &http.Client{Transport: resourceTransport{base: t.hc.Transport, resource: ep.Resource}}
	}
	// A token without an access token is one oauth2 refreshes at once.
	fresh, err := t.srv.OAuth.config(ep, "").TokenSource(context.WithValue(ctx, oauth2.HTTPClient, hc),
		&oauth2.Token{RefreshToken: stored.RefreshToken}).Token()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("refresh the token of MCP server %s: %s", t.server, t.c.redact(err.Error()))
	}
	stamp(fresh, now)
	if fresh.RefreshToken == "" { // the server keeps the refresh token
		fresh.RefreshToken = stored.RefreshToken
	}
	return fresh, nil
}
