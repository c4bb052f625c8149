package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session/logtest"
)

// oidcPages serves f's pages with OIDC sign-in against a real OpenID Connect provider
// (mockoidc, on loopback), beside the fixture's token and proxy-header modes.
func oidcPages(t *testing.T, f *fixture, roles string) (*httptest.Server, *mockoidc.MockOIDC) {
	t.Helper()
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return oidcPagesWith(t, f, roles, m), m
}

// oidcPagesWith serves f's pages with OIDC sign-in against m.
func oidcPagesWith(t *testing.T, f *fixture, roles string, m *mockoidc.MockOIDC) *httptest.Server {
	t.Helper()
	return oidcPagesLogging(t, f, roles, m, zerolog.New(zerolog.NewTestWriter(t)))
}

// oidcPagesLogging serves f's pages with OIDC sign-in against m, logging to log.
func oidcPagesLogging(t *testing.T, f *fixture, roles string, m *mockoidc.MockOIDC, log zerolog.Logger) *httptest.Server {
	t.Helper()
	mapping, err := web.ParseRoles(roles)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	h, err = web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app,
		Access:     web.Access{Tokens: []web.Token{{Name: "ci-bot", Secret: tokenSecret}}, ProxyHeader: proxyHeader},
		Visibility: f.vis, SignIns: f.store, Log: log,
		OIDC: &web.OIDC{Issuer: m.Issuer(), ClientID: m.ClientID, ClientSecret: m.ClientSecret, RedirectURL: srv.URL + "/oidc/callback",
			Scopes: []string{"email", "profile", "groups"}, Roles: mapping}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// browserClient is a browser: a cookie jar, following redirects.
func browserClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar}
}

func fetch(t *testing.T, c *http.Client, u string) (int, string, *url.URL) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Request.URL
}

func user(email string, groups ...string) *mockoidc.MockUser {
	return &mockoidc.MockUser{Subject: "sub-" + email, Email: email, EmailVerified: true, PreferredUsername: email, Groups: groups}
}

// providerUser is a person as a provider describes them, claim by claim, where
// mockoidc.MockUser cannot: email_verified as a string, a userinfo answer about another
// subject, Entra ID's _claim_names. idToken is added to the ID token's registered claims and
// nonce; userinfo is the userinfo answer (its sub is Subject unless it names one).
type providerUser struct {
	Subject  string
	idToken  map[string]any
	userinfo map[string]any
}

func (u providerUser) ID() string { return u.Subject }

func (u providerUser) Userinfo([]string) ([]byte, error) {
	info := map[string]any{"sub": u.Subject}
	for k, v := range u.userinfo {
		info[k] = v
	}
	return json.Marshal(info)
}

func (u providerUser) Claims(_ []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	return idTokenClaims{IDTokenClaims: base, extra: u.idToken}, nil
}

// idTokenClaims are the provider's claims with more beside them.
type idTokenClaims struct {
	*mockoidc.IDTokenClaims
	extra map[string]any
}

func (c idTokenClaims) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(c.IDTokenClaims)
	if err != nil {
		return nil, err
	}
	all := map[string]any{}
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	for k, v := range c.extra {
		all[k] = v
	}
	return json.Marshal(all)
}

// Signing in through the provider: the authorization code flow with PKCE, state and nonce;
// the groups claim decides the role (reader or auditor); the session cookie then opens the
// pages as that person, and the sign-in and what they read are in the access log.
func TestOIDCSignInMapsGroupsToRoles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, m := oidcPages(t, f, "engineering=reader,sec-audit=auditor")

	if code, body, _ := fetch(t, browserClient(t), srv.URL+"/sessions/"+f.sessions["secret reorg plans"].String()); code != http.StatusUnauthorized ||
		!strings.Contains(body, `href="/oidc/login?next=%2Fsessions%2F`) {
		t.Fatalf("signed out: %d, want 401 with a link to the organisation's sign-in that returns to the page:\n%s", code, body)
	}
	for _, tc := range []struct {
		email   string
		groups  []string
		auditor bool
	}{{"jane@example.com", []string{"design", "engineering"}, false}, {"sam@example.com", []string{"engineering", "sec-audit"}, true}} {
		m.QueueUser(user(tc.email, tc.groups...))
		c := browserClient(t)
		code, body, at := fetch(t, c, srv.URL+"/oidc/login?next="+url.QueryEscape("/search?q=timeout"))
		if code != http.StatusOK || at.Path != "/oidc/callback" || !strings.Contains(body, "signed in as "+tc.email) ||
			!strings.Contains(body, `href="/search?q=timeout"`) || !strings.Contains(body, `http-equiv="refresh"`) {
			t.Fatalf("%s: sign-in ended at %s with %d:\n%s", tc.email, at, code, body)
		}
		code, body, _ = fetch(t, c, srv.URL+"/")
		if code != http.StatusOK || !strings.Contains(body, tc.email) || !strings.Contains(body, "Sign out") {
			t.Fatalf("%s: the list after sign-in: %d\n%s", tc.email, code, body)
		}
		if hidden := strings.Contains(body, "secret reorg plans"); hidden != tc.auditor {
			t.Errorf("%s (auditor %v): the private channel's session listed: %v", tc.email, tc.auditor, hidden)
		}
	}
	var got []accessRow
	for _, r := range f.accessLog() {
		if r.Via == "oidc" || r.Format == "oidc" {
			got = append(got, r)
		}
	}
	want := []accessRow{
		{Who: "jane@example.com", Via: "oidc", Action: "signin", Format: "oidc", Status: http.StatusSeeOther},
		{Who: "jane@example.com", Via: "oidc", Action: "list", Status: http.StatusOK},
		{Who: "sam@example.com", Via: "oidc", Action: "signin", Format: "oidc", Auditor: true, Status: http.StatusSeeOther},
		{Who: "sam@example.com", Via: "oidc", Action: "list", Auditor: true, Status: http.StatusOK},
	}
	if len(got) != len(want) {
		t.Fatalf("access log of the OIDC sign-ins: %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i].Who != want[i].Who || got[i].Via != want[i].Via || got[i].Action != want[i].Action || got[i].Format != want[i].Format ||
			got[i].Auditor != want[i].Auditor || got[i].Status != want[i].Status {
			t.Errorf("access log %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A person the provider signs in who is in no allowed group is refused (403), recorded under
// their name, and not signed in; a callback whose state is not this browser's (a forged or
// replayed one), or that comes to a browser that started no sign-in, is refused (400) and
// recorded as anonymous.
func TestOIDCRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, m := oidcPages(t, f, "engineering=reader")

	m.QueueUser(user("mallory@example.com", "marketing"))
	c := browserClient(t)
	code, body, _ := fetch(t, c, srv.URL+"/oidc/login")
	if code != http.StatusForbidden || !strings.Contains(body, "not in a group that may read these pages") {
		t.Fatalf("a person in no allowed group: %d, want 403:\n%s", code, body)
	}
	if code, _, _ := fetch(t, c, srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("after the refusal, the list answers %d, want 401", code)
	}

	// Stop at the provider's redirect back, then forge the state.
	m.QueueUser(user("jane@example.com", "engineering"))
	c = browserClient(t)
	c.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == "/oidc/callback" {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := c.Get(srv.URL + "/oidc/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || back.Path != "/oidc/callback" || back.Query().Get("code") == "" {
		t.Fatalf("the provider sent the browser to %q (%v)", resp.Header.Get("Location"), err)
	}
	q := back.Query()
	q.Set("state", "forged-"+q.Get("state"))
	forged := *back
	forged.RawQuery = q.Encode()
	c.CheckRedirect = nil
	if code, body, _ := fetch(t, c, forged.String()); code != http.StatusBadRequest || !strings.Contains(body, "Signing in did not work") {
		t.Errorf("forged state: %d, want 400:\n%s", code, body)
	}
	// The right state, but the flow was spent by the forged attempt: refused too.
	if code, _, _ := fetch(t, c, back.String()); code != http.StatusBadRequest {
		t.Errorf("the real callback after its flow was spent: %d, want 400", code)
	}
	// Another browser (no flow cookie) with the real callback URL.
	if code, _, _ := fetch(t, browserClient(t), back.String()); code != http.StatusBadRequest {
		t.Errorf("a callback in a browser that started no sign-in: %d, want 400", code)
	}
	if code, _, _ := fetch(t, c, srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("after the refusals, the list answers %d, want 401", code)
	}

	got := f.accessLog()
	want := []accessRow{
		{Who: "mallory@example.com", Via: "oidc", Action: "signin", Format: "oidc", Status: http.StatusForbidden},
		{Who: "anonymous", Via: "none", Action: "signin", Format: "oidc", Status: http.StatusBadRequest},
		{Who: "anonymous", Via: "none", Action: "signin", Format: "oidc", Status: http.StatusBadRequest},
		{Who: "anonymous", Via: "none", Action: "signin", Format: "oidc", Status: http.StatusBadRequest},
	}
	if len(got) != len(want) {
		t.Fatalf("access log: %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i].Who != want[i].Who || got[i].Via != want[i].Via || got[i].Action != want[i].Action || got[i].Format != want[i].Format ||
			got[i].Auditor || got[i].Status != want[i].Status {
			t.Errorf("access log %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseRoles(t *testing.T) {
	t.Parallel()
	got, err := web.ParseRoles(" logbook-readers=reader, sec-audit=auditor ,*=reader")
	if err != nil || len(got) != 3 || got["sec-audit"] != web.RoleAuditor || got["*"] != web.RoleReader {
		t.Errorf("ParseRoles: %v, %v", got, err)
	}
	for _, bad := range []string{"x", "x=admin", "=reader", "x=reader,x=auditor"} {
		if _, err := web.ParseRoles(bad); err == nil {
			t.Errorf("ParseRoles(%q): no error", bad)
		}
	}
}

// An OIDC sign-in holds only while the configuration that gave its role does: pages whose
// group-to-role mapping changed (or whose client secret did) do not honour it.
func TestOIDCSessionEndsWhenTheRoleMappingChanges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, m := oidcPages(t, f, "engineering=reader")
	m.QueueUser(user("jane@example.com", "engineering"))
	c := browserClient(t)
	if code, body, _ := fetch(t, c, srv.URL+"/oidc/login"); code != http.StatusOK {
		t.Fatalf("sign-in: %d\n%s", code, body)
	}
	page, _ := url.Parse(srv.URL + "/")
	var cookie *http.Cookie
	for _, ck := range c.Jar.Cookies(page) {
		if ck.Name == "logbook_session" {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatal("no sign-in cookie")
	}
	get := func(base string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	same := oidcPagesWith(t, f, "engineering=reader", m)
	changed := oidcPagesWith(t, f, "engineering=auditor", m)
	if a, b := get(same.URL), get(changed.URL); a != http.StatusOK || b != http.StatusUnauthorized {
		t.Errorf("the cookie on pages with the same mapping: %d (want 200); with a changed one: %d (want 401)", a, b)
	}
}

// email_verified is a boolean, but Cognito and JumpCloud send it as a string: only true or
// "true" verifies the email ("false", anything else, even null, does not), and a person whose
// email is not verified is refused. A provider that sends no email_verified (Entra ID) is
// believed, as before.
func TestOIDCEmailVerifiedMustBeTrue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, m := oidcPages(t, f, "*=reader")
	for i, tc := range []struct {
		name     string
		verified any // absent: no claim
		ok       bool
	}{
		{"string false", "false", false}, {"string False", "False", false}, {"string no", "no", false},
		{"empty string", "", false}, {"bool false", false, false}, {"number 0", 0, false}, {"null", nil, false},
		{"number 1", 1, false}, {"string yes", "yes", false},
		{"string true", "true", true}, {"bool true", true, true}, {"absent", absent{}, true},
	} {
		email := fmt.Sprintf("person%d@example.com", i)
		claims := map[string]any{"email": email}
		if _, none := tc.verified.(absent); !none {
			claims["email_verified"] = tc.verified
		}
		m.QueueUser(providerUser{Subject: "sub-" + email, idToken: claims})
		c := browserClient(t)
		code, body, _ := fetch(t, c, srv.URL+"/oidc/login")
		signedIn := code == http.StatusOK && strings.Contains(body, "signed in as "+email)
		if signedIn != tc.ok || (!tc.ok && code != http.StatusForbidden) {
			t.Errorf("email_verified %s (%#v): %d, signed in %v; want signed in %v (or 403):\n%s", tc.name, tc.verified, code, signedIn, tc.ok, shown(body))
		}
		if code, _, _ := fetch(t, c, srv.URL+"/"); (code == http.StatusOK) != tc.ok {
			t.Errorf("email_verified %s: the list then answers %d", tc.name, code)
		}
	}
}

type absent struct{}

// When the ID token has no groups, they are read from the provider's userinfo; OpenID Connect
// Core 5.3.2 says its sub MUST be the ID token's. A userinfo answer about someone else (a
// faulty or confused provider, a token mixed up) is refused and logged, never believed: it
// would give its groups, and so the auditor role, to the person the ID token names.
func TestOIDCUserinfoAboutAnotherSubjectIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	var logs logtest.Buffer
	srv := oidcPagesLogging(t, f, "engineering=reader,sec-audit=auditor", m, zerolog.New(&logs))

	// The groups from a userinfo about the same subject decide the role.
	m.QueueUser(providerUser{Subject: "sub-sam", idToken: map[string]any{"email": "sam@example.com", "email_verified": true},
		userinfo: map[string]any{"groups": []string{"sec-audit"}}})
	if code, body, _ := fetch(t, browserClient(t), srv.URL+"/oidc/login"); code != http.StatusOK ||
		!strings.Contains(body, "signed in as sam@example.com (auditor)") {
		t.Fatalf("groups from the userinfo of the same subject: %d\n%s", code, shown(body))
	}

	m.QueueUser(providerUser{Subject: "sub-jane", idToken: map[string]any{"email": "jane@example.com", "email_verified": true},
		userinfo: map[string]any{"sub": "sub-mallory", "groups": []string{"sec-audit"}}})
	c := browserClient(t)
	code, body, _ := fetch(t, c, srv.URL+"/oidc/login")
	if code != http.StatusUnauthorized || strings.Contains(body, "signed in as") || !strings.Contains(body, "two different people") {
		t.Errorf("a userinfo about another subject: %d, want 401 saying the provider named two different people:\n%s", code, shown(body))
	}
	if code, _, _ := fetch(t, c, srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("after the refusal, the list answers %d, want 401", code)
	}
	if !strings.Contains(logs.String(), `userinfo sub \"sub-mallory\" is not the ID token's \"sub-jane\"`) {
		t.Errorf("no log line names the two subjects:\n%s", logs.String())
	}
	rows := f.accessLog()
	if last := rows[len(rows)-1]; last.Action != "signin" || last.Who != "anonymous" || last.Status != http.StatusUnauthorized {
		t.Errorf("the refusal's access log row: %+v", last)
	}
}

// Past 200 groups Entra ID puts no groups claim in the ID token: it names where to read them
// instead (_claim_names and _claim_sources, the "groups overage"). logbook does not call
// Microsoft Graph; it refuses the person, and the page and the log say why, rather than "in no
// allowed group". (docs: the README's OpenID Connect section, "Groups assigned to the
// application".)
func TestOIDCGroupsOverageIsSaidPlainly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	var logs logtest.Buffer
	srv := oidcPagesLogging(t, f, "0b6a4f1e-engineering=reader", m, zerolog.New(&logs))

	m.QueueUser(providerUser{Subject: "sub-kim", idToken: map[string]any{"email": "kim@example.com",
		"_claim_names":   map[string]any{"groups": "src1"},
		"_claim_sources": map[string]any{"src1": map[string]any{"endpoint": "https://graph.windows.net/tenant/users/kim/getMemberObjects"}}}})
	c := browserClient(t)
	code, body, _ := fetch(t, c, srv.URL+"/oidc/login")
	if code != http.StatusForbidden || !strings.Contains(body, "in too many groups") || strings.Contains(body, "not in a group that may read") {
		t.Errorf("a groups overage: %d, want 403 saying the provider sent no groups because there are too many:\n%s", code, shown(body))
	}
	if code, _, _ := fetch(t, c, srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("after the refusal, the list answers %d, want 401", code)
	}
	if !strings.Contains(logs.String(), "groups overage") || strings.Contains(logs.String(), "in no allowed group") {
		t.Errorf("the log does not name the groups overage:\n%s", logs.String())
	}
	rows := f.accessLog()
	if last := rows[len(rows)-1]; last.Action != "signin" || last.Who != "kim@example.com" || last.Status != http.StatusForbidden {
		t.Errorf("the refusal's access log row: %+v", last)
	}
}

// shown is what a page says: its <main>, without the head and styles.
func shown(page string) string {
	_, after, ok := strings.Cut(page, "<main>")
	if !ok {
		return page
	}
	main, _, _ := strings.Cut(after, "</main>")
	return strings.TrimSpace(main)
}

// An issuer that cannot be discovered is said at once, in an error naming it and why; Err
// keeps the reason (what /readyz says) while Run retries, and once the provider answers, the
// next attempt discovers it, says so, and Err is nil.
func TestDiscoveryRunSaysWhyAndRecovers(t *testing.T) {
	t.Parallel()
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	if err := m.AddMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if down.Load() {
				http.Error(w, "provider down for maintenance", http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		})
	}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	d := web.NewDiscovery(m.Issuer(), nil)
	if !errors.Is(d.Err(), web.ErrNotDiscovered) {
		t.Fatalf("Err before any attempt = %v", d.Err())
	}
	var logs logtest.Buffer
	waiting, tick := make(chan time.Duration), make(chan struct{})
	wait := func(ctx context.Context, d time.Duration) error {
		waiting <- d
		select {
		case <-tick:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- d.Run(context.Background(), zerolog.New(&logs), web.RetryOptions{First: time.Second, Max: 3 * time.Second, Wait: wait})
	}()
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		if got := <-waiting; got != want {
			t.Fatalf("wait %d = %s, want %s", i, got, want)
		}
		if i < 2 {
			tick <- struct{}{}
		}
	}
	if err := d.Err(); err == nil || !strings.Contains(err.Error(), m.Issuer()) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Err while the provider is down = %v, want the issuer and why", err)
	}
	if out := logs.String(); strings.Count(out, "OIDC sign-in does NOT work") != 3 || !strings.Contains(out, m.Issuer()) || !strings.Contains(out, `"level":"error"`) {
		t.Fatalf("log while the provider is down:\n%s", out)
	}
	down.Store(false)
	tick <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := d.Err(); err != nil {
		t.Fatalf("Err once discovered = %v", err)
	}
	if !strings.Contains(logs.String(), "sign-in works now") {
		t.Fatalf("no line saying sign-in works:\n%s", logs.String())
	}
	p, err := d.Provider(context.Background())
	if err != nil || p.Endpoint().AuthURL != m.AuthorizationEndpoint() {
		t.Fatalf("Provider = %v, %v", p, err)
	}
}
