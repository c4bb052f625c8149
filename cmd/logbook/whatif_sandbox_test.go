package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// fileModel records threads that write files: for a user message "write NAME" it calls
// write_file NAME with "NAME from the session", then answers "Wrote NAME.".
type fileModel struct{}

func (fileModel) Name() string  { return "scripted" }
func (fileModel) Model() string { return "scripted-1" }
func (fileModel) Complete(_ context.Context, req brain.Request) (brain.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	for _, b := range last.Blocks {
		if b.ToolResult != nil {
			return brain.Response{Text: "Done: " + b.ToolResult.Content, StopReason: "end_turn", InputTokens: 100, OutputTokens: 10}, nil
		}
	}
	_, name, _ := strings.Cut(last.Blocks[0].Text, "write ")
	in, _ := json.Marshal(map[string]string{"path": name, "content": name + " from the session\n"})
	return brain.Response{StopReason: "tool_use", InputTokens: 90, OutputTokens: 5,
		ToolUses: []brain.ToolUse{{ID: fmt.Sprintf("call_%d", len(req.Messages)), Name: brain.ToolWriteFile, Input: in}}}, nil
}

// sandboxBase is a directory for sandboxes that the sandbox user (nobody, when tests run as
// root) can reach; the test is skipped without bubblewrap.
func sandboxBase(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPING: bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)")
	}
	// Short: the egress proxy's socket lives under it, and a socket's path has a small bound.
	base, err := os.MkdirTemp("", "wif")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return base
}

// recordFiles records a thread of C0000001 whose turns write files in a real bubblewrap
// sandbox over the repository at repoURL (branch main), as a cell would: one sandbox for the
// thread, its work saved in the log (work_saved) and the file store, closed at the end.
func recordFiles(t *testing.T, store *session.Store, sandboxes, repoURL, ts string, names ...string) session.Session {
	t.Helper()
	ctx := context.Background()
	sess, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: ts})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := sandbox.New(sandbox.KindBwrap, sandbox.Config{BaseDir: sandboxes}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	spec := &sandbox.RepoSpec{URL: repoURL, Branch: "main"}
	h := hands.NewFactory(prov, hands.Config{Work: filestore.NewStore(store),
		Repo: func(context.Context, string, string) (*sandbox.RepoSpec, error) { return spec, nil }}, zerolog.Nop())(whatIfLog{store, sess.ID}, sess)
	defer h.Close(ctx, true)
	b, err := brain.New(brain.Config{Provider: fileModel{}, DeferTitle: true})
	if err != nil {
		t.Fatal(err)
	}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	for i, name := range names {
		msg, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: ts, TS: fmt.Sprintf("%s%d", ts[:len(ts)-1], i), User: "U0000001",
				Text: "<@UB000001> write " + name}})
		if err != nil {
			t.Fatal(err)
		}
		started, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: msg[0].Seq}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.Run(ctx, brain.Turn{Session: sess, Log: whatIfLog{store, sess.ID}, Hands: h, Where: brain.Where{BotUserID: "UB000001", Channel: "C0000001", ThreadTS: ts},
			TurnSeq: started[0].Seq, Through: msg[0].Seq})
		if err != nil || r.Status != "ok" {
			t.Fatalf("turn %d: %v %+v", i, err, r)
		}
		if _, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell,
			Payload: session.TurnCompleted{Turn: started[0].Seq, Status: r.Status, Through: msg[0].Seq}}); err != nil {
			t.Fatal(err)
		}
	}
	return sess
}

// The what-if's default mode runs a tool call the recording cannot serve in a fresh
// bubblewrap sandbox restored to where the recorded turn began: the command sees the file the
// session wrote before --from and not the one it wrote after (the identical write_file of the
// recorded turn gets its recorded result and is not run), it reaches no network (a local HTTP
// server the test runs gets nothing, the connection is refused), the original session gets no
// event, and the eval record holds the sandbox's own records (sandbox_provisioned, work_saved
// of what the command wrote, on the session's commit though the branch moved on) and
// verifies.
func TestWhatIfRunsOtherCallsInAnOfflineSandboxRestoredToTheTurn(t *testing.T) {
	t.Parallel()
	base := sandboxBase(t)
	srvRepo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "the api\n"}})
	repo, commit := srvRepo.Base, srvRepo.Commit
	store, dbURL := whatIfStore(t)
	sess := recordFiles(t, store, filepath.Join(base, "record"), repo+"/acme/api.git", "1700000000.000100", "before.txt", "after.txt")
	evs, err := store.Events(context.Background(), sess.ID, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var from int64
	saved := 0
	for _, e := range evs {
		switch e.Type {
		case session.TypeUserMessage:
			from = e.Seq // the second: "write after.txt"
		case session.TypeWorkSaved:
			saved++
		}
	}
	if saved != 2 {
		for _, e := range evs {
			t.Logf("%d %s %s", e.Seq, e.Type, e.Payload)
		}
		t.Fatalf("the recording saved work %d times, want 2 (one per file)", saved)
	}
	before := len(evs)
	// The branch moves on after the session: the what-if's sandbox is at the session's commit.
	moved := srvRepo.Git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit-tree", commit+"^{tree}", "-p", commit, "-m", "moved on")
	srvRepo.Git("update-ref", "refs/heads/main", moved)
	if srvRepo.Branch("main") != moved || moved == commit {
		t.Fatalf("main is at %s, not the new %s", srvRepo.Branch("main"), moved)
	}

	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprintln(w, "reached")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	fake := fakeprovider.NewAnthropic(t, "sk-ant-test")
	command := fmt.Sprintf(`ls; cat before.txt; git rev-parse HEAD; echo whatif > whatif.txt; `+
		`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>&1 && echo NET-REACHED || echo NET-REFUSED; `+
		`curl -s -m 5 %s/ || echo CURL-FAILED`, port, srv.URL)
	in, _ := json.Marshal(map[string]string{"command": command})
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "write_file", Input: `{"content":"after.txt from the session\n","path":"after.txt"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "run_command", Input: string(in)}}},
		fakeprovider.Reply{Text: "before.txt is there; no network."},
	)
	u, _ := url.Parse(repo)
	vars := map[string]string{"DATABASE_URL": dbURL, "ANTHROPIC_API_KEY": fake.Key, "ANTHROPIC_BASE_URL": fake.URL,
		"LOGBOOK_SANDBOX": "bwrap", "LOGBOOK_SANDBOX_DIR": filepath.Join(base, "whatif"),
		"LOGBOOK_REPOS": "C0000001=acme/api@main", "LOGBOOK_REPO_URL": repo + "/{repo}.git",
		// Asked for, and not given: a what-if's sandbox has no network whatever these say.
		"LOGBOOK_SANDBOX_EGRESS": u.Host}
	err, _, out, stderr := runCLI(t, vars, "replay", sess.ID.String(), "--from", fmt.Sprint(from), "--model", "anthropic:claude-new")
	if err != nil {
		t.Fatalf("what-if: %v\n%s%s", err, out, stderr)
	}
	calls := fake.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d calls to the provider\n%s", len(calls), out)
	}
	result := func(c fakeprovider.Call) fakeprovider.Block {
		last := c.Messages[len(c.Messages)-1]
		return last.Blocks[len(last.Blocks)-1]
	}
	if r := result(calls[1]); r.IsError || r.Text != "wrote 27 bytes to after.txt" {
		t.Fatalf("the identical write_file: %+v", r)
	}
	r := result(calls[2])
	if !strings.Contains(r.Text, "before.txt from the session") || !strings.Contains(r.Text, commit) || strings.Contains(r.Text, moved) ||
		strings.Contains(r.Text, "after.txt") || !strings.Contains(r.Text, "NET-REFUSED") || strings.Contains(r.Text, "NET-REACHED") ||
		!strings.Contains(r.Text, "CURL-FAILED") || strings.Contains(r.Text, "reached") {
		t.Fatalf("the command in the what-if's sandbox:\n%s", r.Text)
	}
	t.Logf("command output:\n%s", r.Text)
	// The command's output is the signal that its attempts ended: the server got nothing.
	if n := hits.Load(); n != 0 {
		t.Fatalf("the local HTTP server got %d requests from the sandbox", n)
	}
	if n := countEvents(t, store, sess.ID); n != before {
		t.Fatalf("the original went from %d to %d events", before, n)
	}
	flat := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "(same 1, different 0, new 1; 0 recorded not made)") {
		t.Fatalf("what-if output:\n%s", out)
	}
	var id string
	if _, err := fmt.Sscanf(out, "eval record %s", &id); err != nil {
		t.Fatalf("what-if output: %v\n%s", err, out)
	}
	rid, err := session.ParseID(strings.TrimSuffix(id, ":"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Events(context.Background(), rid, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var link session.ReplayStarted
	if err := rec[0].Decode(&link); err != nil || link.Tools != "sandbox" || link.Sandbox != "bwrap, no network" {
		t.Fatalf("link %+v (%v)", link, err)
	}
	var types []string
	var prov session.SandboxProvisioned
	var work session.WorkSaved
	for _, e := range rec {
		types = append(types, string(e.Type))
		switch e.Type {
		case session.TypeSandboxProvisioned:
			if err := e.Decode(&prov); err != nil {
				t.Fatal(err)
			}
		case session.TypeWorkSaved:
			if err := e.Decode(&work); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Checked out at the branch's head as it is now, then moved to the session's commit with
	// its work on top (as a fork's sandbox is): the work saved says so.
	if prov.Provider != "bwrap" || prov.Commit != moved || prov.Repo != repo+"/acme/api.git" || work.SHA256 == "" || work.Head != commit {
		t.Fatalf("the eval record's events %v: sandbox_provisioned %+v, work_saved %+v", types, prov, work)
	}
	if err, _, vout, verr := runCLI(t, vars, "audit", "verify", "--session", rid.String()); err != nil {
		t.Fatalf("audit verify of the eval record: %v\n%s%s", err, vout, verr)
	}

	// Without a repository for the channel the session's work cannot be restored, and with
	// LOGBOOK_SANDBOX=none there is no sandbox: the what-if runs, the call fails or is refused
	// with a tool error saying why, nothing is run, and the original still gets nothing.
	for _, c := range []struct {
		unset, set, want, sandbox string
	}{
		{unset: "LOGBOOK_REPOS", want: "the sandbox failed: the channel has no repository", sandbox: "bwrap, no network"},
		{set: "none", want: "has no sandbox to run the call in (LOGBOOK_SANDBOX=none)", sandbox: "none: LOGBOOK_SANDBOX=none (other tool calls are refused)"},
	} {
		v := map[string]string{}
		for k, val := range vars {
			v[k] = val
		}
		delete(v, c.unset)
		if c.set != "" {
			v["LOGBOOK_SANDBOX"] = c.set
		}
		fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_3", Name: "run_command", Input: `{"command":"echo RAN"}`}}},
			fakeprovider.Reply{Text: "Could not run it."})
		n := len(fake.Calls())
		err, _, out, stderr := runCLI(t, v, "replay", sess.ID.String(), "--from", fmt.Sprint(from), "--model", "anthropic:claude-new")
		if err != nil {
			t.Fatalf("what-if without %s%s: %v\n%s%s", c.unset, c.set, err, out, stderr)
		}
		calls := fake.Calls()
		if len(calls) != n+2 {
			t.Fatalf("%d calls to the provider, want %d", len(calls), n+2)
		}
		if r := result(calls[n+1]); !r.IsError || !strings.Contains(r.Text, c.want) || strings.Contains(r.Text, "RAN") {
			t.Fatalf("without %s%s: %+v", c.unset, c.set, r)
		}
		if _, err := fmt.Sscanf(out, "eval record %s", &id); err != nil {
			t.Fatalf("what-if output: %v\n%s", err, out)
		}
		rid, err := session.ParseID(strings.TrimSuffix(id, ":"))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := store.Events(context.Background(), rid, session.Range{})
		if err != nil {
			t.Fatal(err)
		}
		if err := rec[0].Decode(&link); err != nil || link.Sandbox != c.sandbox {
			t.Fatalf("link %+v (%v)", link, err)
		}
		for _, e := range rec {
			if e.Type == session.TypeSandboxProvisioned {
				t.Fatalf("without %s%s a sandbox was provisioned: %s", c.unset, c.set, e.Payload)
			}
		}
	}
	if n := countEvents(t, store, sess.ID); n != before {
		t.Fatalf("the original went from %d to %d events", before, n)
	}
}

// A what-if of a fork's turn, the fork having saved no work of its own, starts its sandbox
// from the work its parent saved at or before the fork's seq: the parent's first file, not
// the one the parent wrote after the fork was taken.
func TestWhatIfOfAForkStartsFromTheParentsWorkAtTheForkSeq(t *testing.T) {
	t.Parallel()
	base := sandboxBase(t)
	srvRepo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "the api\n"}})
	store, dbURL := whatIfStore(t)
	ctx := context.Background()
	parent := recordFiles(t, store, filepath.Join(base, "record"), srvRepo.Base+"/acme/api.git", "1700000000.000100", "before.txt", "after.txt")
	pevs, err := store.Events(ctx, parent.ID, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	at := int64(0) // the parent's first turn_completed: before.txt saved, after.txt not yet
	for _, e := range pevs {
		if e.Type == session.TypeTurnCompleted {
			at = e.Seq
			break
		}
	}
	ref, err := store.ForkReference(ctx, parent.ID, at)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000009.000100"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, fork.ID, session.NewEvent{Type: session.TypeSessionForked, Actor: session.Actor{Kind: session.ActorSystem, ID: "cli/fork"}, Payload: ref}); err != nil {
		t.Fatal(err)
	}
	// The fork's own turn: a lookup, no sandbox.
	msg, err := store.Append(ctx, fork.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
		Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000009.000100", TS: "1700000009.000200", User: "U0000001",
			Text: "<@UB000001> look up number 0"}})
	if err != nil {
		t.Fatal(err)
	}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	started, err := store.Append(ctx, fork.ID, session.NewEvent{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: msg[0].Seq}})
	if err != nil {
		t.Fatal(err)
	}
	fevs, err := store.Events(ctx, fork.ID, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	prefix, err := session.Prefix(ctx, store, fevs)
	if err != nil || len(prefix) != 1 {
		t.Fatalf("the fork's prefix: %d segments (%v)", len(prefix), err)
	}
	b, err := brain.New(brain.Config{Provider: scriptedModel{}, DeferTitle: true})
	if err != nil {
		t.Fatal(err)
	}
	lookup := brain.NewTool(brain.ToolSpec{Name: "lookup", Description: "lookup", Schema: brain.ObjectSchema(nil)},
		func(_ context.Context, use brain.ToolUse) brain.Outcome {
			return brain.Outcome{Content: "value of " + string(use.Input)}
		})
	r, err := b.Run(ctx, brain.Turn{Session: fork, Log: whatIfLog{store, fork.ID}, Where: brain.Where{BotUserID: "UB000001", Channel: "C0000001", ThreadTS: "1700000009.000100"},
		Tools: []brain.Tool{lookup}, TurnSeq: started[0].Seq, Through: msg[0].Seq, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, fork.ID, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell,
		Payload: session.TurnCompleted{Turn: started[0].Seq, Status: r.Status, Through: msg[0].Seq}}); err != nil {
		t.Fatal(err)
	}
	parentBefore, forkBefore := countEvents(t, store, parent.ID), countEvents(t, store, fork.ID)

	fake := fakeprovider.NewAnthropic(t, "sk-ant-test")
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"ls; cat before.txt"}`}}},
		fakeprovider.Reply{Text: "before.txt only."},
	)
	vars := map[string]string{"DATABASE_URL": dbURL, "ANTHROPIC_API_KEY": fake.Key, "ANTHROPIC_BASE_URL": fake.URL,
		"LOGBOOK_SANDBOX": "bwrap", "LOGBOOK_SANDBOX_DIR": filepath.Join(base, "whatif"),
		"LOGBOOK_REPOS": "C0000001=acme/api@main", "LOGBOOK_REPO_URL": srvRepo.Base + "/{repo}.git"}
	err, _, out, stderr := runCLI(t, vars, "replay", fork.ID.String(), "--from", fmt.Sprint(msg[0].Seq), "--model", "anthropic:claude-new")
	if err != nil {
		t.Fatalf("what-if of the fork: %v\n%s%s", err, out, stderr)
	}
	calls := fake.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d calls to the provider\n%s", len(calls), out)
	}
	last := calls[1].Messages[len(calls[1].Messages)-1].Blocks
	res := last[len(last)-1]
	if res.IsError || !strings.Contains(res.Text, "before.txt from the session") || strings.Contains(res.Text, "after.txt") {
		t.Fatalf("the command in the fork's what-if sandbox:\n%s", res.Text)
	}
	if countEvents(t, store, parent.ID) != parentBefore || countEvents(t, store, fork.ID) != forkBefore {
		t.Fatal("the what-if appended to the fork or its parent")
	}
}
