package mrkdwn

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"github.com/logbook/logbook/session/slacktext"
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
	"[Google](https://google.com)へのリンク [x](https://a.b/c)'s [y](https://a.b/(d))—",
	"- ```\n  code `x`\n  ```\n- | a | b |\n  |---|---|\n  | <@U1> | a&b |\n\nprose",
	"<!here> @channel <!EVERYONE> <!subteam^S1|@ops> `<!here> @everyone`\n```\n@here <!channel>\n```",
	"he**l**lo これは**太字**です ~~Change to ~/.config~~ a\rb\r\nc",
	"`map<string,string>` &amp;&lt; " + "*bold words that go on for a while* and more words",
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
		if live := liveBroadcast(once); live != "" {
			t.Fatalf("output holds a live %q\nin:  %q\nout: %q", live, md, once)
		}
		if utf8.ValidString(md) {
			if w := lostWord(md, once); w != "" {
				t.Fatalf("word %q lost\nin:  %q\nout: %q", w, md, once)
			}
		}
		var sc fenceScanner
		sc.feed(once + "\n")
		if sc.state().open {
			t.Fatalf("output leaves a code block open\nin:  %q\nout: %q", md, once)
		}
		for _, limit := range []int{40, 200} {
			parts := Split(once, limit)
			if got := Join(parts); got != once {
				t.Fatalf("Join(Split(out, %d)) != out\nout:   %q\nparts: %q", limit, once, parts)
			}
			for i, p := range parts {
				if fenceLines(p)%2 != 0 && !longFence(once, limit) {
					t.Fatalf("part %d of Split(out, %d) has an odd number of fence lines\nin:    %q\nparts: %q", i, limit, md, parts)
				}
				if live := liveBroadcast(p); live != "" {
					t.Fatalf("part %d holds a live %q: %q", i, live, parts)
				}
			}
		}
	})
}

// liveBroadcast returns a broadcast mention in s that Slack would act on:
// "<!here", "<!channel", "<!everyone", "<!group", "<!subteam^", or the
// text "@here" (etc.) as a whole word; "" if none.
func liveBroadcast(s string) string {
	low := strings.ToLower(s)
	for _, m := range []string{"<!here", "<!channel", "<!everyone", "<!group", "<!subteam^"} {
		if strings.Contains(low, m) {
			return m
		}
	}
	if n := neutralizeBroadcasts(s); n != s {
		return "@word"
	}
	return ""
}

// lostWord returns a word of md's plain text (the text, code and labels a
// reader sees, Slack tokens aside, which FromMarkdown keeps or neutralizes)
// that out does not show, modulo markup: zero-width spaces and Slack's
// three entities are undone before looking. "" means none is lost.
func lostWord(md, out string) string {
	md = normalizeNewlines(md)
	var b strings.Builder
	for i := 0; i < len(md); {
		if md[i] == '<' {
			if _, n := slacktext.Scan(md[i:]); n > 0 {
				b.WriteRune(0xE000) // not a space, as in protect: the structure stays
				i += n
				continue
			}
		}
		b.WriteByte(md[i])
		i++
	}
	src := []byte(b.String())
	doc := newParser().Parse(text.NewReader(src))
	shown := slacktext.Unescape(strings.ReplaceAll(out, zwsp, ""))
	var lost string
	check := func(s string) {
		for _, w := range strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
			if lost == "" && !strings.Contains(shown, w) {
				lost = w
			}
		}
	}
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Text:
			v := n.Segment.Value(src)
			if _, code := n.Parent().(*ast.CodeSpan); code {
				// Documented: &amp; &lt; &gt; in code count as escaped.
				check(slacktext.Unescape(string(v)))
				break
			}
			check(string(util.ResolveEntityNames(util.ResolveNumericReferences(v))))
		case *ast.String:
			check(string(n.Value))
		case *ast.AutoLink:
			check(string(n.Label(src)))
		case *ast.FencedCodeBlock, *ast.CodeBlock:
			for i := 0; i < n.Lines().Len(); i++ {
				seg := n.Lines().At(i)
				check(slacktext.Unescape(string(seg.Value(src))))
			}
		}
		return ast.WalkContinue, nil
	})
	return lost
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
		plain := slacktext.ToPlain(text, testNames)
		if !strings.ContainsAny(text, "<&") && plain != text {
			t.Fatalf("text without < or & changed: %q → %q", text, plain)
		}
		if got := slacktext.ToPlain(EscapeText(text), nil); got != text {
			t.Fatalf("slacktext.ToPlain(EscapeText(%q)) = %q", text, got)
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
