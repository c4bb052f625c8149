package web

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/logbook/logbook/session"
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
	// ProxySecret, when set, is a secret the proxy sends on every request in the
	// ProxySecretHeader header (X-Logbook-Proxy-Secret): ProxyHeader is then believed only on
	// requests that carry it (compared in constant time) from TrustedProxies. It is what
	// keeps a loopback caller that is not the proxy — a sandboxed command sharing the host's
	// network — from naming itself; cmd/logbook requires it where sandboxes share the host's
	// network (LOGBOOK_WEB_PROXY_SECRET). At least 16 characters.
	ProxySecret string
	// Auditors are the ProxyHeader values (e.g. e-mail addresses) of auditors, who also see
	// sessions whose channel became private and may reveal deleted messages.
	Auditors []string
}

// ProxySecretHeader is the header that carries Access.ProxySecret from the proxy.
const ProxySecretHeader = "X-Logbook-Proxy-Secret"

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

// sessionCookie holds the opaque id of a browser's sign-in (see signin): 32 random bytes,
// base64url; the server keeps only its sha256 (SignInStore). HttpOnly, SameSite=Strict, Secure
// over HTTPS. legacyTokenCookie is the cookie that held the token's secret itself before
// (issue 27): it is never read any more, and sign-in and sign-out clear it.
const (
	sessionCookie     = "logbook_session"
	sessionAge        = 12 * time.Hour
	legacyTokenCookie = "logbook_token"
)

// Identity is the person behind a request.
type Identity struct {
	Who     string
	Via     string // "proxy_header", "bearer_token" (a sign-in cookie stands for its token) or "oidc"
	Auditor bool
	// browser: signed in through a cookie (the sign-in form's, or a SignIn link's), so the
	// pages offer a sign-out button.
	browser bool
}

// anonymous is who a failed sign-in is recorded as: nobody was identified.
var anonymous = Identity{Who: "anonymous", Via: "none"}

type identityKey struct{}

func identityFrom(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// authenticator checks requests against Access.
type authenticator struct {
	tokens   []Token
	hashes   [][32]byte
	macs     [][32]byte // sessionMAC of each token's secret
	header   string
	trusted  []netip.Prefix
	secret   *[32]byte // sha256 of Access.ProxySecret; nil: none asked
	auditors map[string]bool
}

func newAuthenticator(a Access) *authenticator {
	au := &authenticator{tokens: a.Tokens, header: http.CanonicalHeaderKey(strings.TrimSpace(a.ProxyHeader)),
		trusted: a.TrustedProxies, auditors: map[string]bool{}}
	if len(au.trusted) == 0 {
		au.trusted = DefaultTrustedProxies()
	}
	if a.ProxySecret != "" {
		sum := sha256.Sum256([]byte(a.ProxySecret))
		au.secret = &sum
	}
	for _, t := range a.Tokens {
		au.hashes = append(au.hashes, sha256.Sum256([]byte(t.Secret)))
		au.macs = append(au.macs, sessionMAC(t.Secret))
	}
	for _, who := range a.Auditors {
		au.auditors[strings.ToLower(strings.TrimSpace(who))] = true
	}
	return au
}

// sessionMAC ties a sign-in session to the secret of the token it was opened with, without
// storing the secret: HMAC-SHA256 keyed by the secret over a fixed label.
func sessionMAC(secret string) [32]byte {
	m := hmac.New(sha256.New, []byte(strings.TrimSpace(secret)))
	m.Write([]byte("logbook web session v1"))
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}

// Credentials a failed sign-in tried (access_log.format of its record).
const (
	triedForm   = "form"         // the sign-in form
	triedBearer = "bearer"       // an Authorization header
	triedCookie = "cookie"       // a sign-in cookie that is not (any more) valid
	triedHeader = "proxy_header" // the proxy header from an untrusted peer or without the proxy's secret
)

// identify returns the request's identity; ok is false when it has none. tried names the
// credential that was presented and failed ("" when none was). A bearer token comes first,
// then the sign-in cookie, then the proxy header, believed only from the trusted proxy.
func (s *server) identify(r *http.Request) (id Identity, ok bool, tried string, err error) {
	au := s.auth
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") && secret != "" {
			if id, ok := au.token(secret); ok {
				id.browser = r.Context().Value(signInLinkKey{}) != nil
				return id, true, "", nil
			}
		}
		return Identity{}, false, triedBearer, nil
	}
	if c, cerr := r.Cookie(sessionCookie); cerr == nil && c.Value != "" && s.cfg.SignIns != nil {
		id, ok, err := s.signedIn(r.Context(), c.Value)
		if err != nil || ok {
			return id, ok, "", err
		}
		tried = triedCookie
	}
	if au.header != "" {
		if who := strings.TrimSpace(r.Header.Get(au.header)); who != "" {
			if au.proxied(r) {
				return Identity{Who: who, Via: "proxy_header", Auditor: au.auditors[strings.ToLower(who)]}, true, "", nil
			}
			tried = cmp.Or(tried, triedHeader)
		}
	}
	return Identity{}, false, tried, nil
}

// signedIn returns the identity of the sign-in cookie value: its session must exist, not have
// expired, and name a token still configured with the secret it was opened with.
func (s *server) signedIn(ctx context.Context, value string) (Identity, bool, error) {
	ws, err := s.cfg.SignIns.WebSession(ctx, sha256.Sum256([]byte(value)), s.now())
	if errors.Is(err, session.ErrNotFound) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("check a sign-in: %w", err)
	}
	if ws.Via == "oidc" {
		if s.oidc == nil || !hmac.Equal(s.oidc.mac[:], ws.TokenMAC[:]) {
			return Identity{}, false, nil // OIDC is off now, or its secret or role mapping changed
		}
		return Identity{Who: ws.Who, Via: "oidc", Auditor: ws.Auditor, browser: true}, true, nil
	}
	for i, t := range s.auth.tokens {
		if t.Name == ws.Who && hmac.Equal(s.auth.macs[i][:], ws.TokenMAC[:]) {
			return Identity{Who: t.Name, Via: "bearer_token", Auditor: t.Auditor, browser: true}, true, nil
		}
	}
	return Identity{}, false, nil
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

// proxied reports whether the request comes from the trusted proxy: from a trusted address,
// and with the proxy's secret when one is asked.
func (au *authenticator) proxied(r *http.Request) bool {
	if !au.fromTrustedProxy(r) {
		return false
	}
	if au.secret == nil {
		return true
	}
	got := sha256.Sum256([]byte(r.Header.Get(ProxySecretHeader)))
	return subtle.ConstantTimeCompare(got[:], au.secret[:]) == 1
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
// Slack's conversations.info (is_private) — directory.Directory, which every surface shares — and
// answers from what it knows now: the pages ask it on every request and cache nothing.
type ChannelVisibility interface {
	ChannelPrivate(ctx context.Context, channel string) (bool, error)
}
