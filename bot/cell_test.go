package bot_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

func TestThreadConversationOfSeveralTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what broke the build?"})
	first := h.replies(general, top.TS, 1)
	if first[0].Text != "seen: what broke the build?" || first[0].ThreadTS != top.TS {
		t.Fatalf("first reply %+v", first[0])
	}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	// A follow-up without a mention continues the session; so does another person's.
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "and how do we fix it?"})
	h.replies(general, top.TS, 2)
	h.turns(s.ID, 2)
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "I can &amp; will help"})
	third := h.replies(general, top.TS, 3)
	h.turns(s.ID, 3)
	if want := "seen: what broke the build? | and how do we fix it? | I can &amp; will help"; third[2].Text != want {
		t.Fatalf("third reply %q, want %q", third[2].Text, want)
	}
	// A message in the channel that does not mention the bot and is not in a session's
	// thread is not stored.
	lunch := h.post(slackemu.Post{Channel: general, User: ada, Text: "lunch?"})
	h.acked(lunch) // handled: stored by now if it were stored at all
	if _, err := h.store.SessionByThread(context.Background(), session.ThreadKey{Team: h.emu.TeamID(), Channel: general, ThreadTS: lunch.TS}); err == nil {
		t.Fatal("a message without a mention outside any session's thread started a session")
	}

	got := typesOf(conversation(h.events(s.ID)))
	turn := "turn_started assistant_message delivered turn_completed"
	want := "user_message " + turn + " user_message " + turn + " user_message " + turn
	if got != want {
		t.Fatalf("log:\n%s\nwant:\n%s", got, want)
	}
	msgs := h.events(s.ID, session.TypeUserMessage)
	var um session.UserMessage
	if err := msgs[2].Decode(&um); err != nil || um.Text != "I can & will help" || um.Raw != "I can &amp; will help" || um.UserName == "" {
		t.Fatalf("third user_message %+v (%v)", um, err)
	}
	v, err := h.store.Verify(context.Background(), s.ID)
	if err != nil || !v.OK {
		t.Fatalf("verify: %+v %v", v, err)
	}
	// Nothing was redelivered or recovered, so the thread was never read back from Slack
	// (conversations.replies is 1 call a minute for many apps).
	if n := h.emu.Calls("conversations.replies"); n != 0 {
		t.Fatalf("%d conversations.replies calls in a plain conversation", n)
	}
}

// A message that arrives while a turn runs gets a queued marker and is answered by the next
// turn.
func TestMessageDuringTurnIsQueued(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{block: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> first"})
	h.waitFor("the first turn to run", func() bool { return agent.Runs() == 1 })
	s := h.session(general, top.TS)
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "second, while you think"})
	h.waitFor("a queued marker", func() bool { return len(h.events(s.ID, session.TypeQueued)) == 1 })
	release := agent.block
	agent.mu.Lock()
	agent.block = nil // the next turn answers at once
	agent.mu.Unlock()
	close(release)
	replies := h.replies(general, top.TS, 2)
	if replies[0].Text != "seen: first" || replies[1].Text != "seen: first | second, while you think" {
		t.Fatalf("replies %q / %q", replies[0].Text, replies[1].Text)
	}
	var q session.Queued
	if err := h.events(s.ID, session.TypeQueued)[0].Decode(&q); err != nil {
		t.Fatal(err)
	}
	if msgs := h.events(s.ID, session.TypeUserMessage); q.MessageSeq != msgs[1].Seq {
		t.Fatalf("queued marker names seq %d, the second message is %d", q.MessageSeq, msgs[1].Seq)
	}
}

// blockingProvider is a model whose first reply call waits for release; every reply names the
// text of the last message it was sent, and lasts records that text per call.
type blockingProvider struct {
	mu      sync.Mutex
	calls   int
	started chan struct{} // closed when the first reply call begins
	release chan struct{} // closed by the test to let it answer
	lasts   []string
}

func (p *blockingProvider) Name() string { return "anthropic" }

func (p *blockingProvider) Model() string { return "test" }

func (p *blockingProvider) Complete(ctx context.Context, req brain.Request) (brain.Response, error) {
	if req.Purpose != brain.PurposeReply {
		return brain.Response{Text: "title", StopReason: "end_turn"}, nil
	}
	last := ""
	if n := len(req.Messages); n > 0 {
		for _, b := range req.Messages[n-1].Blocks {
			last += b.Text
		}
	}
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.lasts = append(p.lasts, last)
	p.mu.Unlock()
	if n == 1 {
		close(p.started)
		select {
		case <-p.release:
		case <-ctx.Done():
			return brain.Response{}, ctx.Err()
		}
	}
	return brain.Response{Text: "answer to: " + last, StopReason: "end_turn"}, nil
}

// D1: a message posted while the brain is answering the first one gets a queued marker and is
// answered by the next turn with its own model call, whose request ends with that message.
func TestQueuedMessageIsAnsweredByTheBrain(t *testing.T) {
	t.Parallel()
	p := &blockingProvider{started: make(chan struct{}), release: make(chan struct{})}
	b, err := brain.New(brain.Config{Provider: p, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, b, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> first question"})
	<-p.started
	s := h.session(general, top.TS)
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "second question"})
	h.waitFor("queued marker", func() bool { return len(h.events(s.ID, session.TypeQueued)) == 1 })
	close(p.release)
	h.turns(s.ID, 2)
	replies := h.replies(general, top.TS, 2)

	p.mu.Lock()
	lasts := append([]string(nil), p.lasts...)
	p.mu.Unlock()
	if len(lasts) != 2 || !strings.Contains(lasts[0], "first question") || strings.Contains(lasts[0], "second question") ||
		!strings.Contains(lasts[1], "second question") {
		t.Fatalf("model calls with last user text %q; replies %q / %q", lasts, replies[0].Text, replies[1].Text)
	}
	if !strings.Contains(replies[0].Text, "first question") || !strings.Contains(replies[1].Text, "second question") {
		t.Errorf("replies %q / %q, want the first then the second question answered", replies[0].Text, replies[1].Text)
	}
	// Each turn delivered its own reply: two replies from the model, each delivered once.
	var turnsOf []int64
	for _, e := range h.events(s.ID, session.TypeAssistantMessage) {
		var m session.AssistantMessage
		if err := e.Decode(&m); err != nil {
			t.Fatal(err)
		}
		turnsOf = append(turnsOf, m.Turn)
	}
	var starts []int64
	for _, e := range h.events(s.ID, session.TypeTurnStarted) {
		starts = append(starts, e.Seq)
	}
	if len(starts) != 2 || len(turnsOf) != 2 || turnsOf[0] != starts[0] || turnsOf[1] != starts[1] {
		t.Errorf("assistant messages of turns %v; turns started at %v", turnsOf, starts)
	}
}

// Idle eviction, then a reply that uses context from before it.
func TestIdleEvictionAndRehydration(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{idle: 300 * time.Millisecond})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> remember 42"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.waitFor("cell_evicted", func() bool { return len(h.events(s.ID, session.TypeCellEvicted)) == 1 })
	h.waitFor("no cell left", func() bool { return h.reps[0].runner.Active() == 0 })

	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "what did I say?"})
	replies := h.replies(general, top.TS, 2)
	if !strings.Contains(replies[1].Text, "remember 42") {
		t.Fatalf("reply after rehydration lacks earlier context: %q", replies[1].Text)
	}
	woken := h.events(s.ID, session.TypeCellWoken)
	if len(woken) != 2 {
		t.Fatalf("%d cell_woken markers, want 2", len(woken))
	}
}

// No transaction spans a model call: while the agent works, the app holds no
// connection idle in a transaction, and the pool sets idle_in_transaction_session_timeout.
func TestNoTransactionSpansTheModelCall(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{block: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> think hard"})
	h.waitFor("the agent to run", func() bool { return agent.Runs() == 1 })
	su, err := pgxpool.New(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	var idle int
	if err := su.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&idle); err != nil {
		t.Fatal(err)
	}
	if idle != 0 {
		t.Fatalf("%d connections idle in a transaction during the model call", idle)
	}
	// A pool opened as the harness opens the store's.
	app, err := session.Connect(context.Background(), h.dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var timeout string
	if err := app.QueryRow(context.Background(), `SHOW idle_in_transaction_session_timeout`).Scan(&timeout); err != nil || timeout != "5s" {
		t.Fatalf("idle_in_transaction_session_timeout = %q (%v), want 5s", timeout, err)
	}
	close(agent.block)
	h.replies(general, top.TS, 1)
}

// A safety net: a thread gets at most MaxReplies replies per window; the next turn waits.
func TestReplyCapPerThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{maxReplies: 2, replyWindow: time.Hour})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	h.post(slackemu.Post{Channel: general, User: "U0000002", ThreadTS: top.TS, Text: "two"})
	h.replies(general, top.TS, 2)
	h.turns(s.ID, 2)
	third := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "three"})
	if _, err := h.emu.WaitForAck(h.waitCtx(), third.EventIDs[0]); err != nil {
		t.Fatal(err)
	}
	// The cell has had its chance: it read the third message and decided to wait for the
	// reply budget.
	h.waitMetric(1, "logbook_reply_cap_waits_total")
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d replies with a cap of 2 per hour", n)
	}
	if n := len(h.events(s.ID, session.TypeTurnStarted)); n != 2 {
		t.Fatalf("%d turns started with a cap of 2 per hour", n)
	}
}

// REVIEW-8: when lease renewal fails with anything but "fenced" (a statement timeout, a
// dropped connection, a pool that is exhausted), Cell.renew just retries and the cell keeps
// running past its lease's expiry. Another replica takes the session and runs the same turn
// concurrently. Simulated here by making logbook_renew_lease fail.
func TestGatewayExpiredLeaseStopsTheCell(t *testing.T) {
	t.Parallel()
	agent := &activeAgent{echoAgent: echoAgent{block: make(chan struct{})}}
	h := newHarness(t, agent, harnessOptions{replicas: 2, leaseTTL: time.Second})
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `CREATE OR REPLACE FUNCTION logbook_renew_lease(p_session uuid, p_owner text, p_epoch bigint, p_ttl interval)
RETURNS TABLE (expires_at timestamptz) LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014'; END $$`); err != nil {
		t.Fatal(err)
	}
	h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> long job"})
	h.waitFor("the agent to start", func() bool { return agent.Runs() == 1 })
	// The turn can run again only once the first cell's lease is gone (released, or expired
	// while the cell kept running: the defect): wait for two such hand-overs.
	h.waitFor("two more runs of the turn, each after a lease was lost", func() bool { return agent.Runs() >= 3 })
	if n := agent.maxActive(); n != 1 {
		t.Fatalf("the turn's agent ran %d times at once (%d runs): the first cell kept running after its lease expired", n, agent.Runs())
	}
}

// activeAgent counts how many runs are in progress at once.
type activeAgent struct {
	echoAgent
	amu          sync.Mutex
	active, peak int
}

func (a *activeAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.amu.Lock()
	a.active++
	a.peak = max(a.peak, a.active)
	a.amu.Unlock()
	defer func() { a.amu.Lock(); a.active--; a.amu.Unlock() }()
	return a.echoAgent.Run(ctx, t)
}

func (a *activeAgent) maxActive() int {
	a.amu.Lock()
	defer a.amu.Unlock()
	return a.peak
}
