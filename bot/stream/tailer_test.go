package stream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var user1 = session.Actor{Kind: session.ActorUser, ID: "U0000001"}

func msg(text string) session.NewEvent {
	return session.NewEvent{Type: session.TypeUserMessage, Actor: user1, Payload: session.UserMessage{Text: text}}
}

func newStore(t *testing.T) (*session.Store, *pgxpool.Pool) {
	t.Helper()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	su, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(su.Close)
	return session.NewStore(pool, session.Options{}), su
}

func open(t *testing.T, st *session.Store, ts string) session.Session {
	t.Helper()
	s, err := st.Open(context.Background(), session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: ts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder is a sink that keeps what it took, and signals each delivery.
type recorder struct {
	name     string
	mu       sync.Mutex
	got      []string // delivered
	advanced []string // delivered and the cursor moved past
	took     chan struct{}
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, took: make(chan struct{}, 1000)}
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Deliver(_ context.Context, evs []session.Event) (int, error) {
	r.mu.Lock()
	for _, e := range evs {
		r.got = append(r.got, stream.ID(e))
	}
	r.mu.Unlock()
	r.took <- struct{}{}
	return len(evs), nil
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// moved is Options.Delivered: the cursor moved past evs.
func (r *recorder) moved(_ string, evs []session.Event) {
	r.mu.Lock()
	r.advanced = append(r.advanced, ids(evs)...)
	r.mu.Unlock()
	r.took <- struct{}{}
}

func (r *recorder) advancedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.advanced...)
}

// waitFor waits (on deliveries) until r holds every id of want, or fails after a while.
func (r *recorder) waitFor(t *testing.T, want []string) { t.Helper(); r.waitIn(t, want, r.ids) }

// waitAdvanced waits until the cursor moved past every id of want.
func (r *recorder) waitAdvanced(t *testing.T, want []string) {
	t.Helper()
	r.waitIn(t, want, r.advancedIDs)
}

func (r *recorder) waitIn(t *testing.T, want []string, list func() []string) {
	t.Helper()
	// Transaction ids are cluster-wide: a long transaction of another test's database holds
	// every gap-safe reader back until it ends (session.Store.ReadAll), so wait long.
	deadline := time.After(3 * time.Minute)
	for {
		have := map[string]bool{}
		for _, id := range list() {
			have[id] = true
		}
		all := true
		for _, id := range want {
			all = all && have[id]
		}
		if all {
			return
		}
		select {
		case <-r.took:
		case <-deadline:
			t.Fatalf("sink %s has %v, want all of %v", r.name, r.ids(), want)
		}
	}
}

func ids(evs []session.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = stream.ID(e)
	}
	return out
}

// run starts a tailer of sinks over st and returns its stop.
func run(t *testing.T, st stream.Store, owner string, lease time.Duration, rec *recorder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tl := stream.New(st, []stream.Sink{rec}, stream.Options{Owner: owner, Lease: lease, Poll: 10 * time.Millisecond,
		Backoff: 10 * time.Millisecond, Batch: 3, Delivered: rec.moved})
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// An event whose transaction took its position before later ones but commits after them is
// delivered too, and first (its transaction started first).
func TestTailerDeliversALateCommit(t *testing.T) {
	t.Parallel()
	st, su := newStore(t)
	ctx := context.Background()
	a, b := open(t, st, "1700000000.000100"), open(t, st, "1700000000.000200")
	before, err := st.Append(ctx, a.ID, msg("before the sink"))
	if err != nil {
		t.Fatal(err)
	}
	// Claim the sink's cursor now: it starts after "before".
	if _, ok, err := st.ClaimStream(ctx, "rec", "nobody", time.Millisecond); err != nil || !ok {
		t.Fatal(ok, err)
	}
	rec := newRecorder("rec")
	run(t, st, "replica-1", 5*time.Second, rec)

	txA, err := su.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx) //nolint:errcheck
	if _, err := txA.Exec(ctx, `SET LOCAL ROLE logbook_app`); err != nil {
		t.Fatal(err)
	}
	var heldPos int64
	if err := txA.QueryRow(ctx, `SELECT position FROM logbook_append($1, NULL, NULL, ARRAY[gen_random_uuid()], ARRAY['user_message'],
		ARRAY['user'], ARRAY['U0000001'], ARRAY['{"text":"held"}'::jsonb], ARRAY[NULL::text], ARRAY[false])`, a.ID).Scan(&heldPos); err != nil {
		t.Fatal(err)
	}
	later, err := st.Append(ctx, b.ID, msg("b1"), msg("b2"))
	if err != nil {
		t.Fatal(err)
	}
	if later[0].Position <= heldPos {
		t.Fatalf("setup: later position %d not above the held %d", later[0].Position, heldPos)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	held := a.ID.String() + ".2"
	rec.waitFor(t, append(ids(later), held))
	got := rec.ids()
	// A new sink starts at the oldest running transaction (cluster-wide): "before" is streamed
	// only when another database's transaction was running then.
	if len(got) > 0 && got[0] == stream.ID(before[0]) {
		got = got[1:]
	}
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	if seen[held] != 1 || seen[ids(later)[0]] != 1 || seen[ids(later)[1]] != 1 {
		t.Fatalf("deliveries %v: want each event once", got)
	}
	// The late commit's transaction started first: it is read before b's.
	if got[0] != held {
		t.Fatalf("deliveries %v: want the held event first (its transaction started first)", got)
	}
}

// crashed is a store whose replica dies without releasing its lease (kill -9).
type crashed struct{ *session.Store }

func (crashed) ReleaseStream(context.Context, string, string) error { return nil }

// One replica tails a sink at a time; once it dies, another takes the lease over after it
// expires and resumes from the cursor: nothing is missed, nothing already advanced past is
// delivered again.
func TestTailerTakeoverResumesFromTheCursor(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	s := open(t, st, "1700000000.000300")
	if _, ok, err := st.ClaimStream(ctx, "rec", "nobody", time.Millisecond); err != nil || !ok {
		t.Fatal(ok, err)
	}
	const lease = 800 * time.Millisecond
	r1 := newRecorder("rec")
	stop1 := run(t, crashed{st}, "replica-1", lease, r1)
	first, err := st.Append(ctx, s.ID, msg("1"), msg("2"), msg("3"), msg("4"))
	if err != nil {
		t.Fatal(err)
	}
	r1.waitAdvanced(t, ids(first))

	// A second replica does not take the sink while the first holds it.
	r2 := newRecorder("rec")
	run(t, st, "replica-2", lease, r2)
	second, err := st.Append(ctx, s.ID, msg("5"))
	if err != nil {
		t.Fatal(err)
	}
	r1.waitAdvanced(t, ids(second))
	if got := r2.ids(); len(got) != 0 {
		t.Fatalf("replica-2 delivered %v while replica-1 held the lease", got)
	}

	stop1() // dies holding the lease
	third, err := st.Append(ctx, s.ID, msg("6"), msg("7"))
	if err != nil {
		t.Fatal(err)
	}
	r2.waitFor(t, ids(third))
	for _, id := range r2.ids() {
		for _, old := range append(ids(first), ids(second)...) {
			if id == old {
				t.Fatalf("replica-2 delivered %s again; replica-1 had advanced past it", id)
			}
		}
	}
	states, err := st.Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].Owner != "replica-2" {
		t.Fatalf("streams %+v: want rec held by replica-2", states)
	}
}

// A sink that was just fed is read again within BusyPoll, and each empty read after that
// doubles the wait back up to Poll: the lag behind appends is BusyPoll's while events come,
// and an idle sink costs one read per Poll (waits on an injected clock).
func TestTailerPollsSoonAfterEventsAndBacksOffWhenIdle(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	rec := newRecorder("busy")
	if _, ok, err := st.ClaimStream(context.Background(), rec.Name(), "nobody", time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := st.ReleaseStream(context.Background(), rec.Name(), "nobody"); err != nil {
		t.Fatal(err)
	}
	type wait struct {
		d    time.Duration
		fire chan time.Time
	}
	waits := make(chan wait, 16)
	after := func(d time.Duration) <-chan time.Time {
		w := wait{d: d, fire: make(chan time.Time, 1)}
		waits <- w
		return w.fire
	}
	const poll, busy = 400 * time.Millisecond, 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	tl := stream.New(st, []stream.Sink{rec}, stream.Options{Owner: "replica-1", Poll: poll, BusyPoll: busy, After: after})
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	next := func() wait {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case <-time.After(3 * time.Minute):
			t.Fatal("the tailer did not wait")
			return wait{}
		}
	}
	// Idle from the start: Poll.
	w := next()
	if w.d != poll {
		t.Fatalf("an idle tailer waits %v, want %v", w.d, poll)
	}
	s := open(t, st, "1700000000.000100")
	evs, err := st.Append(context.Background(), s.ID, msg("hello"))
	if err != nil {
		t.Fatal(err)
	}
	// Until the event is readable (a transaction elsewhere on the server may hold it back),
	// the waits stay at Poll; the first wait after its delivery is BusyPoll, then they double.
	want := []time.Duration{busy, 2 * busy, 4 * busy, poll, poll}
	var got []time.Duration
	for len(got) < len(want) {
		w.fire <- time.Now()
		w = next()
		delivered := len(rec.ids()) > 0
		if !delivered {
			if w.d != poll {
				t.Fatalf("before any delivery the tailer waits %v, want %v", w.d, poll)
			}
			continue
		}
		got = append(got, w.d)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("the waits after a delivery are %v, want %v", got, want)
		}
	}
	if ids := rec.ids(); len(ids) != 1 || ids[0] != stream.ID(evs[0]) {
		t.Fatalf("delivered %v, want %s once", ids, stream.ID(evs[0]))
	}
}
