package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// MCPOAuth connects remote MCP servers that use OAuth, per channel (*connectors.Connectors
// has it): StartOAuth is the authorization URL (with state and a PKCE challenge) and the
// verifier to keep; FinishOAuth exchanges the code and stores the token sealed. Neither
// returns the token.
type MCPOAuth interface {
	StartOAuth(server, channelID, channelName, redirect, state string) (authURL, verifier string, err error)
	FinishOAuth(ctx context.Context, server, channelID, channelName, redirect, code, verifier, who string) error
}

// oauthStateAge is how long an admin has to finish a connect at the authorization server.
const oauthStateAge = 10 * time.Minute

// pendingConnect is a connect begun and not yet finished, under its state.
type pendingConnect struct {
	server, channel, verifier, who string
	expires                        time.Time
}

// connects holds the pending connects (in memory: a restart asks the admin to start again).
type connects struct {
	mu      sync.Mutex
	pending map[string]pendingConnect
}

// take removes and returns the pending connect of state, if it has not expired by now.
func (c *connects) take(state string, now time.Time) (pendingConnect, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.pending {
		if !now.Before(p.expires) {
			delete(c.pending, k)
		}
	}
	p, ok := c.pending[state]
	delete(c.pending, state)
	return p, ok
}

func (c *connects) put(state string, p pendingConnect) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[state] = p
}

// callbackURL is the pages' OAuth callback: under LOGBOOK_PUBLIC_URL, else the request's host.
func (s *server) callbackURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimRight(s.cfg.PublicURL, "/") + "/mcp/callback"
	}
	scheme := "http"
	if s.https(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/mcp/callback"
}

// mcpConnect is GET /mcp/{server}/connect?channel=C: an admin (an auditor) begins connecting
// the server for the channel; the browser goes on to the server's authorization page.
func (s *server) mcpConnect(w http.ResponseWriter, r *http.Request) {
	id := identityFrom(r.Context())
	if !id.Auditor {
		s.page(w, http.StatusForbidden, "message", pageData{Title: "Admins only", Message: "Only an admin (an auditor of these pages) may connect an MCP server."})
		return
	}
	server, channel := r.PathValue("server"), strings.TrimSpace(r.URL.Query().Get("channel"))
	if channel == "" {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: "Name the channel: /mcp/<server>/connect?channel=C0123ABCD."})
		return
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	state := base64.RawURLEncoding.EncodeToString(b)
	authURL, verifier, err := s.cfg.MCP.StartOAuth(server, channel, s.channelName(r.Context(), channel), s.callbackURL(r), state)
	if err != nil {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: err.Error()})
		return
	}
	s.connects.put(state, pendingConnect{server: server, channel: channel, verifier: verifier, who: id.Who, expires: s.now().Add(oauthStateAge)})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// mcpCallback is GET /mcp/callback?code&state: the authorization server sends the admin back;
// the state must be one this admin began, once, within oauthStateAge. The connect is recorded
// in the access log (action mcp_connect, naming server and channel, never the token).
func (s *server) mcpCallback(w http.ResponseWriter, r *http.Request) {
	id := identityFrom(r.Context())
	if !id.Auditor {
		s.page(w, http.StatusForbidden, "message", pageData{Title: "Admins only", Message: "Only an admin (an auditor of these pages) may connect an MCP server."})
		return
	}
	q := r.URL.Query()
	p, ok := s.connects.take(q.Get("state"), s.now())
	if !ok || p.who != id.Who {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: "This connect is unknown, expired or someone else's: start it again."})
		return
	}
	if e := q.Get("error"); e != "" {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: "The authorization server refused: " + clean(e, 200)})
		return
	}
	if err := s.cfg.MCP.FinishOAuth(r.Context(), p.server, p.channel, s.channelName(r.Context(), p.channel), s.callbackURL(r), q.Get("code"), p.verifier, id.Who); err != nil {
		s.log.Warn().Err(err).Str("server", p.server).Str("channel", p.channel).Msg("MCP connect failed")
		s.page(w, http.StatusBadGateway, "message", pageData{Title: "Connect", Message: "The connect failed: " + err.Error()})
		return
	}
	s.log.Info().Str("server", p.server).Str("channel", p.channel).Str("who", id.Who).Msg("MCP server connected with OAuth")
	query := url.Values{"server": {p.server}, "channel": {p.channel}}.Encode()
	s.respond(w, r, "message", pageData{Title: "Connected", Message: "MCP server " + p.server + " is connected for #" + s.channelName(r.Context(), p.channel) + "."},
		access{action: "mcp_connect", query: query})
}
