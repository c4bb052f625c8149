package sandbox

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		keep      int
		writes    []string
		want      string
		truncated bool
	}{
		{name: "empty", keep: 8, want: ""},
		{name: "fits", keep: 8, writes: []string{"abc", "def"}, want: "abcdef"},
		{name: "exactly keep", keep: 8, writes: []string{"abcdefgh"}, want: "abcdefgh"},
		{name: "one over", keep: 8, writes: []string{"abcdefghi"}, want: "abcd\n[... 1 bytes cut ...]\nfghi", truncated: true},
		{name: "many small writes", keep: 4, writes: strings.Split("0123456789", ""), want: "01\n[... 6 bytes cut ...]\n89", truncated: true},
		{name: "one big write", keep: 6, writes: []string{strings.Repeat("x", 100) + "end"}, want: "xxx\n[... 97 bytes cut ...]\nend", truncated: true},
		{name: "tail spans writes", keep: 6, writes: []string{"abc", "1234567", "89"}, want: "abc\n[... 6 bytes cut ...]\n789", truncated: true},
		{name: "keep zero", keep: 0, writes: []string{"abc"}, want: "\n[... 3 bytes cut ...]\n", truncated: true},
		// "é" is 2 bytes: the cut moves off the middle of a rune.
		{name: "rune split in head", keep: 6, writes: []string{"aaéé" + "zzzz" + "ééb"}, want: "aa\n[... 10 bytes cut ...]\néb", truncated: true},
		{name: "rune split in tail", keep: 4, writes: []string{"aaéé" + "zzzz" + "ééb"}, want: "aa\n[... 12 bytes cut ...]\nb", truncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHeadTail(tt.keep, nil)
			for _, w := range tt.writes {
				if n, err := h.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got, truncated := h.result()
			if got != tt.want || truncated != tt.truncated {
				t.Errorf("result = %q, %v; want %q, %v", got, truncated, tt.want, tt.truncated)
			}
			if !utf8.ValidString(got) {
				t.Errorf("result is not valid UTF-8: %q", got)
			}
		})
	}
}

func TestOutputBudgetFiresOnce(t *testing.T) {
	t.Parallel()
	fired := 0
	b := &outputBudget{limit: 10, exceeded: func() { fired++ }}
	out, errs := newHeadTail(4, b), newHeadTail(4, b)
	_, _ = out.Write([]byte("123456"))
	_, _ = errs.Write([]byte("1234"))
	if fired != 0 {
		t.Fatalf("fired at exactly the limit")
	}
	_, _ = errs.Write([]byte("5"))
	_, _ = out.Write([]byte("7"))
	if fired != 1 {
		t.Errorf("fired %d times, want 1", fired)
	}
}

func TestWorkspaceName(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"C1/1700000000.000100":  "C1_1700000000_000100",
		"../../etc":             "______etc",
		"a*b\x00c é":            "a_b_c__",
		strings.Repeat("k", 99): strings.Repeat("k", 64),
	} {
		if got := workspaceName(key); got != want {
			t.Errorf("workspaceName(%q) = %q, want %q", key, got, want)
		}
	}
}
