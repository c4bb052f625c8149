package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
}

func mustQuery(t *testing.T, link string) url.Values {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}
