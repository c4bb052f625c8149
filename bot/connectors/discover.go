package connectors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// endpoints are where a server's OAuth flow goes: the file's authorization_url and token_url,
// or what discovery found (the MCP authorization spec: RFC 9728 protected resource metadata,
// then RFC 8414 authorization server metadata or OpenID Connect discovery). Resource is the
// server's canonical URI, sent as the resource parameter (RFC 8707) of the authorization and
// token requests; Scopes are the file's, else those the server asks for.
type endpoints struct {
	AuthURL  string   `json:"authorization_url"`
	TokenURL string   `json:"token_url"`
	Resource string   `json:"resource"`
	Scopes   []string `json:"scopes,omitempty"`
	Issuer   string   `json:"issuer,omitempty"` // the authorization server discovered ("" when the file names the endpoints)
}

// discoveryAge is how long discovered endpoints are used before they are discovered again.
const discoveryAge = time.Hour

// discovered caches each server's discovered endpoints, by name.
type discovered struct {
	mu sync.Mutex
	m  map[string]discovery
}

type discovery struct {
	ep endpoints
	at time.Time
}

// endpoints returns srv's OAuth endpoints: the file's when it names both, else discovered
// (cached for discoveryAge), the file's values winning over the discovered ones.
func (c *Connectors) endpoints(ctx context.Context, srv Server) (endpoints, error) {
	o := srv.OAuth
	if o.AuthURL != "" && o.TokenURL != "" {
		return endpoints{AuthURL: o.AuthURL, TokenURL: o.TokenURL, Resource: srv.URL, Scopes: o.Scopes}, nil
	}
	now := c.opts.Now()
	c.disc.mu.Lock()
	d, ok := c.disc.m[srv.Name]
	c.disc.mu.Unlock()
	if !ok || now.Sub(d.at) >= discoveryAge {
		dctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
		ep, err := c.discover(dctx, srv)
		cancel()
		if err != nil {
			return endpoints{}, fmt.Errorf("MCP server %s: OAuth discovery: %s", srv.Name, c.redact(err.Error()))
		}
		d = discovery{ep: ep, at: now}
		c.disc.mu.Lock()
		if c.disc.m == nil {
			c.disc.m = map[string]discovery{}
		}
		c.disc.m[srv.Name] = d
		c.disc.mu.Unlock()
		c.log.Info().Str("server", srv.Name).Str("issuer", ep.Issuer).Str("authorization_url", ep.AuthURL).Str("token_url", ep.TokenURL).
			Msg("MCP server's OAuth endpoints discovered")
	}
	ep := d.ep
	if o.AuthURL != "" {
		ep.AuthURL = o.AuthURL
	}
	if o.TokenURL != "" {
		ep.TokenURL = o.TokenURL
	}
	if len(o.Scopes) > 0 {
		ep.Scopes = o.Scopes
	}
	return ep, nil
}

// discover follows the MCP authorization spec's discovery: an unauthenticated request to the
// server, whose 401 may name its protected resource metadata (WWW-Authenticate: Bearer
// resource_metadata=...); that URL, else /.well-known/oauth-protected-resource at the
// server's path, else at its root (RFC 9728); the first authorization server it lists, whose
// metadata is read from /.well-known/oauth-authorization-server (RFC 8414), else OpenID
// Connect's /.well-known/openid-configuration. A server with no resource metadata is its own
// authorization server (the 2025-03-26 spec), and an authorization server without metadata
// has /authorize and /token at its root. The go-sdk's oauthex and auth packages fetch and
// check each document (the resource must match, HTTPS or loopback, PKCE S256 offered).
func (c *Connectors) discover(ctx context.Context, srv Server) (endpoints, error) {
	hc, done := c.tokenClient()
	defer done()
	challenges, err := c.challenge(ctx, srv, hc)
	if err != nil {
		return endpoints{}, err
	}
	ep := endpoints{Resource: srv.URL}
	var prm *oauthex.ProtectedResourceMetadata
	var tried []string
	for _, u := range resourceMetadataURLs(challengeParam(challenges, "resource_metadata"), srv.URL) {
		m, err := oauthex.GetProtectedResourceMetadata(ctx, u.url, u.resource, hc)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		prm = m
		break
	}
	var issuer string
	switch {
	case prm != nil && len(prm.AuthorizationServers) == 0:
		return endpoints{}, errors.New("the protected resource metadata lists no authorization server")
	case prm != nil:
		issuer, ep.Resource, ep.Scopes = prm.AuthorizationServers[0], prm.Resource, prm.ScopesSupported
	default:
		u, err := url.Parse(srv.URL)
		if err != nil {
			return endpoints{}, err
		}
		u.Path, u.RawQuery, u.Fragment = "", "", ""
		issuer = u.String()
	}
	if s := challengeParam(challenges, "scope"); s != "" {
		ep.Scopes = strings.Fields(s)
	}
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, hc)
	if err != nil {
		return endpoints{}, fmt.Errorf("authorization server %s: %w", issuer, err)
	}
	ep.Issuer = issuer
	if asm == nil {
		if prm == nil && len(tried) > 0 {
			// Neither document: the server may want no OAuth at all, or hides it; the
			// spec's last fallback is the root's /authorize and /token.
			c.log.Info().Str("server", srv.Name).Msg("MCP server has no OAuth metadata; using /authorize and /token at its root")
		}
		base := strings.TrimRight(issuer, "/")
		ep.AuthURL, ep.TokenURL = base+"/authorize", base+"/token"
		return ep, nil
	}
	if !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
		return endpoints{}, fmt.Errorf("authorization server %s does not offer PKCE with S256", issuer)
	}
	ep.AuthURL, ep.TokenURL = asm.AuthorizationEndpoint, asm.TokenEndpoint
	return ep, nil
}

// challenge makes an unauthenticated MCP request (initialize) to srv and returns the
// WWW-Authenticate challenges of its answer (none when it answers without one).
func (c *Connectors) challenge(ctx context.Context, srv Server, hc *http.Client) ([]oauthex.Challenge, error) {
	body := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"logbook","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range srv.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the server: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusForbidden {
		return nil, nil
	}
	cs, err := oauthex.ParseWWWAuthenticate(res.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil, fmt.Errorf("the server's WWW-Authenticate: %w", err)
	}
	return cs, nil
}

// challengeParam is a parameter of the first Bearer challenge that has it.
func challengeParam(cs []oauthex.Challenge, name string) string {
	for _, c := range cs {
		if c.Scheme == "bearer" && c.Params[name] != "" {
			return c.Params[name]
		}
	}
	return ""
}

type metadataURL struct{ url, resource string }

// resourceMetadataURLs are where a server's protected resource metadata may be, in the
// order the MCP spec gives: the challenge's, then the well-known URI at the server's path,
// then at its root (whose resource is the server's origin).
func resourceMetadataURLs(fromChallenge, server string) []metadataURL {
	var out []metadataURL
	if fromChallenge != "" {
		out = append(out, metadataURL{fromChallenge, server})
	}
	u, err := url.Parse(server)
	if err != nil {
		return out
	}
	m := *u
	m.RawQuery, m.Fragment = "", ""
	if p := strings.Trim(u.Path, "/"); p != "" {
		m.Path = "/.well-known/oauth-protected-resource/" + p
		out = append(out, metadataURL{m.String(), server})
	}
	m.Path = "/.well-known/oauth-protected-resource"
	root := *u
	root.Path, root.RawQuery, root.Fragment = "", "", ""
	out = append(out, metadataURL{m.String(), root.String()})
	return out
}
