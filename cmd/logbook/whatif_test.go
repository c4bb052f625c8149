package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// scriptedModel records threads: for each user message it calls one tool — docs when the
// message asks for the docs, else lookup with {"n": the number of messages} — then answers
// with what the tool returned.
type scriptedModel struct{}

func (scriptedModel) Name() string  { return "scripted" }
func (scriptedModel) Model() string { return "scripted-1" }
func (scriptedModel) Complete(_ context.Context, req brain.Request) (brain.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	for _, b := range last.Blocks {
		if b.ToolResult != nil {
			return brain.Response{Text: "It says " + b.ToolResult.Content, StopReason: "end_turn", InputTokens: 100, OutputTokens: 10}, nil
		}
	}
	n := len(req.Messages)
	use := brain.ToolUse{ID: fmt.Sprintf("call_%d", n), Name: "lookup", Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
	if strings.Contains(last.Blocks[0].Text, "docs") {
		use = brain.ToolUse{ID: fmt.Sprintf("call_%d", n), Name: "docs", Input: json.RawMessage(`{"q":"deploy"}`)}
	}
	return brain.Response{StopReason: "tool_use", InputTokens: 90, OutputTokens: 5, ToolUses: []brain.ToolUse{use}}, nil
}

type whatIfLog struct {
	store *session.Store
	id    session.ID
}

func (l whatIfLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	return l.store.Events(ctx, l.id, r)
}

func (l whatIfLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return l.store.Append(ctx, l.id, evs...)
}

// recordThread records a thread of C0000001 as a cell would: per message, the user message,
// turn_started, the real agent (scriptedModel, the lookup and docs tools), turn_completed.
func recordThread(t *testing.T, store *session.Store, ts string, messages ...string) session.Session {
	t.Helper()
	ctx := context.Background()
	sess, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: ts})
	if err != nil {
		t.Fatal(err)
	}
	b, err := brain.New(brain.Config{Provider: scriptedModel{}, DeferTitle: true})
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name string) brain.Tool {
		return brain.NewTool(brain.ToolSpec{Name: name, Description: name, Schema: brain.ObjectSchema(nil)},
			func(_ context.Context, use brain.ToolUse) brain.Outcome {
				return brain.Outcome{Content: "value of " + string(use.Input)}
			})
	}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	for i, text := range messages {
		msg, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: ts, TS: fmt.Sprintf("%s%d", ts[:len(ts)-1], i), User: "U0000001",
				Text: "<@UB000001> " + text}})
		if err != nil {
			t.Fatal(err)
		}
		started, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: msg[0].Seq}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.Run(ctx, brain.Turn{Session: sess, Log: whatIfLog{store, sess.ID}, Where: brain.Where{BotUserID: "UB000001", Channel: "C0000001", ThreadTS: ts},
			Tools: []brain.Tool{tool("lookup"), tool("docs")}, TurnSeq: started[0].Seq, Through: msg[0].Seq})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell,
			Payload: session.TurnCompleted{Turn: started[0].Seq, Status: r.Status, Through: msg[0].Seq}}); err != nil {
			t.Fatal(err)
		}
	}
	return sess
}

func whatIfStore(t *testing.T) (*session.Store, string) {
	t.Helper()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return session.NewStore(pool, session.Options{}), dbURL
}

func countEvents(t *testing.T, store *session.Store, id session.ID) int {
	t.Helper()
	evs, err := store.Events(context.Background(), id, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// `logbook replay --from` sends the new model's name and the instructions file to the
// provider (the official SDK against the fake), posts nothing to Slack, appends nothing to the
// original, and prints the eval record with its page; `audit verify` verifies the record, and
// `logbook usage` shows its spend as an eval. An unknown --tools is a usage error (exit 2),
// having called nothing.
func TestReplayFromIsAWhatIfIntoAnEvalRecord(t *testing.T) {
	t.Parallel()
	store, dbURL := whatIfStore(t)
	sess := recordThread(t, store, "1700000000.000100", "look up number 0")
	before := countEvents(t, store, sess.ID)
	emu := slackemu.MustStart(t, slackemu.Options{})
	fake := fakeprovider.NewAnthropic(t, "sk-ant-test")
	dir := t.TempDir()
	instr := filepath.Join(dir, "instructions.md")
	if err := os.WriteFile(instr, []byte("Always name the runbook."), 0o600); err != nil {
		t.Fatal(err)
	}
	agents := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(agents, []byte("Run make check before you answer."), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL, "ANTHROPIC_API_KEY": fake.Key, "ANTHROPIC_BASE_URL": fake.URL,
		"SLACK_BOT_TOKEN": emu.BotToken(), "SLACK_API_URL": emu.APIURL(), "LOGBOOK_PUBLIC_URL": "https://logbook.example.com",
		"LOGBOOK_PRICES": "scripted-1=1/2,claude-new=3/15"}

	err, code, _, stderr := runCLI(t, vars, "replay", sess.ID.String(), "--from", "1", "--model", "anthropic:claude-new", "--tools", "docker")
	if code != 2 || !strings.Contains(stderr, `--tools "docker": want sandbox or recorded`) {
		t.Fatalf("with --tools docker: exit %d, %v\n%s", code, err, stderr)
	}
	if len(fake.Calls()) != 0 {
		t.Fatalf("a refused what-if called the model %d times", len(fake.Calls()))
	}

	fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "lookup", Input: `{"n":1}`}}, InputTokens: 1000, OutputTokens: 100},
		fakeprovider.Reply{Text: "The runbook says value of {\"n\":1}.", InputTokens: 1100, OutputTokens: 60})
	err, _, out, stderr := runCLI(t, vars, "replay", sess.ID.String(), "--from", "1", "--model", "anthropic:claude-new",
		"--instructions", instr, "--agents-md", agents, "--tools", "recorded")
	if err != nil {
		t.Fatalf("what-if: %v\n%s%s", err, out, stderr)
	}
	calls := fake.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d calls to the provider", len(calls))
	}
	for i, c := range calls {
		var body struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal(c.Body, &body); err != nil || body.Model != "claude-new" ||
			!strings.Contains(c.System, "Always name the runbook.") || !strings.Contains(c.System, "Run make check before you answer.") {
			t.Fatalf("call %d: model %q (%v), system:\n%s", i, body.Model, err, c.System)
		}
	}
	if last := calls[1].Messages[len(calls[1].Messages)-1].Blocks; last[len(last)-1].Text != `value of {"n":1}` {
		t.Fatalf("the recorded result was not served: %+v", last)
	}
	if n := countEvents(t, store, sess.ID); n != before {
		t.Fatalf("the original went from %d to %d events", before, n)
	}
	if posts := emu.History("C0000001"); len(posts) != 0 {
		t.Fatalf("the what-if posted to Slack: %+v", posts)
	}
	var id string
	flat := strings.Join(strings.Fields(out), " ")
	if _, err := fmt.Sscanf(out, "eval record %s", &id); err != nil || !strings.Contains(out, "session "+sess.ID.String()+" (C0000001 1700000000.000100) from seq 1 (turn 2) under anthropic:claude-new: ok") ||
		!strings.Contains(flat, "tool calls 1 1 (same 1, different 0, new 0; 0 recorded not made)") ||
		!strings.Contains(flat, "tokens in/out 190/15 2100/160") || !strings.Contains(flat, "cost 0.00022 USD 0.0087 USD") ||
		!strings.Contains(out, "reply: changed") || !strings.Contains(out, "page: https://logbook.example.com/evals/"+strings.TrimSuffix(id, ":")) {
		t.Fatalf("what-if output:\n%s", out)
	}
	id = strings.TrimSuffix(id, ":")
	if err, _, vout, verr := runCLI(t, vars, "audit", "verify", "--session", id); err != nil {
		t.Fatalf("audit verify of the eval record: %v\n%s%s", err, vout, verr)
	}
	err, _, uout, uerr := runCLI(t, vars, "usage", "--channel", "C0000001")
	if err != nil || !strings.Contains(uout, "evals (what-if replays, counted above)") || !strings.Contains(strings.Join(strings.Fields(uout), " "), "C0000001 0.0087 2") {
		t.Fatalf("usage: %v\n%s%s", err, uout, uerr)
	}
}

// `logbook eval --json` over a channel of three threads counts, per thread and in all, the tool
// calls the same, different and new, the recorded calls not made, the replies changed and the
// cost before and after; run three at once, each thread gets its eval record and nothing else.
func TestEvalOverAChannelCountsTheDifferences(t *testing.T) {
	t.Parallel()
	store, dbURL := whatIfStore(t)
	t1 := recordThread(t, store, "1700000000.000100", "look up number 0")
	t2 := recordThread(t, store, "1700000001.000100", "look up number 0")
	t3 := recordThread(t, store, "1700000002.000100", "look up number 0", "search the docs")
	counts := map[session.ID]int{}
	for _, s := range []session.Session{t1, t2, t3} {
		counts[s.ID] = countEvents(t, store, s.ID)
	}
	fake := fakeprovider.NewAnthropic(t, "sk-ant-test")
	vars := map[string]string{"DATABASE_URL": dbURL, "ANTHROPIC_API_KEY": fake.Key, "ANTHROPIC_BASE_URL": fake.URL,
		"LOGBOOK_PRICES": "scripted-1=1/2,claude-new=3/15"}
	reply := func(text string, tools ...fakeprovider.ToolCall) fakeprovider.Reply {
		return fakeprovider.Reply{Text: text, ToolCalls: tools, InputTokens: 1000, OutputTokens: 100}
	}
	same := `It says value of {"n":1}`
	// One at a time, newest thread first: t3 calls lookup as recorded, then docs (a tool of the
	// thread its first turn did not call), and answers otherwise; t2 calls lookup with another
	// input and answers as recorded; t1 answers as recorded without a call.
	fake.Push(
		reply("", fakeprovider.ToolCall{ID: "toolu_1", Name: "lookup", Input: `{"n":1}`}),
		reply("", fakeprovider.ToolCall{ID: "toolu_2", Name: "docs", Input: `{"q":"deploy"}`}),
		reply("Done."),
		reply("", fakeprovider.ToolCall{ID: "toolu_3", Name: "lookup", Input: `{"n":2}`}),
		reply(same),
		reply(same),
	)
	err, _, out, stderr := runCLI(t, vars, "eval", "--channel", "C0000001", "--model", "anthropic:claude-new", "--tools", "recorded",
		"--concurrency", "1", "--json")
	if err != nil {
		t.Fatalf("eval: %v\n%s%s", err, out, stderr)
	}
	var rep evalReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("eval --json: %v\n%s", err, out)
	}
	perCall := int64(3*1000 + 15*100)
	if rep.Threads != 3 || rep.Skipped != 0 || rep.Same != 1 || rep.Different != 1 || rep.New != 1 || rep.Missing != 2 || rep.RepliesChanged != 1 ||
		rep.CostBefore != 3*(190+2*15) || rep.CostAfter != 6*perCall || len(rep.Rows) != 3 || rep.Currency != "USD" {
		t.Fatalf("eval report:\n%s", out)
	}
	want := map[session.ID][4]int{t3.ID: {1, 0, 1, 0}, t2.ID: {0, 1, 0, 1}, t1.ID: {0, 0, 0, 1}}
	for _, r := range rep.Rows {
		if w := want[r.Session]; [4]int{r.Same, r.Different, r.New, r.Missing} != w || r.From != 1 || r.Record == nil || r.ReplyChanged != (r.Session == t3.ID) {
			t.Fatalf("row %+v, want same/different/new/missing %v", r, w)
		}
	}

	// Three at once: each thread answered without a tool call.
	fake.Push(reply(same), reply(same), reply(same))
	err, _, out, stderr = runCLI(t, vars, "eval", "--channel", "C0000001", "--model", "anthropic:claude-new", "--tools", "recorded", "--concurrency", "3")
	if err != nil || !strings.Contains(out, "eval of C0000001 under anthropic:claude-new: 3 threads replayed, 0 skipped (costs in USD)") ||
		!strings.Contains(out, "all 3") || !strings.Contains(out, "0 changed") {
		t.Fatalf("eval, three at once: %v\n%s%s", err, out, stderr)
	}
	for id, n := range counts {
		if got := countEvents(t, store, id); got != n {
			t.Fatalf("thread %s went from %d to %d events", id, n, got)
		}
	}
	if err, _, vout, verr := runCLI(t, vars, "audit", "verify"); err != nil || !strings.Contains(vout, "9 sessions") {
		t.Fatalf("audit verify: %v\n%s%s", err, vout, verr)
	}
	if _, code, _, _ := runCLI(t, vars, "eval", "--channel", "general", "--tools", "recorded", "--model", "anthropic:claude-new"); code != 2 {
		t.Fatalf("eval of a channel name: exit %d, want 2", code)
	}
}
