package replay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/replay"
	"github.com/logbook/logbook/session"
)

// whatIfConfig is a what-if under the fake Anthropic API (the official SDK) as model spec, the
// channel's budget metered by bot/budget over store, priced at 3/15 per million tokens.
func whatIfConfig(t testing.TB, store *session.Store, fake *fakeprovider.Server, spec string, instructions *string) replay.WhatIfConfig {
	t.Helper()
	provider, err := brain.NewProvider(spec, brain.ProviderConfig{AnthropicAPIKey: fake.Key, AnthropicBaseURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	prices, err := budget.ParsePrices("claude-new=3/15")
	if err != nil {
		t.Fatal(err)
	}
	b, err := budget.New(budget.Config{Store: store, Prices: prices})
	if err != nil {
		t.Fatal(err)
	}
	return replay.WhatIfConfig{
		Brain: brain.Config{Provider: provider, Retry: brain.RetryPolicy{Attempts: 1}},
		Model: spec, Instructions: instructions, Tools: replay.ToolsRecorded,
		Meter: func(eval session.ID, turn int64) brain.Meter { return b.For("C0000001", "", eval, turn) },
		Price: func(provider, model string, u session.Usage) (int64, bool) {
			p, ok := prices.For(provider, model)
			return int64(p.Cost(budget.Usage{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens})), ok
		},
		Currency: prices.Currency,
		By:       session.Actor{Kind: session.ActorSystem, ID: "cli/replay"},
	}
}

// The what-if of a recorded turn calls the new model for real with the new instructions; the
// call identical to the recorded one (the same input, spaced otherwise) gets the recorded
// result without running, the other is refused with an error the model sees; the original
// session gets nothing; the eval record is a replay session that no poll wakes and no thread
// listing shows, that verifies (and fails when the original's event it links is tampered
// with), and whose cost is the provider's tokens at the price, charged as an eval.
func TestWhatIfCallsTheNewModelAndServesOnlyRecordedTools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, sess, dbURL := recordDB(t, 2)
	before := events(t, store, sess.ID)
	fake := fakeprovider.NewAnthropic(t, "sk-test")
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_a", Name: "lookup", Input: `{ "n" : 1 }`}}, InputTokens: 1200, OutputTokens: 30},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_b", Name: "lookup", Input: `{"n":7}`}}, InputTokens: 1300, OutputTokens: 40},
		fakeprovider.Reply{Text: "Number 0 is value of {\"n\":1}.", InputTokens: 1400, OutputTokens: 50},
	)
	instructions := "Answer in one sentence, citing the lookup."
	ev, err := replay.WhatIf(ctx, store, sess, before, 1, whatIfConfig(t, store, fake, "anthropic:claude-new", &instructions))
	if err != nil {
		t.Fatal(err)
	}

	calls := fake.Calls()
	if len(calls) != 3 || fake.Pending() != 0 {
		t.Fatalf("%d calls to the provider, %d replies left", len(calls), fake.Pending())
	}
	for i, c := range calls {
		var body struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal(c.Body, &body); err != nil || body.Model != "claude-new" || !strings.Contains(c.System, instructions) || c.Invalid != "" {
			t.Fatalf("call %d: model %q (%v), invalid %q, system:\n%s", i, body.Model, err, c.Invalid, c.System)
		}
		if first := c.Messages[0].Blocks[0].Text; !strings.Contains(first, "look up number 0") {
			t.Fatalf("call %d opens with %q, not the recorded user message", i, first)
		}
		for _, m := range c.Messages {
			for _, b := range m.Blocks {
				if strings.Contains(b.Text, "look up number 1") {
					t.Fatalf("call %d holds the later user message: %+v", i, c.Messages)
				}
			}
		}
	}
	result := func(c fakeprovider.Call) fakeprovider.Block {
		last := c.Messages[len(c.Messages)-1]
		return last.Blocks[len(last.Blocks)-1]
	}
	if r := result(calls[1]); r.Type != "tool_result" || r.Text != `value of {"n":1}` || r.IsError {
		t.Fatalf("the identical call's result: %+v", r)
	}
	if r := result(calls[2]); r.Type != "tool_result" || !r.IsError || !strings.Contains(r.Text, "refused: this is a what-if replay") {
		t.Fatalf("the other call's result: %+v", r)
	}

	after := events(t, store, sess.ID)
	if len(after) != len(before) {
		t.Fatalf("the original session went from %d to %d events", len(before), len(after))
	}
	rec := events(t, store, ev.Record.ID)
	if !ev.Record.Key.Replay() || ev.Record.Key.Channel != "C0000001" || rec[0].Type != session.TypeReplayStarted || rec[len(rec)-1].Type != session.TypeReplayCompleted {
		t.Fatalf("eval record %+v: %d events, first %s", ev.Record.Key, len(rec), rec[0].Type)
	}
	var link session.ReplayStarted
	if err := rec[0].Decode(&link); err != nil || link.Original != sess.ID || link.Seq != 1 || link.Turn != 2 || link.Model != "anthropic:claude-new" ||
		link.Instructions != instructions || link.Tools != "recorded" {
		t.Fatalf("link %+v (%v)", link, err)
	}
	var types []string
	for _, e := range rec[1 : len(rec)-1] {
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, " "); got != "assistant_message tool_call tool_result assistant_message tool_call tool_result assistant_message" {
		t.Fatalf("the replayed turn's events: %s", got)
	}
	s := ev.Summary
	wantCost := int64(3*(1200+1300+1400) + 15*(30+40+50)) // micros: 3 and 15 per million tokens
	if s.Status != "ok" || s.Same != 1 || s.Different != 1 || s.New != 0 || s.Missing != 0 || !s.ReplyChanged ||
		s.Recorded.ToolCalls != 1 || s.Replayed.ToolCalls != 2 || s.Recorded.Reply != `It says value of {"n":1}` ||
		s.Replayed.ModelCalls != 3 || s.Replayed.InputTokens != 3900 || s.Replayed.OutputTokens != 120 || s.Replayed.CostMicros != wantCost ||
		s.Recorded.ModelCalls != 2 || s.Recorded.InputTokens != 190 || s.Recorded.Unpriced != 2 {
		t.Fatalf("summary %+v", s)
	}
	spend, err := store.SessionSpend(ctx, ev.Record.ID)
	if err != nil {
		t.Fatal(err)
	}
	charged := int64(0)
	for _, sp := range spend {
		if sp.Kind == session.SpendCharge {
			charged += sp.CostMicros
			if sp.Purpose != "eval_reply" || sp.Channel != "C0000001" || sp.Model != "claude-fake-1" {
				t.Fatalf("charge %+v", sp)
			}
		}
	}
	if charged != wantCost {
		t.Fatalf("charged %d, the record says %d", charged, wantCost)
	}
	usage, err := store.Usage(ctx, time.Now().AddDate(0, 0, -1), time.Now().AddDate(0, 0, 1), "C0000001")
	if err != nil || len(usage) != 1 || usage[0].EvalCalls != 3 || usage[0].EvalCostMicros != wantCost {
		t.Fatalf("usage %+v (%v)", usage, err)
	}

	if pending, err := store.Pending(ctx, "someone", time.Hour); err != nil || len(pending) != 0 {
		t.Fatalf("pending sessions after the what-if: %v (%v)", pending, err)
	}
	recent, err := store.Recent(ctx, time.Now().Add(-time.Hour), 10)
	if err != nil || len(recent) != 1 || recent[0].ID != sess.ID {
		t.Fatalf("recent threads: %+v (%v)", recent, err)
	}
	v := audit.NewVerifier(store)
	rep, err := v.Verify(ctx, audit.VerifyOptions{Session: ev.Record.ID})
	if err != nil || !rep.OK() || rep.Events != int64(len(rec)) {
		t.Fatalf("verify the eval record: %+v (%v)", rep, err)
	}
	// The original's user message the record links, edited behind the triggers: the original
	// and the eval record's link both fail.
	su, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	if err := pgx.BeginFunc(ctx, su, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE events SET payload = jsonb_set(payload, '{text}', '"edited"') WHERE session_id = $1 AND seq = 1`, sess.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rep, err = v.Verify(ctx, audit.VerifyOptions{Session: ev.Record.ID})
	if err != nil || rep.OK() || rep.Findings[0].Seq != 1 || !strings.Contains(rep.Findings[0].Reason, "eval record of session "+sess.ID.String()+" at seq 1") {
		t.Fatalf("verify the eval record of a tampered original: %+v (%v)", rep, err)
	}
}

// A what-if needs a user message to run from, and a tool mode it knows.
func TestWhatIfRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	store, sess := record(t, 1)
	evs := events(t, store, sess.ID)
	fake := fakeprovider.NewAnthropic(t, "sk-test")
	cfg := whatIfConfig(t, store, fake, "anthropic:claude-new", nil)
	ctx := context.Background()
	if _, err := replay.WhatIf(ctx, store, sess, evs, 2, cfg); err == nil || !strings.Contains(err.Error(), "--from 2 is a turn_started: name a user_message") {
		t.Fatalf("from a turn_started: %v", err)
	}
	if _, err := replay.WhatIf(ctx, store, sess, evs, 99, cfg); err == nil || !strings.Contains(err.Error(), "--from 99") {
		t.Fatalf("from past the end: %v", err)
	}
	cfg.Tools = "docker"
	if _, err := replay.WhatIf(ctx, store, sess, evs, 1, cfg); err == nil || !strings.Contains(err.Error(), `tools "docker": want sandbox or recorded`) {
		t.Fatalf("tools docker: %v", err)
	}
	if len(fake.Calls()) != 0 || len(events(t, store, sess.ID)) != len(evs) {
		t.Fatalf("a refused what-if called the model %d times or appended", len(fake.Calls()))
	}
}

// BenchmarkReplay5000 is BenchmarkReplay's replay over a session of about 5,000 events (715
// turns of 7 events): ns/1k-events. Each turn rebuilds its history from the log, so the figure
// per 1,000 events grows with the session's length.
func BenchmarkReplay5000(b *testing.B) {
	store, sess := record(b, 715)
	ctx := context.Background()
	n := len(events(b, store, sess.ID))
	for b.Loop() {
		evs, err := store.Events(ctx, sess.ID, session.Range{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := replay.Session(ctx, sess, evs, replay.Config{})
		if err != nil || !res.Identical() {
			b.Fatalf("replay: %v %s", err, res)
		}
	}
	b.ReportMetric(float64(n), "events")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*1000/float64(n), "ns/1k-events")
}

// BenchmarkWhatIf runs the what-if of the last turn of a 50-turn session (the fake Anthropic
// API through the official SDK: a tool call served from the recording, then the reply) and sets
// the eval record's accounting beside what the provider billed: its tokens, and their cost at
// the price (3/15 per million), against the record's tokens and cost and the budget's charges.
func BenchmarkWhatIf(b *testing.B) {
	store, sess := record(b, 50)
	ctx := context.Background()
	evs := events(b, store, sess.ID)
	from := int64(0)
	for _, e := range evs {
		if e.Type == session.TypeUserMessage {
			from = e.Seq
		}
	}
	fake := fakeprovider.NewAnthropic(b, "sk-test")
	cfg := whatIfConfig(b, store, fake, "anthropic:claude-new", nil)
	var billedIn, billedOut, recIn, recOut, recCost, charged int64
	for b.Loop() {
		in1, in2 := int64(20_000), int64(21_000)
		fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_a", Name: "lookup", Input: `{"n":99}`}}, InputTokens: in1, OutputTokens: 37},
			fakeprovider.Reply{Text: "done", InputTokens: in2, OutputTokens: 211})
		billedIn, billedOut = billedIn+in1+in2, billedOut+37+211
		ev, err := replay.WhatIf(ctx, store, sess, evs, from, cfg)
		if err != nil || ev.Summary.Status != "ok" {
			b.Fatalf("what-if: %v %+v", err, ev.Summary)
		}
		recIn += ev.Summary.Replayed.InputTokens
		recOut += ev.Summary.Replayed.OutputTokens
		recCost += ev.Summary.Replayed.CostMicros
		spend, err := store.SessionSpend(ctx, ev.Record.ID)
		if err != nil {
			b.Fatal(err)
		}
		for _, sp := range spend {
			if sp.Kind == session.SpendCharge {
				charged += sp.CostMicros
			}
		}
	}
	billedCost := (3*billedIn + 15*billedOut) // micros at 3 and 15 per million tokens
	b.ReportMetric(float64(billedIn+billedOut)/float64(b.N), "billed-tokens/op")
	b.ReportMetric(float64(recIn+recOut)/float64(b.N), "recorded-tokens/op")
	b.ReportMetric(float64(billedCost)/float64(b.N), "billed-micros/op")
	b.ReportMetric(float64(recCost)/float64(b.N), "recorded-micros/op")
	b.ReportMetric(float64(charged)/float64(b.N), "charged-micros/op")
	if recIn != billedIn || recOut != billedOut || recCost != billedCost || charged != billedCost {
		b.Fatalf("accounting: billed %d/%d tokens, %d micros; recorded %d/%d tokens, %d micros; charged %d micros",
			billedIn, billedOut, billedCost, recIn, recOut, recCost, charged)
	}
}

// The what-if's model calls count against the channel's budget as a turn's do: over it, the
// call is refused before it reaches the model, recorded as a refusal marked as an eval, and
// the eval record ends with the budget's reply.
func TestWhatIfIsRefusedOverTheChannelsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, sess := record(t, 1)
	evs := events(t, store, sess.ID)
	fake := fakeprovider.NewAnthropic(t, "sk-test")
	fake.Push(fakeprovider.Reply{Text: "never sent"})
	cfg := whatIfConfig(t, store, fake, "anthropic:claude-new", nil)
	prices, err := budget.ParsePrices("claude-new=3/15")
	if err != nil {
		t.Fatal(err)
	}
	b, err := budget.New(budget.Config{Store: store, Prices: prices, Limits: budget.Limits{Channel: 10_000, HasChannel: true}}) // 0.01 a day
	if err != nil {
		t.Fatal(err)
	}
	cfg.Meter = func(eval session.ID, turn int64) brain.Meter { return b.For("C0000001", "", eval, turn) }
	ev, err := replay.WhatIf(ctx, store, sess, evs, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.Calls()) != 0 || ev.Summary.Status != "error" || ev.Summary.Replayed.ModelCalls != 0 || ev.Summary.Replayed.CostMicros != 0 ||
		!strings.Contains(ev.Summary.Replayed.Reply, "budget") {
		t.Fatalf("%d calls reached the model; summary %+v", len(fake.Calls()), ev.Summary)
	}
	spend, err := store.SessionSpend(ctx, ev.Record.ID)
	if err != nil || len(spend) != 1 || spend[0].Kind != session.SpendRefused || spend[0].Reason != "channel" || spend[0].Purpose != "eval_reply" {
		t.Fatalf("spend %+v (%v)", spend, err)
	}
}

// In the sandbox mode without a sandbox (none configured), a call of the sandbox's tools that
// the recording cannot serve is refused with a tool error naming why, a call of another tool
// with another input is refused as not the sandbox's, and the record says there was none.
func TestWhatIfWithoutASandboxRefusesSayingWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, sess := record(t, 1)
	evs := events(t, store, sess.ID)
	fake := fakeprovider.NewAnthropic(t, "sk-test")
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_a", Name: "run_command", Input: `{"command":"ls"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_b", Name: "lookup", Input: `{"n":7}`}}},
		fakeprovider.Reply{Text: "Could not look."},
	)
	cfg := whatIfConfig(t, store, fake, "anthropic:claude-new", nil)
	cfg.Tools, cfg.NoSandbox = replay.ToolsSandbox, "LOGBOOK_SANDBOX=none"
	ev, err := replay.WhatIf(ctx, store, sess, evs, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d calls to the provider", len(calls))
	}
	names := map[string]bool{}
	for _, name := range calls[0].Tools {
		names[name] = true
	}
	if !names["run_command"] || !names["read_file"] || !names["write_file"] || !names["lookup"] {
		t.Fatalf("tools offered: %v", names)
	}
	result := func(c fakeprovider.Call) fakeprovider.Block {
		last := c.Messages[len(c.Messages)-1]
		return last.Blocks[len(last.Blocks)-1]
	}
	if r := result(calls[1]); !r.IsError || !strings.Contains(r.Text, "has no sandbox to run the call in (LOGBOOK_SANDBOX=none)") {
		t.Fatalf("run_command without a sandbox: %+v", r)
	}
	if r := result(calls[2]); !r.IsError || !strings.Contains(r.Text, "it runs only the sandbox's tools") {
		t.Fatalf("lookup with another input: %+v", r)
	}
	rec := events(t, store, ev.Record.ID)
	var link session.ReplayStarted
	if err := rec[0].Decode(&link); err != nil || link.Tools != "sandbox" || link.Sandbox != "none: LOGBOOK_SANDBOX=none (other tool calls are refused)" {
		t.Fatalf("link %+v (%v)", link, err)
	}
	for _, e := range rec {
		if e.Type == session.TypeSandboxProvisioned {
			t.Fatalf("a sandbox was recorded: %+v", e)
		}
	}
	if s := ev.Summary; s.Status != "ok" || s.Different != 1 || s.New != 1 || s.Same != 0 {
		t.Fatalf("summary %+v", s)
	}
	if len(events(t, store, sess.ID)) != len(evs) {
		t.Fatal("the original got events")
	}
}
