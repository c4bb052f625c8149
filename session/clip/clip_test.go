package clip

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestText(t *testing.T) {
	for _, c := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"ascii cut, the marker included", "abcdefgh", 6, "abc…"},
		{"two-byte characters are whole", "éééééé", 8, "éé…"},
		{"three-byte characters are whole", "日本語のテキスト", 10, "日本…"},
		{"four-byte characters are whole", "👍👍👍", 9, "👍…"},
		{"mixed", "a日b👍c", 9, "a日b…"},
		{"no room for the marker", "abc", 2, "ab"},
		{"no room for the marker, multi-byte", "日本", 2, ""},
		{"zero", "abc", 0, ""},
		{"negative", "abc", -1, ""},
		{"empty", "", 0, ""},
	} {
		got := Text(c.in, c.n)
		if got != c.want {
			t.Errorf("%s: Text(%q, %d) = %q, want %q", c.name, c.in, c.n, got, c.want)
		}
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdefgh", 6, "…fgh"},
		{"日本語のテキスト", 10, "…スト"},
		{"👍👍👍", 9, "…👍"},
		{"abc", 2, "bc"},
		{"abc", -1, ""},
	} {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// A cut at every length of multi-byte text is valid UTF-8, at most n bytes, and a prefix of
// the text with the marker when it was cut.
func TestTextNeverSplitsACharacter(t *testing.T) {
	s := strings.Repeat("héllo wörld 日本 👍🏽 ", 8)
	for n := 0; n <= len(s)+1; n++ {
		got := Text(s, n)
		if !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("Text(s, %d) = %q: want valid UTF-8 of at most %d bytes", n, got, n)
		}
		body := strings.TrimSuffix(got, Marker)
		if !strings.HasPrefix(s, body) || (got != s && n >= len(Marker) && body == got) {
			t.Fatalf("Text(s, %d) = %q: want a prefix of s, marked when cut", n, got)
		}
		tail := Tail(s, n)
		if !utf8.ValidString(tail) || len(tail) > n || !strings.HasSuffix(s, strings.TrimPrefix(tail, Marker)) {
			t.Fatalf("Tail(s, %d) = %q: want valid UTF-8 of at most %d bytes, a suffix of s", n, tail, n)
		}
	}
}
