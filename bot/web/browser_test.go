package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
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

	logbot "github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/session"
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

// Issue 46: the usage page's chart has labelled axes (the spend with its currency, up the
// side; the UTC day, along the bottom), and the page reads at a phone's width and a desktop's:
// nothing wider than the screen, no table cell whose text spills out of it.
func TestBrowserUsageReadsOnPhoneAndDesktop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seedSpend(t, f)
	b := newBrowser(t, "alice@example.com")
	for _, size := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"usage-phone", 390, 844, true}, {"usage-desktop", 1280, 900, false}} {
		opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(2)}
		if size.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		b.call(chromedp.Do(b.ctx, chromedp.EmulateViewport(size.width, size.height, opts...)))
		text := b.open(f.srv.URL + "/usage?days=7")
		if !strings.Contains(text, "Per channel") || !strings.Contains(text, "#general") {
			t.Fatalf("%s: the page shows:\n%s", size.name, text)
		}
		var axes []string
		b.eval(`Array.from(document.querySelectorAll('figure.chart svg text.axis-label')).map(e => e.textContent)`, &axes)
		if len(axes) != 2 || !strings.Contains(axes[0], "USD") || !strings.Contains(axes[1], "UTC") {
			t.Errorf("%s: the chart's axis labels are %q; want the spend (USD) and the day (UTC)", size.name, axes)
		}
		var ticks int
		b.eval(`document.querySelectorAll('figure.chart svg text.tick').length`, &ticks)
		if ticks < 2 {
			t.Errorf("%s: the spend axis has %d ticks", size.name, ticks)
		}
		var scrollWidth, innerWidth, chartRight int
		b.eval(`Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)`, &scrollWidth)
		b.eval(`window.innerWidth`, &innerWidth)
		b.eval(`Math.ceil(document.querySelector('figure.chart svg').getBoundingClientRect().right)`, &chartRight)
		if scrollWidth > innerWidth || chartRight > innerWidth {
			t.Errorf("%s: the page is %dpx wide, its chart ends at %dpx, on a %dpx screen (sideways scrolling)", size.name, scrollWidth, chartRight, innerWidth)
		}
		var spilled []string
		b.eval(`Array.from(document.querySelectorAll('table.usage th, table.usage td')).filter(c => c.scrollWidth > c.clientWidth + 1 || c.getBoundingClientRect().right > window.innerWidth + 1).map(c => c.textContent)`, &spilled)
		if len(spilled) > 0 {
			t.Errorf("%s: table cells spill out: %q", size.name, spilled)
		}
		b.screenshot(size.name)
	}
}

// Issue 46: a transcript shows an image an MCP tool returned as the image, not a broken link
// (the setup of TestToolImageIsServed, with a real PNG); its screenshot is docs/img's.
func TestBrowserTranscriptShowsAToolImage(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	s, err := ff.store.Open(ff.ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000950.000100"})
	if err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 240, 120))
	for x := range 240 {
		for y := range 120 {
			c := color.RGBA{R: 0xee, G: 0xf2, B: 0xfa, A: 0xff}
			if bar := x / 40; x%40 > 8 && 120-y < (bar+1)*18 {
				c = color.RGBA{R: 0x4a, G: 0x7b, B: 0xd0, A: 0xff}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	sha := session.FileHash(buf.Bytes())
	if err := ff.store.PutFile(ff.ctx, s.ID, sha, buf.Bytes(), false); err != nil {
		t.Fatal(err)
	}
	ts := "1700000950.000100"
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	if _, err := ff.store.Append(ff.ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: alice, Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001",
			ThreadTS: ts, TS: ts, User: "U0000001", UserName: "alice", Text: "chart the error rate"}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "Charting.", ToolCallIDs: []string{"call_1"}, Turn: 2}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "call_1", Name: "mcp__charts__draw", Input: []byte(`{"metric":"errors"}`), Server: "charts", Tool: "draw"}},
		session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSystem, ID: "brain"}, Payload: session.ToolResult{CallID: "call_1",
			Content: "the chart", Server: "charts", Tool: "draw", Images: []session.ToolImage{{SHA256: sha, MediaType: "image/png", Size: int64(buf.Len())}}}}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, "alice@example.com")
	b.open(ff.withFiles.URL + "/sessions/" + s.ID.String())
	b.call(chromedp.Do(b.ctx, chromedp.ScrollIntoView(`img[src*="/files/"]`)))
	_, err = chromedp.Run(b.ctx, chromedp.Poll[bool](`Array.from(document.images).every(i => i.complete)`))
	b.call(err)
	var loaded []int
	b.eval(`Array.from(document.images).filter(i => i.src.includes('/files/')).map(i => i.complete ? i.naturalWidth : -1)`, &loaded)
	if len(loaded) != 1 || loaded[0] != 240 {
		t.Fatalf("the tool's image in the transcript: natural widths %v; want one image 240px wide", loaded)
	}
	b.screenshot("transcript-mcp-image")
}
