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
	var posts []slackemu.Posted
	for i := range 50 {
		p := h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> question %d", botUser, i)})
		posts, threads = append(posts, p), append(threads, p.TS)
	}
	for _, p := range posts {
		h.replies(general, p.TS, 1)
	}
	// Every envelope is handled and every thread answered: a second turn of any thread, on
	// either replica, would have started by now.
	h.everyEnvelopeAcked()
	for _, ts := range threads {
		s := h.session(general, ts)
		h.turns(s.ID, 1)
		h.answered(s.ID)
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

// The LISTEN connection dies; a message appended and notified by another replica during
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

// logbook_lease_acquire_total counts every try to take a session's lease, by result: each
// cell started takes one (taken) — a session whose cell went idle takes it again for its next
// message — and nothing else does.
func TestLeaseAcquireMetric(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{poll: time.Hour, idle: 200 * time.Millisecond})
	leases := func() (taken, held, failed float64) {
		return h.metric("logbook_lease_acquire_total", "result", "taken"), h.metric("logbook_lease_acquire_total", "result", "held"),
			h.metric("logbook_lease_acquire_total", "result", "error")
	}
	var tops []slackemu.Posted
	for i := range 3 {
		top := h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> question %d", botUser, i)})
		h.replies(general, top.TS, 1)
		tops = append(tops, top)
	}
	h.everyEnvelopeAcked()
	h.waitFor("the cells to exit", func() bool { return h.reps[0].runner.Active() == 0 })
	if taken, held, failed := leases(); taken != 3 || held != 0 || failed != 0 {
		t.Fatalf("three sessions, one cell each: taken %v held %v error %v, want 3, 0, 0", taken, held, failed)
	}
	// The first session's cell went idle: its next message starts a cell, which takes the
	// lease again.
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: tops[0].TS, Text: "and one more"})
	h.replies(general, tops[0].TS, 2)
	h.everyEnvelopeAcked()
	h.waitFor("the cell to exit", func() bool { return h.reps[0].runner.Active() == 0 })
	if taken, held, failed := leases(); taken != 4 || held != 0 || failed != 0 {
		t.Fatalf("taken %v held %v error %v, want 4, 0, 0", taken, held, failed)
	}
}
