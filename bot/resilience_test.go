package bot_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// Two replicas on one database, 50 threads: every thread gets exactly one turn and one reply,
// and no session's turn ever ran on both replicas.
func TestTwoReplicasFiftyThreads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{replicas: 2})
	var threads []string
	for i := range 50 {
		threads = append(threads, h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> question %d", botUser, i)}).TS)
	}
	for _, ts := range threads {
		h.replies(general, ts, 1)
	}
	for _, ts := range threads {
		s := h.session(general, ts)
		h.turns(s.ID, 1)
		evs := h.events(s.ID)
		started, woken, owners := 0, 0, map[int64]bool{}
		for _, e := range evs {
			switch e.Type {
			case session.TypeTurnStarted:
				started++
			case session.TypeCellWoken:
				woken++
				var w session.CellWoken
				if err := e.Decode(&w); err != nil {
					t.Fatal(err)
				}
				owners[w.Epoch] = true
			}
		}
		if started != 1 || len(h.emu.BotReplies(general, ts)) != 1 {
			t.Fatalf("thread %s: %d turns, %d replies; want 1 and 1\n%s", ts, started, len(h.emu.BotReplies(general, ts)), typesOf(evs))
		}
		if len(owners) != woken {
			t.Fatalf("thread %s: two cells woke with the same lease epoch", ts)
		}
	}
}

// A database that goes away: appends fail, envelopes are not acked, Slack redelivers, and once
// the database is back the message is stored once and answered once.
func TestDatabaseGoesAwayNothingLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		// Retries fire only when the test says so (FireRetries), like Slack's minutes.
		RetrySchedule: []time.Duration{time.Hour, time.Hour, time.Hour},
	}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> before the outage"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)

	su, err := pgxpool.New(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	exec := func(sql string) {
		t.Helper()
		if _, err := su.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	// The outage: the app's connections are cut and it may not write.
	exec(`REVOKE INSERT ON events FROM logbook_app`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	p := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "during the outage"})
	h.waitFor("the delivery to fail", func() bool { return h.emu.DeliveryState(p.EventIDs[0]) == "awaiting_retry" })
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user messages during the outage", n)
	}
	exec(`GRANT INSERT ON events TO logbook_app`)
	h.emu.FireRetries()
	replies := h.replies(general, top.TS, 2)
	if replies[1].Text != "seen: before the outage | during the outage" {
		t.Fatalf("reply after the outage: %q", replies[1].Text)
	}
	h.turns(s.ID, 2)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("%d user messages, want 2", n)
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d replies, want 2", n)
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

// C03: after refresh_requested (and after a socket silently dropped), the bot reconnects and
// later events still arrive.
func TestReconnectsAfterDisconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	opened := h.emu.ConnectionsOpened()
	if _, err := h.emu.DisconnectAll("refresh_requested"); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a new connection", func() bool { return h.emu.ConnectionsOpened() > opened })
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "two"})
	h.replies(general, top.TS, 2)

	opened = h.emu.ConnectionsOpened()
	if err := h.emu.DropConnection(0); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a new connection after the drop", func() bool { return h.emu.ConnectionsOpened() > opened })
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "three"})
	h.replies(general, top.TS, 3)
}

// C21: the LISTEN connection dies; a message appended and notified by another replica during
// the gap is still answered, because the listener re-LISTENs and then catches up from the log.
func TestListenerReconnectsAndCatchesUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{poll: time.Hour, idle: 200 * time.Millisecond})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.waitFor("the cell to exit", func() bool { return h.reps[0].runner.Active() == 0 })

	su, err := pgxpool.New(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	var killed int
	h.waitFor("the listener connection", func() bool {
		err := su.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'logbook-listen'`).Scan(&killed)
		return err == nil && killed == 1
	})
	// Another replica's gateway stores a message and notifies while this one is not listening.
	if _, err := h.store.Append(context.Background(), s.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: ada}, IdempotencyKey: "other-replica/1",
		Payload: session.UserMessage{Team: h.emu.TeamID(), Channel: general, ThreadTS: top.TS, TS: "1", User: ada, Text: "two"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := su.Exec(context.Background(), `SELECT pg_notify('logbook_session', $1)`, s.ID.String()); err != nil {
		t.Fatal(err)
	}
	replies := h.replies(general, top.TS, 2)
	if replies[1].Text != "seen: one | two" {
		t.Fatalf("reply %q", replies[1].Text)
	}
}

// C20: no transaction spans a model call: while the agent works, the app holds no
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

// C05 safety net: a thread gets at most MaxReplies replies per window; the next turn waits.
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
	time.Sleep(time.Second) // a negative check: nothing may happen in this second
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d replies with a cap of 2 per hour", n)
	}
	if n := len(h.events(s.ID, session.TypeTurnStarted)); n != 2 {
		t.Fatalf("%d turns started with a cap of 2 per hour", n)
	}
}
