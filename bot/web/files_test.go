package web_test

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session"
)

var filesActor = session.Actor{Kind: session.ActorSystem, ID: "files"}

// pngBytes is a small real PNG.
func pngBytes(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for x := range 40 {
		for y := range 30 {
			img.Set(x, y, color.RGBA{R: uint8(6 * x), G: 120, B: uint8(8 * y), A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sharedFile is one file shared in a seeded session.
type sharedFile struct {
	name, mimetype string
	data           []byte
	sha            string
}

// filesFixture is the pages' fixture with files: a session in #general holding a PNG, a text
// file, an HTML page, an SVG, a "PNG" that is not one and a file whose fetch failed; one in
// #data holding a file of its own; one in the channel that became private holding another;
// and a server whose pages serve content (Config.Files).
type filesFixture struct {
	*fixture
	withFiles *httptest.Server
	general   session.ID
	data      session.ID
	secret    session.ID
	files     map[string]sharedFile // by name
}

func newFilesFixture(t *testing.T) *filesFixture {
	t.Helper()
	f := newFixture(t)
	ff := &filesFixture{fixture: f, files: map[string]sharedFile{}}
	share := func(channel, thread, ts string, files ...sharedFile) session.ID {
		s, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: channel, ThreadTS: thread})
		if err != nil {
			t.Fatal(err)
		}
		evs := []session.NewEvent{{Type: session.TypeUserMessage, Actor: alice, IdempotencyKey: "m:" + ts,
			Payload: session.UserMessage{Team: "T0000001", Channel: channel, ThreadTS: thread, TS: ts, User: "U0000001",
				UserName: "alice", Text: "files for you"}}}
		for i, fl := range files {
			id := "F" + string(rune('A'+i)) + ts
			evs = append(evs, session.NewEvent{Type: session.TypeFileRef, Actor: alice,
				Payload: session.FileRef{FileID: id, Name: fl.name, Mimetype: fl.mimetype, Size: int64(len(fl.data)), TS: ts, User: "U0000001"}})
			ffd := session.FileFetched{FileID: id, TS: ts, Name: fl.name, Mimetype: fl.mimetype, Size: int64(len(fl.data))}
			if fl.data == nil {
				ffd.Status, ffd.Reason = session.FileFailed, "Slack answered 500"
			} else {
				fl.sha = session.FileHash(fl.data)
				if err := f.store.PutFile(f.ctx, s.ID, fl.sha, fl.data, false); err != nil {
					t.Fatal(err)
				}
				ffd.Status, ffd.SHA256 = session.FileStored, fl.sha
			}
			evs = append(evs, session.NewEvent{Type: session.TypeFileFetched, Actor: filesActor, Payload: ffd})
			ff.files[fl.name] = fl
		}
		if _, err := f.store.Append(f.ctx, s.ID, evs...); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	ff.general = share("C0000001", "1700000400.000100", "1700000400.000100",
		sharedFile{name: "dashboard.png", mimetype: "image/png", data: pngBytes(t)},
		sharedFile{name: "build.log", mimetype: "text/plain", data: []byte("error: linker ran out of memory\n")},
		sharedFile{name: "page.html", mimetype: "text/html", data: []byte("<script>alert(document.cookie)</script>")},
		sharedFile{name: "logo.svg", mimetype: "image/svg+xml", data: []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`)},
		sharedFile{name: "fake.png", mimetype: "image/png", data: []byte("<html><script>alert(1)</script></html>")},
		sharedFile{name: "broken.pdf", mimetype: "application/pdf"},
	)
	// Files the agent handed back: the log records no type, the name says it.
	for _, fl := range []sharedFile{
		{name: "chart.png", data: append(pngBytes(t), 0)},
		{name: "evil.html", data: []byte("<script>alert(1)</script>")},
	} {
		fl.sha = session.FileHash(fl.data)
		if err := f.store.PutFile(f.ctx, ff.general, fl.sha, fl.data, false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Append(f.ctx, ff.general, session.NewEvent{Type: session.TypeFileUpload, Actor: filesActor,
			Payload: session.FileUpload{CallID: "c-" + fl.name, FileID: "FU" + fl.name, Name: fl.name, Size: int64(len(fl.data)),
				SHA256: fl.sha, Status: "shared", TS: "1700000401.000100"}}); err != nil {
			t.Fatal(err)
		}
		ff.files[fl.name] = fl
	}
	ff.data = share("C0000002", "1700000500.000100", "1700000500.000100",
		sharedFile{name: "orders.csv", mimetype: "text/csv", data: []byte("id,total\n1,9.99\n")})
	ff.secret = share("C0000003", "1700000600.000100", "1700000600.000100",
		sharedFile{name: "reorg.txt", mimetype: "text/plain", data: []byte("the reorg is friday")})
	h, err := web.Handler(web.Config{
		Sessions: f.store, Finder: f.searcher, AccessLog: f.app, Files: f.store,
		Access:     web.Access{ProxyHeader: proxyHeader, Auditors: []string{"auditor@example.com"}},
		Visibility: f.vis, Log: zerolog.New(zerolog.NewTestWriter(t)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ff.withFiles = httptest.NewServer(h)
	t.Cleanup(ff.withFiles.Close)
	return ff
}

// getFiles fetches path from the server that serves files.
func (ff *filesFixture) getFiles(path string, headers map[string]string) (int, string, http.Header) {
	ff.t.Helper()
	g := *ff.fixture
	g.srv = ff.withFiles
	return g.get(path, headers)
}

func (ff *filesFixture) route(id session.ID, name string) string {
	return "/sessions/" + id.String() + "/files/" + ff.files[name].sha
}

func TestFileRouteServesWhatTheSessionHolds(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	for _, c := range []struct {
		name, ctype, disposition string
	}{
		{"dashboard.png", "image/png", `inline; filename=dashboard.png`},
		{"build.log", "text/plain", `attachment; filename=build.log`},
		{"page.html", "application/octet-stream", `attachment; filename=page.html`},
		{"logo.svg", "application/octet-stream", `attachment; filename=logo.svg`},
		{"fake.png", "application/octet-stream", `attachment; filename=fake.png`},
		{"chart.png", "image/png", `inline; filename=chart.png`},
		{"evil.html", "application/octet-stream", `attachment; filename=evil.html`},
	} {
		status, body, hdr := ff.getFiles(ff.route(ff.general, c.name), asAlice)
		if status != http.StatusOK || body != string(ff.files[c.name].data) {
			t.Errorf("%s: status %d, body %q", c.name, status, body)
			continue
		}
		if got := hdr.Get("Content-Type"); got != c.ctype {
			t.Errorf("%s: Content-Type %q, want %q", c.name, got, c.ctype)
		}
		if got := hdr.Get("Content-Disposition"); got != c.disposition {
			t.Errorf("%s: Content-Disposition %q, want %q", c.name, got, c.disposition)
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(hdr.Get("Content-Security-Policy"), "default-src 'none'") ||
			!strings.Contains(hdr.Get("Cache-Control"), "no-store") {
			t.Errorf("%s: headers %v", c.name, hdr)
		}
	}
	// An auditor may read the file of a session hidden from others.
	if status, body, _ := ff.getFiles(ff.route(ff.secret, "reorg.txt"), asAuditor); status != http.StatusOK || body != "the reorg is friday" {
		t.Errorf("auditor, hidden session's file: %d %q", status, body)
	}
	// A name with quotes and non-ASCII letters is encoded, never breaks the header.
	if got := mimeDisposition(t, ff, "rapport «final».txt"); !strings.HasPrefix(got, "attachment; filename*=utf-8''rapport%20%C2%ABfinal%C2%BB.txt") {
		t.Errorf("Content-Disposition of a non-ASCII name: %q", got)
	}
}

// mimeDisposition shares a file named name in a new session and returns the header its
// route answers with.
func mimeDisposition(t *testing.T, ff *filesFixture, name string) string {
	t.Helper()
	s, err := ff.store.Open(ff.ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000900.000100"})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("bonjour")
	sha := session.FileHash(data)
	if err := ff.store.PutFile(ff.ctx, s.ID, sha, data, false); err != nil {
		t.Fatal(err)
	}
	ts := "1700000900.000100"
	if _, err := ff.store.Append(ff.ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: alice, Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001",
			ThreadTS: ts, TS: ts, User: "U0000001", Text: "a file"}},
		session.NewEvent{Type: session.TypeFileRef, Actor: alice, Payload: session.FileRef{FileID: "F9", Name: name, Mimetype: "text/plain", Size: 7, TS: ts, User: "U0000001"}},
		session.NewEvent{Type: session.TypeFileFetched, Actor: filesActor,
			Payload: session.FileFetched{FileID: "F9", TS: ts, Name: name, Mimetype: "text/plain", Size: 7, SHA256: sha, Status: session.FileStored}}); err != nil {
		t.Fatal(err)
	}
	status, _, hdr := ff.getFiles("/sessions/"+s.ID.String()+"/files/"+sha, asAlice)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	return hdr.Get("Content-Disposition")
}

// Content is only for readers of a session that holds it: another session's content, a
// hidden session, a made-up hash, a purged or never-stored file, or pages without Files all
// answer 404, and nobody without an identity gets anything.
func TestFileRouteRefusesWhatTheReaderMayNotSee(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	csv := ff.files["orders.csv"].sha
	for _, c := range []struct {
		what, path string
		who        map[string]string
	}{
		{"another channel's session's content through this session", "/sessions/" + ff.general.String() + "/files/" + csv, asAlice},
		{"this session's content through another session", "/sessions/" + ff.data.String() + "/files/" + ff.files["build.log"].sha, asAlice},
		{"a session whose channel became private", ff.route(ff.secret, "reorg.txt"), asAlice},
		{"a hash no session holds", "/sessions/" + ff.general.String() + "/files/" + session.FileHash([]byte("nothing")), asAlice},
		{"not a hash", "/sessions/" + ff.general.String() + "/files/..%2f..%2fetc%2fpasswd", asAlice},
		{"an uppercase hash", "/sessions/" + ff.general.String() + "/files/" + strings.ToUpper(ff.files["build.log"].sha), asAlice},
		{"no such session", "/sessions/0190f3a2-0000-7000-8000-000000000009/files/" + csv, asAlice},
		{"not a session id", "/sessions/nope/files/" + csv, asAlice},
	} {
		status, body, _ := ff.getFiles(c.path, c.who)
		if status != http.StatusNotFound || strings.Contains(body, "reorg is friday") || strings.Contains(body, "linker") || strings.Contains(body, "9.99") {
			t.Errorf("%s: status %d, want 404 without content", c.what, status)
		}
	}
	if status, _, _ := ff.getFiles(ff.route(ff.general, "build.log"), nil); status != http.StatusUnauthorized {
		t.Errorf("without an identity: %d, want 401", status)
	}
	// The pages without Config.Files serve no content and link none.
	if status, _, _ := ff.get(ff.route(ff.general, "build.log"), asAlice); status != http.StatusNotFound {
		t.Errorf("pages without Files: %d, want 404", status)
	}
	if _, body, _ := ff.get("/sessions/"+ff.general.String(), asAlice); strings.Contains(body, "/files/") || !strings.Contains(body, "build.log") {
		t.Errorf("pages without Files link files, or do not list them")
	}

	// Every answer is in the access log: what was asked for and what was answered.
	var ok200, nf404 int
	for _, r := range ff.accessLog() {
		if r.Action != "download" || !strings.HasPrefix(r.Format, "file") {
			continue
		}
		switch r.Status {
		case http.StatusOK:
			ok200++
		case http.StatusNotFound:
			nf404++
		}
	}
	if ok200 != 0 || nf404 != 9 {
		t.Errorf("access log: %d file downloads answered 200 and %d answered 404, want 0 and 9: %+v", ok200, nf404, ff.accessLog())
	}
}

func TestFileAccessIsRecorded(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	sha := ff.files["build.log"].sha
	if status, _, _ := ff.getFiles(ff.route(ff.general, "build.log"), asAlice); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	ff.getFiles(ff.route(ff.secret, "reorg.txt"), asAlice)
	log := ff.accessLog()
	if len(log) != 2 {
		t.Fatalf("access log = %+v, want 2 records", log)
	}
	r := log[0]
	if r.Who != "alice@example.com" || r.Action != "download" || r.Format != "file:"+sha || r.Status != 200 || r.Results != 1 ||
		r.Session == nil || *r.Session != ff.general.String() {
		t.Errorf("the download is recorded as %+v", r)
	}
	if r := log[1]; r.Status != 404 || r.Format != "file:"+ff.files["reorg.txt"].sha || r.Session == nil || *r.Session != ff.secret.String() {
		t.Errorf("the refusal is recorded as %+v", r)
	}
	// Nothing is served that is not recorded.
	h, err := web.Handler(web.Config{Sessions: ff.store, Finder: ff.searcher, AccessLog: failingLog{}, Files: ff.store,
		Access: web.Access{ProxyHeader: proxyHeader}, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, ff.route(ff.general, "build.log"), nil)
	req.RemoteAddr = "127.0.0.1:4180"
	req.Header.Set(proxyHeader, "alice@example.com")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "linker") {
		t.Errorf("with a broken access log: %d, want 503 without content", rec.Code)
	}
}

// The transcript page links each stored file to its route and shows images inline; files not
// stored say why and link nothing.
func TestTranscriptPageLinksFiles(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	status, body, _ := ff.getFiles("/sessions/"+ff.general.String(), asAlice)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	for _, w := range []string{
		`<a class="name" href="` + ff.route(ff.general, "build.log") + `">build.log</a>`,
		`<img class="file-image" src="` + ff.route(ff.general, "dashboard.png") + `" alt="dashboard.png"`,
		`<span class="name">broken.pdf</span>`, "fetch failed, not stored: Slack answered 500",
		`<img class="file-image" src="` + ff.route(ff.general, "chart.png") + `" alt="chart.png"`,
		ff.files["page.html"].sha[:12],
	} {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %s", w)
		}
	}
	// The fake PNG is listed as the log says, but what the route serves decides how it shows:
	// as a download, never as a page.
	if strings.Count(body, "<img") != 3 {
		t.Errorf("the page shows %d images, want the PNGs and the file claiming to be one", strings.Count(body, "<img"))
	}
}

func TestBrowserShowsSharedImagesInline(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	b := newBrowser(t, "alice@example.com")
	text := b.open(ff.withFiles.URL + "/sessions/" + ff.general.String())
	for _, want := range []string{"dashboard.png", "build.log", "broken.pdf", "fetch failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %q:\n%s", want, text)
		}
	}
	b.call(chromedpWaitImages(b))
	var sizes []int
	b.eval(`Array.from(document.querySelectorAll('img.file-image')).filter(i => i.alt === 'dashboard.png').map(i => i.naturalWidth)`, &sizes)
	if len(sizes) != 1 || sizes[0] != 40 {
		t.Errorf("the shared PNG is shown %v pixels wide, want one image 40 wide", sizes)
	}
	b.eval(`Array.from(document.querySelectorAll('img.file-image')).filter(i => i.alt === 'chart.png').map(i => i.naturalWidth)`, &sizes)
	if len(sizes) != 1 || sizes[0] != 40 {
		t.Errorf("the PNG the agent handed back is shown %v pixels wide, want one image 40 wide", sizes)
	}
	var fake []int
	b.eval(`Array.from(document.querySelectorAll('img.file-image')).filter(i => i.alt === 'fake.png').map(i => i.naturalWidth)`, &fake)
	if len(fake) != 1 || fake[0] != 0 {
		t.Errorf("the file claiming to be a PNG renders as %v", fake)
	}
	b.screenshot("transcript-files")
}

// chromedpWaitImages waits until every image of the page has loaded or failed.
func chromedpWaitImages(b *browser) error {
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`Array.from(document.images).every(i => i.complete)`,
		chromedp.WithPollingTimeout(20*time.Second)))
	return err
}

// A file shared with a message that was deleted is served to auditors only, as the message's
// text is shown to them only.
func TestFileOfADeletedMessageIsForAuditors(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	s, err := ff.store.Open(ff.ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000950.000100"})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("regret")
	sha := session.FileHash(data)
	if err := ff.store.PutFile(ff.ctx, s.ID, sha, data, false); err != nil {
		t.Fatal(err)
	}
	ts := "1700000950.000100"
	if _, err := ff.store.Append(ff.ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: alice, Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001",
			ThreadTS: ts, TS: ts, User: "U0000001", Text: "oops"}},
		session.NewEvent{Type: session.TypeFileRef, Actor: alice, Payload: session.FileRef{FileID: "F8", Name: "oops.txt", Mimetype: "text/plain", Size: 6, TS: ts, User: "U0000001"}},
		session.NewEvent{Type: session.TypeFileFetched, Actor: filesActor,
			Payload: session.FileFetched{FileID: "F8", TS: ts, Name: "oops.txt", Mimetype: "text/plain", Size: 6, SHA256: sha, Status: session.FileStored}},
		session.NewEvent{Type: session.TypeUserMessageDeleted, Actor: alice, Payload: session.UserMessageDeleted{DeletedTS: ts, User: "U0000001"}}); err != nil {
		t.Fatal(err)
	}
	route := "/sessions/" + s.ID.String() + "/files/" + sha
	if status, _, _ := ff.getFiles(route, asAlice); status != http.StatusNotFound {
		t.Errorf("a reader got the deleted message's file: %d", status)
	}
	if status, body, _ := ff.getFiles(route, asAuditor); status != http.StatusOK || body != "regret" {
		t.Errorf("an auditor: %d %q", status, body)
	}
}

// An image an MCP tool returned is served like a shared file: the transcript links it, and
// its link answers with the image, inline (issue 46: it answered 404, a broken image).
func TestToolImageIsServed(t *testing.T) {
	t.Parallel()
	ff := newFilesFixture(t)
	s, err := ff.store.Open(ff.ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000950.000100"})
	if err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n"), []byte("\x00\x00\x00\rIHDR a chart")...)
	sha := session.FileHash(png)
	if err := ff.store.PutFile(ff.ctx, s.ID, sha, png, false); err != nil {
		t.Fatal(err)
	}
	ts := "1700000950.000100"
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	if _, err := ff.store.Append(ff.ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: alice, Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001",
			ThreadTS: ts, TS: ts, User: "U0000001", Text: "chart it"}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "Charting.", ToolCallIDs: []string{"call_1"}, Turn: 2}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "call_1", Name: "mcp__charts__draw", Input: []byte(`{}`), Server: "charts", Tool: "draw"}},
		session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSystem, ID: "brain"}, Payload: session.ToolResult{CallID: "call_1",
			Content: "the chart", Server: "charts", Tool: "draw", Images: []session.ToolImage{{SHA256: sha, MediaType: "image/png", Size: int64(len(png))}}}}); err != nil {
		t.Fatal(err)
	}
	status, body, hdr := ff.getFiles("/sessions/"+s.ID.String()+"/files/"+sha, asAlice)
	if status != http.StatusOK || body != string(png) {
		t.Fatalf("the tool's image: status %d, %d bytes", status, len(body))
	}
	if ct, cd := hdr.Get("Content-Type"), hdr.Get("Content-Disposition"); ct != "image/png" || !strings.HasPrefix(cd, "inline") {
		t.Errorf("the tool's image: Content-Type %q, Content-Disposition %q", ct, cd)
	}
}
