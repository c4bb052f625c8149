package mrkdwn

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session/slacktext"
)

// Model Markdown becomes mrkdwn once; converting again changes nothing.
func TestFromMarkdownC12(t *testing.T) {
	t.Parallel()
	in := "**Bold** and [docs](https://ex.com/a_b) and ~~old~~\n# Title\n" + "`**not bold**`"
	want := "*Bold* and <https://ex.com/a_b|docs> and ~old~\n*Title*\n" + "`**not bold**`"
	got := FromMarkdown(in)
	if got != want {
		t.Fatalf("FromMarkdown(%q)\n got %q\nwant %q", in, got, want)
	}
	if again := FromMarkdown(got); again != want {
		t.Fatalf("second pass changed the text: %q", again)
	}
	if one := convert(got); one != want {
		t.Fatalf("a single conversion of the output is not a fixpoint: %q", one)
	}
}

// Only & < > are escaped; Slack's own tokens stay intact.
func TestFromMarkdownC13(t *testing.T) {
	t.Parallel()
	in := "We've 3 < 5 && x > 2 <script>"
	want := "We've 3 &lt; 5 &amp;&amp; x &gt; 2 &lt;script&gt;"
	if got := FromMarkdown(in); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestFromMarkdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"strong stars", "**b**", "*b*"},
		{"strong underscores", "__b__", "*b*"},
		{"em underscore", "_i_", "_i_"},
		{"em star is Slack bold", "*x*", "*x*"},
		{"strike single and double", "~~s~~ ~t~", "~s~ ~t~"},
		{"nested bold collapses", "**a *b* c**", "*a b c*"},
		{"italic inside bold", "**a _b_ c**", "*a _b_ c*"},
		{"bold italic", "***x***", "*x*"},
		{"link", "[docs](https://ex.com/a_b)", "<https://ex.com/a_b|docs>"},
		{"link label formatting", "[**x**](https://e.com)", "<https://e.com|*x*>"},
		{"link same as url", "[https://e.com](https://e.com)", "<https://e.com>"},
		{"link url escaped", "[q](https://e.com/?a=1&b=<2>|3)", "<https://e.com/?a=1&amp;b=%3C2%3E%7C3|q>"},
		{"relative link keeps label", "[see](#intro)", "see"},
		{"reference link", "[r][x]\n\n[x]: https://ref.example/p", "<https://ref.example/p|r>"},
		{"autolink", "<https://ex.com/x>", "<https://ex.com/x>"},
		{"email autolink", "<a@b.co>", "<mailto:a@b.co|a@b.co>"},
		{"bare url untouched", "see https://x.com/__init__/a_b_c.", "see https://x.com/__init__/a_b_c."},
		{"bare url with ampersand", "https://x.com/?a=1&b=2", "https://x.com/?a=1&amp;b=2"},
		{"image", "![a chart](https://img.example/c.png)", "<https://img.example/c.png|a chart>"},
		{"image without alt", "![](https://img.example/c.png)", "<https://img.example/c.png>"},
		{"atx heading", "## Plan", "*Plan*"},
		{"setext heading", "Plan\n====", "*Plan*"},
		{"heading with bold", "# A **b**", "*A b*"},
		{"bullets", "- a\n- b\n* c", "• a\n• b\n• c"},
		{"ordered keeps start", "3. a\n4. b", "3. a\n4. b"},
		{"ordered paren", "1) a\n2) b", "1) a\n2) b"},
		{"nested list", "- a\n  - b\n    - c\n- d", "• a\n\u00a0\u00a0\u00a0\u00a0• b\n\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0• c\n• d"},
		{"loose list", "- a\n\n- b", "• a\n\n• b"},
		{"item continuation", "1. a\n   more\n2. b", "1. a\nmore\n2. b"},
		{"blockquote", "> a\n> b\n>\n> c", "> a\n> b\n>\n> c"},
		{"quote lazy line", "> a\nb", "> a\n> b"},
		{"quote with list", "> - x", "> • x"},
		{"list after quote", "> note\n- item", "> note\n\n• item"},
		{"code span escaped only", "`a < b && **c**`", "`a &lt; b &amp;&amp; **c**`"},
		{"double backtick span", "`` a ` b ``", "`` a ` b ``"},
		{"fence language dropped", "```go\nif a < b && c {\n\t**x**\n}\n```", "```\nif a &lt; b &amp;&amp; c {\n\t**x**\n}\n```"},
		{"tilde fence", "~~~\nx\n~~~", "```\nx\n```"},
		{"indented code", "    x := 1\n    y", "```\nx := 1\ny\n```"},
		{"fence holding backticks", "````\n```\n````", "````\n```\n````"},
		{"empty fence", "```\n```", "```\n```"},
		{"hr", "a\n\n---\n\nb", "a\n\n──────────\n\nb"},
		{"table", "| a | bb |\n|---|:-:|\n| `1` | **2** |", "```\n| a | bb |\n| - | -- |\n| 1 | 2  |\n```"},
		{"table with wide cells", "| s | n |\n|---|---|\n| ✅ | 日本 |\n| no | x |", "```\n| s  | n    |\n| -- | ---- |\n| ✅ | 日本 |\n| no | x    |\n```"},
		{"paragraph after fence", "```\nx\n```\ny", "```\nx\n```\ny"},
		{"code in ordered item", "1. a\n2. b:\n   ```\n   x\n   ```\n3. c", "1. a\n2. b:\n```\nx\n```\n3. c"},
		{"code in bullet item", "- a:\n  ```\n  x\n  ```\n- c", "• a:\n```\nx\n```\n• c"},
		{"task list", "- [x] done\n- [ ] todo", "• ☑ done\n• ☐ todo"},
		{"footnotes", "Claim[^src] and more[^2].\n\n[^src]: The *source*.\n[^2]: Second.", "Claim[1] and more[2].\n\n[1] The *source*.\n[2] Second."},
		{"blank lines kept", "a\n\n\nb\nc", "a\n\nb\nc"},
		{"hard break", "a  \nb\\\nc", "a\nb\nc"},
		{"trailing newline dropped", "a\n\n", "a"},
		{"apostrophe stays", "We've", "We've"},
		{"entities", "&copy; &#39; &amp; &lt;", "© ' &amp; &lt;"},
		{"markup entity kept", "&#42;x&#42;", "&amp;#42;x&amp;#42;"},
		{"unknown entity", "&nosuch; AT&T", "&amp;nosuch; AT&amp;T"},
		{"backslash escapes kept", `\*x\* a\_b`, `\*x\* a\_b`},
		{"html is text", "<div>\n**x**\n</div>", "&lt;div&gt;\n*x*\n&lt;/div&gt;"},
		{"slack user", "hi <@U0000001>!", "hi @\u200bU0000001!"},
		{"slack channel", "see <#C0000001|general>", "see <#C0000001|general>"},
		{"slack broadcasts made inert", "<!here> <!channel> <!subteam^S1|@ops>", "@\u200bhere @\u200bchannel @\u200bops"},
		{"slack link with label", "<https://x.com/a_b?q=1&amp;r=2|the *docs*>", "<https://x.com/a_b?q=1&amp;r=2|the *docs*>"},
		{"slack mailto", "<mailto:a@b.co|mail me>", "<mailto:a@b.co|mail me>"},
		{"slack date", "<!date^1700000000^{date_short}|Nov 14>", "<!date^1700000000^{date_short}|Nov 14>"},
		{"slack date with spaces", "<!date^1700000000^{date_short} at {time}|Nov 14 at 10:13>", "<!date^1700000000^{date_short} at {time}|Nov 14 at 10:13>"},
		{"code in link label", "[`a>b`](https://e.com)", "<https://e.com|`a&gt;b`>"},
		{"line break in link label", "[a\nb](https://e.com)", "<https://e.com|a b>"},
		{"token inside bold", "**<@U1> said**", "*@\u200bU1 said*"},
		{"token in code", "`<@U1>` and `https://x.com/*a*`", "`&lt;@U1&gt;` and `https://x.com/*a*`"},
		{"escape in heading", "# a<b", "*a&lt;b*"},
		{"escape in list", "- x > y & z", "• x &gt; y &amp; z"},
		{"escape in quote", "> <b>", "> &lt;b&gt;"},
		{"escape in link label", "[a<b](https://e.com)", "<https://e.com|a&lt;b>"},
		{"escape in image alt", "![a>b](https://e.com/i.png)", "<https://e.com/i.png|a&gt;b>"},
		{"escape in footnote", "x[^1]\n\n[^1]: a<b", "x[1]\n\n[1] a&lt;b"},
		{"not a token", "<a b> <x> <1:2>", "&lt;a b&gt; &lt;x&gt; &lt;1:2&gt;"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := FromMarkdown(tt.in)
			if got != tt.want {
				t.Fatalf("FromMarkdown(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := FromMarkdown(got); again != got {
				t.Fatalf("not idempotent: %q → %q", got, again)
			}
		})
	}
}

// The fixpoint loop is a safety net: for ordinary model output one
// conversion must already be stable.
func TestConvertStableInOnePass(t *testing.T) {
	t.Parallel()
	// A heading whose text starts with "* " cannot be wrapped in bold and
	// then reads as a list item: FromMarkdown's second pass settles it.
	needsFixpoint := map[string]bool{"# * x\n# A\n===": true}
	for _, in := range markdownSeeds {
		if needsFixpoint[in] {
			if a := FromMarkdown(in); FromMarkdown(a) != a {
				t.Errorf("FromMarkdown(%q) not idempotent", in)
			}
			continue
		}
		once := convert(in)
		if twice := convert(once); twice != once {
			t.Errorf("convert(%q)\n once  %q\n twice %q", in, once, twice)
		}
	}
}

func TestFromMarkdownPrivateUseRunesSurvive(t *testing.T) {
	t.Parallel()
	in := "\ue000 **b** \ue0010\ue001 <@U1>"
	want := "\ue000 *b* \ue0010\ue001 @\u200bU1"
	if got := FromMarkdown(in); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestEscapeText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"We've 3 < 5 && x > 2", "We've 3 &lt; 5 &amp;&amp; x &gt; 2"},
		{"<@U1>", "&lt;@U1&gt;"},
		{"&amp;", "&amp;amp;"},
		{"plain \"quotes\" 'and' é", "plain \"quotes\" 'and' é"},
	}
	for _, tt := range tests {
		if got := EscapeText(tt.in); got != tt.want {
			t.Errorf("EscapeText(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if back := slacktext.ToPlain(EscapeText(tt.in), nil); back != tt.in {
			t.Errorf("slacktext.ToPlain(EscapeText(%q)) = %q", tt.in, back)
		}
	}
}

// BenchmarkFromMarkdown/convert is the baseline: one conversion. The ratio
// fixpoint/convert is the cost of the idempotence safety net (≈2: one
// conversion plus one confirming pass).
func BenchmarkFromMarkdown(b *testing.B) {
	in := strings.Repeat(strings.Join(markdownSeeds, "\n\n")+"\n\n", 10)
	b.Run("convert", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			convert(in)
		}
	})
	b.Run("fixpoint", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			FromMarkdown(in)
		}
	})
}

// checkMarkdown runs FromMarkdown table tests and checks idempotence.
func checkMarkdown(t *testing.T, tests []struct{ name, in, want string }) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := FromMarkdown(tt.in)
			if got != tt.want {
				t.Fatalf("FromMarkdown(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := FromMarkdown(got); again != got {
				t.Fatalf("not idempotent: %q → %q", got, again)
			}
		})
	}
}

// A lone "\r" and "\r\n" are line endings, as in CommonMark.
func TestFromMarkdownCarriageReturn(t *testing.T) {
	t.Parallel()
	checkMarkdown(t, []struct{ name, in, want string }{
		{"lone cr is a line break", "a\rb", "a\nb"},
		{"crlf", "a\r\nb", "a\nb"},
		{"cr paragraphs", "a\r\rb", "a\n\nb"},
		{"cr list", "- a\r- b", "• a\n• b"},
		{"cr heading", "# T\rbody", "*T*\nbody"},
		{"cr in code block", "```\rx\ry\r```", "```\nx\ny\n```"},
		{"mixed", "a\r\n\rb\rc", "a\n\nb\nc"},
	})
}

// GFM strikethrough pairs only runs of equal length, so a "~" inside
// "~~…~~" is text.
func TestFromMarkdownTildeInStrike(t *testing.T) {
	t.Parallel()
	checkMarkdown(t, []struct{ name, in, want string }{
		{"home dir in strike", "~~Change to ~/.config~~", "~Change to ~/.config~"},
		{"lone tilde in strike", "~~a ~ b~~", "~a ~ b~"},
		{"approx in strike", "~~costs ~5 USD~~ now", "~costs ~5 USD~ now"},
		{"nested strike flattens", "~~x ~y~ z~~", "~x y z~"},
		{"tilde path outside", "cd ~/src and ~~old~~", "cd ~/src and ~old~"},
	})
}

// A link converts whatever character follows its closing parenthesis: the
// bare-URL scanner must stop where the link destination ends.
func TestFromMarkdownLinkFollowedByText(t *testing.T) {
	t.Parallel()
	checkMarkdown(t, []struct{ name, in, want string }{
		{"japanese after link", "[Google](https://google.com)へのリンク", "<https://google.com|Google>へのリンク"},
		{"possessive", "[x](https://a.b/c)'s", "<https://a.b/c|x>'s"},
		{"em dash", "[x](https://a.b/c)—next", "<https://a.b/c|x>—next"},
		{"letter", "[x](https://a.b/c)abc", "<https://a.b/c|x>abc"},
		{"closing paren", "([x](https://a.b/c))", "(<https://a.b/c|x>)"},
		{"parens in url", "[w](https://en.wikipedia.org/wiki/Go_(lang))s", "<https://en.wikipedia.org/wiki/Go_(lang)|w>s"},
		{"title", `[x](https://a.b/c "T")'s`, "<https://a.b/c|x>'s"},
		{"image", "![a](https://i.example/p.png)!x", "<https://i.example/p.png|a>!x"},
		{"two links", "[a](https://a.b/1)/[b](https://a.b/2)x", "<https://a.b/1|a>/<https://a.b/2|b>x"},
		{"angle destination", "[x](<https://a.b/c>)'s", "<https://a.b/c|x>'s"},
		{"bold after", "[x](https://a.b/c)**b**", "<https://a.b/c|x>*b*"},
		{"escaped paren in url", `[x](https://a.b/c\)d)'s`, "<https://a.b/c)d|x>'s"},
		{"not a link keeps url", "x](https://a.b/c)'s", "x](https://a.b/c)'s"},
	})
}

// A code block or table that opens a list item must still start on a line
// of its own: after "• " its fence is not a fence, and everything after it
// would be read as code.
func TestFromMarkdownListItemStartsWithFence(t *testing.T) {
	t.Parallel()
	checkMarkdown(t, []struct{ name, in, want string }{
		{"bullet code", "- ```\n  code\n  ```\n- b\n\nprose *b*", "•\n```\ncode\n```\n• b\n\nprose *b*"},
		{"ordered code", "1. ```\n   x\n   ```\n2. y", "1.\n```\nx\n```\n2. y"},
		{"bullet table", "- | a | b |\n  |---|---|\n  | 1 | 2 |\n- next\n\npara", "•\n```\n| a | b |\n| - | - |\n| 1 | 2 |\n```\n• next\n\npara"},
		{"indented code item", "-     x := 1\n- y", "•\n```\nx := 1\n```\n• y"},
		{"nested item code", "- a\n  - ```\n    x\n    ```\n  - b\n- c", "• a\n\u00a0\u00a0\u00a0\u00a0•\n```\nx\n```\n\u00a0\u00a0\u00a0\u00a0• b\n• c"},
		{"nested item with code later", "- a\n  - b:\n    ```\n    x\n    ```\n- c", "• a\n\u00a0\u00a0\u00a0\u00a0• b:\n```\nx\n```\n• c"},
		{"task item code", "- [ ] todo\n  ```\n  x\n  ```", "• ☐ todo\n```\nx\n```"},
		{"quoted item code", "> - ```\n>   x\n>   ```", "> •\n> ```\n> x\n> ```"},
	})
}

// Prose after a list whose items hold code stays outside code blocks, and
// the output's fences pair up line by line, as Split and Slack read them.
func TestFromMarkdownFencesPair(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"- ```\n  code\n  ```\n- b\n\nPROSE",
		"- | a |\n  |---|\n  | 1 |\n- b\n\nPROSE",
		"- a\n  - ```\n    x\n    ```\n- b\n\nPROSE",
		"1. x\n   1. | a |\n      |---|\n      | 1 |\n2. y\n\nPROSE",
		"1. ```\n   x\n   ```\n2. y\n\nPROSE",
	} {
		out := FromMarkdown(in)
		var st fenceState
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "PROSE") && st.open {
				t.Errorf("FromMarkdown(%q) = %q puts prose in code", in, out)
			}
			st = st.next(line)
		}
		if st.open {
			t.Errorf("FromMarkdown(%q) = %q leaves a code block open", in, out)
		}
	}
}

// Slack parses & < > in code too: "`map<string,string>`" would show as
// "mapstring,string". Code spans, code blocks and table cells are escaped.
func TestFromMarkdownEscapesCode(t *testing.T) {
	t.Parallel()
	checkMarkdown(t, []struct{ name, in, want string }{
		{"generic type in span", "`map<string,string>`", "`map&lt;string,string&gt;`"},
		{"operators in span", "`a < b && c > d`", "`a &lt; b &amp;&amp; c &gt; d`"},
		{"slack token in span", "`<@U1>` and `<https://x.com|y>`", "`&lt;@U1&gt;` and `&lt;https://x.com|y&gt;`"},
		{"html in block", "```html\n<div class=\"a\">&nbsp;</div>\n```", "```\n&lt;div class=\"a\"&gt;&amp;nbsp;&lt;/div&gt;\n```"},
		{"indented block", "    if a<b {}", "```\nif a&lt;b {}\n```"},
		{"escaped entity stays", "`&lt;` `&amp;` `&gt;`", "`&lt;` `&amp;` `&gt;`"},
		{"table cells", "| a<b | c&d |\n|--|--|\n| <x> | `y>z` |", "```\n| a&lt;b | c&amp;d |\n| --- | --- |\n| &lt;x&gt; | y&gt;z |\n```"},
		{"table token cell", "| who |\n|--|\n| <@U1> |", "```\n| who   |\n| ----- |\n| &lt;@U1&gt; |\n```"},
		{"span in link label", "[`a>b`](https://e.com)", "<https://e.com|`a&gt;b`>"},
		{"entity text in cell", "| &amp;amp; |\n|--|\n| x |", "```\n| &amp;amp; |\n| ----- |\n| x     |\n```"},
		{"span in table with pipe", "| `a\\|b` |\n|--|\n| x |", "```\n| a|b |\n| --- |\n| x   |\n```"},
	})
}

// Model output is untrusted: no broadcast mention it writes may ping, in
// any form or place, and each stays visible as text.
func TestFromMarkdownNeutralizesBroadcasts(t *testing.T) {
	t.Parallel()
	const z = "\u200b"
	checkMarkdown(t, []struct{ name, in, want string }{
		{"raw here", "<!here> look", "@" + z + "here look"},
		{"raw channel and everyone", "<!channel> <!everyone>", "@" + z + "channel @" + z + "everyone"},
		{"labelled here", "<!here|here>", "@" + z + "here"},
		{"upper case", "<!HERE>", "@" + z + "HERE"},
		{"group", "<!group>", "@" + z + "group"},
		{"subteam with label", "<!subteam^S1|@ops> please", "@" + z + "ops please"},
		{"subteam without label", "<!subteam^S0000001>", "@" + z + "S0000001"},
		{"text here", "@here the build broke", "@" + z + "here the build broke"},
		{"text channel and everyone", "hi @channel, @everyone.", "hi @" + z + "channel, @" + z + "everyone."},
		{"text case", "@Here", "@" + z + "Here"},
		{"in bold", "**@here now**", "*@" + z + "here now*"},
		{"in code span", "`<!here>` `@here`", "`&lt;!here&gt;` `@" + z + "here`"},
		{"in code block", "```\n<!channel> @channel\n```", "```\n&lt;!channel&gt; @" + z + "channel\n```"},
		{"in table", "| who |\n|--|\n| <!everyone> |\n| @here |", "```\n| who         |\n| ----------- |\n| &lt;!everyone&gt; |\n| @" + z + "here       |\n```"},
		{"in link label", "[@here](https://x.com) <https://y.com|@channel>", "<https://x.com|@" + z + "here> <https://y.com|@" + z + "channel>"},
		{"entity form stays text", "&lt;!here&gt;", "&lt;!here&gt;"},
		{"email is not a mention", "ops@here.com and @hereafter", "ops@here.com and @hereafter"},
		{"user mention inert", "<@U0000001> asked", "@\u200bU0000001 asked"},
		{"user mention with a label inert", "<@W0000001|ada> asked", "@\u200bada asked"},
		{"date kept", "<!date^1700000000^{date_short}|Nov 14>", "<!date^1700000000^{date_short}|Nov 14>"},
	})
}

// Slack formats *b*, _i_ and ~s~ only at word boundaries: next to a letter
// or digit a zero-width space goes between, as slackify-markdown does.
func TestFromMarkdownEmphasisWordBoundary(t *testing.T) {
	t.Parallel()
	const z = "\u200b"
	checkMarkdown(t, []struct{ name, in, want string }{
		{"inside a word", "he**l**lo", "he" + z + "*l*" + z + "lo"},
		{"japanese", "これは**太字**です", "これは" + z + "*太字*" + z + "です"},
		{"before only", "x**b**", "x" + z + "*b*"},
		{"after only", "**b**x", "*b*" + z + "x"},
		{"digits", "1**2**3", "1" + z + "*2*" + z + "3"},
		{"italic star is bold", "a*b*c", "a" + z + "*b*" + z + "c"},
		{"strike", "a~~b~~c", "a" + z + "~b~" + z + "c"},
		{"japanese italic", "日本*語*です", "日本" + z + "*語*" + z + "です"},
		{"spaces need nothing", "a **b** c", "a *b* c"},
		{"punctuation needs nothing", "(**b**), **c**.", "(*b*), *c*."},
		{"snake case untouched", "a_b_c", "a_b_c"},
		{"in link label", "[x**y**](https://e.com)", "<https://e.com|x" + z + "*y*>"},
		{"two in a row", "**a**__b__", "*a*" + z + "*b*"},
		{"bold then strike", "**a**~~b~~", "*a*" + z + "~b~"},
	})
}

// Model text never pings a person: <@U…> shows inert, in prose and (escaped) in code; text
// logbook writes itself keeps its mention, and its broadcasts stay inert.
func TestUserMentionsInertButOurs(t *testing.T) {
	for in, want := range map[string]string{
		"<@U0000001> please look": "@\u200bU0000001 please look",
		"`<@U0000001>`":           "`&lt;@U0000001&gt;`",
	} {
		if got := FromMarkdown(in); got != want || FromMarkdown(got) != got {
			t.Errorf("FromMarkdown(%q) = %q, want %q (and a fixpoint)", in, got, want)
		}
	}
	in := ":warning: <@U0000001> should look at it. <!here>"
	want := ":warning: <@U0000001> should look at it. @\u200bhere"
	if got := FromMarkdownMentioning(in); got != want {
		t.Errorf("FromMarkdownMentioning(%q) = %q, want %q", in, got, want)
	}
}

// Fence's fence is ``` unless body holds a run of three backticks or more, then one longer
// than body's longest run; body ends in a newline before the closing fence.
func TestFence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{"", "```\n```"},
		{"x", "```\nx\n```"},
		{"x\n", "```\nx\n```"},
		{"a `b` ``c``", "```\na `b` ``c``\n```"},
		{"```go\nx\n```", "````\n```go\nx\n```\n````"},
		{"`````", "``````\n`````\n``````"},
	} {
		if got := Fence(tc.body); got != tc.want {
			t.Errorf("Fence(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
