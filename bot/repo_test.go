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

// An admin sets the channel's repository with /logbook repo; others may only ask what it is.
// The channel's next sandbox checks it out; off switches it off.
func TestRepoCommandSetsTheChannelsRepository(t *testing.T) {
	t.Parallel()
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# the api\n"}})
	h, model := modelHarness(t, harnessOptions{repoAdmins: []string{ada}})
	slash := func(user, text string) string {
		t.Helper()
		before := len(h.emu.Ephemerals())
		if _, err := h.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: text, User: user, Channel: general}); err != nil {
			t.Fatal(err)
		}
		if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) > before }); err != nil {
			t.Fatalf("no answer to %q: %v", text, err)
		}
		return h.emu.Ephemerals()[before].Text
	}
	if got := slash(ada, "repo"); !strings.Contains(got, "no repository") {
		t.Fatalf("before: %s", got)
	}
	if got := slash(grace, "repo "+repo.URL+" main"); !strings.Contains(got, "Only logbook's admins") {
		t.Fatalf("a non-admin: %s", got)
	}
	for _, bad := range []string{"repo ftp://x/y.git", "repo https://tok:en@github.com/a/b.git", "repo https://example.com/a.git -f", "repo http://example.com/a.git"} {
		if got := slash(ada, bad); !strings.Contains(got, "not") {
			t.Errorf("%q: %s", bad, got)
		}
	}
	if got := slash(ada, "repo <"+repo.URL+"> main"); !strings.Contains(got, "New sandboxes of this channel check out `"+repo.URL+"` at `main`") ||
		!strings.Contains(got, "create_pull_request opens pull requests on it") {
		t.Fatalf("set: %s", got)
	}
	if got := slash(grace, "repo"); !strings.Contains(got, "set by <@"+ada+">") {
		t.Fatalf("shown to anyone: %s", got)
	}

	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_r", Name: "run_command", Input: `{"command":"cat README.md; git rev-parse HEAD"}`}}},
		fakeprovider.Reply{Text: "It is the api."})
	top := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if r := h.toolResult(s.ID, "toolu_r"); !strings.Contains(r.Content, "# the api") || !strings.Contains(r.Content, repo.Commit) {
		t.Fatalf("the sandbox: %s", r.Content)
	}
	var p session.SandboxProvisioned
	if evs := h.events(s.ID, session.TypeSandboxProvisioned); len(evs) != 1 || evs[0].Decode(&p) != nil || p.Repo != repo.URL || p.Commit != repo.Commit {
		t.Fatalf("sandbox_provisioned: %+v", evs)
	}
	if got := slash(ada, "repo off"); !strings.Contains(got, "no repository now") {
		t.Fatalf("off: %s", got)
	}
	if got := slash(ada, "repo"); !strings.Contains(got, "no repository") {
		t.Fatalf("after off: %s", got)
	}
}
