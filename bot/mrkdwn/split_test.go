package mrkdwn

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func checkParts(t *testing.T, text string, parts []string, limit int) {
	t.Helper()
	if got := Join(parts); got != text {
		t.Fatalf("Join(parts) differs from the input\nparts %q", parts)
	}
	for i, p := range parts {
		if n := utf8.RuneCountInString(p); n > limit {
			t.Fatalf("part %d has %d runes, limit %d", i, n, limit)
		}
		if !utf8.ValidString(p) && utf8.ValidString(text) {
			t.Fatalf("part %d is not valid UTF-8 (cut inside a rune)", i)
		}
		if n := strings.Count(p, "```"); n%2 != 0 {
			t.Fatalf("part %d has %d ``` markers: %q", i, n, p)
		}
	}
}

// 45,000 characters of prose, cut on paragraphs, each part ≤ the cap.
func TestSplitC10Prose(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 0; b.Len() < 45000; i++ {
		b.WriteString(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 6))
		if i%3 == 2 {
			b.WriteString("\n\n")
		} else {
			b.WriteString("\n")
		}
	}
	text := b.String()[:45000]
	parts := Split(text, 0)
	checkParts(t, text, parts, DefaultLimit)
	if len(parts) < 12 {
		t.Fatalf("got %d parts for 45,000 chars", len(parts))
	}
	for i, p := range parts[:len(parts)-1] {
		if !strings.HasSuffix(p, "\n\n") {
			t.Errorf("part %d does not end at a paragraph: %q", i, p[len(p)-20:])
		}
		if utf8.RuneCountInString(p) < DefaultLimit/2 {
			t.Errorf("part %d is only %d runes", i, utf8.RuneCountInString(p))
		}
	}
}

// 3,990 ASCII characters and 20 emoji: two parts, no emoji cut.
func TestSplitC10Emoji(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("a", 3990) + strings.Repeat("😀", 20)
	parts := Split(text, 0)
	checkParts(t, text, parts, DefaultLimit)
	want := []string{strings.Repeat("a", 3900), strings.Repeat("a", 90) + strings.Repeat("😀", 20)}
	if !slices.Equal(parts, want) {
		t.Fatalf("parts have %d parts, lengths %d", len(parts), len(parts[0]))
	}
}

// A long code block is closed and reopened, never broken.
func TestSplitC11Fence(t *testing.T) {
	t.Parallel()
	text := "Intro\n```go\n" + strings.Repeat("x := f(i) // i\n", 300) + "```\nDone"
	parts := Split(text, 3900)
	checkParts(t, text, parts, 3900)
	if len(parts) != 2 {
		t.Fatalf("got %d parts", len(parts))
	}
	if !strings.HasPrefix(parts[1], "```\nx := f(i)") {
		t.Fatalf("second part does not reopen the fence: %q", parts[1][:30])
	}
	if !strings.HasSuffix(parts[0], "x := f(i) // i\n```") {
		t.Fatalf("first part does not close the fence: %q", parts[0][len(parts[0])-30:])
	}
	// Stripping exactly the added fences gives back the original.
	manual := strings.TrimSuffix(parts[0], "\n```") + strings.TrimPrefix(parts[1], "```")
	if manual != text {
		t.Fatal("stripping the added fences does not give the original")
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"empty", "", 10, nil},
		{"fits", "short", 100, []string{"short"}},
		{"paragraph first", "aaaa bbbb\ncccc\n\ndddd eeee", 20, []string{"aaaa bbbb\ncccc\n\n", "dddd eeee"}},
		{"then line", "aaaa bbbb cccc\ndddd eeee ffff", 20, []string{"aaaa bbbb cccc\n", "dddd eeee ffff"}},
		{"then word", "aaaa bbbb cccc dddd eeee", 20, []string{"aaaa bbbb cccc dddd ", "eeee"}},
		{"then rune", strings.Repeat("x", 40), 16, []string{strings.Repeat("x", 16), strings.Repeat("x", 16), strings.Repeat("x", 8)}},
		{"zwj sequence kept", strings.Repeat("a", 15) + "👩‍💻b", 16, []string{strings.Repeat("a", 15), "👩‍💻b"}},
		{"skin tone kept", strings.Repeat("a", 15) + "👍🏽" + "bc", 16, []string{strings.Repeat("a", 15), "👍🏽bc"}},
		{"flag pair kept", strings.Repeat("a", 15) + "🇫🇷🇩🇪", 16, []string{strings.Repeat("a", 15), "🇫🇷🇩🇪"}},
		{"combining mark kept", strings.Repeat("a", 15) + "e\u0301x", 16, []string{strings.Repeat("a", 15), "e\u0301x"}},
		{"limit raised to minimum", "abcdefghijklmnopqrstuvwxyz", 1, []string{"abcdefghijklmnop", "qrstuvwxyz"}},
		{
			"fence reopened", "```\nline1\nline2\nline3\n```\n", 20,
			[]string{"```\nline1\nline2\n```", "```\nline3\n```\n"},
		},
		{
			"cut before fence", "intro text here\n```\ncode\n```", 20,
			[]string{"intro text here\n", "```\ncode\n```"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Split(tt.text, tt.limit)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Split(%q, %d)\n got %q\nwant %q", tt.text, tt.limit, got, tt.want)
			}
			if j := Join(got); j != tt.text {
				t.Fatalf("Join = %q", j)
			}
		})
	}
}

func TestSplitMarkdownOutput(t *testing.T) {
	t.Parallel()
	md := strings.Repeat("Some **prose** here.\n\n```python\n"+strings.Repeat("print('x')  # <tag>\n", 40)+"```\n\n", 20)
	text := FromMarkdown(md)
	parts := Split(text, 500)
	checkParts(t, text, parts, 500)
}

// BenchmarkSplit/runecount is the baseline: one pass counting runes. The
// ratio split/runecount is Split's cost over the least any splitter does.
func BenchmarkSplit(b *testing.B) {
	text := strings.Repeat("word ", 9000) + "\n```\n" + strings.Repeat("code line\n", 2000) + "```\n"
	b.Run("runecount", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			utf8.RuneCountInString(text)
		}
	})
	b.Run("split", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			Split(text, 0)
		}
	})
}

// Split never cuts inside an entity, a <…> token or a code span, and
// avoids cutting inside a bold, italic or strike pair; if it must, it
// closes the pair at the end of the part and reopens it in the next.
func TestSplitKeepsInlineMarkup(t *testing.T) {
	t.Parallel()
	x13 := strings.Repeat("x", 13)
	tests := []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"entity", x13 + "&amp;yyyy", 16, []string{x13, "&amp;yyyy"}},
		{"entity lt", "a b " + x13 + "&lt;c", 20, []string{"a b " + x13, "&lt;c"}},
		{"link token", "see <https://e.com/a|the docs page> now and more", 32, []string{"see ", "<https://e.com/a|the docs page> ", "now and more"}},
		{"user token", x13 + "<@U0000001> hi", 16, []string{x13, "<@U0000001> hi"}},
		{"code span", "run `go test ./...` then", 18, []string{"run ", "`go test ./...` ", "then"}},
		{"bold pair", "aaaa *bold text more* b", 16, []string{"aaaa ", "*bold text more*", " b"}},
		{"italic pair", "aaaa _it al ic_ bb", 16, []string{"aaaa _it al ic_ ", "bb"}},
		{"italic pair late", "aaaa bb _it al ic_ b", 16, []string{"aaaa bb ", "_it al ic_ b"}},
		{"forced bold", "*aaaa bbbb cccc dddd eeee*", 16, []string{"*aaaa bbbb* ", "*cccc dddd eeee*"}},
		{"forced bold and italic", "*aa _bb cc dd ee ff_ gg*", 16, []string{"*aa _bb cc dd_* ", "*_ee ff_ gg*"}},
		{"entity in code block", "```\n" + strings.Repeat("y", 9) + "&amp;&lt;\n```", 20, []string{"```\n" + strings.Repeat("y", 9) + "\n```\n", "```\n&amp;&lt;\n```"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Split(tt.text, tt.limit)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Split(%q, %d)\n got %q\nwant %q", tt.text, tt.limit, got, tt.want)
			}
			checkParts(t, tt.text, got, tt.limit)
		})
	}
}

// A cut inside a code line must not glue the reopening fence onto the rest
// of the line: "```x`y" is no fence, and the next part's fences would not
// pair.
func TestSplitMidLineInCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		text  string
		limit int
	}{
		{"backticks in long line", "```\n" + strings.Repeat("a`b ", 40) + "\n```", 30},
		{"backtick right after cut", "```\n" + strings.Repeat("x", 20) + "`y`\n```\nafter", 24},
		{"long line then short", "```\n" + strings.Repeat("q=`v` ", 30) + "\nshort\n```\n", 40},
		{"json line", "```\n" + strings.Repeat(`{"k":"`+"`"+`x"},`, 50) + "\n```", 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parts := Split(tt.text, tt.limit)
			checkParts(t, tt.text, parts, tt.limit)
			for i, p := range parts {
				if n := fenceLines(p); n%2 != 0 {
					t.Fatalf("part %d has %d fence lines: %q", i, n, p)
				}
			}
		})
	}
}
