package web_test

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/web"
)

// A sign-in link sets an HttpOnly, SameSite=Strict cookie and redirects to the page without
// the token; the cookie opens the pages; the token works once; without it the pages answer 401.
func TestSignInLink(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	si, err := web.NewSignIn("ada", false)
	if err != nil {
		t.Fatal(err)
	}
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app,
		Access: web.Access{Tokens: []web.Token{si.Token()}}, Visibility: f.vis, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(si.Wrap(h))
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string, cookie *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	if resp, _ := get(srv.URL+"/", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token, no cookie: %d, want 401", resp.StatusCode)
	}
	link, err := si.Link(srv.URL + "/search?q=timeout")
	if err != nil {
		t.Fatal(err)
	}
	tok := mustQuery(t, link).Get("signin")
	if len(tok) < 40 {
		t.Fatalf("token %q is too short to be random", tok)
	}
	if other, _ := si.Link(srv.URL + "/"); mustQuery(t, other).Get("signin") == tok {
		t.Fatal("two links share a token")
	}

	resp, _ := get(link, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET link: %d, want 303", resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); loc != "/search?q=timeout" {
		t.Errorf("redirect to %q, want the page without the token", loc)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "logbook_signin" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Value == tok {
		t.Fatalf("sign-in cookie %+v (Set-Cookie %q)", cookie, resp.Header.Values("Set-Cookie"))
	}

	// The cookie opens the pages, as ada.
	if resp, body := get(srv.URL+"/search?q=timeout", &http.Cookie{Name: cookie.Name, Value: cookie.Value}); resp.StatusCode != http.StatusOK || !strings.Contains(body, "billing-api") {
		t.Fatalf("search page with the cookie: %d\n%s", resp.StatusCode, body)
	}
	if rows := f.accessLog(); len(rows) != 1 || rows[0].Who != "ada" || rows[0].Action != "search" {
		t.Errorf("access log %+v, want one search by ada", rows)
	}

	// The token is spent: a second use (another browser, no cookie) is refused and sets nothing.
	resp, body := get(link, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || strings.Contains(body, "billing") {
		t.Fatalf("second use of the link: %d, cookies %v\n%s", resp.StatusCode, resp.Cookies(), body)
	}
	// A made-up token and a made-up cookie get nothing either.
	if resp, _ := get(srv.URL+"/?signin=made-up", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("made-up token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := get(srv.URL+"/", &http.Cookie{Name: "logbook_signin", Value: "made-up"}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("made-up cookie: %d, want 401", resp.StatusCode)
	}
	// The redirect never leaves the server.
	evil, _ := si.Link(srv.URL + "/")
	evilURL := srv.URL + "//evil.example/?signin=" + mustQuery(t, evil).Get("signin")
	if resp, _ := get(evilURL, nil); resp.Header.Get("Location") != "/" {
		t.Errorf("redirect for %s: %q, want /", evilURL, resp.Header.Get("Location"))
	}

	// Signing out (the pages' button) ends the link's session; another site cannot.
	c := client{t, srv.URL}
	signedIn := &http.Cookie{Name: cookie.Name, Value: cookie.Value}
	if a := c.do(http.MethodPost, "/signout", url.Values{}, map[string]string{"Origin": "https://evil.example"}, signedIn); a.status != http.StatusForbidden {
		t.Errorf("cross-site sign-out: %d, want 403", a.status)
	}
	if a := c.do(http.MethodGet, "/", nil, nil, signedIn); a.status != http.StatusOK || !strings.Contains(a.body, `action="/signout"`) {
		t.Fatalf("after a refused sign-out: %d, want 200 with the sign-out button", a.status)
	}
	if a := c.do(http.MethodPost, "/signout", url.Values{}, map[string]string{"Origin": srv.URL}, signedIn); a.status != http.StatusSeeOther {
		t.Errorf("sign-out: %d, want 303", a.status)
	}
	if a := c.do(http.MethodGet, "/", nil, nil, signedIn); a.status != http.StatusUnauthorized {
		t.Errorf("the link's cookie after sign-out: %d, want 401", a.status)
	}
	if a := c.do(http.MethodGet, "/?signin=made-up", nil, nil); a.header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("a sign-in link's answer lacks the security headers: %v", a.header)
	}
}

func mustQuery(t *testing.T, link string) url.Values {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

// client is a browser-like HTTP client of srv: it follows no redirect and sends the headers
// given (Origin, Sec-Fetch-Site, cookies) as a browser would.
type client struct {
	t   *testing.T
	srv string
}

type answer struct {
	status int
	body   string
	header http.Header
	cookie *http.Cookie // the logbook_session cookie set, if any
}

func (c client) do(method, path string, form url.Values, headers map[string]string, cookies ...*http.Cookie) answer {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.srv+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	for _, ck := range cookies {
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: string(b), header: resp.Header}
	for _, ck := range resp.Cookies() {
		if ck.Name == "logbook_session" && ck.Value != "" {
			a.cookie = ck
		}
	}
	return a
}

// signInHandler serves the pages over f's database with the tokens given, as one replica.
func signInHandler(t *testing.T, f *fixture, now func() time.Time, tokens ...web.Token) *httptest.Server {
	t.Helper()
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Visibility: f.vis,
		Access: web.Access{Tokens: tokens}, SignIns: f.store, Now: now, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// The sign-in cookie is an opaque id whose hash the database keeps (issue 27: it held the
// bearer token itself, so a copied cookie kept working after sign-out). Signing out ends it at
// once, for every copy and on every replica; rotating the token's secret ends it; it expires.
func TestSignInCookieIsAServerSideSessionEndedBySignOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	clock := &struct {
		sync.Mutex
		t time.Time
	}{t: time.Now()}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	srv := signInHandler(t, f, now, web.Token{Name: "ci-bot", Secret: tokenSecret})
	replica := client{t, signInHandler(t, f, now, web.Token{Name: "ci-bot", Secret: tokenSecret}).URL}
	c := client{t, srv.URL}
	same := map[string]string{"Origin": srv.URL}

	signIn := func() *http.Cookie {
		t.Helper()
		a := c.do(http.MethodPost, "/signin", url.Values{"token": {tokenSecret}}, same)
		if a.status != http.StatusSeeOther || a.cookie == nil {
			t.Fatalf("sign in: %d, cookie %v\n%s", a.status, a.cookie, a.body)
		}
		return a.cookie
	}
	cookie := signIn()
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.MaxAge != 12*3600 {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, 12 hours", cookie)
	}
	for _, form := range []string{tokenSecret, base64.RawURLEncoding.EncodeToString([]byte(tokenSecret)), base64.StdEncoding.EncodeToString([]byte(tokenSecret))} {
		if strings.Contains(cookie.Value, form) {
			t.Fatalf("the cookie holds the token's secret (%q)", cookie.Value)
		}
	}
	// The database holds the cookie's hash, never the cookie or the secret.
	var rows int
	var dump string
	sum := sha256.Sum256([]byte(cookie.Value))
	if err := f.admin.QueryRow(f.ctx, `SELECT count(*), coalesce(string_agg(row_to_json(w)::text, ''), '') FROM web_sessions w WHERE id_hash = $1`, sum[:]).Scan(&rows, &dump); err != nil || rows != 1 {
		t.Fatalf("web_sessions rows for the cookie's hash: %d, %v", rows, err)
	}
	if strings.Contains(dump, cookie.Value) || strings.Contains(dump, tokenSecret) || !strings.Contains(dump, "ci-bot") {
		t.Errorf("web_sessions row %s", dump)
	}

	// The cookie (and a copy of it) opens the pages here and on the other replica.
	copied := &http.Cookie{Name: cookie.Name, Value: cookie.Value}
	for _, cl := range []client{c, replica} {
		if a := cl.do(http.MethodGet, "/", nil, nil, copied); a.status != http.StatusOK || !strings.Contains(a.body, "billing-api crash loop") ||
			!strings.Contains(a.body, `action="/signout" method="post"`) {
			t.Fatalf("list with the cookie at %s: %d\n%s", cl.srv, a.status, a.body)
		}
	}
	// GET /signout changes nothing: it is the sign-out button's page.
	if a := c.do(http.MethodGet, "/signout", nil, nil, cookie); a.status != http.StatusOK || !strings.Contains(a.body, `<form action="/signout" method="post"`) {
		t.Errorf("GET /signout: %d\n%s", a.status, a.body)
	}
	// Signing out on one replica ends the session for every copy, on every replica.
	a := c.do(http.MethodPost, "/signout", url.Values{}, same, cookie)
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/signin" {
		t.Fatalf("sign out: %d %q", a.status, a.header.Get("Location"))
	}
	cleared := false
	for _, ck := range a.header.Values("Set-Cookie") {
		cleared = cleared || (strings.HasPrefix(ck, "logbook_session=;") && strings.Contains(ck, "Max-Age=0"))
	}
	if !cleared {
		t.Errorf("sign-out does not clear the cookie: %q", a.header.Values("Set-Cookie"))
	}
	for _, cl := range []client{c, replica} {
		if a := cl.do(http.MethodGet, "/", nil, nil, copied); a.status != http.StatusUnauthorized || strings.Contains(a.body, "billing") {
			t.Errorf("the copied cookie after sign-out at %s: %d, want 401", cl.srv, a.status)
		}
	}
	if err := f.admin.QueryRow(f.ctx, `SELECT count(*) FROM web_sessions WHERE id_hash = $1`, sum[:]).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the ended session's row is still there (%d, %v)", rows, err)
	}

	// A session ends by itself after 12 hours.
	cookie = signIn()
	clock.Lock()
	clock.t = clock.t.Add(12*time.Hour + time.Second)
	clock.Unlock()
	if a := c.do(http.MethodGet, "/", nil, nil, cookie); a.status != http.StatusUnauthorized {
		t.Errorf("a 12-hour-old sign-in: %d, want 401", a.status)
	}
	// Rotating the token's secret (same name) ends its sessions.
	cookie = signIn()
	rotated := client{t, signInHandler(t, f, now, web.Token{Name: "ci-bot", Secret: "rotated-secret-0123456789"}).URL}
	if a := rotated.do(http.MethodGet, "/", nil, nil, cookie); a.status != http.StatusUnauthorized {
		t.Errorf("the cookie after the token's secret changed: %d, want 401", a.status)
	}
	if a := c.do(http.MethodGet, "/", nil, nil, cookie); a.status != http.StatusOK {
		t.Errorf("the cookie where the secret is unchanged: %d, want 200", a.status)
	}
	// The old cookie that held the secret itself opens nothing.
	legacy := &http.Cookie{Name: "logbook_token", Value: base64.RawURLEncoding.EncodeToString([]byte(tokenSecret))}
	if a := c.do(http.MethodGet, "/", nil, nil, legacy); a.status != http.StatusUnauthorized {
		t.Errorf("a logbook_token cookie holding the secret: %d, want 401", a.status)
	}

	// The access log says who signed in and out, and each replay of an ended cookie.
	var signins, signouts, replays int
	for _, r := range f.accessLog() {
		switch {
		case r.Action == "signin" && r.Who == "ci-bot" && r.Status == http.StatusSeeOther:
			signins++
		case r.Action == "signout" && r.Who == "ci-bot":
			signouts++
		case r.Action == "signin" && r.Who == "anonymous" && r.Format == "cookie":
			replays++
		}
	}
	if signins != 3 || signouts != 1 || replays != 4 {
		t.Errorf("access log: %d sign-ins, %d sign-outs, %d refused cookies; want 3, 1, 4", signins, signouts, replays)
	}
}

// Every state-changing route checks that the form came from the pages themselves (issue 27:
// another site could sign a browser in with the attacker's token — login CSRF — or sign it
// out): Sec-Fetch-Site, else Origin, else Referer; anything else is refused 403 and recorded.
func TestSignInAndSignOutRefuseOtherOrigins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := signInHandler(t, f, nil, web.Token{Name: "ci-bot", Secret: tokenSecret})
	c := client{t, srv.URL}
	form := url.Values{"token": {tokenSecret}}
	for _, h := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "null"},
		{"Origin": srv.URL, "Sec-Fetch-Site": "cross-site"}, // the browser's word wins
		{"Sec-Fetch-Site": "same-site"},
		{"Sec-Fetch-Site": "none"},
		{"Referer": "https://evil.example/login.html"},
		{"Referer": "http://127.0.0.1.evil.example/"},
		{}, // says nothing
	} {
		if a := c.do(http.MethodPost, "/signin", form, h); a.status != http.StatusForbidden || a.cookie != nil {
			t.Errorf("sign-in with %v: %d, cookie %v; want 403 and none", h, a.status, a.cookie)
		}
	}
	for _, h := range []map[string]string{
		{"Origin": srv.URL},
		{"Sec-Fetch-Site": "same-origin"},
		{"Referer": srv.URL + "/signin"},
	} {
		if a := c.do(http.MethodPost, "/signin", form, h); a.status != http.StatusSeeOther || a.cookie == nil {
			t.Errorf("sign-in with %v: %d, cookie %v; want 303 and a cookie", h, a.status, a.cookie)
		}
	}
	// A foreign site cannot sign the browser out.
	cookie := c.do(http.MethodPost, "/signin", form, map[string]string{"Origin": srv.URL}).cookie
	for _, h := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {}} {
		if a := c.do(http.MethodPost, "/signout", url.Values{}, h, cookie); a.status != http.StatusForbidden {
			t.Errorf("sign-out with %v: %d, want 403", h, a.status)
		}
	}
	if a := c.do(http.MethodGet, "/", nil, nil, cookie); a.status != http.StatusOK {
		t.Errorf("after the refused sign-outs the session is gone: %d", a.status)
	}
	var refused int
	for _, r := range f.accessLog() {
		if r.Who == "anonymous" && r.Status == http.StatusForbidden && (r.Action == "signin" || r.Action == "signout") {
			refused++
		}
	}
	if refused != 11 {
		t.Errorf("access log holds %d refused cross-origin forms, want 11", refused)
	}
	// A configured public address is the pages' origin too (a proxy that rewrites Host).
	h, err := web.Handler(web.Config{Sessions: f.store, Finder: f.searcher, AccessLog: f.app, SignIns: f.store,
		Access: web.Access{Tokens: []web.Token{{Name: "ci-bot", Secret: tokenSecret}}}, PublicURL: "https://logbook.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	pub := httptest.NewServer(h)
	t.Cleanup(pub.Close)
	pc := client{t, pub.URL}
	if a := pc.do(http.MethodPost, "/signin", form, map[string]string{"Origin": "https://logbook.example.com"}); a.status != http.StatusSeeOther {
		t.Errorf("sign-in from LOGBOOK_PUBLIC_URL's origin: %d, want 303", a.status)
	}
	if a := pc.do(http.MethodPost, "/signin", form, map[string]string{"Origin": "http://logbook.example.com"}); a.status != http.StatusForbidden {
		t.Errorf("sign-in from the public host over another scheme: %d, want 403", a.status)
	}
}

// A failed sign-in is recorded (issue 27: it was not), as anonymous, with how it was tried
// and the status; the secret tried is nowhere in the access log.
func TestFailedSignInsAreRecordedWithoutTheSecret(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := signInHandler(t, f, nil, web.Token{Name: "ci-bot", Secret: tokenSecret})
	c := client{t, srv.URL}
	const tried = "guessed-token-0123456789"
	if a := c.do(http.MethodPost, "/signin", url.Values{"token": {tried}}, map[string]string{"Origin": srv.URL, "User-Agent": "mallory/1"}); a.status != http.StatusUnauthorized ||
		!strings.Contains(a.body, "not valid") || a.cookie != nil {
		t.Fatalf("wrong token: %d\n%s", a.status, a.body)
	}
	if a := c.do(http.MethodGet, "/", nil, map[string]string{"Authorization": "Bearer " + tried}); a.status != http.StatusUnauthorized {
		t.Fatalf("wrong bearer token: %d", a.status)
	}
	if a := c.do(http.MethodGet, "/", nil, nil); a.status != http.StatusUnauthorized { // no credential: not an attempt
		t.Fatalf("no token: %d", a.status)
	}
	got := f.accessLog()
	if len(got) != 2 || got[0].Action != "signin" || got[0].Who != "anonymous" || got[0].Via != "none" || got[0].Format != "form" ||
		got[0].Status != http.StatusUnauthorized || got[1].Format != "bearer" || got[1].Status != http.StatusUnauthorized {
		t.Errorf("access log %+v, want the failed form and bearer sign-ins", got)
	}
	var dump string
	if err := f.admin.QueryRow(f.ctx, `SELECT string_agg(row_to_json(a)::text, '') FROM access_log a`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, tried) || !strings.Contains(dump, "mallory/1") {
		t.Errorf("access log rows %s: want the user agent and never the secret tried", dump)
	}
}

// Every answer of the pages — sign-in form, refusals, pages, errors — forbids framing
// (clickjacking) and scripts (issue 27: the sign-in page had no policy at all).
func TestEveryAnswerForbidsFraming(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := client{t, f.srv.URL}
	id := f.sessions["billing-api crash loop"].String()
	for _, r := range []struct {
		method, path string
		form         url.Values
		headers      map[string]string
	}{
		{"GET", "/signin", nil, nil},
		{"GET", "/signout", nil, nil},
		{"GET", "/", nil, nil}, // 401
		{"GET", "/", nil, asAlice},
		{"GET", "/sessions/" + id, nil, asToken},
		{"GET", "/sessions/0190f3a2-0000-7000-8000-000000000009", nil, asToken}, // 404
		{"GET", "/search?q=timeout", nil, asToken},
		{"POST", "/signin", url.Values{"token": {"x"}}, map[string]string{"Origin": "https://evil.example"}}, // 403
		{"POST", "/signin", url.Values{"token": {"x"}}, map[string]string{"Origin": f.srv.URL}},              // 401
	} {
		a := c.do(r.method, r.path, r.form, r.headers)
		csp := a.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'none'") ||
			a.header.Get("X-Frame-Options") != "DENY" || a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s (%d): CSP %q, X-Frame-Options %q", r.method, r.path, a.status, csp, a.header.Get("X-Frame-Options"))
		}
	}
}
