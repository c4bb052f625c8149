package mrkdwn

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var markdownSeeds = []string{
	"**Bold** and [docs](https://ex.com/a_b) and ~~old~~\n# Title\n`**not bold**`",
	"We've 3 < 5 && x > 2 <script>",
	"- a\n- b\n  - c\n    1. d\n\n  para\n- e",
	"> quote *x*\n> - item\n\n***bi*** __u__ _i_ *s* ~s~ ~~~x~~~",
	"```go\nfunc f() { return a<b && c>d }\n```\n\n    indented\n\n~~~\ntilde\n~~~",
	"| a | b |\n|:--|--:|\n| `x|y` | **z** |\n| [l](http://u) | \\| |",
	"<@U123> <#C1|gen> <!here> <!subteam^S1|@t> <https://x.com?a=1&amp;b=2|X> <mailto:a@b.c> <!date^1700000000^{date_short}|Nov 14>",
	"https://x.com/__init__ and http://y.org/a_(b)_c. www.z.io",
	"&amp; &lt; &copy; &#42;x&#42; &#91;a&#93;(b) &nosuch; AT&T \\*x\\* \\[a\\](b)",
	"Title\n===\n\nSub\n---\n\n***\n\n1) one\n2) two\n\n3. three",
	"![img](http://i.png \"t\") [ref][r] <a@b.co>\n\n[r]: https://ref.example/x",
	"a  \nb\\\nc\n\n`` a ` b ``   ` `",
	"*a **b** c* _a *b* c_ **a _b_ c** foo**bar**baz __x__y",
	"# * x\n# A\n===",
	"- [x] done\n- [ ] todo\n\nSee[^1].\n\n[^1]: A note.",
}

func FuzzFromMarkdown(f *testing.F) {
	for _, s := range markdownSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		once := FromMarkdown(md)
		twice := FromMarkdown(once)
		if twice != once {
			t.Fatalf("not idempotent\nin:    %q\nonce:  %q\ntwice: %q", md, once, twice)
		}
		if strings.HasSuffix(once, "\n") {
			t.Fatalf("output ends with a newline: %q", once)
		}
		if utf8.ValidString(md) && !utf8.ValidString(once) {
			t.Fatalf("valid UTF-8 in, invalid out: %q", once)
		}
	})
}

func FuzzSplit(f *testing.F) {
	f.Add("Intro\n```go\n"+strings.Repeat("x := f(i) // i\n", 30)+"```\nDone", 64)
	f.Add(strings.Repeat("word ", 50)+"\n\n"+strings.Repeat("🇫🇷👍🏽👩‍💻é", 20), 20)
	f.Add("```\n```\n```\nx\n```\n````\n```\n````\n", 16)
	f.Add("a\r\nb\xff\xfe\n\n\n```", 17)
	f.Fuzz(func(t *testing.T, text string, limit int) {
		limit = 16 + abs(limit)%200
		_ = Join(strings.Split(text, "\x00")) // arbitrary parts: must not panic
		parts := Split(text, limit)
		if got := Join(parts); got != text {
			t.Fatalf("Join(Split) != text\ntext:  %q\nparts: %q\ngot:   %q", text, parts, got)
		}
		var sc fenceScanner
		sc.feed(text + "\n")
		balanced := !sc.state().open
		for i, p := range parts {
			if p == "" {
				t.Fatalf("part %d is empty: %q", i, parts)
			}
			if n := utf8.RuneCountInString(p); n > limit && !longFence(text, limit) {
				t.Fatalf("part %d has %d runes > %d: %q", i, n, limit, parts)
			}
			if balanced && fenceLines(p)%2 != 0 && !longFence(text, limit) {
				t.Fatalf("part %d has an odd number of fence lines: %q", i, parts)
			}
		}
	})
}

// longFence reports whether text has a fence line too long for Split to
// keep whole together with a closing fence within limit (Split documents
// that it then may cut inside a fence line and exceed the limit).
func longFence(text string, limit int) bool {
	for _, line := range strings.Split(text, "\n") {
		if n, _, ok := fenceRun(line); ok && utf8.RuneCountInString(line)+2*n+2 >= limit {
			return true
		}
	}
	return false
}

// fenceLines counts lines that open or close a code block.
func fenceLines(s string) int {
	var st fenceState
	n := 0
	for _, line := range strings.Split(s, "\n") {
		next := st.next(strings.TrimSuffix(line, "\r"))
		if next != st {
			n++
		}
		st = next
	}
	return n
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func FuzzToPlain(f *testing.F) {
	for _, s := range []string{
		"a &amp; b &lt;tag&gt;", "<@U1> <@U2|x> <#C1|g> <#C1> <!here> <!subteam^S1|@t> <!date^1^x|f> <!date^x>",
		"<https://x|y> <mailto:a@b|a@b> <a b> < <<>> <|> <@> <#> <!> <x:>", "&amp;&&lt;&gt;&", "<@UB1>: hi",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		plain := ToPlain(text, testNames)
		if !strings.ContainsAny(text, "<&") && plain != text {
			t.Fatalf("text without < or & changed: %q → %q", text, plain)
		}
		if got := ToPlain(EscapeText(text), nil); got != text {
			t.Fatalf("ToPlain(EscapeText(%q)) = %q", text, got)
		}
		if s := StripBotMention(text, "UB1"); strings.Contains(s, "<@UB1>") {
			t.Fatalf("StripBotMention left the mention: %q", s)
		}
	})
}

func FuzzBlocksText(f *testing.F) {
	for _, s := range []string{
		`[{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"rollback failed on "},{"type":"link","url":"https://ci.example/1"}]}]}]`,
		`[{"type":"rich_text","elements":[{"type":"rich_text_list","style":"ordered","offset":-5,"indent":99,"elements":[{"type":"x","elements":[{"type":"y"}]}]}]}]`,
		`{"type":"section","text":"x","fields":[{"type":"mrkdwn","text":"<@U1>"}]}`,
		`[{"type":"rich_text","elements":[{"type":"emoji","unicode":"d800"},{"type":"date","timestamp":"x"}]}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := BlocksText(json.RawMessage(raw), testNames)
		if err != nil && got != "" {
			t.Fatalf("text %q returned with error %v", got, err)
		}
		if _, err := AttachmentsText(json.RawMessage(raw), testNames); err != nil && json.Valid([]byte(raw)) && strings.HasPrefix(strings.TrimSpace(raw), "[") {
			t.Fatalf("valid JSON array rejected: %v", err)
		}
	})
}
