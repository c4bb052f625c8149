package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
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
	// person (oauth2-proxy: X-Forwarded-Email or X-Forwarded-User). Only set it when the
	// server is reachable through that proxy alone, and the proxy strips the header from
	// incoming requests; see the package documentation.
	ProxyHeader string
	// Auditors are the ProxyHeader values (e.g. e-mail addresses) of auditors, who also see
	// sessions whose channel became private and may reveal deleted messages.
	Auditors []string
}

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
	auditors map[string]bool
}

func newAuthenticator(a Access) *authenticator {
	au := &authenticator{tokens: a.Tokens, header: http.CanonicalHeaderKey(strings.TrimSpace(a.ProxyHeader)), auditors: map[string]bool{}}
	for _, t := range a.Tokens {
		au.hashes = append(au.hashes, sha256.Sum256([]byte(t.Secret)))
	}
	for _, who := range a.Auditors {
		au.auditors[strings.ToLower(strings.TrimSpace(who))] = true
	}
	return au
}

// identify returns the request's identity; ok is false when it has none or a wrong token.
func (au *authenticator) identify(r *http.Request) (Identity, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || secret == "" {
			return Identity{}, false
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
		for i, hash := range au.hashes {
			if subtle.ConstantTimeCompare(sum[:], hash[:]) == 1 {
				t := au.tokens[i]
				return Identity{Who: t.Name, Via: "bearer_token", Auditor: t.Auditor}, true
			}
		}
		return Identity{}, false
	}
	if au.header != "" {
		if who := strings.TrimSpace(r.Header.Get(au.header)); who != "" {
			return Identity{Who: who, Via: "proxy_header", Auditor: au.auditors[strings.ToLower(who)]}, true
		}
	}
	return Identity{}, false
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
