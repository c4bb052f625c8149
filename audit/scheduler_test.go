package audit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"gocloud.dev/blob"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/logtest"
)

type schedEnv struct {
	f      fixture
	bucket *blob.Bucket
	dir    string
	log    *logtest.Buffer
}

func newSchedEnv(t *testing.T) schedEnv {
	f := newFixture(t)
	b, dir := newBucket(t)
	return schedEnv{f: f, bucket: b, dir: dir, log: &logtest.Buffer{}}
}

func (e schedEnv) scheduler(t *testing.T, pool *pgxpool.Pool, spec string, exp interface {
	Export(context.Context, audit.Query, *blob.Bucket, string) (audit.Manifest, error)
}, mod func(*audit.SchedulerConfig)) *audit.Scheduler {
	t.Helper()
	sp, err := audit.ParseSpec(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := session.NewStore(pool, session.Options{})
	if exp == nil {
		exp = audit.NewExporter(store, pool, audit.ExporterOptions{Settle: time.Millisecond})
	}
	cfg := audit.SchedulerConfig{Spec: sp, Dest: e.bucket, Logger: testLogger(nil).Output(e.log), Node: "test"}
	if mod != nil {
		mod(&cfg)
	}
	s, err := audit.NewScheduler(pool, exp, audit.NewVerifier(store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seedDays writes one event per 6 hours from start for n days, as two actors.
func seedDays(t *testing.T, f fixture, start time.Time, n int) []seedRow {
	sid := uuid.MustParse("0195503a-4f00-7000-8000-0000000000aa")
	var rows []seedRow
	for i := range n * 4 {
		actor := []string{"U00000A1", "U00000B2"}[i%2]
		rows = append(rows, seedRow{sid, int64(i + 1), uuid.Must(uuid.NewV7()).String(), "user_message", "user", actor,
			start.Add(time.Duration(i) * 6 * time.Hour), `{"i": 1}`, ""})
	}
	seedDeterministic(t, f, rows, map[session.ID]string{sid: "C0000001"})
	return rows
}

func succeededWindows(t *testing.T, pool *pgxpool.Pool, schedule string) []audit.Window {
	t.Helper()
	runs, err := audit.Runs(context.Background(), pool, schedule)
	if err != nil {
		t.Fatal(err)
	}
	var ws []audit.Window
	for _, r := range runs {
		if r.Status == audit.RunSucceeded {
			ws = append(ws, r.Window)
		}
	}
	return ws
}

func TestSchedulerCatchesUpMissedWindowsAcrossDST(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	ctx := context.Background()
	la, _ := time.LoadLocation("America/Los_Angeles")
	rows := seedDays(t, e.f, time.Date(2025, 3, 7, 0, 0, 0, 0, la), 6)
	s := e.scheduler(t, e.f.auditorPool, "CRON_TZ=America/Los_Angeles 0 2 * * *", nil, nil)

	// First start: the previous full day.
	runs, err := s.Tick(ctx, time.Date(2025, 3, 9, 5, 0, 0, 0, la))
	if err != nil || len(runs) != 1 {
		t.Fatalf("first tick: %+v, %v", runs, err)
	}
	// Down for three days, across the spring-forward change: caught up in order.
	runs, err = s.Tick(ctx, time.Date(2025, 3, 12, 5, 0, 0, 0, la))
	if err != nil || len(runs) != 3 {
		t.Fatalf("catch-up tick: %+v, %v", runs, err)
	}
	if runs, err := s.Tick(ctx, time.Date(2025, 3, 12, 5, 0, 0, 0, la)); err != nil || len(runs) != 0 {
		t.Fatalf("a tick with nothing due ran %+v, %v", runs, err)
	}
	ws := succeededWindows(t, e.f.su, "default")
	want := []audit.Window{
		{Start: time.Date(2025, 3, 8, 10, 0, 0, 0, time.UTC), End: time.Date(2025, 3, 9, 10, 0, 0, 0, time.UTC)},
		{Start: time.Date(2025, 3, 9, 10, 0, 0, 0, time.UTC), End: time.Date(2025, 3, 10, 9, 0, 0, 0, time.UTC)},
		{Start: time.Date(2025, 3, 10, 9, 0, 0, 0, time.UTC), End: time.Date(2025, 3, 11, 9, 0, 0, 0, time.UTC)},
		{Start: time.Date(2025, 3, 11, 9, 0, 0, 0, time.UTC), End: time.Date(2025, 3, 12, 9, 0, 0, 0, time.UTC)},
	}
	if !slices.Equal(ws, want) {
		t.Fatalf("succeeded windows\n%v\nwant\n%v", ws, want)
	}
	// Every event of the covered span is in exactly one window's export.
	var exported []string
	for _, w := range ws {
		dir := filepath.Join(e.dir, "default", w.Start.Format("20060102T150405Z")+"_"+w.End.Format("20060102T150405Z"))
		for _, ev := range jsonlEvents(t, filepath.Join(dir, "events.jsonl")) {
			exported = append(exported, ev["event_id"].(string))
		}
		if _, err := audit.VerifyExport(ctx, e.bucket, strings.TrimPrefix(dir, e.dir+"/"), nil); err != nil {
			t.Errorf("window %s: %v", w, err)
		}
		cp := filepath.Join(e.dir, "checkpoints", "default", w.End.Format("20060102T150405Z")+".json")
		if _, err := os.Stat(cp); err != nil {
			t.Errorf("no checkpoint for window %s: %v", w, err)
		}
	}
	var inSpan []string
	for _, r := range rows {
		if !r.at.Before(want[0].Start) && r.at.Before(want[3].End) {
			inSpan = append(inSpan, r.id)
		}
	}
	if !slices.Equal(exported, inSpan) {
		t.Fatalf("exported %d events %v\nwant %d %v", len(exported), exported, len(inSpan), inSpan)
	}
	// Scheduled exports are on the access record.
	var n int
	if err := e.f.su.QueryRow(ctx, `SELECT count(*) FROM audit_access WHERE who = 'scheduler:default' AND action = 'export'`).Scan(&n); err != nil || n != 4 {
		t.Errorf("scheduler access records: %d (%v), want 4", n, err)
	}
}

// gatedExporter holds every export until released, so two replicas' ticks overlap.
type gatedExporter struct {
	next    *audit.Exporter
	started chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func (g *gatedExporter) Export(ctx context.Context, q audit.Query, dst *blob.Bucket, prefix string) (audit.Manifest, error) {
	g.calls.Add(1)
	select {
	case g.started <- struct{}{}:
	default:
	}
	<-g.release
	return g.next.Export(ctx, q, dst, prefix)
}

func TestTwoReplicasExportEachWindowOnce(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	ctx := context.Background()
	seedDays(t, e.f, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), 4)
	open := func() *pgxpool.Pool {
		p, err := session.Connect(ctx, e.f.url, session.PoolOptions{Role: "logbook_auditor"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	p1, p2 := open(), open()
	g := &gatedExporter{next: audit.NewExporter(session.NewStore(p1, session.Options{}), p1, audit.ExporterOptions{}),
		started: make(chan struct{}, 1), release: make(chan struct{})}
	a := e.scheduler(t, p1, "0 0 * * *", g, func(c *audit.SchedulerConfig) { c.Node = "replica-a" })
	b := e.scheduler(t, p2, "0 0 * * *", g, func(c *audit.SchedulerConfig) { c.Node = "replica-b" })
	now := time.Date(2025, 3, 4, 1, 0, 0, 0, time.UTC)

	done := make(chan error, 1)
	go func() {
		_, err := a.Tick(ctx, now)
		done <- err
	}()
	<-g.started // replica a is inside its first export
	if runs, err := b.Tick(ctx, now); !errors.Is(err, audit.ErrBusy) || len(runs) != 0 {
		t.Fatalf("replica b ticked while a held the schedule: %+v, %v", runs, err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs, err := b.Tick(ctx, now); err != nil || len(runs) != 0 {
		t.Fatalf("replica b after a finished: %+v, %v; want nothing due", runs, err)
	}
	var wg sync.WaitGroup
	for _, s := range []*audit.Scheduler{a, b, a, b} {
		wg.Go(func() {
			if _, err := s.Tick(ctx, now.Add(48*time.Hour)); err != nil && !errors.Is(err, audit.ErrBusy) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var dup int
	if err := e.f.su.QueryRow(ctx, `SELECT count(*) FROM (SELECT window_start FROM audit_runs WHERE status = 'succeeded'
GROUP BY window_start HAVING count(*) > 1) d`).Scan(&dup); err != nil || dup != 0 {
		t.Fatalf("%d windows succeeded more than once (%v)", dup, err)
	}
	ws := succeededWindows(t, e.f.su, "default")
	if len(ws) != 3 || int(g.calls.Load()) != 3 {
		t.Fatalf("windows %v exported by %d calls, want 3 and 3", ws, g.calls.Load())
	}
	for i := 1; i < len(ws); i++ {
		if !ws[i].Start.Equal(ws[i-1].End) {
			t.Errorf("gap between %s and %s", ws[i-1], ws[i])
		}
	}
}

// panickyExporter panics (a nil map deref, as a NULL actor once caused) on its first n calls.
type panickyExporter struct {
	next   *audit.Exporter
	panics atomic.Int32
}

func (p *panickyExporter) Export(ctx context.Context, q audit.Query, dst *blob.Bucket, prefix string) (audit.Manifest, error) {
	if p.panics.Add(-1) >= 0 {
		var actors *map[string]string
		_ = (*actors)["U1"]
	}
	return p.next.Export(ctx, q, dst, prefix)
}

func TestPanickingExportIsRecordedAndRetried(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	ctx := context.Background()
	seedDays(t, e.f, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), 2)
	px := &panickyExporter{next: audit.NewExporter(e.f.auditor, e.f.auditorPool, audit.ExporterOptions{})}
	px.panics.Store(1)
	s := e.scheduler(t, e.f.auditorPool, "0 0 * * *", px, nil)
	now := time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC)

	runs, err := s.Tick(ctx, now)
	if err == nil || len(runs) != 1 || runs[0].Status != audit.RunFailed || !strings.Contains(runs[0].Err, "panic") {
		t.Fatalf("panicking tick: %+v, %v", runs, err)
	}
	logged := e.log.String()
	if !strings.Contains(logged, `"level":"error"`) || !strings.Contains(logged, "goroutine") ||
		!strings.Contains(logged, "panickyExporter") {
		t.Errorf("the panic's stack is not in the log:\n%s", logged)
	}
	runs, err = s.Tick(ctx, now)
	if err != nil || len(runs) != 1 || runs[0].Status != audit.RunSucceeded || runs[0].Window != runs[0].Window {
		t.Fatalf("retry: %+v, %v", runs, err)
	}
	all, err := audit.Runs(ctx, e.f.su, "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Status != audit.RunFailed || all[1].Status != audit.RunSucceeded || all[0].Window != all[1].Window {
		t.Fatalf("recorded runs %+v; want failed then succeeded for one window", all)
	}
}

// blockingExporter blocks until its context ends.
type blockingExporter struct{ started chan struct{} }

func (b *blockingExporter) Export(ctx context.Context, q audit.Query, dst *blob.Bucket, prefix string) (audit.Manifest, error) {
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return audit.Manifest{}, ctx.Err()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunSurvivesAPanicAndShutsDownCleanly(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	px := &panickyExporter{next: audit.NewExporter(e.f.auditor, e.f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond})}
	px.panics.Store(1)
	s := e.scheduler(t, e.f.auditorPool, "* * * * * *", px, nil) // every second, real clock
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "a failed run and then a succeeded one", func() bool {
		runs, err := audit.Runs(context.Background(), e.f.su, "default")
		if err != nil {
			t.Fatal(err)
		}
		failed := slices.IndexFunc(runs, func(r audit.Run) bool { return r.Status == audit.RunFailed })
		ok := slices.IndexFunc(runs, func(r audit.Run) bool { return r.Status == audit.RunSucceeded })
		return failed >= 0 && ok >= 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	var open int
	if err := e.f.su.QueryRow(context.Background(), `SELECT count(*) FROM audit_runs s WHERE status = 'started'
AND NOT EXISTS (SELECT 1 FROM audit_runs o WHERE o.run_id = s.run_id AND o.status <> 'started')`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d runs left without an outcome after shutdown (%v)", open, err)
	}
}

func TestShutdownRecordsARunningExportInterrupted(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	bx := &blockingExporter{started: make(chan struct{}, 1)}
	s := e.scheduler(t, e.f.auditorPool, "0 0 * * *", bx, func(c *audit.SchedulerConfig) {
		c.ShutdownGrace = time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }() // the catch-up at start exports yesterday
	<-bx.started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	runs, err := audit.Runs(context.Background(), e.f.su, "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != audit.RunInterrupted {
		t.Fatalf("runs %+v; want one interrupted", runs)
	}
}

// A host whose clock runs 20s ahead of the database's does not close a window early: the
// windows it marks done end by the database's clock, so an event appended right after the
// tick lands in a window still to come, and no event falls between exports.
func TestFastHostClockDoesNotCloseAWindowEarly(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	ctx := context.Background()
	s := e.f.open(t, "C0000001", "1700000000.000100")
	e.f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "before"})
	host := func() time.Time { return e.f.dbNow(t).Add(20 * time.Second) }
	sched := e.scheduler(t, e.f.auditorPool, "*/5 * * * * *", nil, func(c *audit.SchedulerConfig) { c.Now = host })

	runs, err := sched.Tick(ctx, host())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no window was due at the database's clock; want the last closed one exported")
	}
	late := e.f.append(t, s.ID, bob, session.TypeUserMessage, map[string]any{"text": "still landing"})
	for _, w := range succeededWindows(t, e.f.su, "default") {
		if w.End.After(late.CreatedAt) {
			t.Errorf("window %s was marked done, but event %d (created %s) still landed in it: no export will hold it",
				w, late.Seq, late.CreatedAt.Format(time.RFC3339Nano))
		}
	}
}
