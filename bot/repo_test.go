package bot_test

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// gitRepo serves a new repository holding files over HTTP (git http-backend on loopback) and
// returns its URL and head commit.
func gitRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed (apt-get install git); .ci/run's machine has it")
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) string {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run(work, "init", "-q", "-b", "main")
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(work, "add", "-A")
	run(work, "commit", "-q", "-m", "first")
	run(root, "clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))
	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}})
	t.Cleanup(srv.Close)
	return srv.URL + "/repo.git", run(work, "rev-parse", "HEAD")
}

// The sandbox is a checkout of the channel's repository at a recorded commit; sandboxes are
// disposable, uncommitted work is not: an edit made before the cell was evicted is there in
// the next cell's sandbox.
func TestUncommittedWorkSurvivesEviction(t *testing.T) {
	t.Parallel()
	url, commit := gitRepo(t, map[string]string{"README.md": "# api\n", "main.go": "package main\n"})
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
