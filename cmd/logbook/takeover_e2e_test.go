package main

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// gitServe serves a new repository acme/api holding files (git http-backend on loopback) and
// returns the LOGBOOK_REPO_URL for it and its head commit.
func gitServe(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed (apt-get install git); .ci/run installs it")
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
	os.MkdirAll(work, 0o755)
	run(work, "init", "-q", "-b", "main")
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(work, "add", "-A")
	run(work, "commit", "-q", "-m", "first")
	os.MkdirAll(filepath.Join(root, "acme"), 0o755)
	run(root, "clone", "-q", "--bare", work, filepath.Join(root, "acme", "api.git"))
	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}})
	t.Cleanup(srv.Close)
	return srv.URL + "/{repo}.git", run(work, "rev-parse", "HEAD")
}

// logbook takeover gives a person the transcript and the workspace as it stands — the
// repository at its recorded commit with the saved uncommitted work — and silences the bot in
// the thread (a note says who took it over) until logbook handback; both are events with the
// person as actor, in the audit export.
func TestE2ETakeoverAndHandback(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	repoURL, commit := gitServe(t, map[string]string{"README.md": "# api\n"})
	e.model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_w", Name: "write_file", Input: `{"path":"README.md","content":"# api\nhalf done\n"}`}}},
		fakeprovider.Reply{Text: "Started on the README."},
		fakeprovider.Reply{Text: "README"},
	)
	cfg := []string{"LOGBOOK_SANDBOX=process", "LOGBOOK_REPOS=" + general + "=acme/api@main", "LOGBOOK_REPO_URL=" + repoURL}
	a := e.serve(cfg...)
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("document the api")})
	s := e.session(top.TS)
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	// A graceful stop closes the sandbox, saving its uncommitted work.
	a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.done
	if n := len(e.events(s.ID, session.TypeWorkSaved)); n != 1 {
		t.Fatalf("%d work_saved", n)
	}
	e.serve(cfg...)

	dir := filepath.Join(t.TempDir(), "mine")
	out := e.run("takeover", s.ID.String(), "--dir", dir)
	if !strings.Contains(out, "taken over by e2e-test") {
		t.Fatalf("takeover printed:\n%s", out)
	}
	if md, err := os.ReadFile(filepath.Join(dir, "TRANSCRIPT.md")); err != nil || !strings.Contains(string(md), "document the api") {
		t.Fatalf("TRANSCRIPT.md: %v\n%s", err, md)
	}
	if readme, err := os.ReadFile(filepath.Join(dir, "repo", "README.md")); err != nil || string(readme) != "# api\nhalf done\n" {
		t.Fatalf("the workspace's README: %q %v", readme, err)
	}
	if head, err := exec.Command("git", "-C", filepath.Join(dir, "repo"), "rev-parse", "HEAD").Output(); err != nil || strings.TrimSpace(string(head)) != commit {
		t.Fatalf("the workspace is at %s, want %s (%v)", head, commit, err)
	}
	e.waitFor("the note", func() bool {
		for _, m := range e.emu.BotReplies(general, top.TS) {
			if strings.Contains(m.Text, "e2e-test has taken this thread over") {
				return true
			}
		}
		return false
	})

	// While a person holds it, a mention gets a reminder, and the model is not called.
	e.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: mention("are you still working on it?")})
	e.waitFor("the reminder", func() bool {
		for _, m := range e.emu.BotReplies(general, top.TS) {
			if strings.Contains(m.Text, "I'm recording it but not answering") {
				return true
			}
		}
		return false
	})
	calls := len(e.model.Calls())
	e.run("handback", s.ID.String())
	e.model.Push(fakeprovider.Reply{Text: "Back on it."})
	e.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "please finish"})
	e.waitFor("the answer after the handback", func() bool {
		for _, m := range e.emu.BotReplies(general, top.TS) {
			if strings.Contains(m.Text, "Back on it.") {
				return true
			}
		}
		return false
	})
	if got := len(e.model.Calls()); got != calls+1 {
		t.Fatalf("the model was called %d times meanwhile; want once, after the handback", got-calls)
	}
	byOperator := e.exported("e2e-test")
	if !strings.Contains(byOperator, `"taken_over"`) || !strings.Contains(byOperator, `"handed_back"`) {
		t.Fatalf("the export for e2e-test lacks the takeover:\n%s", byOperator)
	}
}
