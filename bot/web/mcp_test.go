package web_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/logtest"
)

// authServer is an OAuth authorization server as a real one behaves: /authorize redirects
// back with a code bound to the PKCE challenge and redirect URI; /token exchanges the code
// only with the matching verifier, and refreshes a refresh token into a new access token,
// revoking the old one. As the MCP authorization spec asks of its clients, every token
// request names the resource (RFC 8707): a refresh must name the one its grant was for. As
// Okta, Auth0 and Keycloak do, it detects the reuse of a rotated refresh token and revokes
// the whole grant (every access and refresh token).
type authServer struct {
	*httptest.Server
	mu        sync.Mutex
	codes     map[string]grant  // code → its grant
	valid     map[string]bool   // access tokens in force
	refresh   map[string]string // refresh token in force → the resource it was granted for
	spent     map[string]bool   // refresh tokens already rotated
	refreshes int
	revoked   int // grants revoked for a reused refresh token
	// hold, when set, is called with each refresh_token request before it is answered.
	hold   func(*http.Request)
	issued []string // every token issued, access and refresh
	mux    *http.ServeMux
	// resource, when set, is the only resource (RFC 8707) it issues tokens for: /authorize
	// refuses any other, and /token wants the one the code was granted for.
	resource string
}

type grant struct{ challenge, redirect, resource string }

func newAuthServer(t *testing.T) *authServer {
	a := &authServer{codes: map[string]grant{}, valid: map[string]bool{}, refresh: map[string]string{}, spent: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("response_type") != "code" || q.Get("client_id") != "logbook-client" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		want := a.resource
		a.mu.Unlock()
		if want != "" && q.Get("resource") != want {
			http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"error": {"invalid_target"}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
			return
		}
		code := a.random("code")
		a.mu.Lock()
		a.codes[code] = grant{challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), resource: q.Get("resource")}
		a.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", a.token)
	a.mux = mux
	a.Server = httptest.NewServer(mux)
	t.Cleanup(a.Close)
	return a
}

func (a *authServer) random(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func (a *authServer) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	id, secret, _ := r.BasicAuth()
	if id == "" {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	fail := func(e string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":%q}`, e)
	}
	if id != "logbook-client" || secret != "client-secret-42" {
		fail("invalid_client")
		return
	}
	a.mu.Lock()
	hold := a.hold
	a.mu.Unlock()
	if hold != nil && r.PostForm.Get("grant_type") == "refresh_token" {
		if hold(r); r.Context().Err() != nil {
			return // the client went away: the request is never answered, nor the grant changed
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var resource string
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		g, ok := a.codes[r.PostForm.Get("code")]
		delete(a.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || g.redirect != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge ||
			g.resource != r.PostForm.Get("resource") {
			fail("invalid_grant")
			return
		}
		resource = g.resource
	case "refresh_token":
		if a.spent[r.PostForm.Get("refresh_token")] { // reuse: the grant is revoked
			a.revoked++
			clear(a.refresh)
			clear(a.valid)
			fail("invalid_grant")
			return
		}
		granted, ok := a.refresh[r.PostForm.Get("refresh_token")]
		if !ok {
			fail("invalid_grant")
			return
		}
		if r.PostForm.Get("resource") != granted {
			fail("invalid_target")
			return
		}
		resource = granted
		a.refreshes++
		delete(a.refresh, r.PostForm.Get("refresh_token")) // rotated: a refresh token is good once
		a.spent[r.PostForm.Get("refresh_token")] = true
		for k := range a.valid {
			delete(a.valid, k)
		}
	default:
		fail("unsupported_grant_type")
		return
	}
	access, refresh := a.random("access"), a.random("refresh")
	a.valid[access], a.refresh[refresh] = true, resource
	a.issued = append(a.issued, access, refresh)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh})
}

func (a *authServer) accepts(h string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return ok && a.valid[tok]
}

// protectedMCP is an MCP server (the SDK's, streamable HTTP) that answers only requests
// bearing an access token the authorization server has in force, and records them.
func protectedMCP(t *testing.T, a *authServer) (*httptest.Server, func() []string) {
	s := mcp.NewServer(&mcp.Implementation{Name: "incidents", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "incident INC-7: failover"}}}, nil
		})
	// echo is a verbose (or hostile) server's debugging aid: it hands back the headers it got.
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			auth := req.Extra.Header.Get("Authorization")
			_, token, _ := strings.Cut(auth, " ")
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "you sent Authorization: " + auth + " (token " + token + ")"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.accepts(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		// A session whose client could not say goodbye (its DELETE needed a token the
		// authorization server would not give) is ended here, as a real server's idle
		// timeout would.
		var left []*mcp.ServerSession
		for ss := range s.Sessions() {
			left = append(left, ss)
		}
		for _, ss := range left {
			_ = ss.Close()
		}
	})
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// An admin connects a remote MCP server for a channel through the pages (authorization code
// with PKCE, state checked); logbook's calls then carry the token; an expired token is
// refreshed and the new one stored sealed; a non-admin and a bad state are refused; no token
// is in the database in the clear, the log lines or the access log.
func TestMCPOAuthConnect(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	auth := newAuthServer(t)
	mcpSrv, seen := protectedMCP(t, auth)
	cfg, err := connectors.Parse("mcp.json", []byte(`{"mcpServers": {"incidents": {"url": "`+mcpSrv.URL+`", "channels": ["#general"],
	  "oauth": {"client_id": "logbook-client", "client_secret": "${CLIENT_SECRET}", "authorization_url": "`+auth.URL+`/authorize",
	            "token_url": "`+auth.URL+`/token", "scopes": ["incidents:read"]}}}}`),
		func(k string) string { return map[string]string{"CLIENT_SECRET": "client-secret-42"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	key, err := connectors.ParseSecretKey(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	log := zerolog.New(&logs)
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	conns := connectors.New(cfg, connectors.Options{Logger: log, Tokens: f.store, Key: key, Now: clock})
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Log: log, MCP: conns,
		Access:   web.Access{Tokens: []web.Token{{Name: "ci-bot", Secret: tokenSecret}, {Name: "audit-bot", Secret: auditorSecret, Auditor: true}}},
		Channels: channelNames{"C0000001": "general"}})
	if err != nil {
		t.Fatal(err)
	}
	pages := httptest.NewServer(h)
	defer pages.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	get := func(u, secret string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), b.String()
	}

	ctx := context.Background()
	before := conns.Session("C0000001", "general", nil, log)
	if r := before.Call(ctx, "mcp__incidents__lookup", nil); !r.IsError || !strings.Contains(r.Content, "not connected for this channel") {
		t.Errorf("a call before the connect = %+v", r)
	}
	before.Close()
	if st, _, _ := get(pages.URL+"/mcp/incidents/connect?channel=C0000001", tokenSecret); st != http.StatusForbidden {
		t.Errorf("a non-admin's connect: %d, want 403", st)
	}
	st, toAuth, body := get(pages.URL+"/mcp/incidents/connect?channel=C0000001", auditorSecret)
	if st != http.StatusSeeOther || !strings.HasPrefix(toAuth, auth.URL+"/authorize?") {
		t.Fatalf("connect: %d %q %s", st, toAuth, body)
	}
	st, back, _ := get(toAuth, "")
	if st != http.StatusFound || !strings.HasPrefix(back, pages.URL+"/mcp/callback?") {
		t.Fatalf("authorize: %d %q", st, back)
	}
	cb, _ := url.Parse(back)
	if st, _, _ := get(pages.URL+"/mcp/callback?code="+cb.Query().Get("code")+"&state=forged", auditorSecret); st != http.StatusBadRequest {
		t.Errorf("a bad state: %d, want 400", st)
	}
	if st, _, _ := get(back, tokenSecret); st != http.StatusForbidden {
		t.Errorf("a non-admin's callback: %d, want 403", st)
	}
	if st, _, body := get(back, auditorSecret); st != http.StatusOK || !strings.Contains(body, "connected for #general") {
		t.Fatalf("callback: %d %s", st, body)
	}
	if st, _, _ := get(back, auditorSecret); st != http.StatusBadRequest {
		t.Errorf("a state used twice: %d, want 400", st)
	}

	call := func(s *connectors.Session) {
		t.Helper()
		if r := s.Call(ctx, "mcp__incidents__lookup", nil); r.IsError || r.Content != "incident INC-7: failover" {
			t.Fatalf("lookup = %+v", r)
		}
	}
	// Two sessions of the channel, both connected before the token expires.
	one, two := conns.Session("C0000001", "general", nil, log), conns.Session("C0000001", "general", nil, log)
	defer one.Close()
	defer two.Close()
	call(one)
	call(two)
	if got := seen(); len(got) == 0 || got[0] != "Bearer "+auth.issued[0] {
		t.Fatalf("the MCP server saw %q, want the issued access token", got)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour) // the access token has expired by logbook's clock
	mu.Unlock()
	call(one)
	call(two) // takes the stored refreshed token: no second refresh with the rotated one
	fresh := conns.Session("C0000001", "general", nil, log)
	call(fresh)
	fresh.Close()
	auth.mu.Lock()
	refreshes, issued := auth.refreshes, append([]string(nil), auth.issued...)
	auth.mu.Unlock()
	if refreshes != 1 || len(issued) != 4 {
		t.Fatalf("refreshes = %d, issued %d tokens; want 1 and 4", refreshes, len(issued))
	}
	if got := seen(); got[len(got)-1] != "Bearer "+issued[2] {
		t.Errorf("after the refresh the server saw %q, want the new access token", got[len(got)-1])
	}

	var sealed []byte
	var by string
	var refreshed *time.Time
	if err := f.admin.QueryRow(ctx, `SELECT sealed, connected_by, refreshed_at FROM mcp_tokens WHERE server = 'incidents' AND channel = 'C0000001'`).
		Scan(&sealed, &by, &refreshed); err != nil {
		t.Fatal(err)
	}
	if by != "audit-bot" || refreshed == nil {
		t.Errorf("row: connected_by %q, refreshed_at %v", by, refreshed)
	}
	var rows []accessRow
	for _, r := range f.accessLog() {
		if r.Action == "mcp_connect" {
			rows = append(rows, r)
		}
	}
	if len(rows) != 1 || rows[0].Who != "audit-bot" || rows[0].Query != "channel=C0000001&server=incidents" {
		t.Errorf("mcp_connect records = %+v", rows)
	}
	var events string
	if err := f.admin.QueryRow(ctx, `SELECT coalesce(string_agg(payload::text, ' '), '') FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	everything := string(sealed) + logs.String() + fmt.Sprint(f.accessLog()) + events
	for _, tok := range issued {
		if strings.Contains(everything, tok) {
			t.Errorf("token %s is in the clear in the row, the log, the access log or the events", tok)
		}
	}
	if !strings.Contains(logs.String(), "OAuth token refreshed") {
		t.Errorf("no log line says the token was refreshed:\n%s", logs.String())
	}
}

// discoverable makes a an authorization server whose issuer has a path (as Keycloak's realms
// do) and that publishes only OpenID Connect discovery, under the path
// (<issuer>/.well-known/openid-configuration): RFC 8414's well-known URIs answer 404. Tokens
// are issued for resource only.
func (a *authServer) discoverable(resource string) string {
	issuer := a.URL + "/realms/acme"
	a.mu.Lock()
	a.resource = resource
	a.mu.Unlock()
	a.mux.HandleFunc("GET /realms/acme/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": issuer, "authorization_endpoint": a.URL + "/authorize", "token_endpoint": a.URL + "/token",
			"jwks_uri": issuer + "/certs", "response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"plain", "S256"},
			"grant_types_supported": []string{"authorization_code", "refresh_token"}, "scopes_supported": []string{"openid", "incidents:read", "incidents:write"},
		})
	})
	return issuer
}

// discoverableMCP is protectedMCP at /mcp, whose 401 names its protected resource metadata
// (RFC 9728, served by the SDK's auth.ProtectedResourceMetadataHandler) listing issuer.
func discoverableMCP(t *testing.T, a *authServer, issuer func() string) *httptest.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "incidents", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "incident INC-7: failover"}}}, nil
		})
	// echo is a verbose (or hostile) server's debugging aid: it hands back the headers it got.
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			auth := req.Extra.Header.Get("Authorization")
			_, token, _ := strings.Cut(auth, " ")
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "you sent Authorization: " + auth + " (token " + token + ")"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{Resource: srv.URL + "/mcp",
			AuthorizationServers: []string{issuer()}, ScopesSupported: []string{"incidents:read"}}).ServeHTTP(w, r)
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if !a.accepts(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+srv.URL+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv
}

// A config that names no endpoints: logbook discovers them (the server's 401 → its protected
// resource metadata → the authorization server's OpenID configuration), asks for the scope
// the resource names, and sends the resource parameter. The connect begins on one replica
// and its callback lands on another (two instances on one database): the PKCE verifier is in
// PostgreSQL, sealed, and taken once — a replay on either replica is refused.
func TestMCPOAuthDiscoveryAcrossReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	as := newAuthServer(t)
	var issuer string
	mcpSrv := discoverableMCP(t, as, func() string { return issuer })
	issuer = as.discoverable(mcpSrv.URL + "/mcp")
	cfg, err := connectors.Parse("mcp.json", []byte(`{"mcpServers": {"incidents": {"url": "`+mcpSrv.URL+`/mcp", "channels": ["#general"],
	  "oauth": {"client_id": "logbook-client", "client_secret": "${CLIENT_SECRET}"}}}}`),
		func(k string) string { return map[string]string{"CLIENT_SECRET": "client-secret-42"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	key, err := connectors.ParseSecretKey(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	log := zerolog.New(&logs)
	const public = "https://logbook.example.com"
	replica := func() (*connectors.Connectors, *httptest.Server) {
		// Each replica has its own connectors, pages and store on the one database.
		conns := connectors.New(cfg, connectors.Options{Logger: log, Tokens: session.NewStore(f.app, session.Options{}), Key: key})
		h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Log: log, MCP: conns, PublicURL: public,
			Access:   web.Access{Tokens: []web.Token{{Name: "audit-bot", Secret: auditorSecret, Auditor: true}}},
			Channels: channelNames{"C0000001": "general"}})
		if err != nil {
			t.Fatal(err)
		}
		pages := httptest.NewServer(h)
		t.Cleanup(pages.Close)
		return conns, pages
	}
	connsA, pagesA := replica()
	connsB, pagesB := replica()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	get := func(u, secret string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), b.String()
	}
	st, toAuth, body := get(pagesA.URL+"/mcp/incidents/connect?channel=C0000001", auditorSecret)
	if st != http.StatusSeeOther || !strings.HasPrefix(toAuth, as.URL+"/authorize?") {
		t.Fatalf("connect on replica A: %d %q %s", st, toAuth, body)
	}
	au, _ := url.Parse(toAuth)
	if q := au.Query(); q.Get("resource") != mcpSrv.URL+"/mcp" || q.Get("scope") != "incidents:read" || q.Get("redirect_uri") != public+"/mcp/callback" {
		t.Errorf("authorization request: %v", q)
	}
	var pendingRows int
	if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM mcp_connects`).Scan(&pendingRows); err != nil || pendingRows != 1 {
		t.Fatalf("pending connects in the database: %d (%v), want 1", pendingRows, err)
	}
	st, back, _ := get(toAuth, "")
	if st != http.StatusFound || !strings.HasPrefix(back, public+"/mcp/callback?") {
		t.Fatalf("authorize: %d %q", st, back)
	}
	// The load balancer sends the callback to replica B.
	callback := pagesB.URL + strings.TrimPrefix(back, public)
	if st, _, body := get(callback, auditorSecret); st != http.StatusOK || !strings.Contains(body, "connected for #general") {
		t.Fatalf("callback on replica B: %d %s", st, body)
	}
	for _, pages := range []*httptest.Server{pagesA, pagesB} {
		if st, _, _ := get(pages.URL+strings.TrimPrefix(back, public), auditorSecret); st != http.StatusBadRequest {
			t.Errorf("the state replayed on %s: %d, want 400", pages.URL, st)
		}
	}
	if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM mcp_connects`).Scan(&pendingRows); err != nil || pendingRows != 0 {
		t.Errorf("pending connects left: %d (%v), want 0", pendingRows, err)
	}
	// Both replicas' sessions call the server with the token.
	for _, conns := range []*connectors.Connectors{connsA, connsB} {
		s := conns.Session("C0000001", "general", nil, log)
		if r := s.Call(context.Background(), "mcp__incidents__lookup", nil); r.IsError || r.Content != "incident INC-7: failover" {
			t.Errorf("lookup = %+v", r)
		}
		s.Close()
	}
	// With the authorization server down, a third replica (nothing discovered yet) still
	// calls with the stored token in force: discovery waits for a refresh that needs it.
	as.Close()
	connsC := connectors.New(cfg, connectors.Options{Logger: log, Tokens: f.store, Key: key})
	s := connsC.Session("C0000001", "general", nil, log)
	if r := s.Call(context.Background(), "mcp__incidents__lookup", nil); r.IsError || r.Content != "incident INC-7: failover" {
		t.Errorf("lookup with the authorization server down = %+v", r)
	}
	s.Close()
	if !strings.Contains(logs.String(), "OAuth endpoints discovered") || !strings.Contains(logs.String(), issuer) {
		t.Errorf("no log line names the discovered endpoints:\n%s", logs.String())
	}
}

// An authorization server whose metadata offers no PKCE with S256 is refused at the connect,
// with a page that says so; nothing is stored.
func TestMCPOAuthDiscoveryRefusesNoPKCE(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	as := newAuthServer(t)
	as.mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": as.URL, "authorization_endpoint": as.URL + "/authorize",
			"token_endpoint": as.URL + "/token", "response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"plain"}})
	})
	mcpSrv := discoverableMCP(t, as, func() string { return as.URL })
	cfg, err := connectors.Parse("mcp.json", []byte(`{"mcpServers": {"incidents": {"url": "`+mcpSrv.URL+`/mcp", "channels": ["#general"],
	  "oauth": {"client_id": "logbook-client"}}}}`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	key, _ := connectors.ParseSecretKey(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)))
	conns := connectors.New(cfg, connectors.Options{Logger: zerolog.Nop(), Tokens: f.store, Key: key})
	_, err = conns.StartOAuth(context.Background(), "incidents", "C0000001", "general", "https://logbook.example.com/mcp/callback", "audit-bot")
	if err == nil || !strings.Contains(err.Error(), "S256") {
		t.Fatalf("StartOAuth = %v, want a refusal naming S256", err)
	}
	var n int
	if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM mcp_connects`).Scan(&n); err != nil || n != 0 {
		t.Errorf("pending connects: %d (%v)", n, err)
	}
}

// A connect spends the admin's consent at the authorization server on a channel the request
// names, so another site must not start one with the admin's ambient sign-in (the header
// oauth2-proxy adds to every request, or a sign-in cookie). The browser's Sec-Fetch-Site
// decides (same-origin, or none for an address typed or bookmarked); without it, Origin or
// Referer must be these pages; with neither, only a request that brings its own bearer token
// (no browser sends one for another site) may start a connect. A refusal starts nothing and
// is recorded.
func TestMCPConnectRefusesOtherSites(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	auth := newAuthServer(t)
	mcpSrv, _ := protectedMCP(t, auth)
	cfg, err := connectors.Parse("mcp.json", []byte(`{"mcpServers": {"incidents": {"url": "`+mcpSrv.URL+`", "channels": ["#general"],
	  "oauth": {"client_id": "logbook-client", "authorization_url": "`+auth.URL+`/authorize", "token_url": "`+auth.URL+`/token"}}}}`),
		func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	key, err := connectors.ParseSecretKey(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(t))
	conns := connectors.New(cfg, connectors.Options{Logger: log, Tokens: f.store, Key: key})
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Log: log, MCP: conns,
		Access: web.Access{Tokens: []web.Token{{Name: "audit-bot", Secret: auditorSecret, Auditor: true}},
			ProxyHeader: proxyHeader, Auditors: []string{"admin@example.com"}},
		Channels: channelNames{"C0000001": "general"}})
	if err != nil {
		t.Fatal(err)
	}
	pages := httptest.NewServer(h)
	defer pages.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	connect := func(headers map[string]string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, pages.URL+"/mcp/incidents/connect?channel=C0000001", nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), shown(b.String())
	}
	pending := func() int {
		t.Helper()
		var n int
		if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM mcp_connects`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	admin := func(h map[string]string) map[string]string {
		h[proxyHeader] = "admin@example.com"
		return h
	}
	refused := []map[string]string{
		admin(map[string]string{"Sec-Fetch-Site": "cross-site"}),
		admin(map[string]string{"Sec-Fetch-Site": "same-site"}),
		admin(map[string]string{"Sec-Fetch-Site": "cross-site", "Referer": pages.URL + "/"}), // the browser's word wins
		admin(map[string]string{"Sec-Fetch-Site": "something-new"}),
		admin(map[string]string{"Referer": "https://evil.example/incidents.html"}),
		admin(map[string]string{"Referer": "http://127.0.0.1.evil.example/"}),
		admin(map[string]string{"Origin": "https://evil.example"}),
		admin(map[string]string{"Origin": "null"}),
		admin(map[string]string{}), // an old browser following <a rel="noreferrer"> looks like this
	}
	for _, h := range refused {
		if st, loc, body := connect(h); st != http.StatusForbidden || loc != "" || !strings.Contains(body, "another site") {
			t.Errorf("connect with %v: %d to %q, want 403 saying it came from another site:\n%s", h, st, loc, body)
		}
	}
	if n := pending(); n != 0 {
		t.Errorf("the refused connects left %d pending connects, want 0", n)
	}
	var recorded int
	for _, r := range f.accessLog() {
		if r.Action == "mcp_connect" && r.Status == http.StatusForbidden && r.Who == "admin@example.com" && r.Query == "channel=C0000001&server=incidents" {
			recorded++
		}
	}
	if recorded != len(refused) {
		t.Errorf("%d refused connects recorded, want %d", recorded, len(refused))
	}

	for _, h := range []map[string]string{
		admin(map[string]string{"Sec-Fetch-Site": "same-origin"}),
		admin(map[string]string{"Sec-Fetch-Site": "none"}), // typed, bookmarked, or opened from another app
		admin(map[string]string{"Referer": pages.URL + "/sessions"}),
		admin(map[string]string{"Origin": pages.URL}),
		{"Authorization": "Bearer " + auditorSecret}, // a script's own token: no site can make a browser send it
	} {
		if st, loc, body := connect(h); st != http.StatusSeeOther || !strings.HasPrefix(loc, auth.URL+"/authorize?") {
			t.Errorf("connect with %v: %d to %q, want 303 to the authorization server:\n%s", h, st, loc, body)
		}
	}
}

// oauthConnected is connectors for one channel's server at mcpURL with oauth at auth, each
// replica with its own store on f's database, the server connected for #general (C0000001)
// on the first by audit-bot.
func oauthConnected(t *testing.T, f *fixture, auth *authServer, mcpURL string, replicas int, opts connectors.Options) []*connectors.Connectors {
	t.Helper()
	cfg, err := connectors.Parse("mcp.json", []byte(`{"mcpServers": {"incidents": {"url": "`+mcpURL+`", "channels": ["#general"],
	  "oauth": {"client_id": "logbook-client", "client_secret": "client-secret-42", "authorization_url": "`+auth.URL+`/authorize",
	            "token_url": "`+auth.URL+`/token"}}}}`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	opts.Key, err = connectors.ParseSecretKey(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	var out []*connectors.Connectors
	for range replicas {
		opts.Tokens = session.NewStore(f.app, session.Options{})
		out = append(out, connectors.New(cfg, opts))
	}
	ctx := context.Background()
	const redirect = "https://logbook.example.com/mcp/callback"
	toAuth, err := out[0].StartOAuth(ctx, "incidents", "C0000001", "general", redirect, "audit-bot")
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	resp, err := client.Get(toAuth)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := out[0].TakeOAuth(ctx, back.Query().Get("state"), "audit-bot")
	if err != nil {
		t.Fatal(err)
	}
	if err := out[0].FinishOAuth(ctx, p, "general", redirect, back.Query().Get("code")); err != nil {
		t.Fatal(err)
	}
	return out
}

// Two replicas' sessions of a channel whose token has expired refresh it at once: one
// refresh reaches the token endpoint, the other waits for it (a lock in PostgreSQL) and takes
// the stored token. The rotated refresh token is never spent twice, so an authorization
// server that detects reuse (Okta, Auth0, Keycloak) keeps the grant, and both calls succeed.
func TestMCPOAuthRefreshOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	auth := newAuthServer(t)
	mcpSrv, _ := protectedMCP(t, auth)
	log := zerolog.New(zerolog.NewTestWriter(t))
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reps := oauthConnected(t, f, auth, mcpSrv.URL, 2, connectors.Options{Logger: log, Now: clock})
	ctx := context.Background()
	one, two := reps[0].Session("C0000001", "general", nil, log), reps[1].Session("C0000001", "general", nil, log)
	defer one.Close()
	defer two.Close()
	for _, s := range []*connectors.Session{one, two} {
		if r := s.Call(ctx, "mcp__incidents__lookup", nil); r.IsError {
			t.Fatalf("lookup before expiry = %+v", r)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()

	arrived, release := make(chan struct{}, 2), make(chan struct{})
	auth.mu.Lock()
	auth.hold = func(r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	auth.mu.Unlock()
	results := make(chan connectors.Result, 2)
	for _, s := range []*connectors.Session{one, two} {
		go func() { results <- s.Call(ctx, "mcp__incidents__lookup", nil) }()
	}
	timeout := time.After(30 * time.Second)
	select {
	case <-arrived:
	case <-timeout:
		t.Fatal("no refresh reached the token endpoint")
	}
	// The first refresh is held at the token endpoint: the other must not reach it, but wait
	// in PostgreSQL for the first to finish.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waiting := false; !waiting; {
		select {
		case <-arrived:
			t.Error("a second refresh of the same token reached the token endpoint while the first was under way")
			waiting = true
		case <-tick.C:
			var n int
			if err := f.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			waiting = n > 0
		case <-timeout:
			t.Fatal("neither a second refresh nor a session waiting for the first")
		}
	}
	close(release)
	for range 2 {
		if r := <-results; r.IsError || r.Content != "incident INC-7: failover" {
			t.Errorf("lookup after expiry = %+v", r)
		}
	}
	auth.mu.Lock()
	refreshes, revoked := auth.refreshes, auth.revoked
	auth.mu.Unlock()
	if refreshes != 1 || revoked != 0 {
		t.Errorf("refreshes = %d, grants revoked for reuse = %d; want 1 and 0", refreshes, revoked)
	}
}

// A token endpoint that never answers fails the call within ConnectTimeout with an error
// that says so, abandons the request (no goroutine left waiting on it), and leaves nothing
// locked: once the endpoint answers again, the next call refreshes and succeeds.
func TestMCPOAuthRefreshStalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	auth := newAuthServer(t)
	mcpSrv, _ := protectedMCP(t, auth)
	log := zerolog.New(zerolog.NewTestWriter(t))
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const bound = 2 * time.Second
	conns := oauthConnected(t, f, auth, mcpSrv.URL, 1, connectors.Options{Logger: log, Now: clock, ConnectTimeout: bound})[0]
	ctx := context.Background()
	s := conns.Session("C0000001", "general", nil, log)
	defer s.Close()
	if r := s.Call(ctx, "mcp__incidents__lookup", nil); r.IsError {
		t.Fatalf("lookup before expiry = %+v", r)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()

	abandoned := make(chan struct{}, 1)
	auth.mu.Lock()
	auth.hold = func(r *http.Request) { // never answers
		<-r.Context().Done()
		abandoned <- struct{}{}
	}
	auth.mu.Unlock()
	result := make(chan connectors.Result, 1)
	start := time.Now()
	go func() { result <- s.Call(ctx, "mcp__incidents__lookup", nil) }()
	select {
	case r := <-result:
		if !r.IsError || !strings.Contains(r.Content, "token endpoint did not answer") {
			t.Errorf("lookup with the token endpoint stalled = %+v, want an error saying it did not answer", r)
		}
		if took := time.Since(start); took > 3*bound {
			t.Errorf("the call failed after %v, want within about %v", took, bound)
		}
	case <-time.After(10 * bound):
		t.Fatalf("the call still waits on the stalled token endpoint after %v", 10*bound)
	}
	<-abandoned

	auth.mu.Lock()
	auth.hold = nil
	auth.mu.Unlock()
	if r := s.Call(ctx, "mcp__incidents__lookup", nil); r.IsError || r.Content != "incident INC-7: failover" {
		t.Errorf("lookup once the token endpoint answers again = %+v", r)
	}
}

// A server that hands back the channel's OAuth access token (a verbose error, or a hostile
// server fishing) does not get it into the tool's result: the token logbook added is scrubbed
// from what comes back, before it is recorded — and a refreshed token too.
func TestMCPOAuthTokenEchoedIsScrubbed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	auth := newAuthServer(t)
	mcpSrv, seen := protectedMCP(t, auth)
	log := zerolog.New(zerolog.NewTestWriter(t))
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	conns := oauthConnected(t, f, auth, mcpSrv.URL, 1, connectors.Options{Logger: log, Now: clock})[0]
	s := conns.Session("C0000001", "general", nil, log)
	defer s.Close()
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		r := s.Call(ctx, "mcp__incidents__echo", nil)
		sent := seen()
		if len(sent) == 0 {
			t.Fatalf("%s: the server saw no request", when)
		}
		_, token, _ := strings.Cut(sent[len(sent)-1], " ")
		if len(token) < 8 || !strings.Contains(r.Content, "you sent Authorization") {
			t.Fatalf("%s: the echo did not run with a token (sent %q): %+v", when, sent[len(sent)-1], r)
		}
		if strings.Contains(r.Content, token) {
			t.Fatalf("%s: the channel's access token came back into the result: %q", when, r.Content)
		}
	}
	check("with the token connected")
	mu.Lock()
	now = now.Add(2 * time.Hour) // expired: the next call refreshes
	mu.Unlock()
	check("with the refreshed token")
}
