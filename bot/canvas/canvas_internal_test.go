package canvas

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// A canvas's title is the answer's first heading (else its first line), plain, then the key.
func TestTitle(t *testing.T) {
	t.Parallel()
	key := Key("0193a4b2-0000-7000-8000-000000000001")
	if key != Key("0193a4b2-0000-7000-8000-000000000001") || key == Key("0193a4b2-0000-7000-8000-000000000002") || !strings.HasPrefix(key, "lb-") {
		t.Fatalf("keys: %q", key)
	}
	for _, c := range []struct{ in, want string }{
		{"Intro line\n\n## The *plan* for <!channel> `now`\nbody", "The plan for channel now"},
		{"```\ncode\n```\nFirst real line with [a link](x)", "code"},
		{"\n\n", "Answer"},
		{strings.Repeat("word ", 40), strings.TrimSpace(strings.Repeat("word ", 16))},
	} {
		got := Title(c.in, key)
		if !strings.HasSuffix(got, " · "+key) {
			t.Fatalf("%q has no key: %q", c.in, got)
		}
		if head := strings.TrimSuffix(got, " · "+key); !strings.HasPrefix(head, strings.TrimSuffix(c.want, "…")[:min(len(c.want), 12)]) ||
			strings.ContainsAny(head, "<>*`[]!@#") || utf8.RuneCountInString(head) > maxTitle {
			t.Errorf("Title(%q) = %q, want about %q", c.in, got, c.want)
		}
	}
}

// The excerpt under the link ends at a line, says more follows, and closes a code block it
// cut open.
func TestExcerpt(t *testing.T) {
	t.Parallel()
	if got := Excerpt("short", 100); got != "short" {
		t.Fatalf("short: %q", got)
	}
	text := "intro\n```go\n" + strings.Repeat("fmt.Println(1)\n", 50) + "```\nafter"
	got := Excerpt(text, 200)
	if utf8.RuneCountInString(got) > 220 || !strings.HasSuffix(got, "…\n```") || strings.Count(got, "```")%2 != 0 {
		t.Fatalf("Excerpt = %q", got)
	}
}

// Mentions and broadcasts in the model's Markdown ping nobody from a canvas.
func TestInert(t *testing.T) {
	t.Parallel()
	got := inert("hi <!channel> <!here> <@U1> <#C1> ![](@U2) ![](#C2)")
	for _, live := range []string{"<!", "<@", "<#", "![](@", "![](#"} {
		if strings.Contains(got, live) {
			t.Fatalf("%q still holds %q", got, live)
		}
	}
}

// What may pass is the turn's error (it stays open); what Slack means for good is not.
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&slack.RateLimitedError{}, true},
		{slack.SlackErrorResponse{Err: "internal_error"}, true},
		{io.ErrUnexpectedEOF, true},
		{slack.StatusCodeError{Code: 503}, true},
		{slack.SlackErrorResponse{Err: "canvas_disabled_user_team"}, false},
		{slack.SlackErrorResponse{Err: "missing_scope"}, false},
		{slack.SlackErrorResponse{Err: "restricted_action"}, false},
		{slack.StatusCodeError{Code: 403}, false},
		{errors.New("connection reset"), true},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v", c.err, got)
		}
	}
}
