package web_test

import (
	"context"
	"encoding/json"
	logbot "github.com/logbook/logbook/bot"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The browser tests drive a real headless Chromium against the pages served from a seeded
// database, check what a person sees, and save screenshots under testdata/out (git-ignored;
// CI keeps them as artifacts). Without Chromium they fail and say how to install it, unless
// LOGBOOK_SKIP_BROWSER=1.

const installChromium = `headless Chromium is needed for the browser tests and was not found.
Install it (Debian/Ubuntu: apt-get update && apt-get install -y chromium), or point
LOGBOOK_CHROMIUM at a Chrome/Chromium binary. .ci/run installs it in CI. To skip these tests
on purpose, set LOGBOOK_SKIP_BROWSER=1.`

func chromiumPath(t *testing.T) string {
	t.Helper()
	if os.Getenv("LOGBOOK_SKIP_BROWSER") == "1" {
		t.Skip("LOGBOOK_SKIP_BROWSER=1")
	}
	if p := os.Getenv("LOGBOOK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal(installChromium)
	return ""
}

type browser struct {
	t   *testing.T
	ctx context.Context
	out string
}

// newBrowser starts Chromium signed in as who (through the trusted proxy header, as
// oauth2-proxy would set it); with who "", signed in as nobody.
func newBrowser(t *testing.T, who string) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // containers run tests as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start Chromium (%s): %v\n%s", path, err, installChromium)
	}
	if who != "" {
		if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{proxyHeader: who}}); err != nil {
			t.Fatalf("start Chromium (%s): %v\n%s", path, err, installChromium)
		}
	}
	out := filepath.Join("testdata", "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: bctx, out: out}
}

// open loads url and returns the page's visible text (innerText: what a person reads).
func (b *browser) open(url string) string {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		b.t.Fatalf("load %s: %v", url, err)
	}
	var text string
	b.eval(`document.body.innerText`, &text)
	return text
}

// screenshot saves the whole page as testdata/out/<name>.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 1000 {
		b.t.Fatalf("screenshot %s is only %d bytes", name, len(png))
	}
	path := filepath.Join(b.out, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

func (b *browser) eval(js string, v any) {
	b.t.Helper()
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("evaluate %s: decode %s: %v", js, raw, err)
	}
}

func (b *browser) call(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

func TestBrowserRecentSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := newBrowser(t, "alice@example.com")
	text := b.open(f.srv.URL + "/")
	for _, want := range []string{"Recent sessions", "billing-api crash loop", "kafka consumer lag", "alice@example.com"} {
		if !strings.Contains(text, want) {
			t.Errorf("the list page does not show %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "secret reorg plans") {
		t.Error("the list shows a session whose channel became private")
	}
	// Most recently active first.
	if strings.Index(text, "secret") < 0 && strings.Index(text, "kafka consumer lag") > strings.Index(text, "billing-api crash loop") {
		t.Error("sessions are not listed most recent first")
	}
	b.screenshot("list-laptop")
}

func TestBrowserTranscript(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := newBrowser(t, "alice@example.com")
	text := b.open(f.srv.URL + "/sessions/" + f.sessions["billing-api crash loop"].String())
	want := []string{
		"billing-api crash loop",
		"@logbook why is billing-api failing with a timeout? 👀",
		"kubectl logs deploy/billing-api",
		"The pods cannot reach Postgres:",
		"panic: dial tcp 10.0.0.5:5432: i/o timeout",
		"deploy to prod",
		"(edited)",
		"[message deleted]",
	}
	rest := text
	for _, w := range want { // each after the one before
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("%q is missing or out of order in what the page shows:\n%s", w, text)
			continue
		}
		rest = rest[i+len(w):]
	}
	if strings.Contains(text, "sk-XXXX") {
		t.Error("the page shows a deleted message's text")
	}
	var codeBlocks int
	b.eval(`document.querySelectorAll('.assistant pre code').length`, &codeBlocks)
	if codeBlocks != 1 {
		t.Errorf("the reply's code block is rendered as %d <pre><code> blocks, want 1", codeBlocks)
	}
	b.screenshot("transcript-laptop")

	// Print: navigation and page actions disappear.
	var navDisplay, actionsDisplay string
	_, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Media: "print"})
	b.call(err)
	b.eval(`getComputedStyle(document.querySelector('nav')).display`, &navDisplay)
	b.eval(`getComputedStyle(document.querySelector('.actions')).display`, &actionsDisplay)
	if navDisplay != "none" || actionsDisplay != "none" {
		t.Errorf("print view shows navigation (nav %q, actions %q)", navDisplay, actionsDisplay)
	}
	b.screenshot("transcript-print")
	_, err = chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Media: ""})
	b.call(err)

	// Phone: nothing is wider than the screen.
	b.call(chromedp.Do(b.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile)))
	b.open(f.srv.URL + "/sessions/" + f.sessions["billing-api crash loop"].String())
	var scrollWidth, innerWidth int
	b.eval(`document.documentElement.scrollWidth`, &scrollWidth)
	b.eval(`window.innerWidth`, &innerWidth)
	if scrollWidth > innerWidth {
		t.Errorf("on a phone the page is %dpx wide on a %dpx screen (sideways scrolling)", scrollWidth, innerWidth)
	}
	b.screenshot("transcript-phone")
}

func TestBrowserSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := newBrowser(t, "alice@example.com")
	text := b.open(f.srv.URL + "/search?q=timeout")
	for _, want := range []string{"billing-api crash loop", "kafka consumer lag", "Open in Slack"} {
		if !strings.Contains(text, want) {
			t.Errorf("search results do not show %q:\n%s", want, text)
		}
	}
	var marks []string
	b.eval(`Array.from(document.querySelectorAll('.hit mark')).map(m => m.textContent)`, &marks)
	if len(marks) < 3 {
		t.Errorf("highlighted words = %q, want the term highlighted in each of 3 hits", marks)
	}
	for _, m := range marks {
		if !strings.EqualFold(m, "timeout") {
			t.Errorf("highlighted %q, want only the search term", m)
		}
	}
	var bg string
	b.eval(`getComputedStyle(document.querySelector('.hit mark')).backgroundColor`, &bg)
	if bg == "" || bg == "rgba(0, 0, 0, 0)" || bg == "transparent" {
		t.Errorf("the highlight has no visible background (%q)", bg)
	}
	b.screenshot("search-laptop")

	// Typing a query into the form works the same way.
	b.call(chromedp.Do(b.ctx,
		chromedp.Navigate(f.srv.URL+"/search"),
		chromedp.SendKeys(chromedp.CSS(`.filters input[name=q]`), `"consumer group"`),
		chromedp.Submit(chromedp.CSS(`.filters input[name=q]`)),
		chromedp.WaitVisible(chromedp.CSS(`ol.hits`)),
	))
	var got string
	b.eval(`document.querySelector('ol.hits').innerText`, &got)
	if !strings.Contains(got, "kafka consumer lag") || strings.Contains(got, "billing") {
		t.Errorf("phrase search from the form: %q", got)
	}

	text = b.open(f.srv.URL + "/search?q=the")
	if !strings.Contains(text, "Cannot search for that") {
		t.Errorf("a query of only common words is not explained:\n%s", text)
	}
}

// docs/web.md's token way, in a browser: the pages answer a sign-in form; pasting the token
// the operator gave (LOGBOOK_WEB_TOKENS) opens them, and signing out closes them again.
func TestBrowserSignInWithAToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := newBrowser(t, "")
	text := b.open(f.srv.URL + "/search?q=timeout")
	if !strings.Contains(text, "Sign in required") || strings.Contains(text, "billing") {
		t.Fatalf("without signing in the pages show:\n%s", text)
	}
	b.screenshot("signin")

	// A wrong token is refused.
	b.call(chromedp.Do(b.ctx,
		chromedp.SendKeys(chromedp.CSS(`#signin input[name=token]`), "not-the-token-at-all"),
		chromedp.Submit(chromedp.CSS(`#signin input[name=token]`)),
		chromedp.WaitVisible(chromedp.CSS(`[role=alert]`)),
	))
	var alert string
	b.eval(`document.querySelector('[role=alert]').innerText`, &alert)
	if !strings.Contains(alert, "not valid") {
		t.Errorf("a wrong token is answered %q", alert)
	}

	// The right one opens the pages, as its holder.
	b.call(chromedp.Do(b.ctx,
		chromedp.SendKeys(chromedp.CSS(`#signin input[name=token]`), tokenSecret),
		chromedp.Submit(chromedp.CSS(`#signin input[name=token]`)),
		chromedp.WaitVisible(chromedp.CSS(`ul.sessions`)),
	))
	b.eval(`document.body.innerText`, &text)
	for _, want := range []string{"Recent sessions", "billing-api crash loop", "ci-bot"} {
		if !strings.Contains(text, want) {
			t.Errorf("after signing in the list does not show %q:\n%s", want, text)
		}
	}
	var cookieVisible bool
	b.eval(`document.cookie.includes('logbook_session')`, &cookieVisible)
	if cookieVisible {
		t.Error("the sign-in cookie is readable by scripts (want HttpOnly)")
	}
	if text := b.open(f.srv.URL + "/search?q=timeout"); !strings.Contains(text, "kafka consumer lag") {
		t.Errorf("search after signing in:\n%s", text)
	}
	b.screenshot("signed-in")

	// Signing out is the button at the top of the page (a POST from the page itself).
	b.call(chromedp.Do(b.ctx,
		chromedp.Click(chromedp.CSS(`nav form.signout button`)),
		chromedp.WaitVisible(chromedp.CSS(`#signin`)),
	))
	b.eval(`document.body.innerText`, &text)
	if !strings.Contains(text, "Sign in required") {
		t.Errorf("after signing out:\n%s", text)
	}
	if text := b.open(f.srv.URL + "/"); !strings.Contains(text, "Sign in required") || strings.Contains(text, "billing") {
		t.Errorf("after signing out the list shows:\n%s", text)
	}

	var actions []string
	for _, r := range f.accessLog() {
		actions = append(actions, r.Action+":"+r.Who+":"+r.Via+":"+strconv.Itoa(r.Status))
	}
	want := []string{"signin:anonymous:none:401", "signin:ci-bot:bearer_token:303", "list:ci-bot:bearer_token:200",
		"search:ci-bot:bearer_token:200", "signout:ci-bot:bearer_token:303"}
	if strings.Join(actions, " ") != strings.Join(want, " ") {
		t.Errorf("access log = %q, want %q", actions, want)
	}
}

// The link a reply's footer (and the Open transcript shortcut) carries opens that session's
// page; the pages name channels, not their ids.
func TestBrowserFooterLinkOpensTheTranscript(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := newBrowser(t, "alice@example.com")
	id := f.sessions["billing-api crash loop"]
	link := logbot.TranscriptURL(f.srv.URL+"/", id)
	text := b.open(link)
	for _, want := range []string{"billing-api crash loop", "#general", id.String(), "The pods cannot reach Postgres"} {
		if !strings.Contains(text, want) {
			t.Errorf("the footer's link %s does not show %q:\n%s", link, want, text)
		}
	}
	list := b.open(f.srv.URL + "/")
	if !strings.Contains(list, "#general") || !strings.Contains(list, "#data") || strings.Contains(list, "#C0000001") {
		t.Errorf("the list does not name its channels:\n%s", list)
	}
	b.screenshot("footer-link")
}
