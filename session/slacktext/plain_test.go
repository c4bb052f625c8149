package slacktext

import (
	"strings"
	"testing"
)

func testNames(kind, id string) string {
	switch kind + ":" + id {
	case "user:U0000001":
		return "ada"
	case "channel:C0000002":
		return "ops"
	case "usergroup:S0000001":
		return "oncall"
	}
	return ""
}

// Inbound: Slack-escaped user text is decoded exactly once.
func TestToPlainC13(t *testing.T) {
	t.Parallel()
	if got, want := ToPlain("a &amp; b &lt;tag&gt;", nil), "a & b <tag>"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestToPlain(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"entities once", "&amp;lt; &#39; &quot;", "&lt; &#39; &quot;"},
		{"user known", "hi <@U0000001>", "hi @ada"},
		{"user unknown", "hi <@U0000009>", "hi @U0000009"},
		{"user with label", "<@U0000009|bob>", "@bob"},
		{"channel label", "<#C0000001|general>", "#general"},
		{"channel names", "<#C0000002>", "#ops"},
		{"channel unknown", "<#C0000009>", "#C0000009"},
		{"special", "<!here> <!channel> <!everyone> <!here|here>", "@here @channel @everyone @here"},
		{"usergroup label", "<!subteam^S0000009|@devs>", "@devs"},
		{"usergroup names", "<!subteam^S0000001>", "@oncall"},
		{"date fallback", "<!date^1700000000^{date_short}|Nov 14, 2023>", "Nov 14, 2023"},
		{"date no fallback", "<!date^1700000000^{date_short}>", "2023-11-14T22:13:20Z"},
		{"url", "<https://ci.example/1>", "https://ci.example/1"},
		{"url label", "<https://ci.example/1|build 1>", "build 1 (https://ci.example/1)"},
		{"url label same", "<https://ci.example/1|ci.example/1>", "https://ci.example/1"},
		{"url entities", "<https://x.com/?a=1&amp;b=2|q &amp; a>", "q & a (https://x.com/?a=1&b=2)"},
		{"mailto", "<mailto:a@b.co|a@b.co>", "a@b.co"},
		{"mailto label", "<mailto:a@b.co|Ada>", "Ada (a@b.co)"},
		{"stray bracket", "a < b <c", "a < b <c"},
		{"formatting kept", "*bold* _it_", "*bold* _it_"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ToPlain(tt.in, testNames); got != tt.want {
				t.Fatalf("ToPlain(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// Markup decodes control sequences with ToPlain's rules and leaves entities alone: the text
// it is given was decoded once already.
func TestMarkup(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"entities kept", "a &amp; b &lt;c&gt;", "a &amp; b &lt;c&gt;"},
		{"literal brackets kept", "3 < 5 && x > 2 <script>alert(1)</script>", "3 < 5 && x > 2 <script>alert(1)</script>"},
		{"user", "cc <@U0000001> and <@U0000009|bob>", "cc @ada and @bob"},
		{"link label", "<https://wiki.example/billing|billing runbook>", "billing runbook (https://wiki.example/billing)"},
		{"label not unescaped", "<https://x.com/?a=1&amp;b=2|q &amp; a>", "q &amp; a (https://x.com/?a=1&amp;b=2)"},
		{"channel", "in <#C0000009|ops>", "in #ops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Markup(tt.in, testNames); got != tt.want {
				t.Fatalf("Markup(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestMap(t *testing.T) {
	t.Parallel()
	if Map(nil) != nil {
		t.Error("Map(nil) is not nil")
	}
	n := Map(map[string]string{"U0000001": "ada", "C0000001": "general"})
	if got := ToPlain("<@U0000001> in <#C0000001>", n); got != "@ada in #general" {
		t.Errorf("got %q", got)
	}
}

func FuzzToPlain(f *testing.F) {
	for _, s := range []string{
		"a &amp; b &lt;tag&gt;", "<@U1> <@U2|x> <#C1|g> <#C1> <!here> <!subteam^S1|@t> <!date^1^x|f> <!date^x>",
		"<https://x|y> <mailto:a@b|a@b> <a b> < <<>> <|> <@> <#> <!> <x:>", "&amp;&&lt;&gt;&", "<@UB1>: hi",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if plain := ToPlain(text, testNames); !strings.ContainsAny(text, "<&") && plain != text {
			t.Fatalf("text without < or & changed: %q → %q", text, plain)
		}
		if m := Markup(text, testNames); !strings.Contains(text, "<") && m != text {
			t.Fatalf("Markup changed text without <: %q → %q", text, m)
		}
		if got, want := ToPlain(text, nil), Markup(Unescape(text), nil); !strings.Contains(text, "&") && got != want {
			t.Fatalf("ToPlain(%q) = %q, Markup = %q", text, got, want)
		}
	})
}
