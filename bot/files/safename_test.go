package files

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A shared file's name never leads out of the sandbox's shared/ folder, never names a
// directory, and fits a file system's 255 bytes.
func TestSafeName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("日本", 60) + ".log" // 364 bytes
	for in, want := range map[string]string{
		"report.csv":       "report.csv",
		"../../etc/passwd": "passwd",
		"..\\..\\boot.ini": "boot.ini",
		"/":                "file",
		".":                "file",
		"..":               "file",
		".bashrc":          "bashrc",
		"a\x00b\nc":        "a_b_c",
		"dir/":             "dir",
		"":                 "file",
	} {
		if got := SafeName(in); got != want {
			t.Errorf("SafeName(%q) = %q, want %q", in, got, want)
		}
	}
	got := SafeName(long)
	if len(got) > 200 || !utf8.ValidString(got) || !strings.HasSuffix(got, ".log") {
		t.Errorf("SafeName(long) = %q (%d bytes)", got, len(got))
	}
	if p := workspacePath("F1", "../x"); p != "shared/F1-x" {
		t.Errorf("workspacePath = %q", p)
	}
}
