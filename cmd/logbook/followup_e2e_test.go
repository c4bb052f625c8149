package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/followup"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// A pull request followed, the whole way, with two replicas and kill -9 during each step (issue
// 32): the agent opens a pull request (killed after its push); the check fails, GitHub's signed
// webhook stores it once (a redelivery to the other replica stores nothing) and the session
// wakes on one replica (killed while the model works on it, and again after the fix's push);
// the fix is pushed to the same branch; the check passes, and the replica that took the
// webhook is killed at once; the thread says it once. Exactly one turn per wake: the message,
// the failure, the success; three replies.
func TestE2EFollowedPullRequestThroughKills(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPING: bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)")
	}
	const token, hookSecret = "ghp_e2e-followup-T0KEN-0123456789", "e2e-webhook-secret-0123456789"
	const branch = "logbook/fix"
	e := newE2E(t, slackemu.Options{})
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Push: true,
		Files: map[string]string{"README.md": "# api\n", "test.sh": "grep -q fixed fix.txt\n"}})
	gh := forgetest.New(t, forgetest.Options{Token: token, Repo: "acme/api", HasBranch: func(b string) bool { return repo.Branch(b) != "" },
		HeadSHA: repo.Branch})
	call := func(id, name, input string) fakeprovider.Reply {
		return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: name, Input: input}}}
	}
	e.model.Push(
		call("toolu_try", "run_command", `{"command":"printf broken > fix.txt && git checkout -q -b `+branch+` && git add fix.txt && git commit -q -m Try && git push -q origin `+branch+` 2>&1 && git rev-parse HEAD"}`),
		call("toolu_pr", "create_pull_request", `{"branch":"`+branch+`","title":"Fix the test","body":"fix.txt"}`),
		fakeprovider.Reply{Text: "Opened the pull request."},
		fakeprovider.Reply{Text: "Fix the test"}, // the title
		call("toolu_fix", "run_command", `{"command":"printf fixed > fix.txt && sh test.sh && git commit -qam Fix && git push -q origin `+branch+` 2>&1 && git rev-parse HEAD"}`),
		fakeprovider.Reply{Text: "test.sh wanted fix.txt to say fixed; changed it and pushed to " + branch + "."},
	)
	cfg := []string{"LOGBOOK_SANDBOX=bwrap", "LOGBOOK_REPOS=" + general + "=acme/api@main", "LOGBOOK_REPO_URL=" + repo.Base + "/{repo}.git",
		"GITHUB_TOKEN=" + token, "LOGBOOK_GITHUB_API_URL=" + gh.URL, "LOGBOOK_GITHUB_WEBHOOK_SECRET=" + hookSecret, "LOGBOOK_FOLLOWUP_POLL=off"}
	e.gate.close()
	procs := []*proc{e.serve(cfg...), e.serve(cfg...)}
	alive := func() []*proc {
		var out []*proc
		for _, p := range procs {
			select {
			case <-p.done:
			default:
				out = append(out, p)
			}
		}
		return out
	}
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("make test.sh pass and open a PR")})
	s := e.session(top.TS)
	// kill kills p with SIGKILL, waits for its held model request (if any) to go, and starts a
	// replacement: two replicas run all along.
	kill := func(p *proc) {
		t.Helper()
		dropped := e.gate.droppedCount()
		held := e.gate.held()
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		e.waitFor("the killed process's request to go", func() bool { return held == 0 || e.gate.droppedCount() > dropped })
		procs = append(procs, e.serve(cfg...))
	}
	// running is the replica whose cell woke last for the session.
	running := func() *proc {
		t.Helper()
		woken := e.events(s.ID, session.TypeCellWoken)
		var w session.CellWoken
		if len(woken) == 0 || woken[len(woken)-1].Decode(&w) != nil {
			t.Fatalf("no cell_woken: %s", typeList(e.events(s.ID)))
		}
		for _, p := range alive() {
			if p.cmd.Process.Pid == w.PID {
				return p
			}
		}
		t.Fatalf("no live replica has pid %d", w.PID)
		return nil
	}
	results := func() int { return len(e.events(s.ID, session.TypeToolResult)) }
	admitUntil := func(what string, done func() bool) {
		t.Helper()
		e.waitFor(what, func() bool {
			if done() {
				return true
			}
			if e.gate.held() > 0 {
				e.gate.admit()
			}
			return false
		})
	}
	completed := func(n int) func() bool {
		return func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) >= n }
	}

	// 1. The pull request: killed after the push, with the next model call in flight.
	e.waitFor("the first model call", func() bool { return e.gate.held() == 1 })
	e.gate.admit()
	e.waitFor("the push's result and the next call", func() bool { return results() == 1 && e.gate.held() == 1 })
	kill(running())
	admitUntil("the pull request opened and the turn completed", completed(1))
	admitUntil("the session's title", func() bool { return len(e.events(s.ID, session.TypeTitle)) == 1 })
	if r := e.replies(top.TS, 1); !strings.Contains(r[0].Text, "Opened the pull request") {
		t.Fatalf("reply %q", r[0].Text)
	}
	if subs := e.events(s.ID, session.TypeFollowupSubscribed); len(subs) != 1 {
		t.Fatalf("%d followup_subscribed", len(subs))
	}
	tried := repo.Branch(branch)
	if tried == "" || gh.Head(branch) != tried {
		t.Fatalf("branch %q, GitHub's head %q", tried, gh.Head(branch))
	}

	// 2. The check fails: GitHub's webhook to one replica, its redelivery to the other (which
	// finds it taken in the database and asks GitHub nothing).
	id := gh.AddCheckRun(tried, forgetest.Check{Name: "test", Conclusion: "failure", Title: "test.sh failed",
		Text: "+ grep -q fixed fix.txt\nexit status 1: fix.txt says broken\n", Annotations: []forgetest.Annotation{{Path: "fix.txt", Line: 1, Message: "want fixed"}}})
	reps := alive()
	d := gh.Send(t, webhookURL(t, reps[0]), hookSecret, "check_run", "", gh.CheckRunEvent(id, "completed"))
	if d.Status != 202 || !strings.Contains(d.Body, "stored 1 events") {
		t.Fatalf("webhook: %d %s", d.Status, d.Body)
	}
	if again := gh.Send(t, webhookURL(t, reps[1]), hookSecret, "check_run", d.ID, gh.CheckRunEvent(id, "completed")); again.Status != 200 || !strings.Contains(again.Body, "already delivered") {
		t.Fatalf("redelivery: %d %s", again.Status, again.Body)
	}
	if bad := gh.Send(t, webhookURL(t, reps[1]), "wrong-secret-0123456789", "check_run", "", gh.CheckRunEvent(id, "completed")); bad.Status != 401 {
		t.Fatalf("a wrongly signed delivery: %d", bad.Status)
	}
	// The session wakes; killed while the model works on the failure.
	e.waitFor("the failure's model call", func() bool { return len(e.events(s.ID, session.TypeTurnStarted)) == 2 && e.gate.held() == 1 })
	kill(running())
	e.waitFor("the resumed failure turn's model call", func() bool { return e.gate.held() == 1 })
	e.gate.admit()
	// 3. The fix is pushed; killed after it.
	e.waitFor("the fix's push and the next call", func() bool { return results() == 3 && e.gate.held() == 1 })
	kill(running())
	admitUntil("the failure's turn completed", completed(2))
	r := e.replies(top.TS, 2)
	if !strings.Contains(r[1].Text, "changed it and pushed") {
		t.Fatalf("reply %q", r[1].Text)
	}
	var sawFailure bool
	for _, c := range e.model.Calls() {
		if strings.Contains(string(c.Body), `Check \"test\" concluded failure`) && strings.Contains(string(c.Body), "fix.txt says broken") {
			sawFailure = true
		}
	}
	fixed := repo.Branch(branch)
	if !sawFailure || fixed == tried || fixed == "" {
		t.Fatalf("the model saw the failure: %v; the branch %s → %s", sawFailure, tried, fixed)
	}

	// 4. The check passes; the replica that took the webhook is killed at once.
	id = gh.AddCheckRun(fixed, forgetest.Check{Name: "test", Conclusion: "success"})
	taker := alive()[0]
	if d := gh.Send(t, webhookURL(t, taker), hookSecret, "check_run", "", gh.CheckRunEvent(id, "completed")); d.Status != 202 {
		t.Fatalf("webhook: %d %s", d.Status, d.Body)
	}
	kill(taker)
	e.waitFor("the success's turn completed", completed(3))
	r = e.replies(top.TS, 3)
	if !strings.Contains(r[2].Text, "All checks pass on acme/api#1") {
		t.Fatalf("reply %q", r[2].Text)
	}

	// 5. The merge ends it.
	gh.ClosePull(1, true)
	if d := gh.Send(t, webhookURL(t, alive()[0]), hookSecret, "pull_request", "", gh.PullRequestEvent(1, "closed")); d.Status != 202 {
		t.Fatalf("close webhook: %d %s", d.Status, d.Body)
	}
	e.waitFor("followup_ended", func() bool { return len(e.events(s.ID, session.TypeFollowupEnded)) == 1 })

	// One turn per wake, one reply each, two signals, each stored once.
	if n := len(e.events(s.ID, session.TypeTurnStarted)); n != 3 {
		t.Fatalf("%d turns, want 3: %s", n, typeList(e.events(s.ID)))
	}
	if n := len(e.emu.BotReplies(general, top.TS)); n != 3 {
		t.Fatalf("%d replies, want 3", n)
	}
	if n := len(e.events(s.ID, session.TypeFollowupSignal)); n != 2 {
		t.Fatalf("%d followup_signal events, want 2", n)
	}
	if len(procs) != 6 {
		t.Fatalf("%d processes: the kills did not happen as planned", len(procs))
	}
	for _, ev := range e.events(s.ID) {
		if strings.Contains(string(ev.Payload), token) || strings.Contains(string(ev.Payload), hookSecret) {
			t.Fatalf("%s holds a secret", ev.Type)
		}
	}
}

// webhookURL is p's POST /webhooks/github, from the address it logged.
func webhookURL(t *testing.T, p *proc) string {
	t.Helper()
	m := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*http: /healthz`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no http address in the output:\n%s", p.out.String())
	}
	return fmt.Sprintf("http://%s%s", m[1], followup.WebhookPath)
}
