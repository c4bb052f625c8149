package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// newStore returns a store on a fresh database, connected as the application role, and the
// database URL (whose role is a superuser).
func newStore(t *testing.T) (*session.Store, string) { return newStoreTB(t, 4) }

// newStoreTB opens a store with a pool of maxConns connections. Tests run in parallel with
// other packages' tests on one server: ask only for the connections a test needs.
func newStoreTB(t testing.TB, maxConns int32) (*session.Store, string) {
	t.Helper()
	st, _, dbURL := newStorePool(t, maxConns)
	return st, dbURL
}

// newStorePool is newStoreTB that also returns the store's pool (the application role's).
func newStorePool(t testing.TB, maxConns int32) (*session.Store, *pgxpool.Pool, string) {
	t.Helper()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return session.NewStore(pool, session.Options{}), pool, dbURL
}

func superuser(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var user1 = session.Actor{Kind: session.ActorUser, ID: "U0000001"}

func msg(text string) session.NewEvent {
	return session.NewEvent{Type: session.TypeUserMessage, Actor: user1, Payload: session.UserMessage{Text: text}}
}

func openSession(t *testing.T, st *session.Store, ts string) session.Session {
	return openSessionTB(t, st, ts)
}

func openSessionTB(t testing.TB, st *session.Store, ts string) session.Session {
	t.Helper()
	s, err := st.Open(context.Background(), session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: ts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustVerify(t *testing.T, st *session.Store, id session.ID, wantEvents int64) {
	t.Helper()
	v, err := st.Verify(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK || v.Events != wantEvents {
		t.Fatalf("verify: %+v, want OK with %d events", v, wantEvents)
	}
}

func TestOpenIsIdempotentAcrossConcurrentCallers(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	key := session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"}
	ids := make([]session.ID, 8)
	created := make([]bool, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			s, err := st.Open(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i], created[i] = s.ID, s.Created
		})
	}
	wg.Wait()
	if n := len(slices.DeleteFunc(created, func(c bool) bool { return !c })); n != 1 {
		t.Fatalf("%d Open calls say they created the session, want 1", n)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("Open gave different sessions for one thread: %v", ids)
		}
	}
	byThread, err := st.SessionByThread(ctx, key)
	if err != nil || byThread.ID != ids[0] || byThread.Created {
		t.Fatalf("SessionByThread = %v, %v; want %v", byThread.ID, err, ids[0])
	}
	byID, err := st.Session(ctx, ids[0])
	if err != nil || byID.Key != key {
		t.Fatalf("Session = %+v, %v; want key %+v", byID, err, key)
	}
	if _, err := st.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001"}); !errors.Is(err, session.ErrInvalidEvent) {
		t.Fatalf("Open without thread ts: %v, want ErrInvalidEvent", err)
	}
	if _, err := st.SessionByThread(ctx, session.ThreadKey{Team: "T", Channel: "C", ThreadTS: "1"}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("SessionByThread of unknown thread: %v, want ErrNotFound", err)
	}
}

func TestAppendAndRead(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")

	var evs []session.NewEvent
	for i := 1; i <= 10; i++ {
		typ := session.TypeUserMessage
		if i%2 == 0 {
			typ = session.TypeTurnStarted
		}
		evs = append(evs, session.NewEvent{Type: typ, Actor: user1, Payload: map[string]any{"i": i}})
	}
	got, err := st.Append(ctx, s.ID, evs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Seq != int64(i+1) || e.Duplicate || e.Type != evs[i].Type {
			t.Fatalf("event %d = seq %d dup %v type %s", i, e.Seq, e.Duplicate, e.Type)
		}
		if i > 0 && string(e.PrevHash) != string(got[i-1].Hash) {
			t.Fatalf("event %d prev_hash is not event %d's hash", i+1, i)
		}
		if i > 0 && e.ID.String() <= got[i-1].ID.String() {
			t.Fatalf("event ids not time-ordered: %s after %s", e.ID, got[i-1].ID)
		}
	}
	mustVerify(t, st, s.ID, 10)

	seqs := func(evs []session.Event) string {
		var b strings.Builder
		for _, e := range evs {
			fmt.Fprintf(&b, "%d,", e.Seq)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name string
		r    session.Range
		want string
	}{
		{"all", session.Range{}, "1,2,3,4,5,6,7,8,9,10,"},
		{"slice", session.Range{From: 3, To: 5}, "3,4,5,"},
		{"newest first", session.Range{Desc: true, Limit: 3}, "10,9,8,"},
		{"by type", session.Range{Types: []session.Type{session.TypeTurnStarted}}, "2,4,6,8,10,"},
		{"three before 8", session.Range{Before: 8, Limit: 3}, "5,6,7,"},
		{"two user messages before 8, newest first", session.Range{Before: 8, Limit: 2, Desc: true, Types: []session.Type{session.TypeUserMessage}}, "7,5,"},
	} {
		got, err := st.Events(ctx, s.ID, tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if seqs(got) != tc.want {
			t.Errorf("%s: got %s want %s", tc.name, seqs(got), tc.want)
		}
	}
	head, err := st.Head(ctx, s.ID)
	if err != nil || head.Seq != 10 || string(head.Hash) != string(got[9].Hash) {
		t.Fatalf("Head = %+v, %v", head, err)
	}
	var p map[string]int
	if err := got[2].Decode(&p); err != nil || p["i"] != 3 {
		t.Fatalf("Decode = %v, %v", p, err)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	ev := msg("hello")
	ev.IdempotencyKey = "T0000001/C0000001/1700000000.000100"

	first, err := st.Append(ctx, s.ID, ev)
	if err != nil {
		t.Fatal(err)
	}
	again, err := st.Append(ctx, s.ID, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !again[0].Duplicate || again[0].ID != first[0].ID || again[0].Seq != 1 {
		t.Fatalf("second append = %+v, want the stored event marked duplicate", again[0])
	}

	// Raced from 8 goroutines: one row.
	ev.IdempotencyKey = "raced"
	var wg sync.WaitGroup
	var mu sync.Mutex
	dups := 0
	for range 8 {
		wg.Go(func() {
			got, err := st.Append(ctx, s.ID, ev)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if got[0].Duplicate {
				dups++
			}
		})
	}
	wg.Wait()
	all, err := st.Events(ctx, s.ID, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || dups != 7 {
		t.Fatalf("after a raced key: %d events and %d duplicates, want 2 and 7", len(all), dups)
	}
	mustVerify(t, st, s.ID, 2)
}

func TestExpectedSeq(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{CheckSeq: true, ExpectedSeq: 0}, msg("a")); err != nil {
		t.Fatal(err)
	}
	_, err := st.AppendWith(ctx, s.ID, session.AppendOptions{CheckSeq: true, ExpectedSeq: 0}, msg("b"))
	var conflict *session.ConflictError
	if !errors.As(err, &conflict) || conflict.Actual != 1 || conflict.Expected != 0 || !errors.Is(err, session.ErrConflict) {
		t.Fatalf("stale expectation: %v, want *ConflictError{Expected 0, Actual 1}", err)
	}

	// Two workers that both read seq 1 and both append at 2: exactly one wins.
	var wg sync.WaitGroup
	results := make([]error, 2)
	for i := range results {
		wg.Go(func() {
			_, results[i] = st.AppendWith(ctx, s.ID, session.AppendOptions{CheckSeq: true, ExpectedSeq: 1}, msg(fmt.Sprint("w", i)))
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, session.ErrConflict):
			t.Fatal(err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d appends with the same expected seq succeeded, want 1", wins)
	}
	mustVerify(t, st, s.ID, 2)
}

func TestFencedAppend(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")

	a, err := st.AcquireLease(ctx, s.ID, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, s.ID, "replica-b", time.Minute); !errors.Is(err, session.ErrLeaseHeld) {
		t.Fatalf("second owner: %v, want ErrLeaseHeld", err)
	}
	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: a.Epoch}, msg("from a")); err != nil {
		t.Fatal(err)
	}
	// a pauses; its lease expires (on the database's clock: a short TTL expired on a loaded
	// machine before the second owner's first try); b takes over.
	if _, err := superuser(t, dbURL).Exec(ctx, `UPDATE leases SET expires_at = clock_timestamp() - interval '1 second'
		WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	b, err := st.AcquireLease(ctx, s.ID, "replica-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.Epoch != a.Epoch+1 {
		t.Fatalf("takeover epoch %d, want %d", b.Epoch, a.Epoch+1)
	}
	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: a.Epoch}, msg("late write from a")); !errors.Is(err, session.ErrFenced) {
		t.Fatalf("append with stale epoch: %v, want ErrFenced", err)
	}
	if _, err := st.RenewLease(ctx, a, time.Minute); !errors.Is(err, session.ErrFenced) {
		t.Fatalf("renew of a lost lease: %v, want ErrFenced", err)
	}
	if _, err := st.AppendWith(ctx, s.ID, session.AppendOptions{Epoch: b.Epoch}, msg("from b")); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	c, err := st.AcquireLease(ctx, s.ID, "replica-c", time.Minute)
	if err != nil || c.Epoch != b.Epoch+1 {
		t.Fatalf("acquire after release: %+v, %v", c, err)
	}
	mustVerify(t, st, s.ID, 2)
}

func TestBadInputGetsTypedErrorsAndWritesNothing(t *testing.T) {
	t.Parallel()
	st, pool, _ := newStorePool(t, 4)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	if _, err := st.Append(ctx, s.ID, msg("first")); err != nil {
		t.Fatal(err)
	}
	small := session.NewStore(pool, session.Options{MaxPayload: 64})

	for _, tc := range []struct {
		name  string
		store *session.Store
		id    session.ID
		ev    session.NewEvent
		is    error
	}{
		{"unknown type", st, s.ID, session.NewEvent{Type: "user_mesage", Actor: user1}, session.ErrUnknownType},
		{"empty session id", st, session.ID{}, msg("x"), session.ErrEmptySessionID},
		{"unknown session", st, session.ID{1}, msg("x"), session.ErrNotFound},
		{"not JSON", st, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: user1, Payload: json.RawMessage(`{"a":`)}, session.ErrInvalidPayload},
		{"not an object", st, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: user1, Payload: []string{"a"}}, session.ErrInvalidPayload},
		{"no actor", st, s.ID, session.NewEvent{Type: session.TypeUserMessage}, session.ErrInvalidEvent},
		{"NUL in actor id", st, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U\x00"}}, session.ErrInvalidEvent},
		{"NUL in key", st, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: user1, IdempotencyKey: "k\x00"}, session.ErrInvalidEvent},
	} {
		// The bad event sits in the middle of a batch: nothing of the batch is written.
		_, err := tc.store.Append(ctx, tc.id, msg("before"), tc.ev, msg("after"))
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.is)
		}
	}
	_, err := small.Append(ctx, s.ID, msg(strings.Repeat("x", 100)))
	var tooLarge *session.TooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Limit != 64 {
		t.Errorf("oversized payload: %v, want *TooLargeError", err)
	}
	// Nothing written, no seq consumed: the next append is seq 2.
	got, err := st.Append(ctx, s.ID, msg("second"))
	if err != nil || got[0].Seq != 2 {
		t.Fatalf("append after failures: seq %v, %v; want 2", got, err)
	}
	mustVerify(t, st, s.ID, 2)
}

func TestTextPostgresCannotStoreIsSanitizedNotLost(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")

	// A tool result holding U+0000 and an unpaired surrogate.
	raw := session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "bwrap"},
		Payload: json.RawMessage(`{"stdout":"abc\u0000def","note":"\ud800","pair":"\ud83d\ude00","escaped":"\\u0000"}`)}
	// The same kinds of text from Go values: a NUL and invalid UTF-8.
	typed := session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "bwrap"},
		Payload: session.ToolResult{CallID: "toolu_1", Content: "a\x00b\xffc"}}
	clean := msg("plain")
	got, err := st.Append(ctx, s.ID, raw, typed, clean)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Sanitized || !got[1].Sanitized || got[2].Sanitized {
		t.Fatalf("sanitized flags = %v %v %v, want true true false", got[0].Sanitized, got[1].Sanitized, got[2].Sanitized)
	}
	var p map[string]string
	if err := got[0].Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p["stdout"] != "abc\uFFFDdef" || p["note"] != "\uFFFD" || p["pair"] != "😀" || p["escaped"] != `\u0000` {
		t.Fatalf("raw payload stored as %q", p)
	}
	var r session.ToolResult
	if err := got[1].Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Content != "a\uFFFDb\uFFFDc" {
		t.Fatalf("typed payload stored as %q", r.Content)
	}
	mustVerify(t, st, s.ID, 3)
}

func TestAppendOnlyEnforcedByTheDatabase(t *testing.T) {
	t.Parallel()
	st, app, dbURL := newStorePool(t, 4)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	for i := range 3 {
		if _, err := st.Append(ctx, s.ID, msg(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	su := superuser(t, dbURL)
	for _, stmt := range []string{
		"UPDATE events SET payload = '{}' WHERE seq = 2",
		"DELETE FROM events WHERE seq = 2",
		"TRUNCATE events CASCADE",
		"UPDATE sessions SET thread_ts = 'x'",
		"DELETE FROM sessions",
	} {
		// The application role lacks the privilege.
		_, err := app.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("as logbook_app, %q: %v, want permission denied (42501)", stmt, err)
		}
		// A superuser has every privilege; the trigger still refuses, with a clear message.
		_, err = su.Exec(ctx, stmt)
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("as superuser, %q: %v, want the append-only trigger's error", stmt, err)
		}
	}
	mustVerify(t, st, s.ID, 3)

	// A superuser who disables the triggers can edit a row: the chain check finds it.
	tamper := func(stmt string) {
		t.Helper()
		tx, err := su.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		for _, q := range []string{"SET LOCAL session_replication_role = replica", stmt} {
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tamper(`UPDATE events SET payload = '{"text":"deploy to prod"}' WHERE seq = 2`)
	v, err := st.Verify(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK || v.BrokenSeq != 2 || !strings.Contains(v.Reason, "payload") {
		t.Fatalf("verify after a payload edit: %+v, want broken at seq 2", v)
	}
}

func TestVerifyFindsHeaderEditsAndGaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stmt   string
		broken int64
	}{
		{"actor changed", "UPDATE events SET actor_id = 'U0000002' WHERE seq = 3", 3},
		{"row deleted", "DELETE FROM events WHERE seq = 2", 3},
		{"last hash rewritten", "UPDATE events SET hash = sha256('x') WHERE seq = 4", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, dbURL := newStore(t)
			ctx := context.Background()
			s := openSession(t, st, "1700000000.000100")
			for i := range 4 {
				if _, err := st.Append(ctx, s.ID, msg(fmt.Sprint("m", i))); err != nil {
					t.Fatal(err)
				}
			}
			su := superuser(t, dbURL)
			err := pgx.BeginFunc(ctx, su, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, tc.stmt)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			v, err := st.Verify(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK || v.BrokenSeq != tc.broken {
				t.Fatalf("verify: %+v, want broken at %d", v, tc.broken)
			}
		})
	}
}

func TestLatest(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	for _, typ := range []session.Type{session.TypeUserMessage, session.TypeTurnStarted, session.TypeUserMessage, session.TypeTurnCompleted, session.TypeTurnStarted} {
		if _, err := st.Append(ctx, s.ID, session.NewEvent{Type: typ, Actor: user1}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.Latest(ctx, s.ID, session.TypeUserMessage, session.TypeTurnStarted, session.TypeTurnCompleted, session.TypeTitle)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[session.TypeUserMessage].Seq != 3 || got[session.TypeTurnStarted].Seq != 5 || got[session.TypeTurnCompleted].Seq != 4 {
		t.Fatalf("Latest = %v", got)
	}
}

func TestSessionByMessage(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	a := openSession(t, st, "1700000000.000100")
	openSession(t, st, "1700000000.000200")
	ev := msg("in a thread")
	ev.IdempotencyKey = "T0000001/C0000001/1700000000.000150"
	if _, err := st.Append(ctx, a.ID, ev); err != nil {
		t.Fatal(err)
	}
	got, err := st.SessionByMessage(ctx, "C0000001", "1700000000.000150")
	if err != nil || got.ID != a.ID {
		t.Fatalf("SessionByMessage = %v, %v; want %v", got.ID, err, a.ID)
	}
	if _, err := st.SessionByMessage(ctx, "C0000001", "1700000000.000999"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
}

// A session is its channel and thread: opened through two organisations' team ids at once (a
// Slack Connect channel: the envelope's team, our own team in a catch-up), the thread gets one
// session, which records the first opener's team, and every lookup by thread finds it.
func TestOneSessionPerThreadWhicheverTeamOpensIt(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	teams := []string{"T0000001", "T0000002", "T0000001", "T0000002", "T0000003", "T0000001"}
	ids := make([]session.ID, len(teams))
	var wg sync.WaitGroup
	for i, team := range teams {
		wg.Go(func() {
			s, err := st.Open(ctx, session.ThreadKey{Team: team, Channel: "C0000005", ThreadTS: "1700000000.000100"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = s.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one thread opened through several teams got several sessions: %v", ids)
		}
	}
	got, err := st.SessionByThread(ctx, session.ThreadKey{Team: "T0000009", Channel: "C0000005", ThreadTS: "1700000000.000100"})
	if err != nil || got.ID != ids[0] || !slices.Contains(teams, got.Key.Team) {
		t.Fatalf("SessionByThread through another team = %+v, %v; want %v with its opener's team", got, err, ids[0])
	}
}

// Sessions reads several sessions by id in one call: those that exist, by id; an unknown id is
// absent, not an error; no ids, no query.
func TestSessionsByIDs(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	a, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C2", ThreadTS: "1700000000.000200"})
	if err != nil {
		t.Fatal(err)
	}
	unknown := session.ID{1}
	got, err := st.Sessions(ctx, []session.ID{a.ID, unknown, b.ID, a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[a.ID].Key.Channel != "C1" || got[a.ID].Key.ThreadTS != "1700000000.000100" ||
		got[b.ID].Key.Channel != "C2" || got[b.ID].Key.ThreadTS != "1700000000.000200" {
		t.Fatalf("sessions %+v: want %s in C1 and %s in C2", got, a.ID, b.ID)
	}
	if none, err := st.Sessions(ctx, nil); err != nil || len(none) != 0 {
		t.Fatalf("no ids: %v, %v", none, err)
	}
}
