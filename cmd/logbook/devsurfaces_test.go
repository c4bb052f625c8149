package main

import (
	"testing"

	"github.com/logbook/logbook/bot/slackemu"
)

// dev prints a code channel on one line: its name, id, status and context bar.
func TestCodeChannelLine(t *testing.T) {
	t.Parallel()
	cc := slackemu.CodeChannel{ID: "CCODE00001", Name: "logbook 1a2b3c4d", Status: "active",
		ContextBar: []slackemu.ContextBarItem{{Key: "repository", Label: "acme/api"}, {Key: "ci", Label: "CI passing"}}}
	if got, want := codeChannelLine(cc), "(code channel #logbook 1a2b3c4d (CCODE00001) — active — acme/api · CI passing)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := codeChannelLine(slackemu.CodeChannel{ID: "C1", Name: "n"}); got != "(code channel #n (C1) — no status)" {
		t.Fatalf("bare: %q", got)
	}
}
