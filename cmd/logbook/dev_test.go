package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/hooks"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// collect reads every input until the channel closes.
func collect(ch <-chan input) []input {
	var out []input
	for in := range ch {
		out = append(out, in)
	}
	return out
}

// On a terminal, lines arriving together (a paste) are one message and lines typed apart are
// separate messages; lines between """ are one message on a terminal and from a pipe alike.
func TestReadInputsPasteIsOneMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, w := io.Pipe()
		ch := readInputs(t.Context(), r, pasteWindow, false)
		go func() {
			io.WriteString(w, "first line\nsecond line\n  indented third\n") // one paste
			time.Sleep(time.Second)
			io.WriteString(w, "typed later\n")
			time.Sleep(time.Second)
			io.WriteString(w, "\"\"\"\nfenced one\n")
			time.Sleep(time.Second) // a pause inside the fence does not end the message
			io.WriteString(w, "fenced two\n\"\"\"\n")
			w.Close()
		}()
		got := collect(ch)
		want := []string{"first line\nsecond line\n  indented third", "typed later", "fenced one\nfenced two"}
		if len(got) != len(want) {
			t.Fatalf("got %d messages %q, want %d", len(got), got, len(want))
		}
		for i := range want {
			if got[i].text != want[i] || got[i].note != "" {
				t.Errorf("message %d = %+v, want %q", i, got[i], want[i])
			}
		}
	})
}

// From a pipe every line is a message, unless fenced.
func TestReadInputsPipedLines(t *testing.T) {
	t.Parallel()
	got := collect(readInputs(t.Context(), strings.NewReader("one\ntwo\n\"\"\"\nthree\nfour\n\"\"\"\nfive"), 0, false))
	var texts []string
	for _, in := range got {
		texts = append(texts, in.text)
	}
	if strings.Join(texts, "|") != "one|two|three\nfour|five" {
		t.Fatalf("messages %q", texts)
	}
}

// With the offline model, `write: PATH` typed alone (then Enter, as the docs put it) takes the
// lines typed after it, up to a """ line, as its content: one message, on a terminal and from
// a pipe alike, and the chat says so. Without it (a model), the lines stay messages.
func TestReadInputsWriteTakesTheLinesAfterIt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, w := io.Pipe()
		ch := readInputs(t.Context(), r, pasteWindow, true)
		go func() {
			io.WriteString(w, "write: notes.txt\n")
			time.Sleep(time.Second) // typed, not pasted
			io.WriteString(w, "hello from the sandbox\n")
			time.Sleep(time.Second)
			io.WriteString(w, "second line\n")
			time.Sleep(time.Second)
			io.WriteString(w, "\"\"\"\n")
			time.Sleep(time.Second)
			io.WriteString(w, "run: cat notes.txt\n")
			w.Close()
		}()
		got := collect(ch)
		if len(got) != 3 || got[0].hint != writeHint || got[1].text != "write: notes.txt\nhello from the sandbox\nsecond line" ||
			got[2].text != "run: cat notes.txt" {
			t.Fatalf("typed write: %+v", got)
		}
	})
	piped := collect(readInputs(t.Context(), strings.NewReader("write: a.txt\none\n\"\"\"\nWrite: b.txt\ntwo"), 0, true))
	if len(piped) != 4 || piped[1].text != "write: a.txt\none" || piped[3].text != "Write: b.txt\ntwo" {
		t.Fatalf("piped write: %+v", piped)
	}
	model := collect(readInputs(t.Context(), strings.NewReader("write: a.txt\none\n"), 0, false))
	if len(model) != 2 || model[0].text != "write: a.txt" || model[0].hint != "" {
		t.Fatalf("write with a model: %+v", model)
	}
}

// Slack's 40,000-character limit refuses a longer message with a note; on a terminal a line
// of 4,095 bytes (the terminal's cut) is refused too, never sent shortened.
func TestReadInputsTooLong(t *testing.T) {
	t.Parallel()
	ok := strings.Repeat("é", slackMaxChars) // 40,000 characters, 80,000 bytes: allowed
	for _, tc := range []struct {
		name  string
		lines []string
		tty   bool
		note  string
	}{
		{"at Slack's limit", []string{ok}, false, ""},
		{"over Slack's limit", []string{ok + "!"}, false, "(not sent: 40001 characters; Slack takes at most 40,000"},
		{"over the limit in a paste", []string{strings.Repeat("a", 30_000), strings.Repeat("b", 10_000)}, true, "(not sent: 40001 characters"},
		{"a terminal-cut line", []string{"start", strings.Repeat("c", ttyLineMax)}, true, "a line of 4,095 bytes is the most a terminal passes on"},
		{"the same line piped", []string{strings.Repeat("c", ttyLineMax)}, false, ""},
	} {
		in := checkInput(tc.lines, tc.tty)
		if tc.note == "" && (in.note != "" || in.text != strings.Join(tc.lines, "\n")) {
			t.Errorf("%s: refused (%q) or changed", tc.name, in.note)
		}
		if tc.note != "" && !strings.Contains(in.note, tc.note) {
			t.Errorf("%s: note %q, want %q", tc.name, in.note, tc.note)
		}
	}
	// A line far longer than any buffer is read whole.
	long := strings.Repeat("z", 3<<20)
	got := collect(readInputs(t.Context(), strings.NewReader(long+"\n"), 0, false))
	if len(got) != 1 || len(got[0].text) != len(long) {
		t.Fatalf("a %d-byte line was not read whole", len(long))
	}
}

// A message typed while logbook works on the thread shows as queued; the first shows its new
// thread and nothing of thinking yet: that is printed once the log shows a turn took it up.
func TestChatShowsThinkingAndQueued(t *testing.T) {
	t.Parallel()
	emu := slackemu.MustStart(t, slackemu.Options{})
	var out bytes.Buffer
	c := &chat{out: &out, emu: emu, waiting: map[string]pending{}, shown: map[string]bool{}}
	if err := c.post("first"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "(new thread ") || strings.Contains(got, "thinking") {
		t.Fatalf("chat printed:\n%s", got)
	}
	if err := c.post("second"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "(logbook is still working") {
		t.Fatalf("chat printed:\n%s", got)
	}
}

// A task card's line with a command's output keeps the output under it, indented.
func TestTaskLines(t *testing.T) {
	t.Parallel()
	got := taskLines("[x] run_command: uname → exit code: 0\n--- stdout ---\nLinux\n")
	if want := "  ⚙ [x] run_command: uname → exit code: 0\n    --- stdout ---\n    Linux"; got != want {
		t.Errorf("task lines:\n%s\nwant:\n%s", got, want)
	}
}

// A card's lines are whole terminal lines: its text, then the code of what will run indented,
// without Slack's fences or bold markers.
func TestCardLines(t *testing.T) {
	t.Parallel()
	blocks := `[{"type":"section","text":{"type":"mrkdwn","text":"*Approval needed:* I want to use ` + "`write_file`" + `."}},
		{"type":"section","text":{"type":"mrkdwn","text":"` + "```" + `notes.txt\n--- a\n+++ b\n+hello &amp; bye` + "```" + `"}},
		{"type":"context","elements":[{"type":"mrkdwn","text":"Who may decide: <@U1>."}]}]`
	got := cardLines(slackemu.Message{Blocks: []byte(blocks)})
	want := []string{"Approval needed: I want to use `write_file`.", "  notes.txt", "  --- a", "  +++ b", "  +hello & bye", "Who may decide: @U1."}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("card lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The CLIs use a running dev's database only when its URL file is there and the server
// answers; otherwise they say what to set. Two devs on two data dirs leave two files: with
// both live the CLIs pick neither and name both, with one live they use it and name its data dir.
func TestDevDatabaseDiscovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "logbook", "dev-databases")
	pick := func() (string, string, error) {
		var stderr strings.Builder
		u, err := pickDatabaseURL(ctx, env{getenv: func(string) string { return "" }, stderr: &stderr}, dir)
		return u, stderr.String(), err
	}
	if _, _, err := pick(); err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not set") {
		t.Fatalf("no dev: %v", err)
	}
	urlA, urlB := pgtest.New(t), pgtest.New(t)
	fileA, fileB := devDatabaseFile(dir, "/data/a/pg"), devDatabaseFile(dir, "/data/b/pg")
	if fileA == fileB || devDatabaseFile(dir, "/data/a/pg/") != fileA {
		t.Fatalf("pointer files %s and %s: want one per data dir", fileA, fileB)
	}
	unpublishA, err := publishDevDatabase(fileA, urlA, "/data/a/pg")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fileA); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("URL file %v %v, want mode 0600", fi, err)
	}
	if got, stderr, err := pick(); err != nil || got != urlA || !strings.Contains(stderr, "using the database of the running logbook dev with data dir /data/a/pg") {
		t.Fatalf("one dev: %q %v\n%s", got, err, stderr)
	}
	unpublishB, err := publishDevDatabase(fileB, urlB, "/data/b/pg")
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := pick()
	if err == nil || got != "" || stderr != "" {
		t.Fatalf("two live devs: picked %q (stderr %q), want an error", got, stderr)
	}
	for _, want := range []string{"2 logbook dev runs are live", "set DATABASE_URL", "data dir /data/a/pg: DATABASE_URL='" + urlA + "'", "data dir /data/b/pg: DATABASE_URL='" + urlB + "'"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("two live devs: error lacks %q:\n%v", want, err)
		}
	}
	// Set, DATABASE_URL wins whatever runs.
	if u, err := pickDatabaseURL(ctx, env{getenv: func(k string) string { return map[string]string{"DATABASE_URL": urlB}[k] }, stderr: io.Discard}, dir); err != nil || u != urlB {
		t.Fatalf("DATABASE_URL set: %q %v", u, err)
	}
	unpublishA()
	if _, err := os.Stat(fileA); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unpublish left the file: %v", err)
	}
	if got, stderr, err := pick(); err != nil || got != urlB || !strings.Contains(stderr, "data dir /data/b/pg") {
		t.Fatalf("the other dev after the first stopped: %q %v\n%s", got, err, stderr)
	}
	unpublishB()
	// A dev that died without removing its file: the server does not answer.
	stale := "postgres://postgres@/logbook?host=" + dir + "&port=5433&sslmode=disable"
	if _, err := publishDevDatabase(fileA, stale, "/data/a/pg"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pick(); err == nil || !strings.Contains(err.Error(), "is logbook dev still running?") || !strings.Contains(err.Error(), "DATABASE_URL is not set") {
		t.Fatalf("stale URL file: %v", err)
	}
	// Another dev replaced the file: unpublish leaves it.
	unpublish, _ := publishDevDatabase(fileB, "postgres://first", "/data/b/pg")
	publishDevDatabase(fileB, "postgres://second", "/data/b/pg")
	unpublish()
	if d, err := readDevDatabase(fileB); err != nil || d.url != "postgres://second" {
		t.Fatalf("unpublish removed another dev's file: %+v %v", d, err)
	}
}

// newTestChat is a chat on an emulator and a fresh database, printing into out.
func newTestChat(t *testing.T, out io.Writer) (*chat, *slackemu.Server) {
	t.Helper()
	emu := slackemu.MustStart(t, slackemu.Options{})
	pool, err := session.Connect(t.Context(), pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &chat{out: out, emu: emu, rt: running{store: session.NewStore(pool, session.Options{})},
		waiting: map[string]pending{}, shown: map[string]bool{}}, emu
}

// A thread the bot starts itself (a schedule's tick, a hook) shows in the chat, labelled with
// what started it, and so do its replies; a message of the bot's own from before the chat
// looked does not.
func TestChatShowsThreadsTheBotStarted(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	c, emu := newTestChat(t, &out)
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()))
	post := func(kind, text, thread string) string {
		t.Helper()
		opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
		if kind != "" {
			opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: kind, EventPayload: map[string]any{"id": "1"}}))
		}
		if thread != "" {
			opts = append(opts, slack.MsgOptionTS(thread))
		}
		_, ts, err := api.PostMessage(devChannel, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	post(schedule.MetadataEventType, "an old tick", "")
	c.watchStarted()
	tick := post(schedule.MetadataEventType, "⏰ Schedule 3 (@every 4s), set by ada: check the queue", "")
	hook := post(hooks.MetadataEventType, "Hook alerts: disk full", "")
	post("", "a post of its own", "")
	c.refresh(t.Context())
	post("", "The queue is empty.", tick)
	post("", "The disk is at 97%.", hook)
	c.refresh(t.Context())
	got := out.String()
	for _, want := range []string{
		"logbook started thread " + tick + " (a schedule)> ⏰ Schedule 3 (@every 4s), set by ada: check the queue\n",
		"logbook started thread " + hook + " (a hook)> Hook alerts: disk full\n",
		"logbook (thread " + tick + ", started by a schedule)> The queue is empty.\n",
		"logbook (thread " + hook + ", started by a hook)> The disk is at 97%.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("chat lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "an old tick") || strings.Contains(got, "a post of its own") {
		t.Errorf("chat shows posts that are not new threads it started:\n%s", got)
	}
}

// dev says the ids LOGBOOK_ADMINS, approvers and hooks take: at start and on /ids.
func TestChatSaysTheIDs(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	c, emu := newTestChat(t, &out)
	c.handle(t.Context(), input{text: "/ids"})
	for _, s := range []string{devIDs(emu), out.String()} {
		if !strings.Contains(s, "user id U0000001") || !strings.Contains(s, "channel id C0000001") || !strings.Contains(s, "LOGBOOK_ADMINS=U0000001") {
			t.Errorf("ids not said: %q", s)
		}
	}
}

// What the chat prints is not garbled: a prompt never splits a reply that is being written; a
// line taking the prompt's place clears it on a terminal and, elsewhere (dev | tee), ends its
// line with no "\r"; control characters from the bot or a tool are shown, never obeyed.
func TestChatOutputIsNotGarbled(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	c, emu := newTestChat(t, &out)
	lp := &livePrinted{who: "logbook", tasks: map[string]bool{}}
	c.prompt()
	c.liveText(lp, "(offline mode: I am ")
	c.prompt() // a refresh that printed something, while the reply is being written
	c.liveText(lp, "logbook's stand-in.")
	c.liveText(lp, "\n")
	c.open = nil
	c.prompt()
	if got, want := out.String(), "you> \nlogbook> (offline mode: I am logbook's stand-in.\nyou> "; got != want {
		t.Errorf("a streamed reply and the prompt, not a terminal:\n%q\nwant\n%q", got, want)
	}

	out.Reset()
	c.tty = true
	c.status("… logbook is thinking\n")
	if got, want := out.String(), "\r\x1b[K… logbook is thinking\n"; got != want {
		t.Errorf("a status line on a terminal: %q, want %q", got, want)
	}

	out.Reset()
	c.tty = false
	c.thread = "1.000001"
	c.printReply(c.thread, slackemu.Message{TS: "1.000002", Text: "colours: \x1b[31mred\x1b[0m\rover\x07"})
	if got := out.String(); strings.ContainsAny(got, "\x1b\r\x07") || !strings.Contains(got, "logbook> colours: ␛[31mred␛[0mover␇\n") {
		t.Errorf("a reply with control characters: %q", got)
	}
	_ = emu
}
