package session_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for the migrations

	"github.com/logbook/logbook/cmd/logbook/localpg"
	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func TestParseLSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want session.LSN
		bad  bool
	}{
		{in: "0/0", want: 0},
		{in: "0/16B3748", want: 0x16B3748},
		{in: "16/B374D848", want: 0x16_B374D848},
		{in: "FFFFFFFF/FFFFFFFF", want: 1<<64 - 1},
		{in: "16B3748", bad: true},
		{in: "x/1", bad: true},
		{in: "1/100000000", bad: true},
	} {
		got, err := session.ParseLSN(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseLSN(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.bad)
		}
		if !c.bad && got.String() != c.in {
			t.Errorf("%q printed as %q", c.in, got.String())
		}
	}
}

// standbyPair starts a throwaway primary cluster of the test's own (never the shared server),
// migrates it, and starts a streaming standby of it made with pg_basebackup -R, on its own
// port. It returns both, and the primary's URL.
func standbyPair(t *testing.T) (primary, standby *localpg.Server) {
	t.Helper()
	if _, err := os.Stat("/usr/lib/postgresql"); err != nil {
		t.Skip("no PostgreSQL server binaries installed")
	}
	base := t.TempDir()
	if os.Geteuid() == 0 { // the clusters run as another user, who must pass through
		for _, d := range []string{base, filepath.Dir(base)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := localpg.Start(ctx, localpg.Options{Dir: filepath.Join(base, "primary")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Stop(context.Background()) })
	db, err := sql.Open("pgx", primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	err = migrations.Up(ctx, db, io.Discard)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	standby, err = localpg.StartStandby(ctx, primary, localpg.Options{Dir: filepath.Join(base, "standby")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop(context.Background()) })
	return primary, standby
}

func connect(t *testing.T, url, role string) *pgxpool.Pool {
	t.Helper()
	pool, err := session.Connect(context.Background(), url, session.PoolOptions{Role: role, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// observed records what a Standby reports.
type observed struct {
	mu          sync.Mutex
	reads       []string // server/reason
	lags        []session.Lag
	unreachable int
	reachable   int
}

func (o *observed) Read(server, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads = append(o.reads, server+"/"+reason)
}
func (o *observed) Lag(l session.Lag) { o.mu.Lock(); o.lags = append(o.lags, l); o.mu.Unlock() }
func (o *observed) Unreachable(error) { o.mu.Lock(); o.unreachable++; o.mu.Unlock() }
func (o *observed) Reachable()        { o.mu.Lock(); o.reachable++; o.mu.Unlock() }

// take returns the reads recorded since the last call.
func (o *observed) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.reads
	o.reads = nil
	return r
}

// Issue 33, reads on a standby: a write on the primary is read through the standby at once
// (read your writes, caught up); with replay paused the same read still shows the write, from
// the primary, and the lag says how far behind the standby is; a standby that goes away makes
// reads go to the primary, not fail.
func TestStandbyReadYourWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, standby := standbyPair(t)
	app := connect(t, primary.URL(), "logbook_app")
	store := session.NewStore(app, session.Options{})
	admin := connect(t, standby.URL(), "") // the superuser: pg_wal_replay_pause()
	obs := &observed{}
	sb := session.NewStandby(app, connect(t, standby.URL(), "logbook_app"),
		session.StandbyOptions{MaxWait: 300 * time.Millisecond, Observer: obs})
	reads := sb.Reads()

	sess, err := store.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.1"})
	if err != nil {
		t.Fatal(err)
	}
	appendReply := func(text string) session.Event {
		t.Helper()
		evs, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeAssistantMessage,
			Actor: session.Actor{Kind: session.ActorBot, ID: "B1"}, Payload: session.AssistantMessage{Text: text}})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0]
	}
	last := func() int64 {
		t.Helper()
		evs, err := reads.Events(ctx, sess.ID, session.Range{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return 0
		}
		return evs[len(evs)-1].Seq
	}

	// Caught up: the reply is read on the standby, right after its append returned.
	e := appendReply("first")
	if got := last(); got != e.Seq {
		t.Fatalf("read seq %d right after appending %d", got, e.Seq)
	}
	if got := obs.take(); !slices.Equal(got, []string{"standby/"}) {
		t.Fatalf("reads %v, want one on the standby", got)
	}
	if got, err := reads.Session(ctx, sess.ID); err != nil || got.ID != sess.ID {
		t.Fatalf("session on the standby: %+v, %v", got, err)
	}
	obs.take()
	// What read your writes costs a caught-up standby: the primary's position, then the
	// standby's (a figure for the report, not a limit).
	const n = 50
	start := time.Now()
	for range n {
		if err := sb.CatchUp(ctx); err != nil {
			t.Fatalf("caught-up standby: %v", err)
		}
	}
	t.Logf("CatchUp on a caught-up standby: %v each (mean of %d)", time.Since(start)/n, n)
	lag, err := sb.Lag(ctx)
	if err != nil || lag.Bytes != 0 || !lag.Recovery || lag.Paused {
		t.Fatalf("caught-up lag %+v, %v", lag, err)
	}
	// What a standby cannot do, it refuses: it is one.
	if err := session.NewStore(sb.StandbyPool(), session.Options{}).CheckWritable(ctx); !errors.Is(err, session.ErrReadOnly) {
		t.Fatalf("the standby is writable? %v", err)
	}

	// Lagging: replay paused, the next reply is still read (from the primary).
	if _, err := admin.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	e = appendReply("second")
	if got := last(); got != e.Seq {
		t.Fatalf("with replay paused, read seq %d right after appending %d", got, e.Seq)
	}
	if got := obs.take(); !slices.Equal(got, []string{"primary/lagging"}) {
		t.Fatalf("reads %v, want one on the primary for a lagging standby", got)
	}
	// The standby itself does not have it; ReadAny reads it as it is.
	var onStandby int64
	if err := session.ReadFrom(ctx, sb, session.ReadAny, session.NewStore(sb.StandbyPool(), session.Options{}), store,
		func(st *session.Store) error {
			evs, err := st.Events(ctx, sess.ID, session.Range{})
			onStandby = int64(len(evs))
			return err
		}); err != nil {
		t.Fatal(err)
	}
	if onStandby != e.Seq-1 {
		t.Fatalf("the paused standby has %d events, want %d", onStandby, e.Seq-1)
	}
	lag, err = sb.Lag(ctx)
	if err != nil || lag.Bytes <= 0 || !lag.Paused || lag.Seconds <= 0 {
		t.Fatalf("lag with replay paused: %+v, %v", lag, err)
	}
	t.Logf("paused standby: %d bytes, %.3fs behind", lag.Bytes, lag.Seconds)
	if _, err := admin.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	if err := sb.CatchUp(ctx); err != nil {
		t.Fatalf("resumed standby: %v", err)
	}
	obs.take()
	if got := last(); got != e.Seq {
		t.Fatalf("resumed: read seq %d, want %d", got, e.Seq)
	}
	if got := obs.take(); !slices.Equal(got, []string{"standby/"}) {
		t.Fatalf("reads %v after resuming, want one on the standby", got)
	}

	// Gone: the standby stops; reads go to the primary and succeed.
	if err := standby.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e = appendReply("third")
	for i := range 2 {
		if got := last(); got != e.Seq {
			t.Fatalf("standby stopped (read %d): read seq %d, want %d", i, got, e.Seq)
		}
	}
	if got := obs.take(); !slices.Equal(got, []string{"primary/unreachable", "primary/unreachable"}) {
		t.Fatalf("reads %v with the standby stopped, want both on the primary", got)
	}
	if _, err := sb.Lag(ctx); !errors.Is(err, session.ErrStandbyUnavailable) {
		t.Fatalf("lag of a stopped standby: %v", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.unreachable != 1 {
		t.Fatalf("told %d times the standby went away, want once", obs.unreachable)
	}
}

// A standby that is down when the pools open (a lazy pool on an address nothing listens on)
// is read around from the first read: the primary serves it, the standby is skipped for
// Retry (by the injected clock), tried again after, and reported unreachable once.
func TestStandbyDownFromTheStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, pool, _ := newStorePool(t, 2)
	sess := openSession(t, store, "1.1")
	if _, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: "U1"}, Payload: session.UserMessage{TS: "1.1", Text: "hi"}}); err != nil {
		t.Fatal(err)
	}
	dead, err := session.Connect(ctx, "postgres://postgres@/logbook?host="+t.TempDir()+"&port=5999&sslmode=disable",
		session.PoolOptions{Lazy: true, ConnectTimeout: time.Second})
	if err != nil {
		t.Fatalf("a lazy pool on a standby that is down: %v", err)
	}
	t.Cleanup(dead.Close)
	now := time.Unix(1_700_000_000, 0)
	obs := &observed{}
	sb := session.NewStandby(pool, dead, session.StandbyOptions{Observer: obs, Retry: 5 * time.Second,
		Now: func() time.Time { return now }})
	reads := sb.Reads()
	read := func(c session.Consistency) {
		t.Helper()
		var evs []session.Event
		err := session.ReadFrom(ctx, sb, c, session.NewStore(dead, session.Options{}), store, func(st *session.Store) (err error) {
			evs, err = st.Events(ctx, sess.ID, session.Range{})
			return err
		})
		if err != nil || len(evs) != 1 {
			t.Fatalf("read with the standby down: %d events, %v", len(evs), err)
		}
	}
	read(session.ReadAny)        // tried, failed, handed to the primary
	read(session.ReadYourWrites) // skipped
	if _, err := reads.Session(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	read(session.ReadYourWrites) // tried again
	if got, want := obs.take(), []string{"primary/unreachable", "primary/unreachable", "primary/unreachable", "primary/unreachable"}; !slices.Equal(got, want) {
		t.Fatalf("reads %v, want %v", got, want)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.unreachable != 1 || obs.reachable != 0 {
		t.Fatalf("told %d times it went away and %d times it came back, want once and never", obs.unreachable, obs.reachable)
	}
}

// A standby that stalls (its connections open, nothing answering, as after a partition) is
// read around once its position does not come back within the probe's bound: a read that
// must show the newest writes goes to the primary instead of hanging.
func TestStandbyThatStallsIsReadAround(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, pool, dbURL := newStorePool(t, 2)
	sess := openSession(t, store, "1.1")
	proxy, viaProxy := pgtest.NewProxy(t, dbURL)
	// The "standby" is the same database through the proxy: not in recovery, it counts as
	// caught up with itself.
	stalling, err := session.Connect(ctx, viaProxy, session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stalling.Close)
	t.Cleanup(proxy.Close) // first: a stalled connection would hold the pool's Close
	obs := &observed{}
	sb := session.NewStandby(pool, stalling, session.StandbyOptions{MaxWait: 300 * time.Millisecond, Observer: obs})
	reads := sb.Reads()
	if _, err := reads.Session(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if got := obs.take(); !slices.Equal(got, []string{"standby/"}) {
		t.Fatalf("reads %v before the stall, want one on the standby", got)
	}
	proxy.Stall()
	start := time.Now()
	if got, err := reads.Session(ctx, sess.ID); err != nil || got.ID != sess.ID {
		t.Fatalf("read with the standby stalled: %+v, %v", got, err)
	}
	took := time.Since(start)
	if got := obs.take(); !slices.Equal(got, []string{"primary/unreachable"}) {
		t.Fatalf("reads %v with the standby stalled, want one on the primary", got)
	}
	t.Logf("a stalled standby was read around in %v", took.Round(time.Millisecond))
}
