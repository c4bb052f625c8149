package session_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session"
)

func TestConcurrentAppendersToOneSession(t *testing.T) {
	t.Parallel()
	st, _ := newStoreTB(t, 32) // 32 appenders on separate connections
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	const workers, each = 32, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if _, err := st.Append(ctx, s.ID, msg(fmt.Sprintf("w%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	assertDense(t, st, s.ID, workers*each)
}

// assertDense checks that the session holds seq 1..n exactly and its chain verifies.
func assertDense(t *testing.T, st *session.Store, id session.ID, n int) {
	t.Helper()
	evs, err := st.Events(context.Background(), id, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%d events, want %d", len(evs), n)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	mustVerify(t, st, id, int64(n))
}

// TestHelperAppender is not a test: TestConcurrentAppendersInTwoProcesses runs the test binary
// again with LOGBOOK_TEST_APPENDER set, so a second process appends to the same session.
func TestHelperAppender(t *testing.T) {
	spec := os.Getenv("LOGBOOK_TEST_APPENDER")
	if spec == "" {
		t.Skip("runs only as the second process of TestConcurrentAppendersInTwoProcesses")
	}
	dbURL, id := os.Getenv("LOGBOOK_TEST_APPENDER_DB"), spec
	n, _ := strconv.Atoi(os.Getenv("LOGBOOK_TEST_APPENDER_N"))
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := session.NewStore(pool, session.Options{})
	sid, err := session.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range n / 8 {
				if _, err := st.Append(context.Background(), sid, msg(fmt.Sprintf("p2-%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestConcurrentAppendersInTwoProcesses(t *testing.T) {
	t.Parallel()
	st, dbURL := newStoreTB(t, 8)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	const each = 400
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperAppender$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOGBOOK_TEST_APPENDER="+s.ID.String(),
		"LOGBOOK_TEST_APPENDER_DB="+dbURL, "LOGBOOK_TEST_APPENDER_N="+strconv.Itoa(each))
	out := make(chan error, 1)
	go func() {
		b, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, b)
		}
		out <- err
	}()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range each / 8 {
				if _, err := st.Append(ctx, s.ID, msg(fmt.Sprintf("p1-%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := <-out; err != nil {
		t.Fatalf("second process: %v", err)
	}
	assertDense(t, st, s.ID, 2*each)
}

// A reader paging by global position must not lose an event whose transaction got a lower
// position but committed after later ones.
func TestReadAllNeverSkipsALateCommit(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	a := openSession(t, st, "1700000000.000100")
	b := openSession(t, st, "1700000000.000200")
	if _, err := st.Append(ctx, a.ID, msg("a1")); err != nil {
		t.Fatal(err)
	}

	// Transaction A appends (and so takes a position) and stays open.
	su := superuser(t, dbURL)
	txA, err := su.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx) //nolint:errcheck
	if _, err := txA.Exec(ctx, `SET LOCAL ROLE logbook_app`); err != nil {
		t.Fatal(err)
	}
	var heldPos int64
	err = txA.QueryRow(ctx, `SELECT position FROM logbook_append($1, NULL, NULL, ARRAY[gen_random_uuid()], ARRAY['user_message'],
		ARRAY['user'], ARRAY['U0000001'], ARRAY['{"text":"held"}'::jsonb], ARRAY[NULL::text], ARRAY[false])`, a.ID).Scan(&heldPos)
	if err != nil {
		t.Fatal(err)
	}
	// Later transactions commit with higher positions.
	later, err := st.Append(ctx, b.ID, msg("b1"), msg("b2"))
	if err != nil {
		t.Fatal(err)
	}
	if later[0].Position <= heldPos {
		t.Fatalf("test setup: later position %d not above held %d", later[0].Position, heldPos)
	}

	seen := map[int64]int{}
	var cur session.Cursor
	drain := func() {
		for {
			evs, next, err := st.ReadAll(ctx, cur, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				seen[e.Position]++
			}
			cur = next
			if len(evs) == 0 {
				return
			}
		}
	}
	drain()
	if seen[heldPos] != 0 {
		t.Fatal("read an uncommitted event")
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := su.Query(ctx, `SELECT position FROM events ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	// Transaction ids are cluster-wide: a transaction of another test's database can hold the
	// reader's horizon back for a moment, so read until everything arrived or time is up.
	deadline := time.Now().Add(20 * time.Second)
	for drain(); len(seen) < len(want) && time.Now().Before(deadline); drain() {
		time.Sleep(20 * time.Millisecond)
	}
	if len(seen) != len(want) {
		t.Fatalf("reader saw %d distinct events, table has %d (%v)", len(seen), len(want), seen)
	}
	for _, p := range want {
		if seen[p] != 1 {
			t.Fatalf("position %d read %d times, want exactly once", p, seen[p])
		}
	}
}
