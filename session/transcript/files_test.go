package transcript_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

var filesActor = session.Actor{Kind: session.ActorSystem, ID: "files"}

const (
	logSHA = "3f2a9c1b4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
	pngSHA = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	outSHA = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	delSHA = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
)

// filesSession has files of every fate: shared with a message and stored (text and an
// image), too large, failed, never fetched, shared with a message later deleted, and one
// the agent handed back.
func filesSession() []session.Event {
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	ref := func(ts, id, name, mime string, size int64) {
		b.add(session.TypeFileRef, alice, session.FileRef{FileID: id, Name: name, Mimetype: mime, Size: size, TS: ts, User: alice.ID,
			URL: "https://files.slack.com/" + id})
	}
	b.user("1700000000.001200", "@logbook why does the build fail? logs attached", "<@UB000001> why does the build fail? logs attached",
		map[string]string{"UB000001": "logbook"})
	ref("1700000000.001200", "F001", "build.log", "text/plain", 12345)
	ref("1700000000.001200", "F002", "screen shot.png", "image/png", 2048)
	ref("1700000000.001200", "F003", "core.dump.zip", "application/zip", 45_000_000)
	ref("1700000000.001200", "F004", "report.pdf", "application/pdf", 1000)
	b.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: 1, Reason: "message"})
	b.add(session.TypeFileFetched, filesActor, session.FileFetched{FileID: "F001", TS: "1700000000.001200", Name: "build.log",
		Mimetype: "text/plain", Size: 12345, SHA256: logSHA, Status: session.FileStored, Attempts: 1})
	b.add(session.TypeFileFetched, filesActor, session.FileFetched{FileID: "F002", TS: "1700000000.001200", Name: "screen shot.png",
		Mimetype: "image/png", Size: 2048, SHA256: pngSHA, Status: session.FileStored, Attempts: 1})
	b.add(session.TypeFileFetched, filesActor, session.FileFetched{FileID: "F003", TS: "1700000000.001200", Name: "core.dump.zip",
		Mimetype: "application/zip", Size: 45_000_000, Status: session.FileTooLarge, Reason: "45.0 MB is over the 20.0 MB limit (LOGBOOK_FILE_MAX)"})
	b.add(session.TypeFileFetched, filesActor, session.FileFetched{FileID: "F004", TS: "1700000000.001200", Name: "report.pdf",
		Mimetype: "application/pdf", Size: 1000, Status: session.FileFailed, Reason: "Slack answered 500 Internal Server Error", Attempts: 3})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "Let me write a summary.", ToolCallIDs: []string{"call_1"}, Turn: 6})
	b.add(session.TypeToolCall, bot, session.ToolCall{CallID: "call_1", Name: "attach_file", Input: json.RawMessage(`{"path":"summary.md"}`)})
	b.add(session.TypeFileUpload, filesActor, session.FileUpload{CallID: "call_1", FileID: "F100", Name: "summary.md", Mimetype: "text/markdown",
		Size: 321, SHA256: outSHA, Status: "uploaded"})
	b.add(session.TypeFileUpload, filesActor, session.FileUpload{CallID: "call_1", FileID: "F100", Name: "summary.md", Mimetype: "text/markdown",
		Size: 321, SHA256: outSHA, Status: "shared", TS: "1700000021.000100"})
	b.add(session.TypeToolResult, box, session.ToolResult{CallID: "call_1", Content: "attached summary.md (321 B) to the thread"})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "The linker runs out of memory; the summary is attached.", Turn: 6})
	b.add(session.TypeDelivered, sys, session.Delivered{EventID: "x", Seq: 16, Channel: "C0000001", TS: []string{"1700000031.000100"}})
	b.add(session.TypeTurnCompleted, sys, session.TurnCompleted{Turn: 6, Status: "ok"})
	b.user("1700000040.000100", "", "", nil) // a file shared alone, never fetched
	ref("1700000040.000100", "F005", "notes.txt", "text/plain", 10)
	b.user("1700000050.000100", "oops, wrong file", "oops, wrong file", nil)
	ref("1700000050.000100", "F006", "passwords.txt", "text/plain", 99)
	b.add(session.TypeFileFetched, filesActor, session.FileFetched{FileID: "F006", TS: "1700000050.000100", Name: "passwords.txt",
		Mimetype: "text/plain", Size: 99, SHA256: delSHA, Status: session.FileStored})
	b.add(session.TypeUserMessageDeleted, alice, session.UserMessageDeleted{DeletedTS: "1700000050.000100", User: "U0000001"})
	return b.evs
}

func fileURL(sha string) string { return "/sessions/" + sessionID.String() + "/files/" + sha }

func TestGoldenFiles(t *testing.T) {
	t.Parallel()
	exts := map[transcript.Format]string{transcript.FormatText: "txt", transcript.FormatMarkdown: "md", transcript.FormatHTML: "html", transcript.FormatJSON: "json"}
	for f, ext := range exts {
		var b bytes.Buffer
		if err := transcript.Render(&b, sess, filesSession(), transcript.Options{Format: f, FileURL: fileURL}); err != nil {
			t.Fatal(err)
		}
		golden(t, "files."+ext, b.Bytes())
	}
}

// A user entry lists the files shared with it (by ts), each with what became of it; the file
// the agent handed back is an entry of the bot's; a deleted message's files are for auditors.
func TestFilesInEntries(t *testing.T) {
	t.Parallel()
	tr := transcript.Build(sess, filesSession(), transcript.Options{})
	var kinds []string
	for _, e := range tr.Entries {
		kinds = append(kinds, e.Kind)
	}
	if got, want := strings.Join(kinds, ","), "user,assistant,tool,assistant,assistant,user,user"; got != want {
		t.Fatalf("kinds = %s, want %s", got, want)
	}
	first := tr.Entries[0].Files
	if len(first) != 4 {
		t.Fatalf("the first message has %d files, want 4: %+v", len(first), first)
	}
	want := []transcript.File{
		{FileID: "F001", Name: "build.log", Mimetype: "text/plain", Size: 12345, SHA256: logSHA, Status: session.FileStored},
		{FileID: "F002", Name: "screen shot.png", Mimetype: "image/png", Size: 2048, SHA256: pngSHA, Status: session.FileStored},
		{FileID: "F003", Name: "core.dump.zip", Mimetype: "application/zip", Size: 45_000_000, Status: session.FileTooLarge,
			Reason: "45.0 MB is over the 20.0 MB limit (LOGBOOK_FILE_MAX)"},
		{FileID: "F004", Name: "report.pdf", Mimetype: "application/pdf", Size: 1000, Status: session.FileFailed,
			Reason: "Slack answered 500 Internal Server Error"},
	}
	for i := range want {
		if first[i] != want[i] {
			t.Errorf("file %d = %+v, want %+v", i, first[i], want[i])
		}
	}
	if !first[1].Image() || first[0].Image() || !first[0].Stored() || first[2].Stored() {
		t.Errorf("Image/Stored wrong: %+v", first)
	}
	up := tr.Entries[3]
	if up.Type != session.TypeFileUpload || up.Author != "logbook" || up.TS != "1700000021.000100" || len(up.Files) != 1 ||
		up.Files[0].SHA256 != outSHA || up.Files[0].Status != transcript.FileShared || up.Files[0].Name != "summary.md" {
		t.Errorf("the handed-back file's entry = %+v", up)
	}
	if fs := tr.Entries[5].Files; len(fs) != 1 || fs[0].Status != transcript.FileNotFetched || fs[0].Name != "notes.txt" {
		t.Errorf("the never-fetched file = %+v", fs)
	}
	if fs := tr.Entries[6].Files; len(fs) != 0 || !tr.Entries[6].Deleted {
		t.Errorf("a deleted message shows its files to a reader who is not an auditor: %+v", tr.Entries[6])
	}
	audit := transcript.Build(sess, filesSession(), transcript.Options{RevealDeleted: true})
	if fs := audit.Entries[6].Files; len(fs) != 1 || fs[0].SHA256 != delSHA {
		t.Errorf("the auditor view lacks the deleted message's file: %+v", audit.Entries[6])
	}
	for _, e := range tr.Entries {
		for _, f := range e.Files {
			if f.URL != "" {
				t.Errorf("without Options.FileURL a file is linked: %+v", f)
			}
		}
	}
}

// Every format says each file's name, type and size, the hash of stored ones, and that the
// too large and failed ones were not stored, with why.
func TestFilesInEveryFormat(t *testing.T) {
	t.Parallel()
	evs := filesSession()
	for _, f := range []transcript.Format{transcript.FormatText, transcript.FormatMarkdown, transcript.FormatHTML, transcript.FormatJSON} {
		out := render(t, evs, transcript.Options{Format: f})
		wants := []string{"build.log", "text/plain", "screen shot.png", "image/png", "core.dump.zip", "report.pdf", "summary.md", "notes.txt"}
		if f == transcript.FormatJSON {
			wants = append(wants, `"sha256": "`+logSHA+`"`, `"status": "too_large"`, `"status": "failed"`, `"status": "shared"`,
				`"status": "not_fetched"`, `"size": 12345`, "Slack answered 500")
		} else {
			wants = append(wants, "12.1 KB", logSHA[:12], pngSHA[:12], outSHA[:12], "too large, not stored", "fetch failed, not stored",
				"Slack answered 500", "not fetched")
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: missing %q\n%s", f, w, out)
			}
		}
		if strings.Contains(out, "passwords.txt") || strings.Contains(render(t, evs, transcript.Options{Format: f, All: true}), "passwords.txt") {
			t.Errorf("%s: shows the deleted message's file", f)
		}
		if strings.Contains(out, "/files/") || strings.Contains(out, "<img") {
			t.Errorf("%s: links files without Options.FileURL", f)
		}
	}
	page := render(t, evs, transcript.Options{Format: transcript.FormatHTML, FileURL: fileURL})
	for _, w := range []string{
		`<a class="name" href="` + fileURL(logSHA) + `">build.log</a>`,
		`<img class="file-image" src="` + fileURL(pngSHA) + `" alt="screen shot.png"`,
		`<a class="name" href="` + fileURL(outSHA) + `">summary.md</a>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("linked HTML lacks %s", w)
		}
	}
	if n := strings.Count(page, "<img"); n != 1 {
		t.Errorf("the page shows %d images inline, want only the PNG", n)
	}
	md := render(t, evs, transcript.Options{Format: transcript.FormatMarkdown, FileURL: fileURL})
	if !strings.Contains(md, "[build.log](<"+fileURL(logSHA)+">)") || strings.Contains(md, "core.dump.zip](") {
		t.Errorf("linked Markdown:\n%s", md)
	}
	all := render(t, evs, transcript.Options{All: true})
	for _, w := range []string{"file fetched: report.pdf (application/pdf, 1000 B) — fetch failed, not stored: Slack answered 500",
		"file upload: summary.md (text/markdown, 321 B) uploaded for call call_1, sha256 " + outSHA[:12]} {
		if !strings.Contains(all, w) {
			t.Errorf("--all lacks %q:\n%s", w, all)
		}
	}
}

// A handed-back file's type may be missing from the log: its name tells an image.
func TestImageByExtension(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{"chart.PNG": true, "photo.jpg": true, "a.webp": true, "logo.svg": false, "page.html": false, "notes": false} {
		if got := (transcript.File{Name: name}).Image(); got != want {
			t.Errorf("Image(%q) = %v, want %v", name, got, want)
		}
	}
	if (transcript.File{Name: "x.png", Mimetype: "text/plain"}).Image() {
		t.Error("a recorded type loses to the extension")
	}
}

// A name cannot break out of its line or its markup.
func TestFileNamesAreEscaped(t *testing.T) {
	t.Parallel()
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "see", "see", nil)
	b.add(session.TypeFileRef, alice, session.FileRef{FileID: "F1", Name: "<img src=x onerror=alert(1)>\n[x](javascript:alert(1)).png",
		Mimetype: "image/png", Size: 1, TS: "1700000000.001200", User: alice.ID})
	b.add(session.TypeFileFetched, filesActor, session.FileFetched{FileID: "F1", TS: "1700000000.001200",
		Name: "<img src=x onerror=alert(1)>\n[x](javascript:alert(1)).png", Mimetype: "image/png", Size: 1, SHA256: pngSHA, Status: session.FileStored})
	page := render(t, b.evs, transcript.Options{Format: transcript.FormatHTML, FileURL: fileURL})
	if strings.Contains(page, "<img src=x") || !strings.Contains(page, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("HTML does not escape a file name:\n%s", page)
	}
	md := render(t, b.evs, transcript.Options{Format: transcript.FormatMarkdown, FileURL: fileURL})
	if strings.Contains(md, "[x](javascript") || strings.Contains(md, "\\<img src=x onerror=alert(1)>\n") {
		t.Errorf("Markdown does not escape a file name:\n%s", md)
	}
	text := render(t, b.evs, transcript.Options{})
	if !strings.Contains(text, "📎 <img src=x onerror=alert(1)> [x](javascript:alert(1)).png (image/png, 1 B)") {
		t.Errorf("text keeps a file name on one line:\n%s", text)
	}
}

// The images a tool returned are named in every format ("image (png, 2.0 KB)"), listed with
// their hash in JSON, and shown inline on a linked page; their bytes are never in the text.
func TestToolImagesInTranscripts(t *testing.T) {
	t.Parallel()
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "@logbook screenshot the dashboard", "<@UB000001> screenshot the dashboard", map[string]string{"UB000001": "logbook"})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "Taking it.", ToolCallIDs: []string{"call_1"}, Turn: 2})
	b.add(session.TypeToolCall, bot, session.ToolCall{CallID: "call_1", Name: "mcp__shots__grab", Input: json.RawMessage(`{}`), Server: "shots", Tool: "grab"})
	b.add(session.TypeToolResult, sys, session.ToolResult{CallID: "call_1", Content: "the dashboard", Server: "shots", Tool: "grab",
		Images: []session.ToolImage{{SHA256: pngSHA, MediaType: "image/png", Size: 2048}}})
	evs := b.evs
	for _, f := range []transcript.Format{transcript.FormatText, transcript.FormatMarkdown, transcript.FormatHTML, transcript.FormatJSON} {
		out := render(t, evs, transcript.Options{Format: f})
		if !strings.Contains(out, "image (png, 2.0 KB)") || !strings.Contains(out, "the dashboard") {
			t.Errorf("%s: the tool's image is not named:\n%s", f, out)
		}
		if f == transcript.FormatJSON && !strings.Contains(out, `"sha256": "`+pngSHA+`"`) {
			t.Errorf("json lacks the image's hash:\n%s", out)
		}
		if strings.Contains(out, "<img") {
			t.Errorf("%s: shows the image without Options.FileURL", f)
		}
	}
	page := render(t, evs, transcript.Options{Format: transcript.FormatHTML, FileURL: fileURL})
	if !strings.Contains(page, `<img class="file-image" src="`+fileURL(pngSHA)+`" alt="image (png, 2.0 KB)"`) {
		t.Errorf("the linked page does not show the tool's image:\n%s", page)
	}
}
