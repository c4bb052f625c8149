package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/logbook/logbook/bot/connectors"
)

// MCPOAuth connects remote MCP servers that use OAuth, per channel (*connectors.Connectors
// has it): StartOAuth is the authorization URL (with a fresh state and a PKCE challenge; the
// verifier kept sealed in the database, so the callback may land on any replica); TakeOAuth
// takes the connect of a state back once (connectors.ErrUnknownConnect for one unknown, used,
// someone else's or expired); FinishOAuth exchanges the code and stores the token sealed.
// None returns the token.
type MCPOAuth interface {
	StartOAuth(ctx context.Context, server, channelID, channelName, redirect, who string) (authURL string, err error)
	TakeOAuth(ctx context.Context, state, who string) (connectors.PendingConnect, error)
	FinishOAuth(ctx context.Context, p connectors.PendingConnect, channelName, redirect, code string) error
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
	authURL, err := s.cfg.MCP.StartOAuth(r.Context(), server, channel, s.channelName(r.Context(), channel), s.callbackURL(r), id.Who)
	if err != nil {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: err.Error()})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// mcpCallback is GET /mcp/callback?code&state: the authorization server sends the admin back;
// the state must be one this admin began, once, within connectors.ConnectAge, on any replica. The connect is recorded
// in the access log (action mcp_connect, naming server and channel, never the token).
func (s *server) mcpCallback(w http.ResponseWriter, r *http.Request) {
	id := identityFrom(r.Context())
	if !id.Auditor {
		s.page(w, http.StatusForbidden, "message", pageData{Title: "Admins only", Message: "Only an admin (an auditor of these pages) may connect an MCP server."})
		return
	}
	q := r.URL.Query()
	p, err := s.cfg.MCP.TakeOAuth(r.Context(), q.Get("state"), id.Who)
	if errors.Is(err, connectors.ErrUnknownConnect) {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: "This connect is unknown, expired or someone else's: start it again."})
		return
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("MCP connect: the pending connect could not be read")
		s.page(w, http.StatusInternalServerError, "message", pageData{Title: "Connect", Message: "The connect could not be read: start it again."})
		return
	}
	if e := q.Get("error"); e != "" {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Connect", Message: "The authorization server refused: " + clean(e, 200)})
		return
	}
	if err := s.cfg.MCP.FinishOAuth(r.Context(), p, s.channelName(r.Context(), p.Channel), s.callbackURL(r), q.Get("code")); err != nil {
		s.log.Warn().Err(err).Str("server", p.Server).Str("channel", p.Channel).Msg("MCP connect failed")
		s.page(w, http.StatusBadGateway, "message", pageData{Title: "Connect", Message: "The connect failed: " + err.Error()})
		return
	}
	s.log.Info().Str("server", p.Server).Str("channel", p.Channel).Str("who", id.Who).Msg("MCP server connected with OAuth")
	query := url.Values{"server": {p.Server}, "channel": {p.Channel}}.Encode()
	s.respond(w, r, "message", pageData{Title: "Connected", Message: "MCP server " + p.Server + " is connected for #" + s.channelName(r.Context(), p.Channel) + "."},
		access{action: "mcp_connect", query: query})
}
