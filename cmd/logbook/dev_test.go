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

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
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
		ch := readInputs(t.Context(), r, pasteWindow)
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
	got := collect(readInputs(t.Context(), strings.NewReader("one\ntwo\n\"\"\"\nthree\nfour\n\"\"\"\nfive"), 0))
	var texts []string
	for _, in := range got {
		texts = append(texts, in.text)
	}
	if strings.Join(texts, "|") != "one|two|three\nfour|five" {
		t.Fatalf("messages %q", texts)
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
	got := collect(readInputs(t.Context(), strings.NewReader(long+"\n"), 0))
	if len(got) != 1 || len(got[0].text) != len(long) {
		t.Fatalf("a %d-byte line was not read whole", len(long))
	}
}

// A message typed while logbook works on the thread shows as queued; the first shows that
// logbook is thinking.
func TestChatShowsThinkingAndQueued(t *testing.T) {
	t.Parallel()
	emu := slackemu.MustStart(t, slackemu.Options{})
	var out bytes.Buffer
	c := &chat{out: &out, emu: emu, waiting: map[string]pending{}, shown: map[string]bool{}}
	if err := c.post("first"); err != nil {
		t.Fatal(err)
	}
	if err := c.post("second"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "(new thread ") || !strings.Contains(got, "… logbook is thinking\n") || !strings.Contains(got, "(logbook is still working") {
		t.Fatalf("chat printed:\n%s", got)
	}
	if strings.Index(got, "thinking") > strings.Index(got, "still working") {
		t.Fatalf("queued before thinking:\n%s", got)
	}
}

// The CLIs use a running dev's database only when its URL file is there and the server
// answers; otherwise they say what to set.
func TestDevDatabaseDiscovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "logbook", "dev-database-url")
	if _, err := runningDevDatabase(ctx, path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no file: %v", err)
	}
	url := pgtest.New(t)
	unpublish, err := publishDevDatabase(path, url)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("URL file %v %v, want mode 0600", fi, err)
	}
	if got, err := runningDevDatabase(ctx, path); err != nil || got != url {
		t.Fatalf("running dev database: %q %v", got, err)
	}
	unpublish()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unpublish left the file: %v", err)
	}
	// A dev that died without removing its file: the server does not answer.
	stale := "postgres://postgres@/logbook?host=" + dir + "&port=5433&sslmode=disable"
	if _, err := publishDevDatabase(path, stale); err != nil {
		t.Fatal(err)
	}
	if _, err := runningDevDatabase(ctx, path); err == nil || !strings.Contains(err.Error(), "is logbook dev still running?") {
		t.Fatalf("stale URL file: %v", err)
	}
	// Another dev replaced the file: unpublish leaves it.
	unpublish, _ = publishDevDatabase(path, "postgres://first")
	publishDevDatabase(path, "postgres://second")
	unpublish()
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != "postgres://second" {
		t.Fatalf("unpublish removed another dev's file: %q", b)
	}
}
