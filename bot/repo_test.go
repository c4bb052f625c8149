package bot_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// Serial saves: the tests here that save work at eviction run alone, before the package's
// parallel tests. A save runs git in the sandbox behind logbook's own git dir (and, with a
// cgroup v1 memory bound, behind a gate per command); beside the package's fifty parallel
// tests on two cores, a close's save outran the harness's 20 s wait (seen in CI runs on this
// machine), though alone it takes about 2 s.

// The sandbox is a checkout of the channel's repository at a recorded commit; sandboxes are
// disposable, uncommitted work is not: an edit made before the cell was evicted is there in
// the next cell's sandbox.
func TestUncommittedWorkSurvivesEviction(t *testing.T) {
	// Not parallel: see "Serial saves" above.
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

	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_r", Name: "run_command", Input: `{"command":"cat README.md; git rev-parse HEAD; git config --get-regexp '^url[.]'"}`}}},
		fakeprovider.Reply{Text: "It is the api."})
	top := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	// With no allowlist at all, the repository is still fetched and pushed through the proxy.
	if r := h.toolResult(s.ID, "toolu_r"); !strings.Contains(r.Content, "# the api") || !strings.Contains(r.Content, repo.Commit) ||
		!strings.Contains(r.Content, "/session.git.insteadof "+repo.URL) {
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

// A session whose last save recorded nothing beyond an older checkout (as every save at Close
// did before HEAD was recorded) gets the branch as it is now in its next sandbox — not the old
// commit, not a detached HEAD.
func TestNothingSavedOnAnOldCommitDoesNotPinTheSession(t *testing.T) {
	// Not parallel: see "Serial saves" above.
	repo := gittest.ServeWith(t, gittest.Options{Path: "repo.git", Files: map[string]string{"README.md": "# v1\n"}, Push: true})
	old := repo.Commit
	work := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("clone", "-q", repo.URL, ".")
	git("commit", "-q", "--allow-empty", "-m", "v2")
	git("push", "-q", "origin", "HEAD:main")
	current := repo.Branch("main")
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: repo.URL, Branch: "main"}})
	model.Push(fakeprovider.Reply{Text: "Hello."},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_h", Name: "run_command", Input: `{"command":"git rev-parse HEAD; git symbolic-ref --short HEAD"}`}}},
		fakeprovider.Reply{Text: "There."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if _, err := h.store.Append(context.Background(), s.ID, session.NewEvent{Type: session.TypeWorkSaved,
		Actor: session.Actor{Kind: session.ActorSystem, ID: "sandbox"}, Payload: session.WorkSaved{Commit: old}}); err != nil {
		t.Fatal(err)
	}
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "where are you?"})
	h.turns(s.ID, 2)
	if r := h.toolResult(s.ID, "toolu_h"); !strings.Contains(r.Content, current+"\nmain") {
		t.Fatalf("the sandbox is not on main at %s: %s", current, r.Content)
	}
}

// Work too large to save after a command is saved when the sandbox closes, whole — also when
// a later command changed only HEAD (the large part, unchanged, was not read again).
func TestLargeWorkSavedAtCloseAfterHEADMoved(t *testing.T) {
	// Not parallel: see "Serial saves" above; each save here also looks at 17 MB of random data.
	repo := gittest.ServeWith(t, gittest.Options{Path: "repo.git", Files: map[string]string{"README.md": "# api\n"}})
	// A lease of 30 s, not the harness's 3 s: on a loaded machine the cell lost a 3 s lease
	// while it saved the 17 MB, and the turn ran again elsewhere. Leases are not what this
	// test checks; the saved work is.
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: repo.URL, Branch: "main"}, leaseTTL: 30 * time.Second})
	run := func(id, command string) fakeprovider.Reply {
		return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: "run_command", Input: `{"command":"` + command + `"}`}}}
	}
	model.Push(
		run("toolu_big", "head -c 17000000 /dev/urandom > big.bin && echo made"), // over the 16 MiB checkpoint bound
		run("toolu_head", "git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m moved && echo moved"),
		fakeprovider.Reply{Text: "Done."},
		run("toolu_check", "wc -c < big.bin; git log --format=%s -1"),
		fakeprovider.Reply{Text: "Still there."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> make a big file"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	h.reps[0].runner.Evict()
	h.waitFor("the cell to go", func() bool { return h.reps[0].runner.Active() == 0 })
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "is it still there?"})
	h.turns(s.ID, 2)
	if r := h.toolResult(s.ID, "toolu_check"); !strings.Contains(r.Content, "17000000") || !strings.Contains(r.Content, "moved") {
		t.Fatalf("after eviction: %s", r.Content)
	}
}

// A hostile repository configuration — core.fsmonitor, a filter and a textconv driver named
// in .gitattributes, a post-index-change hook — runs nothing when logbook saves the work after
// a write_file or a command. write_file into .git is refused outright; a command (held to the
// approval policy of commands) may write .git/config, and the same configuration then does
// run its commands on the sandbox's own `git add` (the control, last), but never on a save.
func TestSavingWorkRunsNoCommandOfTheRepository(t *testing.T) {
	// Not parallel: see "Serial saves" above.
	base, _ := gittest.Serve(t, "repo.git", map[string]string{"README.md": "# api\n"})
	h, model := modelHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: base + "/repo.git", Branch: "main"}})
	const hostile = `set -e
M=$(pwd)/marks
cat >> .git/config <<CFG
[core]
	fsmonitor = "mkdir -p $M; touch $M/fsmonitor; false"
[filter "evil"]
	clean = "mkdir -p $M; touch $M/filter; cat"
[diff "evil"]
	textconv = "mkdir -p $M; touch $M/textconv; cat"
CFG
printf '* filter=evil diff=evil\n' > .gitattributes
printf '#!/bin/sh\nmkdir -p %s; touch %s/hook\n' "$M" "$M" > .git/hooks/post-index-change
chmod +x .git/hooks/post-index-change
echo configured`
	call := func(id, name, input string) fakeprovider.Reply {
		return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: name, Input: input}}}
	}
	model.Push(
		call("toolu_cfg", "write_file", `{"path":".git/config","content":"[core]\n\tfsmonitor = \"touch pwned\"\n"}`),
		call("toolu_cmd", "run_command", `{"command":`+strconv.Quote(hostile)+`}`),
		call("toolu_w", "write_file", `{"path":"README.md","content":"# api\nedited\n"}`),
		call("toolu_ls", "run_command", `{"command":"ls marks 2>&1; echo end"}`),
		call("toolu_ctl", "run_command", `{"command":"git add -A; git diff --cached HEAD >/dev/null; ls marks"}`),
		fakeprovider.Reply{Text: "Done."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> configure the repository"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if r := h.toolResult(s.ID, "toolu_cfg"); !r.IsError || !strings.Contains(r.Content, "writes into a git directory") {
		t.Fatalf("write_file of .git/config: %+v", r)
	}
	if r := h.toolResult(s.ID, "toolu_cmd"); !strings.Contains(r.Content, "configured") {
		t.Fatalf("the command: %+v", r)
	}
	if r := h.toolResult(s.ID, "toolu_ls"); !strings.Contains(r.Content, "No such file") || !strings.Contains(r.Content, "end") {
		t.Fatalf("saving the work after the command and the write ran the repository's commands: %s", r.Content)
	}
	if len(h.events(s.ID, session.TypeWorkSaved)) == 0 {
		t.Fatal("no work was saved: the test proves nothing")
	}
	r := h.toolResult(s.ID, "toolu_ctl")
	for _, m := range []string{"fsmonitor", "filter", "hook"} {
		if !strings.Contains(r.Content, m) {
			t.Fatalf("the control: the hostile config did not run %s on the sandbox's own git add: %s", m, r.Content)
		}
	}
}
