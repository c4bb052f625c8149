package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// A thread asks for a change, and the agent does it the whole way in a bwrap sandbox whose
// only way out is logbook's egress proxy: the checkout (clone), an edit, the test, a commit
// and push, a pull request. logbook is killed with SIGKILL after every step, and once while
// GitHub has created the pull request but not yet answered; each time a new process takes
// the turn up. At the end there is one branch, pushed once (the push replayed after a kill is
// a no-op: the saved work brought back the same commit), one pull request, its link in the
// thread and the log; a host not on the allowlist was refused and recorded; and GITHUB_TOKEN
// is nowhere in the sandbox, the log, the transcript, the audit export or logbook's output.
func TestE2EPullRequestThroughKills(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPING: bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)")
	}
	const tokenHead, tokenTail = "ghp_e2e", "-PR-T0KEN-0123456789" // never written whole in a command
	token := tokenHead + tokenTail
	e := newE2E(t, slackemu.Options{})
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Push: true,
		Files: map[string]string{"README.md": "# api\n", "test.sh": "grep -q fixed fix.txt\n"}})
	gh := forgetest.New(t, forgetest.Options{Token: token, Repo: "acme/api", HasBranch: func(b string) bool { return repo.Branch(b) != "" }})
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed-ok") }))
	defer allowed.Close()
	au, _ := url.Parse(allowed.URL)

	call := func(id, name, input string) fakeprovider.Reply {
		return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: name, Input: input}}}
	}
	pr := `{"branch":"logbook/fix","title":"Fix the test","body":"fix.txt says fixed."}`
	e.model.Push(
		call("toolu_edit", "write_file", `{"path":"fix.txt","content":"fixed\n"}`),
		call("toolu_test", "run_command", `{"command":"sh test.sh && echo test-passed; `+
			`curl -s -o /dev/null -w 'connect=%{http_connect}\\n' https://example.com/; curl -s --noproxy '' `+allowed.URL+`/; echo; `+
			`a=`+tokenHead+`; b=`+tokenTail+`; env | grep -c \"$a$b\"; `+
			`grep -rl -a -F \"$a$b\" /workspace /tmp /run /etc 2>/dev/null; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -l -a -F \"$a$b\" $f 2>/dev/null; done; echo searched"}`),
		call("toolu_push", "run_command", `{"command":"git checkout -q -b logbook/fix && git add fix.txt && git commit -q -m 'Fix the test' && git push -q origin logbook/fix 2>&1 && git rev-parse HEAD"}`),
		call("toolu_push2", "run_command", `{"command":"git rev-parse HEAD && git status --short && git push origin logbook/fix 2>&1"}`),
		call("toolu_pr", "create_pull_request", pr),
		call("toolu_pr2", "create_pull_request", pr),
		fakeprovider.Reply{Text: "Pushed logbook/fix and opened the pull request."},
		fakeprovider.Reply{Text: "Fix the test"},
	)
	cfg := []string{"LOGBOOK_SANDBOX=bwrap", "LOGBOOK_REPOS=" + general + "=acme/api@main", "LOGBOOK_REPO_URL=" + repo.Base + "/{repo}.git",
		"GITHUB_TOKEN=" + token, "LOGBOOK_GITHUB_API_URL=" + gh.URL, "LOGBOOK_SANDBOX_EGRESS=" + au.Host,
		"LOGBOOK_PUBLIC_URL=https://logbook.example.com"}
	e.gate.close()
	a := e.serve(cfg...)
	e.gate.admit()
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("make test.sh pass and open a PR")})
	s := e.session(top.TS)

	procs := []*proc{a}
	kill := func() {
		t.Helper()
		dropped := e.gate.droppedCount()
		p := procs[len(procs)-1]
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		e.waitFor("the killed process's request to go", func() bool { return e.gate.droppedCount() > dropped || e.gate.held() == 0 })
		procs = append(procs, e.serve(cfg...))
	}
	results := func() int { return len(e.events(s.ID, session.TypeToolResult)) }
	// After each step: its result is in the log and the model is being asked for the next
	// one. Kill, and let the new process's request through.
	for step := 1; step <= 4; step++ {
		e.waitFor(fmt.Sprintf("step %d's result and the next request", step), func() bool { return results() == step && e.gate.held() == 1 })
		kill()
		e.waitFor(fmt.Sprintf("the resumed turn's request after step %d", step), func() bool { return e.gate.held() == 1 })
		if step == 4 {
			break
		}
		e.gate.admit()
	}
	// create_pull_request: GitHub creates it and holds its answer; logbook dies waiting.
	created, release := gh.HoldNext()
	defer release()
	e.gate.admit()
	e.waitFor("create_pull_request to reach GitHub", func() bool {
		select {
		case <-created:
			return true
		default:
			return false
		}
	})
	kill()
	e.gate.release() // the rest runs through
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })

	if woken := len(e.events(s.ID, session.TypeCellWoken)); len(procs) != 6 || woken < 6 {
		t.Fatalf("%d processes, %d cells: the kills did not happen as planned", len(procs), woken)
	}
	result := func(id string) session.ToolResult {
		t.Helper()
		for _, ev := range e.events(s.ID, session.TypeToolResult) {
			var r session.ToolResult
			if ev.Decode(&r) == nil && r.CallID == id {
				return r
			}
		}
		t.Fatalf("no result for %s", id)
		return session.ToolResult{}
	}
	// The edit survived the kill after it; the test passed; example.com was refused, the
	// allowed host reached; the token was in no environment, file or process.
	test := result("toolu_test").Content
	if !strings.Contains(test, "test-passed\nconnect=403\nallowed-ok\n0\nsearched") {
		t.Fatalf("the test step:\n%s", test)
	}
	pushed := repo.Branch("logbook/fix")
	if pushed == "" || !strings.Contains(result("toolu_push").Content, pushed) {
		t.Fatalf("branch %q; the push step: %s", pushed, result("toolu_push").Content)
	}
	if again := result("toolu_push2").Content; !strings.Contains(again, pushed) || !strings.Contains(again, "Everything up-to-date") {
		t.Fatalf("the push after the kill was not the same commit: %s", again)
	}
	if r := result("toolu_pr"); !r.IsError || !strings.Contains(r.Content, "interrupted") {
		t.Fatalf("the call killed mid-way: %+v", r)
	}
	if r := result("toolu_pr2"); r.IsError || !strings.Contains(r.Content, "https://github.com/acme/api/pull/1") {
		t.Fatalf("create_pull_request after the kill: %+v", r)
	}
	creates, pulls := gh.State()
	if creates != 1 || len(pulls) != 1 || !strings.Contains(pulls[0]["body"].(string), "https://logbook.example.com/sessions/"+s.ID.String()) {
		t.Fatalf("%d pull requests created: %v", creates, pulls)
	}
	var rec session.PullRequest
	if evs := e.events(s.ID, session.TypePullRequest); len(evs) != 1 || evs[0].Decode(&rec) != nil || rec.Number != 1 || rec.Branch != "logbook/fix" {
		t.Fatalf("pull_request events: %+v", evs)
	}
	e.waitFor("the pull request's link in the thread", func() bool {
		for _, m := range e.emu.BotReplies(general, top.TS) {
			if strings.Contains(m.Text+string(m.Blocks), "https://github.com/acme/api/pull/1") {
				return true
			}
		}
		return false
	})

	// Every connection is in the log: the refusal, the allowed host, the pushes.
	var refused, reached, receive int
	for _, ev := range e.events(s.ID, session.TypeEgressConnection) {
		var c session.EgressConnection
		if err := ev.Decode(&c); err != nil {
			t.Fatal(err)
		}
		switch {
		case c.Kind == "connect" && !c.Allowed && c.Host == "example.com" && c.Port == 443:
			refused++
		case c.Kind == "http" && c.Allowed && c.BytesIn == int64(len("allowed-ok")):
			reached++
		case c.Kind == "git" && c.Allowed && c.Reason == "git-receive-pack" && len(c.Refs) == 1:
			receive++
		}
	}
	if refused != 1 || reached != 1 || receive != 1 {
		t.Fatalf("egress_connection: %d refusals of example.com, %d of the allowed host, %d pushes (want 1 each)", refused, reached, receive)
	}

	// GITHUB_TOKEN is nowhere it must not be.
	for _, ev := range e.events(s.ID) {
		if strings.Contains(string(ev.Payload), token) {
			t.Fatalf("%s holds the token", ev.Type)
		}
	}
	transcript := e.run("transcript", s.ID.String(), "--all")
	export := e.exported("sandbox") + e.exported("forge")
	if !strings.Contains(transcript, "egress connection: connect example.com:443 refused") || !strings.Contains(export, "egress_connection") {
		t.Fatalf("the transcript or the export lacks the connections:\n%s\n%s", transcript, export)
	}
	for what, text := range map[string]string{"the transcript": transcript, "the audit export": export} {
		if strings.Contains(text, token) {
			t.Fatalf("%s holds the token", what)
		}
	}
	for _, p := range procs {
		if strings.Contains(p.out.String(), token) {
			t.Fatalf("logbook's output holds the token")
		}
	}
}
