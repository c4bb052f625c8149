package mrkdwn

import (
	"strings"
	"testing"
)

func TestInert(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"hi <!here> and <!channel|channel>":    "hi <" + zwsp + "!here> and <" + zwsp + "!channel|channel>",
		"ping @here and @Everyone now":         "ping @" + zwsp + "here and @" + zwsp + "Everyone now",
		"<!subteam^S1|@ops> <!date^1|x> <@U1>": "<" + zwsp + "!subteam^S1|@ops> <!date^1|x> <" + zwsp + "@U1>",
		"ask <@U0000001> and <@W0000002|ada>":  "ask <" + zwsp + "@U0000001> and <" + zwsp + "@W0000002|ada>",
		"mail ops@here.com @hereafter":         "mail ops@here.com @hereafter",
		"```\n@channel in code\n```":           "```\n@" + zwsp + "channel in code\n```",
	} {
		if got := Inert(in); got != want {
			t.Errorf("Inert(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHoldBack(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"hello @her":      {"hello ", "@her"},
		"hello @here now": {"hello @here now", ""},
		"see <!he":        {"see ", "<!he"},
		"see <!here> ok":  {"see <!here> ok", ""},
		"a &am":           {"a ", "&am"},
		"a &amp; b":       {"a &amp; b", ""},
		"plain text":      {"plain text", ""},
		"x <y":            {"x ", "<y"},
	} {
		r, tail := HoldBack(in)
		if r != want[0] || tail != want[1] || r+tail != in {
			t.Errorf("HoldBack(%q) = %q + %q, want %q + %q", in, r, tail, want[0], want[1])
		}
	}
	// Whatever the cut, the pieces shown never hold a live broadcast once made inert.
	text := "ask @here and <!channel> please"
	var shown strings.Builder
	buf := ""
	for _, piece := range []string{"ask @h", "ere and <!cha", "nnel> please"} {
		r, tail := HoldBack(buf + piece)
		shown.WriteString(Inert(r))
		buf = tail
	}
	shown.WriteString(Inert(buf))
	if got := shown.String(); strings.Contains(got, "@here") || strings.Contains(got, "<!channel") || strings.ReplaceAll(got, zwsp, "") != text {
		t.Errorf("streamed %q", got)
	}
}
