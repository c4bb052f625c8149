package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Token is a bearer token that may read the pages: `Authorization: Bearer <Secret>`.
type Token struct {
	Name    string // who holds it; recorded in the access log (never the secret)
	Secret  string
	Auditor bool
}

// Access says who may read the pages. The pages are closed by default: Handler refuses a
// configuration that admits nobody.
type Access struct {
	Tokens []Token
	// ProxyHeader, when set, names a header that a trusted reverse proxy sets to the signed-in
	// person (oauth2-proxy: X-Forwarded-Email or X-Forwarded-User). It is believed only on
	// requests whose peer address (the TCP connection's, never a forwarded one) is in
	// TrustedProxies, and the proxy must overwrite it on every request; see the package
	// documentation.
	ProxyHeader string
	// TrustedProxies are the addresses from which ProxyHeader is believed; nil or empty:
	// DefaultTrustedProxies (loopback only). A request from anywhere else that carries the
	// header is treated as carrying no identity (401).
	TrustedProxies []netip.Prefix
	// Auditors are the ProxyHeader values (e.g. e-mail addresses) of auditors, who also see
	// sessions whose channel became private and may reveal deleted messages.
	Auditors []string
}

// DefaultTrustedProxies is where ProxyHeader is believed from when Access.TrustedProxies is
// empty: loopback only (127.0.0.0/8 and ::1/128), for a proxy on the same host.
func DefaultTrustedProxies() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

// ParseTrustedProxies parses a comma-separated list of CIDRs or single addresses
// ("10.0.0.0/8, 192.0.2.7, ::1/128"). An empty list is nil.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// tokenCookie holds a bearer token's secret (base64url) for browsers that signed in on the
// sign-in page; HttpOnly, SameSite=Strict, Secure over HTTPS.
const (
	tokenCookie    = "logbook_token"
	tokenCookieAge = 12 * time.Hour
)

// Identity is the person behind a request.
type Identity struct {
	Who     string
	Via     string // "proxy_header" or "bearer_token"
	Auditor bool
}

type identityKey struct{}

func identityFrom(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// authenticator checks requests against Access.
type authenticator struct {
	tokens   []Token
	hashes   [][32]byte
	header   string
	trusted  []netip.Prefix
	auditors map[string]bool
}

func newAuthenticator(a Access) *authenticator {
	au := &authenticator{tokens: a.Tokens, header: http.CanonicalHeaderKey(strings.TrimSpace(a.ProxyHeader)),
		trusted: a.TrustedProxies, auditors: map[string]bool{}}
	if len(au.trusted) == 0 {
		au.trusted = DefaultTrustedProxies()
	}
	for _, t := range a.Tokens {
		au.hashes = append(au.hashes, sha256.Sum256([]byte(t.Secret)))
	}
	for _, who := range a.Auditors {
		au.auditors[strings.ToLower(strings.TrimSpace(who))] = true
	}
	return au
}

// identify returns the request's identity; ok is false when it has none or a wrong token.
// A bearer token (header, else the sign-in cookie) comes first; the proxy header counts only
// from a trusted peer.
func (au *authenticator) identify(r *http.Request) (Identity, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || secret == "" {
			return Identity{}, false
		}
		return au.token(secret)
	}
	if c, err := r.Cookie(tokenCookie); err == nil && c.Value != "" {
		if secret, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil {
			if id, ok := au.token(string(secret)); ok {
				return id, true
			}
		}
	}
	if au.header != "" && au.fromTrustedProxy(r) {
		if who := strings.TrimSpace(r.Header.Get(au.header)); who != "" {
			return Identity{Who: who, Via: "proxy_header", Auditor: au.auditors[strings.ToLower(who)]}, true
		}
	}
	return Identity{}, false
}

// token returns the identity of the token whose secret this is.
func (au *authenticator) token(secret string) (Identity, bool) {
	sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	for i, hash := range au.hashes {
		if subtle.ConstantTimeCompare(sum[:], hash[:]) == 1 {
			t := au.tokens[i]
			return Identity{Who: t.Name, Via: "bearer_token", Auditor: t.Auditor}, true
		}
	}
	return Identity{}, false
}

// fromTrustedProxy reports whether the request's peer (r.RemoteAddr, the connection's address;
// forwarded-for headers are never consulted) is a trusted proxy.
func (au *authenticator) fromTrustedProxy(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range au.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ChannelVisibility tells whether a channel is private now. The caller implements it with
// Slack's conversations.info (is_private); Handler caches the answers.
type ChannelVisibility interface {
	ChannelPrivate(ctx context.Context, channel string) (bool, error)
}

// visibilityCache remembers ChannelVisibility answers for a while. Errors are not cached,
// and a channel whose visibility cannot be learnt counts as private (hidden but to auditors).
type visibilityCache struct {
	src ChannelVisibility
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]visibility
}

type visibility struct {
	private bool
	until   time.Time
}

func (c *visibilityCache) private(ctx context.Context, channel string) (bool, error) {
	if c.src == nil {
		return false, nil
	}
	now := c.now()
	c.mu.Lock()
	v, ok := c.entries[channel]
	c.mu.Unlock()
	if ok && now.Before(v.until) {
		return v.private, nil
	}
	private, err := c.src.ChannelPrivate(ctx, channel)
	if err != nil {
		return true, err
	}
	c.mu.Lock()
	c.entries[channel] = visibility{private: private, until: now.Add(c.ttl)}
	c.mu.Unlock()
	return private, nil
}
