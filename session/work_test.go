package session_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session"
)

// A user_message append keeps session_work with an in-place (HOT) update: no new index
// entries, no row lock before the update (00011_work_hot.sql). Before, every one was a
// non-HOT upsert, and appends of different sessions queued on session_work's index pages.
func TestUserMessageUpdatesSessionWorkInPlace(t *testing.T) {
	st, dbURL := newStore(t)
	ctx := context.Background()
	sess := openSession(t, st, "1700000000.000100")
	if _, err := st.Append(ctx, sess.ID, msg("first: inserts the session's row")); err != nil {
		t.Fatal(err)
	}
	su := superuser(t, dbURL)
	const appends = 5
	err := pgx.BeginFunc(ctx, su, func(tx pgx.Tx) error {
		for range appends {
			if _, err := tx.Exec(ctx, `SELECT * FROM logbook_append($1, NULL, NULL, ARRAY[gen_random_uuid()], ARRAY['user_message'],
				ARRAY['user'], ARRAY['U0000001'], ARRAY['{"text":"again"}'::jsonb], ARRAY[NULL::text], ARRAY[false])`, sess.ID); err != nil {
				return err
			}
		}
		var updated, hot int64
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('session_work'::regclass),
			pg_stat_get_xact_tuples_hot_updated('session_work'::regclass)`).Scan(&updated, &hot); err != nil {
			return err
		}
		if updated != appends || hot != appends {
			t.Errorf("%d user_message appends: %d updates of session_work, %d of them in place; want %d and %d",
				appends, updated, hot, appends, appends)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lastSeq int64
	if err := su.QueryRow(ctx, `SELECT last_message_seq FROM session_work WHERE session_id = $1`, sess.ID).Scan(&lastSeq); err != nil {
		t.Fatal(err)
	}
	if lastSeq != 1+appends {
		t.Errorf("last_message_seq = %d, want %d", lastSeq, 1+appends)
	}
}

// The poll's index is keyed by the hour of the last message; the window still ends exactly
// at its start: a message 90 minutes old is inside a 100-minute window and outside an
// 80-minute one, whichever hours the three instants fall in.
func TestPendingWindowIsExactWithinTheHour(t *testing.T) {
	st, dbURL := newStore(t)
	ctx := context.Background()
	sess := openSession(t, st, "1700000000.000200")
	if _, err := st.Append(ctx, sess.ID, msg("an old question")); err != nil {
		t.Fatal(err)
	}
	su := superuser(t, dbURL)
	if _, err := su.Exec(ctx, `UPDATE session_work SET last_message_at = clock_timestamp() - interval '90 minutes',
		last_message_hour = date_trunc('hour', (clock_timestamp() - interval '90 minutes') AT TIME ZONE 'UTC')
		WHERE session_id = $1`, sess.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		window time.Duration
		want   bool
	}{{100 * time.Minute, true}, {80 * time.Minute, false}, {91 * time.Minute, true}, {89 * time.Minute, false}} {
		ids, err := st.Pending(ctx, "me", c.window)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(ids, sess.ID); got != c.want {
			t.Errorf("Pending(window %v) lists the session whose message is 90 minutes old: %v, want %v", c.window, got, c.want)
		}
		orphans, err := st.Orphaned(ctx, "me", c.window)
		if err != nil || len(orphans) != 0 {
			t.Errorf("Orphaned(window %v) = %v, %v; want none (no lease)", c.window, orphans, err)
		}
	}
}

// An append writes its event and session_work and nothing else (00060_append_keeps_work.sql):
// no trigger fires on an insert into events (each one's WHEN clause alone was compiled again
// for every insert, whatever the event's type), and the session's row is not locked (the
// foreign key's FOR KEY SHARE check wrote a row lock to the WAL and to the page of sessions
// that the appends of many sessions share).
func TestAppendLocksNoSessionAndFiresNoTrigger(t *testing.T) {
	st, dbURL := newStore(t)
	ctx := context.Background()
	sess := openSession(t, st, "1700000000.000300")
	su := superuser(t, dbURL)
	// xmax of the session's row: the last transaction that locked it. The first message's
	// insert into session_work locks it once (that table's foreign key).
	locker := func() string {
		t.Helper()
		var x string
		if err := su.QueryRow(ctx, `SELECT xmax::text FROM sessions WHERE id = $1`, sess.ID).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	if _, err := st.Append(ctx, sess.ID, msg("first")); err != nil {
		t.Fatal(err)
	}
	before := locker()
	for _, text := range []string{"second", "third"} {
		if _, err := st.Append(ctx, sess.ID, msg(text)); err != nil {
			t.Fatal(err)
		}
	}
	if after := locker(); after != before {
		t.Errorf("the session's row was locked again by transaction %s (after %s); an append must not lock it", after, before)
	}
	rows, err := su.Query(ctx, `SELECT tgname FROM pg_trigger
		WHERE tgrelid = 'events'::regclass AND tgtype & 4 <> 0 ORDER BY tgname`) // 4: TRIGGER_TYPE_INSERT
	if err != nil {
		t.Fatal(err)
	}
	triggers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(triggers) > 0 {
		t.Errorf("triggers on inserts into events: %v; want none (logbook_append does that work)", triggers)
	}
	var lastSeq int64
	if err := su.QueryRow(ctx, `SELECT last_message_seq FROM session_work WHERE session_id = $1`, sess.ID).Scan(&lastSeq); err != nil {
		t.Fatal(err)
	}
	if lastSeq != 3 {
		t.Errorf("last_message_seq = %d, want 3", lastSeq)
	}
}

// One event at a time through every branch of logbook_append: a session's first event, its
// first message (no session_work row yet), a duplicate key (retried with a stale expectation
// too: the stored event comes back), a stale expectation, a stale epoch, a turn marker, a
// followup_signal. The chain verifies and session_work ends where the events say. (It guards
// any faster way of appending one event, such as the single-statement one measured on
// 2026-12-02, docs/measurements.md: each must give what the loop gives.)
func TestOneEventAppendsThroughEveryBranch(t *testing.T) {
	st, dbURL := newStore(t)
	ctx := context.Background()
	sess := openSession(t, st, "1700000000.000400")
	one := func(opts session.AppendOptions, ev session.NewEvent) (session.Event, error) {
		t.Helper()
		out, err := st.AppendWith(ctx, sess.ID, opts, ev)
		if err != nil {
			return session.Event{}, err
		}
		return out[0], nil
	}
	want := func(e session.Event, err error, seq int64, dup bool) {
		t.Helper()
		if err != nil || e.Seq != seq || e.Duplicate != dup {
			t.Fatalf("append: seq %d duplicate %v, %v; want seq %d duplicate %v", e.Seq, e.Duplicate, err, seq, dup)
		}
	}
	started := session.NewEvent{Type: session.TypeTurnStarted, Actor: bot1, Payload: session.TurnStarted{Through: 0}}
	reply := session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot1, Payload: session.AssistantMessage{Text: "hi"}}
	keyed := msg("keyed")
	keyed.IdempotencyKey = "T0000001/C0000001/1700000000.000401"

	e, err := one(session.AppendOptions{}, started) // the session's first event
	want(e, err, 1, false)
	e, err = one(session.AppendOptions{CheckSeq: true, ExpectedSeq: 1}, msg("first message: no session_work row yet"))
	want(e, err, 2, false)
	e, err = one(session.AppendOptions{}, reply)
	want(e, err, 3, false)
	e, err = one(session.AppendOptions{}, keyed)
	want(e, err, 4, false)
	e, err = one(session.AppendOptions{CheckSeq: true, ExpectedSeq: 1}, keyed) // a retry, stale expectation and all
	want(e, err, 4, true)
	if _, err := one(session.AppendOptions{CheckSeq: true, ExpectedSeq: 3}, msg("stale")); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("stale expectation: %v, want ErrConflict", err)
	}
	lease, err := st.AcquireLease(ctx, sess.ID, "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one(session.AppendOptions{Epoch: lease.Epoch + 1}, reply); !errors.Is(err, session.ErrFenced) {
		t.Fatalf("stale epoch: %v, want ErrFenced", err)
	}
	e, err = one(session.AppendOptions{Epoch: lease.Epoch, CheckSeq: true, ExpectedSeq: 4}, reply)
	want(e, err, 5, false)
	e, err = one(session.AppendOptions{}, session.NewEvent{Type: session.TypeFollowupSignal, Actor: session.Actor{Kind: session.ActorGitHub, ID: "octocat"},
		Payload: session.FollowupSignal{Repo: "acme/api", Number: 1, Kind: session.SignalCheckFailed, HeadSHA: "abc"}})
	want(e, err, 6, false)
	e, err = one(session.AppendOptions{Epoch: lease.Epoch}, session.NewEvent{Type: session.TypeTurnCompleted, Actor: bot1,
		Payload: session.TurnCompleted{Turn: 1, Status: session.StatusOK, Through: 4}})
	want(e, err, 7, false)
	last, err := one(session.AppendOptions{}, msg("after the turn"))
	want(last, err, 8, false)
	mustVerify(t, st, sess.ID, 8)

	var lastSeq, answered int64
	var lastAt time.Time
	var pending bool
	if err := superuser(t, dbURL).QueryRow(ctx, `SELECT last_message_seq, last_message_at, answered_through, pending
		FROM session_work WHERE session_id = $1`, sess.ID).Scan(&lastSeq, &lastAt, &answered, &pending); err != nil {
		t.Fatal(err)
	}
	if lastSeq != 8 || !lastAt.Equal(last.CreatedAt) || answered != 4 || !pending {
		t.Errorf("session_work: last message %d at %v, answered through %d, pending %v; want 8 at %v, 4, true",
			lastSeq, lastAt, answered, pending, last.CreatedAt)
	}
}

// session_work's pending and last_message_hour are plain columns that their writers keep
// (00140; generated before): after every branch that writes session_work — a session's row
// from Store.Open, a session's first row from a message and from a turn_completed, a message in place and across an hour, a
// followup_signal, a turn_completed that answers and one that does not, turn_suspended,
// approval_decided, stop_requested — both equal 00011's definitions on every row.
func TestSessionWorkKeepsItsDerivedColumns(t *testing.T) {
	st, dbURL := newStore(t)
	ctx := context.Background()
	su := superuser(t, dbURL)
	check := func(step string, rows int) {
		t.Helper()
		var n, wrong int
		if err := su.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE
			pending IS DISTINCT FROM (last_message_seq > answered_through)
			OR last_message_hour IS DISTINCT FROM date_trunc('hour', last_message_at AT TIME ZONE 'UTC'))
			FROM session_work`).Scan(&n, &wrong); err != nil {
			t.Fatal(err)
		}
		if n != rows || wrong != 0 {
			t.Fatalf("after %s: %d session_work rows, %d of them with pending or last_message_hour off; want %d and 0", step, n, wrong, rows)
		}
	}
	turnDone := func(through int64) session.NewEvent {
		return session.NewEvent{Type: session.TypeTurnCompleted, Actor: bot1,
			Payload: session.TurnCompleted{Turn: 1, Status: session.StatusOK, Through: through}}
	}
	a := openSession(t, st, "1700000000.000500")
	b := openSession(t, st, "1700000000.000501")
	check("two sessions opened (Store.Open makes their rows)", 2)
	// logbook_append's first rows, for a session without one (from before 00170, or inserted by
	// other means).
	if _, err := su.Exec(ctx, `DELETE FROM session_work`); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, st, a.ID, turnDone(0))
	check("a first row from a turn_completed", 1)
	mustAppend(t, st, a.ID, msg("a message: the row updated in place"))
	check("a message", 1)
	mustAppend(t, st, b.ID, msg("a session's first row from a message"))
	check("a first row from a message", 2)
	// The last message two hours ago (its hour kept with it), then one now: the hour moves.
	if _, err := su.Exec(ctx, `UPDATE session_work SET last_message_at = clock_timestamp() - interval '2 hours',
		last_message_hour = date_trunc('hour', (clock_timestamp() - interval '2 hours') AT TIME ZONE 'UTC')
		WHERE session_id = $1`, b.ID); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, st, b.ID, msg("a message in a later hour"))
	check("a message in a later hour", 2)
	var moved bool
	if err := su.QueryRow(ctx, `SELECT last_message_hour > (clock_timestamp() - interval '2 hours') AT TIME ZONE 'UTC'
		FROM session_work WHERE session_id = $1`, b.ID).Scan(&moved); err != nil || !moved {
		t.Fatalf("last_message_hour after a message in a later hour: moved %v, %v", moved, err)
	}
	mustAppend(t, st, a.ID, turnDone(2)) // answers a's message (seq 2)
	check("a turn_completed that answers", 2)
	mustAppend(t, st, b.ID, turnDone(1)) // b's last message is seq 2: still pending
	check("a turn_completed that does not answer", 2)
	mustAppend(t, st, a.ID, session.NewEvent{Type: session.TypeFollowupSignal, Actor: session.Actor{Kind: session.ActorGitHub, ID: "octocat"},
		Payload: session.FollowupSignal{Repo: "acme/api", Number: 1, Kind: session.SignalCheckFailed, HeadSHA: "abc"}})
	check("a followup_signal", 2)
	mustAppend(t, st, a.ID, session.NewEvent{Type: session.TypeTurnSuspended, Actor: bot1,
		Payload: session.TurnSuspended{Turn: 1, CallID: "call-1", Until: time.Now().Add(time.Hour), Seen: 4}})
	check("a turn_suspended", 2)
	mustAppend(t, st, a.ID, session.NewEvent{Type: session.TypeApprovalDecided, Actor: user1,
		Payload: session.ApprovalDecided{CallID: "call-1", Decision: "approve", Via: "slack"}})
	check("an approval_decided", 2)
	mustAppend(t, st, a.ID, session.NewEvent{Type: session.TypeStopRequested, Actor: user1,
		Payload: session.StopRequested{Source: "slack"}})
	check("a stop_requested", 2)

	var pa, pb bool
	if err := su.QueryRow(ctx, `SELECT (SELECT pending FROM session_work WHERE session_id = $1),
		(SELECT pending FROM session_work WHERE session_id = $2)`, a.ID, b.ID).Scan(&pa, &pb); err != nil {
		t.Fatal(err)
	}
	if !pa || !pb {
		t.Errorf("pending: a %v (a followup_signal after its answer), b %v (a message after its answer); want both true", pa, pb)
	}
}
