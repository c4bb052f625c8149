package brain

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExcerptKeepsFirstAndLastLines(t *testing.T) {
	long := "first line of the output\n" + strings.Repeat("middle ü\n", 100) + "the last line: FAIL"
	got := excerpt(long, 200)
	if !strings.HasPrefix(got, "first line of the output\n…\n") || !strings.HasSuffix(got, "the last line: FAIL") {
		t.Errorf("excerpt %q, want the first and last lines", got)
	}
	for _, s := range []string{long, strings.Repeat("x", 1000), strings.Repeat("é", 150) + "\n" + strings.Repeat("ö", 150)} {
		if n := utf8.RuneCountInString(excerpt(s, 200)); n > 200 {
			t.Errorf("excerpt of %d bytes is %d characters, want at most 200", len(s), n)
		}
	}
	if got := excerpt("  short\n", 200); got != "short" {
		t.Errorf("excerpt %q, want the short result whole", got)
	}
}

func TestToolStatusAndTitle(t *testing.T) {
	for _, c := range []struct{ name, input, status, title string }{
		{ToolRunCommand, `{"command":"make test\nmake lint"}`, "running `make test …`", "run_command: make test …"},
		{ToolReadFile, `{"path":"a/b.go"}`, "reading a/b.go", "read_file: a/b.go"},
		{ToolWriteFile, `{"path":"c.txt","content":"x"}`, "writing c.txt", "write_file: c.txt"},
		{"search_sessions", `{"query":"deploy key"}`, "running search_sessions", "search_sessions: deploy key"},
		{ToolReadLog, `{}`, "rereading this thread's log", "read_log"},
	} {
		use := ToolUse{Name: c.name, Input: []byte(c.input)}
		if got := toolStatus(use); got != c.status {
			t.Errorf("status of %s = %q, want %q", c.name, got, c.status)
		}
		if got := toolTitle(use); got != c.title {
			t.Errorf("title of %s = %q, want %q", c.name, got, c.title)
		}
	}
}
