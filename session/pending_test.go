package session_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

var bot1 = session.Actor{Kind: session.ActorBot, ID: "B0000001"}

func turnCompleted(through int64) session.NewEvent {
	return session.NewEvent{Type: session.TypeTurnCompleted, Actor: bot1,
		Payload: session.TurnCompleted{Turn: 1, Status: "ok", Through: through}}
}

func mustPending(t *testing.T, st *session.Store, owner string, window time.Duration, want ...session.ID) {
	t.Helper()
	got, err := st.Pending(context.Background(), owner, window)
	if err != nil {
		t.Fatal(err)
	}
	key := func(a, b session.ID) int { return slices.Compare(a[:], b[:]) }
	slices.SortFunc(got, key)
	want = slices.Clone(want)
	slices.SortFunc(want, key)
	if !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}

func mustAppend(t *testing.T, st *session.Store, id session.ID, evs ...session.NewEvent) []session.Event {
	t.Helper()
	out, err := st.Append(context.Background(), id, evs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A session is pending while its last user_message is above the Through of its latest
// turn_completed and no other owner holds its lease.
func TestPending(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	const week = 7 * 24 * time.Hour
	a := openSession(t, st, "1700000000.000100")
	b := openSession(t, st, "1700000000.000200")
	openSession(t, st, "1700000000.000300") // no events: never pending
	mustPending(t, st, "me", week)

	mustAppend(t, st, a.ID, msg("one"))                   // seq 1
	mustAppend(t, st, b.ID, msg("one"), turnCompleted(1)) // answered in the same batch
	mustPending(t, st, "me", week, a.ID)

	// Events of other types change nothing.
	mustAppend(t, st, a.ID, session.NewEvent{Type: session.TypeTurnStarted, Actor: bot1, Payload: session.TurnStarted{Through: 1}})
	mustPending(t, st, "me", week, a.ID)

	// A turn that answered only up to seq 1 leaves a later message pending.
	mustAppend(t, st, a.ID, msg("two"), turnCompleted(1)) // seqs 3, 4
	mustPending(t, st, "me", week, a.ID)
	mustAppend(t, st, a.ID, turnCompleted(3))
	mustPending(t, st, "me", week)

	// The latest turn_completed counts, not the largest Through.
	mustAppend(t, st, b.ID, msg("two"), turnCompleted(0)) // seqs 3, 4
	mustPending(t, st, "me", week, b.ID)

	// Another owner's unexpired lease hides the session; our own does not.
	l, err := st.AcquireLease(ctx, b.ID, "other", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustPending(t, st, "me", week)
	mustPending(t, st, "other", week, b.ID)
	if err := st.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	mustPending(t, st, "me", week, b.ID)

	// Only messages newer than the window count.
	mustPending(t, st, "me", time.Microsecond)
}

// The pending state is taken when events are appended: a retention purge, which removes
// payloads, does not make answered sessions pending again (the poll used to read Through from
// the payload, so a purged turn_completed read as 0).
func TestPendingSurvivesARetentionPurge(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	mustAppend(t, st, s.ID, msg("one"), turnCompleted(1))
	su := superuser(t, dbURL)
	tx, err := su.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, q := range []string{`SET LOCAL ROLE logbook_retention`, `SELECT set_config('logbook.purge', 'on', true)`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if tag, err := tx.Exec(ctx, `UPDATE events SET payload = NULL WHERE session_id = $1`, s.ID); err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("purge: %v, %v", tag, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mustPending(t, st, "me", time.Hour)
}

// Listen is in place before it calls listening: a signal sent from inside listening
// is delivered. Each signal carries its session and sender; garbage payloads are skipped.
func TestListenIsInPlaceBeforeTheCatchUp(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	s := openSession(t, st, "1700000000.000100")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type signal struct {
		id     session.ID
		sender string
	}
	got := make(chan signal, 4)
	done := make(chan error, 1)
	su := superuser(t, dbURL)
	go func() {
		done <- session.Listen(ctx, dbURL, func() {
			if _, err := su.Exec(ctx, `SELECT pg_notify('logbook_session', 'not-a-session x')`); err != nil {
				t.Error(err)
			}
			if err := st.Notify(ctx, s.ID, "replica-a"); err != nil {
				t.Error(err)
			}
		}, func(id session.ID, sender string) { got <- signal{id, sender} })
	}()
	select {
	case sig := <-got:
		if sig != (signal{s.ID, "replica-a"}) {
			t.Fatalf("signal %+v, want session %s from replica-a", sig, s.ID)
		}
	case err := <-done:
		t.Fatalf("Listen returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no signal")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Listen returned nil")
	}
}

// A turn suspended while it waits for a person is no pending work until something can move
// it on: a decision, a stop request, a user message after the suspension, or its deadline
// (measured on the database's clock). A malformed deadline reads as "not waiting".
func TestPendingSkipsSuspendedTurns(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	const week = 7 * 24 * time.Hour
	suspended := func(until time.Time, seen int64) session.NewEvent {
		return session.NewEvent{Type: session.TypeTurnSuspended, Actor: bot1,
			Payload: session.TurnSuspended{Turn: 2, CallID: "c1", Until: until, Seen: seen}}
	}
	decided := session.NewEvent{Type: session.TypeApprovalDecided, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"},
		Payload: session.ApprovalDecided{CallID: "c1", Decision: session.DecisionApproved, Via: "button"}}
	later := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		wake session.NewEvent
	}{
		{"decision", decided},
		{"stop", session.NewEvent{Type: session.TypeStopRequested, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"},
			Payload: session.StopRequested{Source: "button"}}},
		{"message", msg("any news?")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSession(t, st, "1700000001.000"+tc.name)
			mustAppend(t, st, s.ID, msg("go"), session.NewEvent{Type: session.TypeTurnStarted, Actor: bot1, Payload: session.TurnStarted{Through: 1}})
			mustPending(t, st, "me", week, s.ID)
			mustAppend(t, st, s.ID, suspended(later, 1))
			mustPending(t, st, "me", week)
			woke := mustAppend(t, st, s.ID, tc.wake)[0]
			mustPending(t, st, "me", week, s.ID)
			if tc.name == "message" {
				// Suspended again, having read the message: asleep again.
				mustAppend(t, st, s.ID, suspended(later, woke.Seq))
				mustPending(t, st, "me", week)
			}
			mustAppend(t, st, s.ID, turnCompleted(10))
			mustPending(t, st, "me", week)
		})
	}
	// What landed before the suspension, unseen by the suspending cell, keeps the session
	// pending: a decision, a stop, a message after the last one it read.
	for _, tc := range []struct {
		name string
		ev   session.NewEvent
	}{
		{"decision before", decided},
		{"stop before", session.NewEvent{Type: session.TypeStopRequested, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"},
			Payload: session.StopRequested{Source: "reaction"}}},
		{"message before", msg("stop")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSession(t, st, "1700000003.000"+tc.name)
			mustAppend(t, st, s.ID, msg("go"), session.NewEvent{Type: session.TypeTurnStarted, Actor: bot1, Payload: session.TurnStarted{Through: 1}})
			mustAppend(t, st, s.ID, tc.ev, suspended(later, 1))
			mustPending(t, st, "me", week, s.ID)
			mustAppend(t, st, s.ID, turnCompleted(10))
		})
	}
	t.Run("deadline", func(t *testing.T) {
		s := openSession(t, st, "1700000002.000100")
		mustAppend(t, st, s.ID, msg("go"), suspended(time.Now().Add(-time.Second), 1))
		mustPending(t, st, "me", week, s.ID)
		mustAppend(t, st, s.ID, turnCompleted(10))
	})
	t.Run("malformed deadline", func(t *testing.T) {
		s := openSession(t, st, "1700000002.000200")
		mustAppend(t, st, s.ID, msg("go"), session.NewEvent{Type: session.TypeTurnSuspended, Actor: bot1,
			Payload: map[string]any{"turn": 2, "until": "next tuesday"}})
		mustPending(t, st, "me", week, s.ID)
	})
}

// PendingAmong answers for the sessions it is given alone: of a replica's own sessions, those
// with work (as Pending counts it, whoever holds the lease), none of the others.
func TestPendingAmongLooksOnlyAtTheSessionsNamed(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	const week = 7 * 24 * time.Hour
	a := openSession(t, st, "1700000000.000100")
	b := openSession(t, st, "1700000000.000200")
	c := openSession(t, st, "1700000000.000300")
	mustAppend(t, st, a.ID, msg("one"))                   // pending
	mustAppend(t, st, b.ID, msg("one"), turnCompleted(1)) // answered
	mustAppend(t, st, c.ID, msg("one"))                   // pending, not named
	if _, err := st.AcquireLease(ctx, a.ID, "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := st.PendingAmong(ctx, week, []session.ID{a.ID, b.ID})
	if err != nil || len(got) != 1 || got[0] != a.ID {
		t.Fatalf("PendingAmong(a, b) = %v, %v; want [a]", got, err)
	}
	if got, err := st.PendingAmong(ctx, time.Microsecond, []session.ID{a.ID}); err != nil || len(got) != 0 {
		t.Fatalf("PendingAmong outside the window = %v, %v; want none", got, err)
	}
	if got, err := st.PendingAmong(ctx, week, nil); err != nil || len(got) != 0 {
		t.Fatalf("PendingAmong(none) = %v, %v", got, err)
	}
}
