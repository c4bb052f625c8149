package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// logbook takeover gives a person the transcript and the workspace as it stands — the
// repository at its recorded commit with the saved uncommitted work — and silences the bot in
// the thread (a note says who took it over) until logbook handback; both are events with the
// person as actor, in the audit export.
func TestE2ETakeoverAndHandback(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	base, commit := gittest.Serve(t, "acme/api.git", map[string]string{"README.md": "# api\n"})
	repoURL := base + "/{repo}.git"
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
	// The write saved the work at once; a graceful stop closes the sandbox (with nothing new
	// to save).
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

// The sandbox's commits come with a takeover — the same commit, from the bundle saved after
// the command that made it — but commits that create a symbolic link are refused, as a patch
// that does is: they would land on the person's machine.
func TestE2ETakeoverBringsTheSandboxsCommits(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	base, _ := gittest.Serve(t, "acme/api.git", map[string]string{"README.md": "# api\n"})
	run := func(id, command string) fakeprovider.Reply {
		return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: "run_command", Input: `{"command":"` + command + `"}`}}}
	}
	e.model.Push(
		run("toolu_c", "git checkout -q -b logbook/docs && echo more >> README.md && git commit -qam docs && echo wip > notes.txt && git rev-parse HEAD"),
		fakeprovider.Reply{Text: "Committed."}, fakeprovider.Reply{Text: "Docs"},
		run("toolu_l", "git checkout -q -b logbook/link && ln -s /etc/passwd notes.md && git add notes.md && git commit -qm link && echo linked"),
		fakeprovider.Reply{Text: "Linked."}, fakeprovider.Reply{Text: "Link"},
	)
	e.serve("LOGBOOK_SANDBOX=process", "LOGBOOK_REPOS="+general+"=acme/api@main", "LOGBOOK_REPO_URL="+base+"/{repo}.git")
	session1 := func(text string) session.Session {
		top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention(text)})
		s := e.session(top.TS)
		e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
		return s
	}
	docs := session1("commit the docs")
	var head string
	for _, ev := range e.events(docs.ID, session.TypeToolResult) {
		var r session.ToolResult
		if ev.Decode(&r) == nil {
			if f := strings.Fields(r.Content); len(f) > 0 {
				head = f[len(f)-1]
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "docs")
	out := e.run("takeover", docs.ID.String(), "--dir", dir)
	got, err := exec.Command("git", "-C", filepath.Join(dir, "repo"), "rev-parse", "HEAD").Output()
	if err != nil || strings.TrimSpace(string(got)) != head || !strings.Contains(out, `the sandbox's branch "logbook/docs"`) {
		t.Fatalf("the takeover is at %s (%v), the sandbox was at %q:\n%s", got, err, head, out)
	}
	if notes, err := os.ReadFile(filepath.Join(dir, "repo", "notes.txt")); err != nil || string(notes) != "wip\n" {
		t.Fatalf("the uncommitted file on top: %q %v", notes, err)
	}

	link := session1("link the notes")
	cmd := exec.Command(binary, "takeover", link.ID.String(), "--dir", filepath.Join(t.TempDir(), "link"))
	cmd.Env = e.env()
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "symbolic links") {
		t.Fatalf("a takeover of commits with a symbolic link: %v\n%s", err, msg)
	}
	if evs := e.events(link.ID, session.TypeTakenOver); len(evs) != 0 {
		t.Fatal("the refused takeover was recorded as one")
	}
}
