package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// statements records the SQL text of every query a pool's connections run.
type statements struct {
	mu   sync.Mutex
	sqls []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sqls = append(s.sqls, data.SQL)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns what ran since the last take: how many one-event statements and how many calls
// of logbook_append.
func (s *statements) take() (one, calls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.sqls {
		switch {
		case strings.Contains(q, "FROM logbook_append("):
			calls++
		case strings.Contains(q, "INSERT INTO events AS e") && strings.Contains(q, "UPDATE session_work AS w"):
			one++
		}
	}
	s.sqls = nil
	return one, calls
}

// newTracedStore is a Store of the application role on a new database, over a pool whose
// queries the returned statements record.
func newTracedStore(t *testing.T) (*session.Store, *statements, string) {
	t.Helper()
	_, dbURL := newStore(t)
	tr := &statements{}
	return tracedStore(t, dbURL, tr), tr, dbURL
}

// tracedStore is a Store of the application role over a pool whose queries st records.
func tracedStore(t *testing.T, dbURL string, st *statements) *session.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = st
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE logbook_app")
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return session.NewStore(pool, session.Options{})
}

// A single event is appended by one statement (migrations/00170) and makes the same chain,
// rows and session_work as logbook_append: one session is written event by event through the
// statement, another with the same events through logbook_append (each event sent together with
// a no-op duplicate of the first event's key, which only logbook_append takes), and both are
// compared column by column; Verify recomputes every hash in Go.
func TestAppendOneStatementIsLogbookAppend(t *testing.T) {
	t.Parallel()
	st, tr, dbURL := newTracedStore(t)
	ctx := context.Background()
	one := openSession(t, st, "1700000000.000700")
	fn := openSession(t, st, "1700000000.000701")

	first := session.NewEvent{Type: session.TypeUserMessage, Actor: user1, IdempotencyKey: "first",
		Payload: session.UserMessage{Text: "the first message"}}
	mustAppend(t, st, one.ID, first)
	mustAppend(t, st, fn.ID, first, first) // the second is a duplicate: logbook_append
	if o, c := tr.take(); o != 1 || c != 1 {
		t.Fatalf("first events: %d statements and %d calls of logbook_append, want 1 and 1", o, c)
	}
	evs := []session.NewEvent{
		msg("a message without a key"),
		{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0ÄÖ✓"}, IdempotencyKey: "ключ:1",
			Payload: session.UserMessage{Text: "a multi-byte actor and key, \"quotes\" and \\ and ✓"}},
		{Type: session.TypeAssistantMessage, Actor: bot1, Payload: session.AssistantMessage{Text: "not a message for session_work"}},
		{Type: session.TypeTurnStarted, Actor: bot1, IdempotencyKey: "turn-1", Payload: session.TurnStarted{Through: 3}},
		{Type: session.TypeFollowupSignal, Actor: session.Actor{Kind: session.ActorGitHub, ID: "octocat"},
			Payload: session.FollowupSignal{Repo: "acme/api", Number: 1, Kind: session.SignalCheckFailed, HeadSHA: "abc"}},
		{Type: session.TypeTurnCompleted, Actor: bot1, Payload: session.TurnCompleted{Turn: 1, Status: session.StatusOK, Through: 3}},
		msg("a message after the answer"),
	}
	for i, ev := range evs {
		a := mustAppend(t, st, one.ID, ev)[0]
		b := mustAppend(t, st, fn.ID, ev, first)[0]
		o, c := tr.take()
		want := 1
		if ev.Type == session.TypeTurnCompleted {
			want = 0 // logbook_track_turn's
		}
		if o != want || c != 2-want {
			t.Fatalf("event %d (%s): %d statements and %d calls, want %d and %d", i, ev.Type, o, c, want, 2-want)
		}
		if a.Seq != b.Seq || a.Type != b.Type || a.Actor != b.Actor || !bytes.Equal(a.PayloadHash, b.PayloadHash) ||
			a.Duplicate || b.Duplicate || a.IdempotencyKey != ev.IdempotencyKey || a.Sanitized != b.Sanitized {
			t.Fatalf("event %d (%s): statement %+v, logbook_append %+v", i, ev.Type, a, b)
		}
	}
	mustVerify(t, st, one.ID, int64(len(evs)+1))
	mustVerify(t, st, fn.ID, int64(len(evs)+1))

	// Stored columns, but for what differs by nature (ids, times and the hashes over them).
	su := superuser(t, dbURL)
	rows := func(id session.ID) string {
		t.Helper()
		var out string
		if err := su.QueryRow(ctx, `SELECT string_agg(concat_ws(' ', seq, type, actor_kind, actor_id, payload::text,
			encode(payload_hash, 'hex'), idempotency_key, sanitized), E'\n' ORDER BY seq)
			FROM events e WHERE session_id = $1`, id).Scan(&out); err != nil {
			t.Fatal(err)
		}
		var work string
		if err := su.QueryRow(ctx, `SELECT concat_ws(' ', last_message_seq, answered_seq, answered_through,
			awaiting_until, awaiting_through, pending, last_message_hour IS NOT NULL, head_seq,
			last_message_at = (SELECT created_at FROM events e WHERE e.session_id = w.session_id AND e.seq = w.last_message_seq),
			(head_at, head_prev, head_hash) = (SELECT created_at, prev_hash, hash FROM events e
			   WHERE e.session_id = w.session_id ORDER BY seq DESC LIMIT 1))
			FROM session_work w WHERE session_id = $1`, id).Scan(&work); err != nil {
			t.Fatal(err)
		}
		return out + "\n" + work
	}
	if a, b := rows(one.ID), rows(fn.ID); a != b {
		t.Errorf("the statement's session:\n%s\nlogbook_append's:\n%s", a, b)
	} else if !strings.HasSuffix(a, "\n8 7 3 0 t t 8 t t") {
		t.Errorf("session_work: %q, want the last message 8, answered 7 through 3, pending, head 8 (times and hashes those of its events)", a)
	}
}

// What the statement leaves to logbook_append, logbook_append answers as before: a stored key,
// an expected seq or a fencing epoch that differs, a session without its session_work row, a
// head behind the log, a session that does not exist.
func TestAppendOneStatementLeavesTheRestToLogbookAppend(t *testing.T) {
	t.Parallel()
	st, tr, dbURL := newTracedStore(t)
	su := superuser(t, dbURL)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000710")
	expect := func(step string, one, calls int) {
		t.Helper()
		if o, c := tr.take(); o != one || c != calls {
			t.Fatalf("%s: %d statements and %d calls of logbook_append, want %d and %d", step, o, c, one, calls)
		}
	}

	keyed := session.NewEvent{Type: session.TypeUserMessage, Actor: user1, IdempotencyKey: "Ev1", Payload: session.UserMessage{Text: "hi"}}
	stored := mustAppend(t, st, s.ID, keyed)[0]
	expect("a new key", 1, 0)
	again := mustAppend(t, st, s.ID, keyed)[0]
	expect("a stored key", 1, 1)
	if !again.Duplicate || again.Seq != stored.Seq || again.ID != stored.ID {
		t.Fatalf("the key again: %+v, want the stored event %+v as a duplicate", again, stored)
	}

	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{CheckSeq: true, ExpectedSeq: 1}, msg("expected 1")); err != nil {
		t.Fatal(err)
	}
	expect("the expected seq", 1, 0)
	_, err := st.AppendWith(ctx, s.ID, session.AppendOptions{CheckSeq: true, ExpectedSeq: 1}, msg("expected 1 again"))
	var conflict *session.ConflictError
	if !errors.As(err, &conflict) || conflict.Actual != 2 {
		t.Fatalf("a stale expected seq: %v, want a conflict with head 2", err)
	}
	expect("a stale expected seq", 1, 1)

	l, err := st.AcquireLease(ctx, s.ID, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tr.take()
	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: l.Epoch}, msg("fenced")); err != nil {
		t.Fatal(err)
	}
	expect("the lease's epoch", 1, 0)
	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: l.Epoch + 1}, msg("fenced out")); !errors.Is(err, session.ErrFenced) {
		t.Fatalf("another epoch: %v, want ErrFenced", err)
	}
	expect("another epoch", 1, 1)

	// A head behind the log: the row says 2, the log 3.
	if _, err := su.Exec(ctx, `UPDATE session_work SET head_seq = 2 WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	if e := mustAppend(t, st, s.ID, msg("after a head behind the log"))[0]; e.Seq != 4 {
		t.Fatalf("after a head behind the log: seq %d, want 4", e.Seq)
	}
	expect("a head behind the log", 1, 1)
	mustAppend(t, st, s.ID, msg("the head is repaired"))
	expect("a repaired head", 1, 0)

	// No session_work row (a session inserted by other means).
	if _, err := su.Exec(ctx, `DELETE FROM session_work WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, st, s.ID, session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot1, Payload: session.AssistantMessage{Text: "no row"}})
	expect("no session_work row", 1, 1)
	mustAppend(t, st, s.ID, msg("the row is back"))
	expect("the row made again", 1, 0)
	mustVerify(t, st, s.ID, 7)

	if _, err := st.Append(ctx, session.ID{1}, msg("nobody's")); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("a session that does not exist: %v, want ErrNotFound", err)
	}
	expect("a session that does not exist", 1, 1)
}

// Appenders of one session through the statement and through logbook_append at once (single
// events, pairs, fenced single events) take turns: seqs 1..n, one chain, session_work's head
// on the last event, and no statement ever found the head behind the log.
func TestAppendOneStatementAndLogbookAppendTakeTurns(t *testing.T) {
	t.Parallel()
	st, tr, dbURL := newTracedStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000720")
	l, err := st.AcquireLease(ctx, s.ID, "replica-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 12, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				var err error
				switch w % 3 {
				case 0:
					_, err = st.Append(ctx, s.ID, msg(fmt.Sprintf("w%d-%d", w, i)))
				case 1:
					_, err = st.Append(ctx, s.ID, msg(fmt.Sprintf("w%d-%d a", w, i)), msg(fmt.Sprintf("w%d-%d b", w, i)))
				case 2:
					_, err = st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: l.Epoch},
						session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot1, Payload: session.AssistantMessage{Text: "fenced"}})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// No statement left its event to logbook_append: its head was never behind (a collision
	// would have been repaired by a call, and hidden).
	if o, c := tr.take(); o != workers/3*each*2 || c != workers/3*each {
		t.Errorf("%d statements and %d calls of logbook_append, want %d and %d (the pairs)", o, c, workers/3*each*2, workers/3*each)
	}
	n := workers / 3 * each * 4
	assertDense(t, st, s.ID, n)
	var head int64
	var ok bool
	if err := superuser(t, dbURL).QueryRow(ctx, `SELECT w.head_seq, (w.head_at, w.head_prev, w.head_hash) =
		(SELECT created_at, prev_hash, hash FROM events e WHERE e.session_id = w.session_id AND e.seq = w.head_seq)
		FROM session_work w WHERE w.session_id = $1`, s.ID).Scan(&head, &ok); err != nil {
		t.Fatal(err)
	}
	if head != int64(n) || !ok {
		t.Fatalf("session_work's head %d (its time and hashes the event's: %v), want %d", head, ok, n)
	}
}

// A takeover fences the old holder's one-event appends at once: while the old holder appends
// in a loop, the lease changes hands and the new holder appends a marker; every event of the
// old holder that was stored lies before the marker, and its loop ends with ErrFenced (at the
// latest on the attempt it makes once the marker is stored).
func TestAppendOneStatementIsFencedByATakeover(t *testing.T) {
	t.Parallel()
	st, dbURL := newStoreTB(t, 8)
	su := superuser(t, dbURL)
	ctx := context.Background()
	for round := range 5 {
		s := openSession(t, st, fmt.Sprintf("1700000000.00073%d", round))
		old, err := st.AcquireLease(ctx, s.ID, "replica-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		started, stop := make(chan struct{}), make(chan struct{})
		ended := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				stopped := false // this attempt starts after the marker: it must be refused
				select {
				case <-stop:
					stopped = true
				default:
				}
				_, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: old.Epoch},
					session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot1, Payload: session.AssistantMessage{Text: fmt.Sprintf("old %d", i)}})
				if i == 0 {
					close(started)
				}
				if err != nil || stopped {
					ended <- err
					return
				}
			}
		}()
		<-started
		if _, err := su.Exec(ctx, `UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE session_id = $1`, s.ID); err != nil {
			t.Fatal(err)
		}
		next, err := st.AcquireLease(ctx, s.ID, "replica-b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		marker, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: next.Epoch}, msg("the new holder"))
		close(stop)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-ended; !errors.Is(err, session.ErrFenced) {
			t.Fatalf("round %d: the old holder's loop ended with %v, want ErrFenced", round, err)
		}
		var after int
		if err := su.QueryRow(ctx, `SELECT count(*) FROM events WHERE session_id = $1 AND type = 'assistant_message' AND seq > $2`,
			s.ID, marker[0].Seq).Scan(&after); err != nil {
			t.Fatal(err)
		}
		if after != 0 {
			t.Fatalf("round %d: %d events of the old holder after the new holder's marker (seq %d)", round, after, marker[0].Seq)
		}
		mustVerify(t, st, s.ID, marker[0].Seq)
	}
}

// The fence is read from the row as a takeover left it, even when that takeover committed while
// the append waited for the session's lock (so after the append's statement took its snapshot):
// the old holder's append, blocked behind a takeover in an open transaction, is refused once the
// takeover commits, and the refusal is logbook_append's (the statement wrote nothing).
func TestAppendOneStatementIsFencedByATakeoverItWaitedFor(t *testing.T) {
	t.Parallel()
	st, tr, dbURL := newTracedStore(t)
	su := superuser(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openSession(t, st, "1700000000.000740")
	old, err := st.AcquireLease(ctx, s.ID, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := su.Exec(ctx, `UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	takeover, err := su.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer takeover.Rollback(ctx)
	var epoch int64
	if err := takeover.QueryRow(ctx, `SELECT epoch FROM logbook_acquire_lease($1, 'replica-b', interval '1 minute', false)`, s.ID).Scan(&epoch); err != nil || epoch != old.Epoch+1 {
		t.Fatalf("takeover: epoch %d, %v; want %d", epoch, err, old.Epoch+1)
	}
	tr.take()
	done := make(chan error, 1)
	go func() {
		_, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: old.Epoch}, msg("the old holder, late"))
		done <- err
	}()
	for waiting := false; !waiting; {
		// The only lock anyone waits for in this test's database is the append's.
		if err := su.QueryRow(ctx, `SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if !waiting {
			select {
			case err := <-done:
				t.Fatalf("the append ended before the takeover committed: %v", err)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if err := takeover.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, session.ErrFenced) {
		t.Fatalf("the old holder's append after the takeover it waited for: %v, want ErrFenced", err)
	}
	if o, c := tr.take(); o != 1 || c != 1 {
		t.Errorf("%d statements and %d calls of logbook_append, want 1 and 1 (the statement wrote nothing)", o, c)
	}
	mustVerify(t, st, s.ID, 0)
}
