package brain

import (
	"context"
	"strings"
	"testing"
)

// An offline title cut short ends with an ellipsis at a word boundary; a short one is whole.
func TestOfflineTitleMarksTheCut(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ada: why would a deploy hang at 'waiting for rollout'?\nassistant: …": "why would a deploy hang at…",
		"ada: run: echo hi":                "run: echo hi",
		"ada: one two three four five six": "one two three four five six",
	} {
		resp, err := Offline{}.Complete(context.Background(), Request{Purpose: PurposeTitle,
			Messages: []Message{{Role: RoleUser, Blocks: []Block{{Text: in}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Text != want {
			t.Errorf("title of %q = %q, want %q", in, resp.Text, want)
		}
	}
}

// The offline reply gives the same instruction as logbook dev's banner: set an API key.
func TestOfflineReplySaysToSetAnAPIKey(t *testing.T) {
	t.Parallel()
	resp, err := Offline{}.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Blocks: []Block{{Text: "hello"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Text, "set ANTHROPIC_API_KEY (or OPENAI_API_KEY / OPENAI_BASE_URL)") || strings.Contains(resp.Text, "LOGBOOK_MODEL") {
		t.Errorf("offline reply: %q", resp.Text)
	}
}
