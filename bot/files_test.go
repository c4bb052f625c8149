package bot_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// onePixelPNG is a real 1×1 PNG.
var onePixelPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

// fetched waits for n file_fetched events and returns them by file id.
func (h *harness) fetched(id session.ID, n int) map[string]session.FileFetched {
	h.t.Helper()
	h.waitFor("file_fetched", func() bool { return len(h.events(id, session.TypeFileFetched)) >= n })
	out := map[string]session.FileFetched{}
	for _, e := range h.events(id, session.TypeFileFetched) {
		var ff session.FileFetched
		if err := e.Decode(&ff); err != nil {
			h.t.Fatal(err)
		}
		out[ff.FileID] = ff
	}
	return out
}

// blocksOf is every block of the model request's messages of role.
func blocksOf(c fakeprovider.Call, role string) []fakeprovider.Block {
	var out []fakeprovider.Block
	for _, m := range c.Messages {
		if m.Role == role {
			out = append(out, m.Blocks...)
		}
	}
	return out
}

// An image and a text file shared with the message that mentions the bot reach the model
// as the Anthropic API takes them — the image's bytes as an image block, the log as text —,
// fetched once each with the bot token and stored by hash.
func TestSharedFilesReachTheModel(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{files: true})
	model.Push(fakeprovider.Reply{Text: "The log says the disk is full."})
	logText := "2026-12-01 10:00:01 ERROR disk full on /var\n"
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what is wrong?", Files: []slackemu.File{
		{ID: "F00000IMG1", Name: "graph.png", Mimetype: "image/png", Content: onePixelPNG},
		{ID: "F00000LOG1", Name: "app.log", Mimetype: "text/plain", Content: []byte(logText)},
	}})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	ff := h.fetched(s.ID, 2)
	if img := ff["F00000IMG1"]; img.Status != session.FileStored || img.SHA256 != session.FileHash(onePixelPNG) {
		t.Fatalf("image %+v", img)
	}
	if lg := ff["F00000LOG1"]; lg.Status != session.FileStored || lg.SHA256 != session.FileHash([]byte(logText)) {
		t.Fatalf("log %+v", lg)
	}
	var image, text bool
	for _, b := range blocksOf(model.Calls()[0], "user") {
		switch {
		case b.Type == "image" && b.MediaType == "image/png" && bytes.Equal(b.Data, onePixelPNG):
			image = true
		case b.Type == "text" && strings.Contains(b.Text, "disk full on /var") && strings.Contains(b.Text, "app.log"):
			text = true
		}
	}
	if !image || !text {
		t.Fatalf("the model's request lacks the image (%v) or the log (%v): %+v", image, text, model.Calls()[0].Messages)
	}
	for _, f := range []string{"F00000IMG1", "F00000LOG1"} {
		if n := h.emu.Downloads(f); n != 1 {
			t.Fatalf("%s downloaded %d times", f, n)
		}
	}
}

// A file over LOGBOOK_FILE_MAX is not fetched, a download that keeps failing is tried again
// and then reported, and a type nothing reads (no sandbox here) is named: the model is told of
// each, the reply says so whatever the model writes, and the message itself is answered.
func TestUnreadableFilesAreReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{files: true, fileMax: 1024})
	h.emu.InjectDownloadFault("F0000FAIL1", 500, 0)
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> look", Files: []slackemu.File{
		{ID: "F000BIG001", Name: "big.log", Mimetype: "text/plain", Content: bytes.Repeat([]byte("x"), 5000)},
		{ID: "F0000FAIL1", Name: "flaky.txt", Mimetype: "text/plain", Content: []byte("hello")},
		{ID: "F00000ZIP1", Name: "dump.zip", Mimetype: "application/zip", Content: []byte("PK\x03\x04 not text \x00\x01")},
	}})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	ff := h.fetched(s.ID, 3)
	if f := ff["F000BIG001"]; f.Status != session.FileTooLarge || h.emu.DownloadAttempts("F000BIG001") != 0 {
		t.Fatalf("big file %+v, %d downloads tried", f, h.emu.DownloadAttempts("F000BIG001"))
	}
	if f := ff["F0000FAIL1"]; f.Status != session.FileFailed || f.Attempts != 3 || h.emu.DownloadAttempts("F0000FAIL1") != 3 || !strings.Contains(f.Reason, "500") {
		t.Fatalf("failing file %+v, %d attempts at Slack", f, h.emu.DownloadAttempts("F0000FAIL1"))
	}
	if f := ff["F00000ZIP1"]; f.Status != session.FileStored || f.Workspace != "" {
		t.Fatalf("zip %+v", f)
	}
	reply := h.replies(general, top.TS, 1)[0]
	shown := cardText(reply)
	for _, want := range []string{"I could not read `big.log`", "over the 1.0 KB limit", "I could not read `flaky.txt`", "I cannot read `dump.zip`"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the reply does not say %q: %s", want, shown)
		}
	}
}

// Private channels are never sessions: a file shared there with a mention is never fetched.
func TestFilesInPrivateChannelsAreNeverFetched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{files: true, privateNote: true})
	h.post(slackemu.Post{Channel: secret, User: ada, Text: "<@" + botUser + "> read this", Files: []slackemu.File{
		{ID: "F0000SEC01", Name: "salaries.csv", Mimetype: "text/csv", Content: []byte("ada,1\n")}}})
	h.waitFor("the private note", func() bool { return len(h.emu.Ephemerals()) == 1 })
	if n := h.emu.DownloadAttempts("F0000SEC01"); n != 0 {
		t.Fatalf("the private channel's file was fetched %d times", n)
	}
}

// attach_file hands a sandbox file back to the thread once, recorded with its hash.
func TestAttachFileSharesItOnce(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{files: true})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_w", Name: "write_file", Input: `{"path":"out/report.csv","content":"a,b\n1,2\n"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_a", Name: "attach_file", Input: `{"path":"out/report.csv","title":"The report"}`}}},
		fakeprovider.Reply{Text: "Here is the report."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> make me a report"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	r := h.toolResult(s.ID, "toolu_a")
	if r.IsError || !strings.Contains(r.Content, "attached report.csv") {
		t.Fatalf("attach result %+v", r)
	}
	var shared []slackemu.Message
	for _, m := range h.botMessages(top.TS) {
		if len(m.Files) > 0 {
			shared = append(shared, m)
		}
	}
	if len(shared) != 1 || shared[0].Files[0].Name != "report.csv" {
		t.Fatalf("messages with files: %+v", shared)
	}
	f, ok := h.emu.UploadedFile(shared[0].Files[0].ID)
	if !ok || string(f.Content) != "a,b\n1,2\n" {
		t.Fatalf("uploaded %+v %v", f, ok)
	}
	var recs []session.FileUpload
	for _, e := range h.events(s.ID, session.TypeFileUpload) {
		var u session.FileUpload
		if err := e.Decode(&u); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, u)
	}
	if len(recs) != 2 || recs[1].Status != "shared" || recs[1].SHA256 != session.FileHash([]byte("a,b\n1,2\n")) || recs[1].TS != shared[0].TS {
		t.Fatalf("file_upload records %+v", recs)
	}
}

// A session opened late — a mention inside a thread people already wrote in — takes in the
// files of the thread's earlier messages too, and fetches them for its first turn.
func TestFilesOfEarlierThreadMessagesAreFetched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{files: true})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "deploy failed"})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "here is the crash log", Files: []slackemu.File{
		{ID: "F0000CRSH1", Name: "crash.log", Mimetype: "text/plain", Content: []byte("panic: nil map\n")}}})
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "<@" + botUser + "> what does the log above say?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if f := h.fetched(s.ID, 1)["F0000CRSH1"]; f.Status != session.FileStored || f.Kind != "text" {
		t.Fatalf("crash.log %+v", f)
	}
}

// An empty file is content like any other: stored, not reported as a failure.
func TestEmptyFileIsStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{files: true})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> see", Files: []slackemu.File{
		{ID: "F000EMPTY1", Name: "empty.txt", Mimetype: "text/plain", Content: []byte{}}}})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if f := h.fetched(s.ID, 1)["F000EMPTY1"]; f.Status != session.FileStored || f.SHA256 != session.FileHash(nil) {
		t.Fatalf("empty.txt %+v", f)
	}
}
