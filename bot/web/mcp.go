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
// the server for the channel; the browser goes on to the server's authorization page. A
// connect another site started (connectStartedHere) is refused and recorded (action
// mcp_connect, status 403).
func (s *server) mcpConnect(w http.ResponseWriter, r *http.Request) {
	id := identityFrom(r.Context())
	if !id.Auditor {
		s.page(w, http.StatusForbidden, "message", pageData{Title: "Admins only", Message: "Only an admin (an auditor of these pages) may connect an MCP server."})
		return
	}
	server, channel := r.PathValue("server"), strings.TrimSpace(r.URL.Query().Get("channel"))
	if !connectStartedHere(r, s.cfg.PublicURL, id) {
		s.log.Warn().Str("server", server).Str("channel", channel).Str("who", id.Who).Str("sec_fetch_site", clean(r.Header.Get("Sec-Fetch-Site"), 40)).
			Msg("MCP connect refused: started from another site")
		w.Header().Set("Cache-Control", "no-store")
		query := url.Values{"server": {server}, "channel": {channel}}.Encode()
		if err := record(r.Context(), s.cfg.AccessLog, r, access{action: "mcp_connect", query: query, status: http.StatusForbidden}); err != nil {
			s.unrecorded(w, err)
			return
		}
		s.page(w, http.StatusForbidden, "message", pageData{Title: "Refused", Message: "This connect was started from another site, so it was refused. " +
			"To connect, paste the address into your browser's address bar yourself."})
		return
	}
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

// connectStartedHere reports whether a connect comes from the admin rather than from another
// site: a link, a redirect or an image there would otherwise spend the admin's consent at the
// authorization server on a channel that site chose, whenever the admin's sign-in is ambient —
// the header the proxy adds to every request, a sign-in cookie. (The callback cannot be
// checked so: the authorization server's redirect back is cross-site by nature; its state is
// bound to the admin and to a connect begun here.)
//
// The browser's Sec-Fetch-Site decides: "same-origin" (a page here), or "none" (an address
// the admin typed, pasted or bookmarked, or opened from another app); "same-site",
// "cross-site" and anything unknown are refused. Without it, Origin, else Referer, must be
// these pages (sameOrigin). With neither header, only a request that brings its own bearer
// token may start a connect: no site can make a browser send an Authorization header, while an
// ambient sign-in with neither is what a browser too old for Sec-Fetch-Site (before Safari
// 16.4, Firefox 90, Chrome 76) sends when another site's link says rel="noreferrer", which
// cannot be told from a typed address. Such an admin is refused; every current browser sends
// "none" for a typed address, so that costs little, and an admin connects rarely.
func connectStartedHere(r *http.Request, publicURL string, id Identity) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	if r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
		return sameOrigin(r, publicURL)
	}
	return id.Via == "bearer_token" && !id.browser
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
