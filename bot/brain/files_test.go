package brain_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// testImage is a w×h picture with some detail, encoded by enc.
func testImage(t testing.TB, w, h int, enc func(*bytes.Buffer, image.Image) error) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(x * 13), G: uint8(y * 7), B: uint8(x ^ y), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := enc(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testPNG(t testing.TB) []byte {
	return testImage(t, 24, 16, func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) })
}

func testJPEG(t testing.TB) []byte {
	return testImage(t, 20, 20, func(b *bytes.Buffer, m image.Image) error { return jpeg.Encode(b, m, nil) })
}

// testPDF is a one-page PDF.
const testPDF = "%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n" +
	"3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n"

// file is a file a test shares with a message.
type file struct {
	name, mimetype string
	data           []byte
	status         string // the file_fetched status; "" is stored, "-" is no file_fetched at all
	reason         string
	workspace      string
	missing        bool // stored, but its content is not in the store
}

// share appends a user message from Alice that shares files: the message, its file_ref events,
// then each file's file_fetched (stored files' content put into the store). It returns the
// message's seq.
func (e *env) share(text string, files ...file) int64 {
	e.t.Helper()
	ctx := context.Background()
	seq, ts := e.user(text)
	var refs []session.NewEvent
	for i, f := range files {
		id := fmt.Sprintf("F%s_%d", ts[len(ts)-3:], i)
		refs = append(refs, session.NewEvent{Type: session.TypeFileRef, Actor: alice, IdempotencyKey: "file_ref:" + ts + ":" + id,
			Payload: session.FileRef{FileID: id, Name: f.name, Mimetype: f.mimetype, Size: int64(len(f.data)), TS: ts, User: "U0000001"}})
	}
	if len(refs) > 0 {
		e.append(refs...)
	}
	for i, f := range files {
		if f.status == "-" {
			continue
		}
		id := fmt.Sprintf("F%s_%d", ts[len(ts)-3:], i)
		ff := session.FileFetched{FileID: id, TS: ts, Name: f.name, Mimetype: f.mimetype, Size: int64(len(f.data)),
			Status: cmp.Or(f.status, session.FileStored), Reason: f.reason, Attempts: 1, Workspace: f.workspace}
		if ff.Status == session.FileStored {
			ff.SHA256 = session.FileHash(f.data)
			if !f.missing {
				if err := e.st.PutFile(ctx, e.sess.ID, ff.SHA256, f.data, false); err != nil {
					e.t.Fatal(err)
				}
			}
		}
		e.append(session.NewEvent{Type: session.TypeFileFetched, Actor: session.Actor{Kind: session.ActorSystem, ID: "files"},
			IdempotencyKey: "file_fetched:" + ts + ":" + id, Payload: ff})
	}
	return seq
}

// countingFiles is the store as a FileReader, counting reads by hash.
type countingFiles struct {
	st    *session.Store
	mu    sync.Mutex
	reads map[string]int
}

func (c *countingFiles) FileContent(ctx context.Context, sha string) ([]byte, error) {
	c.mu.Lock()
	if c.reads == nil {
		c.reads = map[string]int{}
	}
	c.reads[sha]++
	c.mu.Unlock()
	return c.st.FileContent(ctx, sha)
}

// blocksOf returns the blocks of a received message of the given type.
func blocksOf(m fakeprovider.Message, typ string) []fakeprovider.Block {
	var out []fakeprovider.Block
	for _, b := range m.Blocks {
		if b.Type == typ {
			out = append(out, b)
		}
	}
	return out
}

// allText is the text of a received message's text blocks, joined.
func allText(m fakeprovider.Message) string {
	var parts []string
	for _, b := range blocksOf(m, "text") {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n")
}

// An image, a text file and a PDF shared with a message reach Anthropic as an image block, a
// fenced text block and a document block, with the bytes intact; the count-tokens endpoint
// takes the same request; each file is read once in a Run of two rounds.
func TestSharedFilesReachAnthropic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	pic, notes := testPNG(t), "line one\nline two with ``` fences\n"
	seq := e.share("@logbook what do these say?",
		file{name: "chart.png", mimetype: "image/png", data: pic},
		file{name: "notes.txt", mimetype: "text/plain", data: []byte(notes)},
		file{name: "report.pdf", mimetype: "application/pdf", data: []byte(testPDF)})
	turnSeq := e.startTurn(seq)
	fake, p := fakeFor(t, "anthropic")
	fake.PushCount(fakeprovider.Count{InputTokens: 4000}, fakeprovider.Count{InputTokens: 4100})
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_ls", Name: "run_command", Input: `{"command":"ls"}`}}},
		fakeprovider.Reply{Text: "A chart, two lines of notes and a one-page report."},
	)
	b, _ := newBrain(t, p, func(cfg *brain.Config) { cfg.ContextBudget = 12000 }) // the estimate is over a quarter: the API counts
	files := &countingFiles{st: e.st}
	tu := e.turn(&fakeHands{}, turnSeq)
	tu.Files = files
	if _, err := b.Run(context.Background(), tu); err != nil {
		t.Fatal(err)
	}
	calls := mustAllValid(t, fake, 2)
	for i, c := range calls {
		m := c.Messages[0]
		want := []string{"text:Alice: what do these say?", "text:[File chart.png (image/png, " + sizeOf(pic) + ") shared by Alice]",
			fmt.Sprintf("image:image/png:%d", len(pic))}
		if got := blockTexts(m); len(got) != 6 || !slices.Equal(got[:3], want) {
			t.Fatalf("request %d: first message %q, want it to open with %q and have 6 blocks", i, got, want)
		}
		if img := m.Blocks[2]; !bytes.Equal(img.Data, pic) {
			t.Errorf("request %d: the image's bytes changed on the way", i)
		}
		text := m.Blocks[3].Text
		if !strings.HasPrefix(text, "[File notes.txt (text/plain, "+sizeOf([]byte(notes))+") shared by Alice]\n````\n"+notes+"````") {
			t.Errorf("request %d: text file block = %q", i, text)
		}
		if got := m.Blocks[4].Text; got != "[File report.pdf (application/pdf, "+sizeOf([]byte(testPDF))+") shared by Alice]" {
			t.Errorf("request %d: PDF label = %q", i, got)
		}
		if doc := m.Blocks[5]; doc.Type != "document" || doc.MediaType != "application/pdf" || doc.Name != "report.pdf" || string(doc.Data) != testPDF {
			t.Errorf("request %d: document = %s %s %q (%d bytes)", i, doc.Type, doc.MediaType, doc.Name, len(doc.Data))
		}
	}
	counts := fake.CountCalls()
	if len(counts) != 2 || counts[0].Invalid != "" || len(blocksOf(counts[0].Messages[0], "image")) != 1 || len(blocksOf(counts[0].Messages[0], "document")) != 1 {
		t.Fatalf("count_tokens calls: %d, first invalid %q", len(counts), counts[0].Invalid)
	}
	if len(files.reads) != 3 {
		t.Errorf("files read: %v, want three", files.reads)
	}
	for sha, n := range files.reads {
		if n != 1 {
			t.Errorf("file %s read %d times in one Run, want once", sha[:8], n)
		}
	}
}

func sizeOf(b []byte) string {
	if len(b) < 1024 {
		return fmt.Sprintf("%d B", len(b))
	}
	return fmt.Sprintf("%.1f KB", float64(len(b))/1024)
}

// Chat Completions gets a user message of content parts: the text, an image_url part with a
// data URL, the text file; a PDF (this is not api.openai.com) is named in a note. The image
// never goes into a tool message.
func TestSharedFilesReachOpenAI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	pic := testJPEG(t)
	seq := e.share("@logbook look", file{name: "photo.jpg", mimetype: "image/jpeg", data: pic},
		file{name: "app.log", mimetype: "application/octet-stream", data: []byte("ERROR boom\n")},
		file{name: "report.pdf", mimetype: "application/pdf", data: []byte(testPDF)})
	turnSeq := e.startTurn(seq)
	fake, p := fakeFor(t, "openai")
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_ls", Name: "run_command", Input: `{"command":"ls"}`}}},
		fakeprovider.Reply{Text: "A photo and a log with one error."})
	b, _ := newBrain(t, p, nil)
	tu := e.turn(&fakeHands{}, turnSeq)
	tu.Files = e.st
	if _, err := b.Run(context.Background(), tu); err != nil {
		t.Fatal(err)
	}
	calls := mustAllValid(t, fake, 2)
	for i, c := range calls {
		if c.Messages[0].Role != "system" || c.Messages[1].Role != "user" {
			t.Fatalf("request %d roles = %s", i, roles(c.Messages))
		}
		m := c.Messages[1]
		got := blockTexts(m)
		if len(got) != 3 || got[0] != "text:Alice: look\n\n[File photo.jpg (image/jpeg, "+sizeOf(pic)+") shared by Alice]" ||
			got[1] != fmt.Sprintf("image:image/jpeg:%d", len(pic)) || !bytes.Equal(m.Blocks[1].Data, pic) {
			t.Fatalf("request %d user message = %q", i, got)
		}
		if !strings.Contains(got[2], "[File app.log (application/octet-stream, 11 B) shared by Alice]\n```\nERROR boom\n```") ||
			!strings.Contains(got[2], "The PDF report.pdf") {
			t.Errorf("request %d: text part = %q", i, got[2])
		}
		for _, m := range c.Messages[2:] {
			if len(blocksOf(m, "image")) > 0 && m.Role != "user" {
				t.Errorf("request %d: an image in a %s message", i, m.Role)
			}
		}
	}
	if roles(calls[1].Messages) != "system,user,assistant,tool" {
		t.Errorf("second request roles = %s", roles(calls[1].Messages))
	}
}

// Files whose content is not here are named in the history with why: too large, failed,
// not fetched, not loadable, unreadable with and without a copy in the sandbox. The turn goes
// on.
func TestSharedFilesNamedWhenNotShown(t *testing.T) {
	t.Parallel()
	zip := []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00binary\x00stuff")
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			seq := e.share("@logbook what about these?",
				file{name: "huge.mov", mimetype: "video/quicktime", data: []byte("x"), status: session.FileTooLarge, reason: "it is 2.1 GB, over LOGBOOK_FILE_MAX (50 MB)"},
				file{name: "secret.txt", mimetype: "text/plain", data: []byte("x"), status: session.FileFailed, reason: "files.slack.com answered HTTP 403"},
				file{name: "archive.zip", mimetype: "application/zip", data: zip, workspace: "files/archive.zip"},
				file{name: "blob.bin", mimetype: "application/octet-stream", data: zip[:len(zip)-1]},
				file{name: "later.txt", mimetype: "text/plain", data: []byte("later"), status: "-"},
				file{name: "gone.png", mimetype: "image/png", data: testPNG(t), missing: true})
			turnSeq := e.startTurn(seq)
			fake, p := fakeFor(t, kind)
			fake.Push(fakeprovider.Reply{Text: "Some of these I can't read."})
			b, _ := newBrain(t, p, nil)
			tu := e.turn(&fakeHands{}, turnSeq)
			tu.Files = e.st
			r, err := b.Run(context.Background(), tu)
			if err != nil || r.Status != session.StatusOK {
				t.Fatalf("Run = %+v, %v", r, err)
			}
			calls := mustAllValid(t, fake, 1)
			text := allText(calls[0].Messages[len(calls[0].Messages)-1])
			for _, want := range []string{
				"[File huge.mov (video/quicktime, 1 B) shared by Alice: its content was not fetched: it is 2.1 GB, over LOGBOOK_FILE_MAX (50 MB).]",
				"[File secret.txt (text/plain, 1 B) shared by Alice: its content could not be fetched: files.slack.com answered HTTP 403.]",
				"[File archive.zip (application/zip, " + sizeOf(zip) + ") shared by Alice: it is not readable here as text or image. A copy is in the sandbox at files/archive.zip; run_command can work on it.]",
				"[File blob.bin (application/octet-stream, " + sizeOf(zip[:len(zip)-1]) + ") shared by Alice: it is not readable as text or image, and nothing here can read it (no copy is in the sandbox).]",
				"[File later.txt (text/plain, 5 B) shared by Alice: it was shared, but its content was not fetched, so it is not available here.]",
				"shared by Alice: its content could not be loaded.]",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("the request lacks %q; it says:\n%s", want, text)
				}
			}
			if n := len(blocksOf(calls[0].Messages[len(calls[0].Messages)-1], "image")); n != 0 {
				t.Errorf("%d images sent for a file whose content could not be loaded", n)
			}
		})
	}
}

// Without a FileReader, files are only named; a file shared with a bare mention is content,
// not a bare mention.
func TestSharedFilesWithoutReaderAreNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	seq := e.share("@logbook", file{name: "chart.png", mimetype: "image/png", data: testPNG(t)})
	turnSeq := e.startTurn(seq)
	fake, p := fakeFor(t, "anthropic")
	fake.Push(fakeprovider.Reply{Text: "I only see the name."})
	b, _ := newBrain(t, p, nil)
	if _, err := b.Run(context.Background(), e.turn(nil, turnSeq)); err != nil {
		t.Fatal(err)
	}
	calls := mustAllValid(t, fake, 1)
	got := blockTexts(calls[0].Messages[0])
	want := []string{"text:Alice: (shared a file)", "text:[File chart.png (image/png, " + sizeOf(testPNG(t)) +
		") shared by Alice: its content is not loaded in this conversation; only its name is.]"}
	if !slices.Equal(got, want) {
		t.Errorf("message = %q, want %q", got, want)
	}
}

// A summary request is text: the image of a summarised turn becomes a one-line note in it.
func TestSummaryRequestCarriesNoImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	pic := testPNG(t)
	for i := range 5 {
		var seq int64
		if i == 0 {
			seq = e.share("what is this chart?", file{name: "chart.png", mimetype: "image/png", data: pic})
		} else {
			seq, _ = e.user(fmt.Sprintf("explain part %d", i))
		}
		ts := e.startTurn(seq)
		e.append(
			session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
				Text: strings.Repeat(fmt.Sprintf("Part %d works like this. ", i), 40), Turn: ts}},
			session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{Turn: ts, Status: "ok", Through: seq}})
	}
	seq, _ := e.user("and the last part?")
	turnSeq := e.startTurn(seq)
	fake, p := fakeFor(t, "anthropic")
	fake.PushCount(fakeprovider.Count{InputTokens: 9000})
	fake.Push(fakeprovider.Reply{Text: "A chart was shown, parts 1 to 3 were explained."}, fakeprovider.Reply{Text: "Simple."})
	b, _ := newBrain(t, p, func(cfg *brain.Config) { cfg.ContextBudget = 3000 })
	tu := e.turn(nil, turnSeq)
	tu.Files = e.st
	if _, err := b.Run(context.Background(), tu); err != nil {
		t.Fatal(err)
	}
	wantTypes(t, e.after(turnSeq), session.TypeContextSummary, session.TypeAssistantMessage)
	calls := mustAllValid(t, fake, 2)
	sum := calls[0]
	if !strings.Contains(sum.System, "condense") || len(sum.Messages) != 1 {
		t.Fatalf("first call is not the summary: %q", sum.System)
	}
	for _, m := range sum.Messages {
		if n := len(blocksOf(m, "image")) + len(blocksOf(m, "document")); n > 0 {
			t.Errorf("the summary request carries %d images or documents", n)
		}
	}
	if text := allText(sum.Messages[0]); !strings.Contains(text, "[image chart.png (image/png, "+sizeOf(pic)+") was shown to the model here; it is not included in this text]") {
		t.Errorf("the summary transcript does not name the image:\n%s", text)
	}
	for _, m := range calls[1].Messages {
		if len(blocksOf(m, "image")) > 0 {
			t.Errorf("the image of a summarised turn is still sent")
		}
	}
}

// attach_file (bot/files' tool) is offered as the turn's parts offer it, beside the sandbox's
// tools; its result is what it returned, an error an error result.
func TestAttachFile(t *testing.T) {
	t.Parallel()
	attach := attachTool(func(callID, path, title string) (string, error) { return "", nil })
	for _, c := range []struct {
		name   string
		hands  bool
		attach bool
		want   bool
	}{{"hands and attach", true, true, true}, {"hands only", true, false, false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			seq, _ := e.user("@logbook hi")
			turnSeq := e.startTurn(seq)
			fake, p := fakeFor(t, "anthropic")
			fake.Push(fakeprovider.Reply{Text: "Hi."})
			b, _ := newBrain(t, p, nil)
			tu := e.turn(nil, turnSeq)
			if c.hands {
				tu.Hands = &fakeHands{}
			}
			if c.attach {
				tu.Tools = []brain.Tool{attach}
			}
			if _, err := b.Run(context.Background(), tu); err != nil {
				t.Fatal(err)
			}
			calls := mustAllValid(t, fake, 1)
			if got := slices.Contains(calls[0].Tools, "attach_file"); got != c.want {
				t.Errorf("attach_file offered = %v, want %v (tools %v)", got, c.want, calls[0].Tools)
			}
			if got := strings.Contains(calls[0].System, "attach_file"); got != c.want {
				t.Errorf("system prompt names attach_file = %v, want %v", got, c.want)
			}
		})
	}

	t.Run("calls", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		seq, _ := e.user("@logbook send me the report")
		turnSeq := e.startTurn(seq)
		fake, p := fakeFor(t, "openai")
		fake.Push(
			fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
				{ID: "call_ok", Name: "attach_file", Input: `{"path":"out/report.csv","title":"Q3 report"}`},
				{ID: "call_bad", Name: "attach_file", Input: `{"path":"missing.csv"}`},
			}},
			fakeprovider.Reply{Text: "Attached."})
		b, _ := newBrain(t, p, nil)
		type got struct{ callID, path, title string }
		var mu sync.Mutex
		var seen []got
		tu := e.turn(&fakeHands{}, turnSeq)
		tu.Tools = []brain.Tool{attachTool(func(callID, path, title string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, got{callID, path, title})
			if path == "missing.csv" {
				return "", errors.New("open missing.csv: no such file in the workspace " + strings.Repeat("x", 300))
			}
			return "attached out/report.csv (12 KB) to the thread as \"Q3 report\"", nil
		})}
		if _, err := b.Run(context.Background(), tu); err != nil {
			t.Fatal(err)
		}
		mustAllValid(t, fake, 2)
		if want := []got{{"call_ok", "out/report.csv", "Q3 report"}, {"call_bad", "missing.csv", ""}}; !slices.Equal(seen, want) {
			t.Errorf("Attach calls = %+v, want %+v", seen, want)
		}
		evs := e.after(turnSeq)
		wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolCall,
			session.TypeToolResult, session.TypeToolResult, session.TypeAssistantMessage)
		ok := decode[session.ToolResult](t, evs[3])
		if ok.CallID != "call_ok" || ok.IsError || ok.Content != "attached out/report.csv (12 KB) to the thread as \"Q3 report\"" {
			t.Errorf("first result = %+v", ok)
		}
		bad := decode[session.ToolResult](t, evs[4])
		if bad.CallID != "call_bad" || !bad.IsError || !strings.HasPrefix(bad.Content, "open missing.csv: no such file") || len(bad.Content) > 200+len("…") {
			t.Errorf("second result = %+v (%d bytes)", bad, len(bad.Content))
		}
	})
}

// FileKind decides by content when it has it, else by mimetype, else by extension.
func TestFileKind(t *testing.T) {
	t.Parallel()
	pic := testPNG(t)
	for _, c := range []struct {
		mimetype, name string
		data           []byte
		want           string
	}{
		{"image/png", "a.png", nil, brain.FileKindImage},
		{"image/webp", "a.webp", nil, brain.FileKindImage},
		{"image/heic", "a.heic", nil, brain.FileKindOther},
		{"image/svg+xml", "a.svg", nil, brain.FileKindText},
		{"application/pdf", "a.pdf", nil, brain.FileKindPDF},
		{"text/csv", "a.csv", nil, brain.FileKindText},
		{"application/json; charset=utf-8", "a.json", nil, brain.FileKindText},
		{"application/x-yaml", "a.yaml", nil, brain.FileKindText},
		{"application/octet-stream", "main.go", nil, brain.FileKindText},
		{"", "Dockerfile", nil, brain.FileKindText},
		{"", "photo.JPG", nil, brain.FileKindImage},
		{"application/zip", "a.zip", nil, brain.FileKindOther},
		{"", "a.bin", nil, brain.FileKindOther},
		// by content, whatever the mimetype says
		{"application/octet-stream", "x", pic, brain.FileKindImage},
		{"image/jpeg", "a.jpg", pic, brain.FileKindImage},
		{"image/png", "a.png", []byte("not an image at all"), brain.FileKindText},
		{"application/octet-stream", "x", []byte(testPDF), brain.FileKindPDF},
		{"application/zip", "a.zip", []byte("héllo, plain UTF-8"), brain.FileKindText},
		{"text/plain", "a.txt", []byte("NUL\x00inside"), brain.FileKindOther},
		{"text/plain", "latin1.txt", []byte("caf\xe9"), brain.FileKindText},
		{"application/octet-stream", "x", []byte("\xff\xfe\xfd"), brain.FileKindOther},
		{"", "empty.txt", []byte{}, brain.FileKindText},
	} {
		if got := brain.FileKind(c.mimetype, c.name, c.data); got != c.want {
			t.Errorf("FileKind(%q, %q, %d bytes) = %q, want %q", c.mimetype, c.name, len(c.data), got, c.want)
		}
	}
}

// The fake takes images and documents only in the shapes the APIs define, and answers 400
// otherwise; count_tokens takes them too.
func TestFakeProviderMediaShapes(t *testing.T) {
	t.Parallel()
	pic := base64.StdEncoding.EncodeToString(testPNG(t))
	pdf := base64.StdEncoding.EncodeToString([]byte(testPDF))
	post := func(t *testing.T, fake *fakeprovider.Server, path, body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, fake.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", anthropicKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Authorization", "Bearer "+openAIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("anthropic", func(t *testing.T) {
		t.Parallel()
		fake := fakeprovider.NewAnthropic(t, anthropicKey)
		msg := func(content string) string {
			return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi"},` + content + `]}]}`
		}
		img := func(mt, data string) string {
			return `{"type":"image","source":{"type":"base64","media_type":"` + mt + `","data":"` + data + `"}}`
		}
		for _, c := range []struct{ name, body, want string }{
			{"bmp", msg(img("image/bmp", pic)), "media_type: Input should be"},
			{"bad base64", msg(img("image/png", "not base64!")), "invalid base64"},
			{"type mismatch", msg(img("image/jpeg", pic)), "does not match the provided media type image/jpeg"},
			{"url source", msg(`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`), "only base64 sources"},
			{"no source", msg(`{"type":"image"}`), "source: Field required"},
			{"text document", msg(`{"type":"document","source":{"type":"base64","media_type":"text/plain","data":"aGk="}}`), "Input should be 'application/pdf'"},
			{"not a pdf", msg(`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"aGk="}}`), "The PDF specified was not valid"},
			{"assistant image", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` +
				img("image/png", pic) + `]},{"role":"user","content":"so?"}]}`, "only allowed in user messages"},
			// The API takes images in a tool_result's content (an MCP tool's), checked as any image.
			{"bmp in tool_result", `{"model":"m","max_tokens":10,"tools":[{"name":"t","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[` +
				img("image/bmp", pic) + `]}]}]}`, "media_type: Input should be"},
		} {
			if status := post(t, fake, "v1/messages", c.body); status != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", c.name, status)
			}
			calls := fake.Calls()
			if got := calls[len(calls)-1].Invalid; !strings.Contains(got, c.want) {
				t.Errorf("%s: rejected with %q, want %q", c.name, got, c.want)
			}
		}
		good := msg(img("image/png", pic) + `,{"type":"document","title":"r.pdf","source":{"type":"base64","media_type":"application/pdf","data":"` + pdf + `"}}`)
		if status := post(t, fake, "v1/messages/count_tokens", strings.Replace(good, `"max_tokens":10,`, "", 1)); status != http.StatusOK {
			t.Errorf("count_tokens with an image and a document: status %d (%+v)", status, fake.CountCalls())
		}
		fake.Push(fakeprovider.Reply{Text: "ok"})
		if status := post(t, fake, "v1/messages", good); status != http.StatusOK {
			t.Fatalf("a good request: status %d", status)
		}
		calls := fake.Calls()
		bs := calls[len(calls)-1].Messages[0].Blocks
		if len(bs) != 3 || bs[1].Type != "image" || !bytes.Equal(bs[1].Data, testPNG(t)) || bs[2].Type != "document" || bs[2].Name != "r.pdf" || string(bs[2].Data) != testPDF {
			t.Errorf("received %+v", bs)
		}
	})
	t.Run("openai", func(t *testing.T) {
		t.Parallel()
		fake := fakeprovider.NewOpenAI(t, openAIKey)
		user := func(parts string) string {
			return `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},` + parts + `]}]}`
		}
		for _, c := range []struct{ name, body, want string }{
			{"http url", user(`{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`), "only base64 data URLs"},
			{"bmp", user(`{"type":"image_url","image_url":{"url":"data:image/bmp;base64,` + pic + `"}}`), "unsupported MIME type 'image/bmp'"},
			{"bad base64", user(`{"type":"image_url","image_url":{"url":"data:image/png;base64,%%%"}}`), "not valid base64"},
			{"type mismatch", user(`{"type":"image_url","image_url":{"url":"data:image/gif;base64,` + pic + `"}}`), "does not match"},
			{"bad detail", user(`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pic + `","detail":"max"}}`), "Invalid value: 'max'"},
			{"no filename", user(`{"type":"file","file":{"file_data":"data:application/pdf;base64,` + pdf + `"}}`), "file.filename"},
			{"text file", user(`{"type":"file","file":{"filename":"a.txt","file_data":"data:text/plain;base64,aGk="}}`), "unsupported MIME type 'text/plain'"},
			{"raw base64 file", user(`{"type":"file","file":{"filename":"a.pdf","file_data":"` + pdf + `"}}`), "expected a base64-encoded data URL"},
			{"unknown part", user(`{"type":"video","video":{}}`), "Invalid value: 'video'"},
			{"empty parts", `{"model":"m","messages":[{"role":"user","content":[]}]}`, "empty array"},
			{"image in tool message", `{"model":"m","tools":[{"type":"function","function":{"name":"t","parameters":{"type":"object"}}}],"messages":[` +
				`{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"t","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pic + `"}}]}]}`,
				"Image URLs are only allowed for messages with role 'user'"},
			{"image in system", `{"model":"m","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pic + `"}}]},{"role":"user","content":"hi"}]}`,
				"Image URLs are only allowed for messages with role 'user'"},
		} {
			if status := post(t, fake, "chat/completions", c.body); status != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", c.name, status)
			}
			calls := fake.Calls()
			if got := calls[len(calls)-1].Invalid; !strings.Contains(got, c.want) {
				t.Errorf("%s: rejected with %q, want %q", c.name, got, c.want)
			}
		}
		fake.Push(fakeprovider.Reply{Text: "ok"})
		good := user(`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pic + `","detail":"auto"}},{"type":"file","file":{"filename":"r.pdf","file_data":"data:application/pdf;base64,` + pdf + `"}}`)
		if status := post(t, fake, "chat/completions", good); status != http.StatusOK {
			t.Fatalf("a good request: status %d (%+v)", status, fake.Calls())
		}
		calls := fake.Calls()
		bs := calls[len(calls)-1].Messages[0].Blocks
		if len(bs) != 3 || bs[1].Type != "image" || !bytes.Equal(bs[1].Data, testPNG(t)) || bs[2].Type != "document" || bs[2].Name != "r.pdf" || string(bs[2].Data) != testPDF {
			t.Errorf("received %+v", bs)
		}
	})
}

// An OpenAI-compatible server other than api.openai.com gets no images by default (a text-only
// model would refuse the request, and every later turn of the thread with it): it is told of
// the image instead. LOGBOOK_MODEL_VISION=on sends them.
func TestImagesAreNotSentToOtherServersByDefault(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	fake.Push(fakeprovider.Reply{Text: "ok"})
	p, err := brain.NewProvider("openai:llava", brain.ProviderConfig{OpenAIAPIKey: openAIKey, OpenAIBaseURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	pic := []byte("\x89PNG\r\n\x1a\n not really")
	if _, err := p.Complete(context.Background(), brain.Request{MaxTokens: 50, Messages: []brain.Message{{Role: brain.RoleUser, Blocks: []brain.Block{
		{Text: "Alice: look"}, {Image: &brain.Media{MediaType: "image/png", Data: pic, Name: "shot.png"}}}}}}); err != nil {
		t.Fatal(err)
	}
	c := fake.Calls()[0]
	for _, b := range c.Messages[len(c.Messages)-1].Blocks {
		if b.Type == "image" {
			t.Fatal("an image was sent to a server not known to take images")
		}
	}
	if !bytes.Contains(c.Body, []byte("The image shot.png")) || !bytes.Contains(c.Body, []byte("LOGBOOK_MODEL_VISION")) {
		t.Fatalf("the model is not told of the image: %s", c.Body)
	}
}
