package bot_test

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// The sandbox is a checkout of the channel's repository at a recorded commit; sandboxes are
// disposable, uncommitted work is not: an edit made before the cell was evicted is there in
// the next cell's sandbox.
func TestUncommittedWorkSurvivesEviction(t *testing.T) {
	t.Parallel()
	base, commit := gittest.Serve(t, "repo.git", map[string]string{"README.md": "# api\n", "main.go": "package main\n"})
	url := base + "/repo.git"
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: url, Branch: "main"}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_w", Name: "write_file", Input: `{"path":"README.md","content":"# api\nnow documented\n"}`},
			{ID: "toolu_n", Name: "write_file", Input: `{"path":"NOTES.md","content":"todo\n"}`}}},
		fakeprovider.Reply{Text: "Edited."},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_r", Name: "run_command", Input: `{"command":"git status --short; cat README.md"}`}}},
		fakeprovider.Reply{Text: "Still there."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> document the api"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	h.reps[0].runner.Evict()
	h.waitFor("the cell to go", func() bool { return h.reps[0].runner.Active() == 0 })
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "is the edit still there?"})
	h.turns(s.ID, 2)
	r := h.toolResult(s.ID, "toolu_r")
	if !strings.Contains(r.Content, "now documented") || !strings.Contains(r.Content, "M README.md") || !strings.Contains(r.Content, "?? NOTES.md") {
		t.Fatalf("after eviction: %s", r.Content)
	}
	var saved session.WorkSaved
	if evs := h.events(s.ID, session.TypeWorkSaved); len(evs) == 0 || evs[0].Decode(&saved) != nil || saved.Size == 0 || saved.Commit != commit {
		t.Fatalf("work_saved %+v", evs)
	}
	provs := h.events(s.ID, session.TypeSandboxProvisioned)
	if len(provs) != 2 {
		t.Fatalf("%d sandboxes provisioned; want 2", len(provs))
	}
	for _, e := range provs {
		var p session.SandboxProvisioned
		if e.Decode(&p) != nil || p.Commit != commit || p.Repo != url {
			t.Fatalf("sandbox_provisioned %s", e.Payload)
		}
	}
}
