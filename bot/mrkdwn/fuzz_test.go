package mrkdwn

import (
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
