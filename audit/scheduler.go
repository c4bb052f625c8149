package audit

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"
	"github.com/rs/zerolog"
	"gocloud.dev/blob"

	"github.com/logbook/logbook/session"
)

// exporter is what the scheduler needs of an Exporter.
type exporter interface {
	Export(ctx context.Context, q Query, dst *blob.Bucket, prefix string) (Manifest, error)
}

// SchedulerConfig configures a Scheduler. Zero values take defaults.
type SchedulerConfig struct {
	Name    string   // schedule name; runs are recorded per name (default "default")
	Spec    *Spec    // when to export (required)
	Actors  []string // actor ids; empty: all actors
	Channel string   // one channel; empty: all
	// PerActor writes one export per actor of Actors, each under its own prefix.
	PerActor bool
	Format   Format
	Dest     *blob.Bucket // where exports and checkpoints go (required)
	Prefix   string       // key prefix inside Dest
	// SigningKey signs checkpoints (the Exporter signs manifests with its own key).
	SigningKey ed25519.PrivateKey
	// Retention, when set, purges expired sessions after each tick's exports.
	Retention *Retention
	Node      string // this replica's name in run records (default "logbook")
	// MaxCatchUp is the most windows one tick exports (default 100); the rest follow on the
	// next ticks.
	MaxCatchUp int
	// ShutdownGrace is how long Run waits, once its context is done, for a running export to
	// finish before cancelling it and recording it interrupted (default 30s).
	ShutdownGrace time.Duration
	Now           func() time.Time // default time.Now
	Logger        zerolog.Logger
}

// Scheduler runs scheduled exports; see the package doc. It is safe for concurrent use; Tick
// calls never overlap (a tick that finds another running returns at once).
type Scheduler struct {
	pool *pgxpool.Pool
	exp  exporter
	ver  *Verifier
	cfg  SchedulerConfig
	log  zerolog.Logger
	mu   sync.Mutex // held while a tick runs
}

// Run statuses recorded in audit_runs.
const (
	RunStarted     = "started"
	RunSucceeded   = "succeeded"
	RunFailed      = "failed"
	RunInterrupted = "interrupted"
)

// NewScheduler returns a scheduler that records runs through pool (logbook_auditor may) and
// exports with exp. Errors: ErrInvalid when Spec or Dest is missing.
func NewScheduler(pool *pgxpool.Pool, exp exporter, ver *Verifier, cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.Spec == nil || cfg.Dest == nil || exp == nil || ver == nil {
		return nil, fmt.Errorf("new audit scheduler: %w: spec, destination, exporter and verifier are required", ErrInvalid)
	}
	if _, err := ParseFormat(string(cfg.Format)); err != nil {
		return nil, fmt.Errorf("new audit scheduler: %w", err)
	}
	cfg.Name = cmp.Or(cfg.Name, "default")
	cfg.Node = cmp.Or(cfg.Node, "logbook")
	cfg.MaxCatchUp = cmp.Or(cfg.MaxCatchUp, 100)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, 30*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scheduler{pool: pool, exp: exp, ver: ver, cfg: cfg,
		log: cfg.Logger.With().Str("component", "audit-scheduler").Str("schedule", cfg.Name).Logger()}, nil
}

// Run ticks on the schedule (and once at start, to catch up missed windows) until ctx is
// done. Then it stops ticking and waits for a running export; after ShutdownGrace it cancels
// it, and the run is recorded interrupted. A failing or panicking run is logged and recorded
// and never ends Run; it returns nil after a clean shutdown.
func (s *Scheduler) Run(ctx context.Context) error {
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	logger := cronLogger{s.log}
	c := cron.New(cron.WithLocation(time.UTC), cron.WithLogger(logger),
		cron.WithChain(cron.Recover(logger), cron.SkipIfStillRunning(logger)))
	c.Schedule(s.cfg.Spec, cron.FuncJob(func() { s.tickSafely(jobCtx) }))
	var wg sync.WaitGroup
	wg.Go(func() { s.tickSafely(jobCtx) }) // catch up at start
	c.Start()
	<-ctx.Done()
	stopped := c.Stop()
	done := make(chan struct{})
	go func() {
		<-stopped.Done()
		wg.Wait()
		close(done)
	}()
	grace := time.NewTimer(s.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		s.log.Warn().Dur("grace", s.cfg.ShutdownGrace).Msg("audit export still running at shutdown; interrupting it")
		cancelJobs()
		<-done
	}
	return nil
}

// tickSafely runs a tick, skipping it when one is running, and turns a panic into a log line
// with the stack.
func (s *Scheduler) tickSafely(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("audit tick panicked")
		}
	}()
	if _, err := s.Tick(ctx, s.cfg.Now()); err != nil && !errors.Is(err, ErrBusy) {
		s.log.Error().Err(err).Msg("audit tick failed; it is retried on the next tick")
	}
}

// ErrBusy: another tick (in this process or another replica) holds the schedule.
var ErrBusy = errors.New("audit schedule busy")

// Run is one recorded export run.
type Run struct {
	ID     uuid.UUID
	Window Window
	Status string
	Events int64
	Files  []string
	Err    string
}

// Tick exports every window due at now, or at the database's clock when that is earlier
// (catching up missed ones, oldest first), writes a
// checkpoint after each, then applies retention when configured. It stops at the first
// failed window, which the next tick retries. It returns the runs it made, and ErrBusy
// when another tick holds the schedule (here or on another replica). A panic in an export
// is recovered, logged with its stack and recorded as a failed run.
func (s *Scheduler) Tick(ctx context.Context, now time.Time) ([]Run, error) {
	if !s.mu.TryLock() {
		return nil, ErrBusy
	}
	defer s.mu.Unlock()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit tick: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, $2))`, s.cfg.Name, session.LockScheduleSeed).Scan(&locked); err != nil {
		return nil, fmt.Errorf("audit tick: lock schedule %s: %w", s.cfg.Name, err)
	}
	if !locked {
		return nil, ErrBusy
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, $2))`, s.cfg.Name, session.LockScheduleSeed); err != nil {
			// A lock we cannot release must not stay on a pooled connection.
			conn.Conn().Close(uctx) //nolint:errcheck
		}
	}()

	// A window is over by the database's clock, which stamps the events (created_at), not
	// by this host's: a host running fast would close a window while events still land in
	// it, and they would appear in no export. A host running slow only exports later.
	var lastEnd *time.Time
	var dbNow time.Time
	if err := conn.QueryRow(ctx, `SELECT max(window_end), clock_timestamp() FROM audit_runs WHERE schedule = $1 AND status = 'succeeded'`,
		s.cfg.Name).Scan(&lastEnd, &dbNow); err != nil {
		return nil, fmt.Errorf("audit tick: last run: %w", err)
	}
	if now.After(dbNow) {
		if skew := now.Sub(dbNow); skew > time.Second {
			s.log.Warn().Dur("ahead", skew).Msg("this host's clock is ahead of the database's; windows close by the database's")
		}
		now = dbNow
	}
	var start time.Time
	if lastEnd != nil {
		start = *lastEnd
	}
	var runs []Run
	for _, w := range windowsDue(s.cfg.Spec, start, now, s.cfg.MaxCatchUp) {
		r := s.runWindow(ctx, w)
		runs = append(runs, r)
		if r.Status != RunSucceeded {
			return runs, fmt.Errorf("audit run %s of window %s: %s: %s", r.ID, w, r.Status, r.Err)
		}
	}
	if s.cfg.Retention != nil {
		ps, err := s.cfg.Retention.Purge(ctx, Who{Name: "retention", System: true}, now)
		if err != nil {
			return runs, fmt.Errorf("audit tick: %w", err)
		}
		if len(ps) > 0 {
			s.log.Info().Int("sessions", len(ps)).Msg("retention purged expired sessions")
		}
	}
	return runs, nil
}

const sqlRecordRun = `
INSERT INTO audit_runs (run_id, schedule, window_start, window_end, status, node, events, files, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// runWindow exports one window and records the run; a panic becomes a failed run.
func (s *Scheduler) runWindow(ctx context.Context, w Window) (r Run) {
	id, err := uuid.NewV7()
	if err != nil {
		return Run{Window: w, Status: RunFailed, Err: err.Error()}
	}
	r = Run{ID: id, Window: w, Status: RunStarted}
	log := s.log.With().Str("run_id", id.String()).Stringer("window", w).Logger()
	if err := s.checkCollision(ctx, w, id); err != nil {
		// Recorded failed without a started row: the run wrote nothing, and no retry may
		// take the objects there for its own leftovers.
		r.Status, r.Err = RunFailed, err.Error()
		log.Error().Err(err).Msg("audit export refused")
		if err := s.record(ctx, r); err != nil {
			log.Error().Err(err).Msg("record audit run outcome")
		}
		return r
	}
	if err := s.record(ctx, r); err != nil {
		r.Status, r.Err = RunFailed, err.Error()
		log.Error().Err(err).Msg("audit run not started")
		return r
	}
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("audit export panicked")
			r.Status, r.Err = RunFailed, fmt.Sprintf("panic: %v", p)
		}
		if err := s.record(ctx, r); err != nil {
			log.Error().Err(err).Str("status", r.Status).Msg("record audit run outcome")
			if r.Status == RunSucceeded {
				r.Status, r.Err = RunFailed, err.Error()
			}
		}
	}()
	files, events, err := s.export(ctx, w, id)
	r.Files, r.Events = files, events
	switch {
	case err != nil && ctx.Err() != nil:
		r.Status, r.Err = RunInterrupted, err.Error()
		log.Warn().Err(err).Msg("audit export interrupted")
	case err != nil:
		r.Status, r.Err = RunFailed, err.Error()
		log.Error().Err(err).Msg("audit export failed")
	default:
		r.Status = RunSucceeded
		log.Info().Int64("events", events).Msg("audit export done")
	}
	return r
}

func (s *Scheduler) record(ctx context.Context, r Run) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var files []byte
	if r.Files != nil {
		files, _ = json.Marshal(r.Files)
	}
	var events *int64
	var errText *string
	if r.Status != RunStarted {
		events = &r.Events
	}
	if r.Err != "" {
		errText = &r.Err
	}
	_, err := s.pool.Exec(ctx, sqlRecordRun, r.ID, s.cfg.Name, r.Window.Start, r.Window.End, r.Status, s.cfg.Node,
		events, files, errText)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && r.Status == RunSucceeded {
		return fmt.Errorf("record run %s: window %s was already exported by another run", r.ID, r.Window)
	}
	if err != nil {
		return fmt.Errorf("record run %s (%s): %w", r.ID, r.Status, err)
	}
	return nil
}

// exportJob is one export of a window: its prefix and actors.
type exportJob struct {
	prefix string
	actors []string
}

// jobs are the exports of window w, each under its own prefix: the window's, or one per actor
// below it.
func (s *Scheduler) jobs(w Window) []exportJob {
	base := s.cfg.Prefix
	if base != "" {
		base += "/"
	}
	base += s.cfg.Name + "/" + w.key()
	if !s.cfg.PerActor || len(s.cfg.Actors) == 0 {
		return []exportJob{{prefix: base, actors: s.cfg.Actors}}
	}
	var jobs []exportJob
	for _, a := range s.cfg.Actors {
		jobs = append(jobs, exportJob{prefix: base + "/actor=" + a, actors: []string{a}})
	}
	return jobs
}

const sqlRunStarted = `
SELECT EXISTS (SELECT 1 FROM audit_runs WHERE schedule = $1 AND window_start = $2 AND window_end = $3 AND status = 'started' AND run_id <> $4)`

// startedBefore reports whether a run of window w other than run has started (and, the
// window being due, not succeeded): what is under its prefixes is what that run left.
func (s *Scheduler) startedBefore(ctx context.Context, w Window, run uuid.UUID) (bool, error) {
	var started bool
	if err := s.pool.QueryRow(ctx, sqlRunStarted, s.cfg.Name, w.Start, w.End, run).Scan(&started); err != nil {
		return false, fmt.Errorf("export %s: earlier runs: %w", w, err)
	}
	return started, nil
}

// checkCollision fails (ErrNotEmpty) when a prefix of window w holds objects and no run of
// the window has started before: they are someone else's, and a collision is an error, never
// an overwrite.
func (s *Scheduler) checkCollision(ctx context.Context, w Window, run uuid.UUID) error {
	started, err := s.startedBefore(ctx, w, run)
	if err != nil || started {
		return err
	}
	for _, j := range s.jobs(w) {
		if err := checkEmpty(ctx, s.cfg.Dest, normPrefix(j.prefix), false); err != nil {
			return fmt.Errorf("export %s to %s: %w", w, j.prefix, err)
		}
	}
	return nil
}

// export writes the window's exports and a checkpoint, and returns the object keys written.
// What an earlier run of the window left under its prefixes (checkCollision let it through)
// is cleared first, so the new export never mixes with it.
func (s *Scheduler) export(ctx context.Context, w Window, run uuid.UUID) ([]string, int64, error) {
	started, err := s.startedBefore(ctx, w, run)
	if err != nil {
		return nil, 0, err
	}
	jobs := s.jobs(w)
	var keys []string
	var events int64
	for _, j := range jobs {
		q := Query{Actors: j.actors, Channel: s.cfg.Channel, From: w.Start, To: w.End, Format: s.cfg.Format,
			Zone: s.cfg.Spec.Location.String()}
		if _, err := RecordAccess(ctx, s.pool, Who{Name: "scheduler:" + s.cfg.Name, System: true}, "export", q.filters()); err != nil {
			return keys, events, err
		}
		if started { // by a run before this one, which has recorded its start too
			if err := ClearExport(ctx, s.cfg.Dest, j.prefix); err != nil {
				return keys, events, fmt.Errorf("export %s: what an earlier run left: %w", w, err)
			}
		}
		m, err := s.exp.Export(ctx, q, s.cfg.Dest, j.prefix)
		if err != nil {
			return keys, events, err
		}
		if !m.WindowClosed {
			// Never record a window done that the database has not finished writing.
			return keys, events, fmt.Errorf("export %s: the window is still open at the database's clock (as of %s)", w, m.AsOf.Format(time.RFC3339Nano))
		}
		events += m.Counts.Events
		for _, f := range m.Files {
			keys = append(keys, j.prefix+"/"+f.Name)
		}
		keys = append(keys, j.prefix+"/"+ManifestName)
	}
	cp, err := s.ver.TakeCheckpoint(ctx)
	if err != nil {
		return keys, events, err
	}
	cpKey := s.cfg.Prefix
	if cpKey != "" {
		cpKey += "/"
	}
	cpKey += "checkpoints/" + s.cfg.Name + "/" + w.End.UTC().Format("20060102T150405Z") + ".json"
	if err := WriteCheckpoint(ctx, s.cfg.Dest, cpKey, cp, s.cfg.SigningKey); err != nil {
		return keys, events, err
	}
	return append(keys, cpKey), events, nil
}

// filters renders the query for an access record.
func (q Query) filters() map[string]any {
	f := map[string]any{"from": q.From.UTC(), "to": q.To.UTC(), "format": cmp.Or(q.Format, JSONL)}
	if len(q.Actors) > 0 {
		f["actors"] = q.Actors
	}
	if q.Channel != "" {
		f["channel"] = q.Channel
	}
	return f
}

// Filters renders the query as the filters of an access record.
func (q Query) Filters() map[string]any { return q.filters() }

// Runs lists the recorded runs of a schedule, one per run with its latest status, oldest
// window first.
func Runs(ctx context.Context, db dbtx, schedule string) ([]Run, error) {
	const q = `
SELECT DISTINCT ON (run_id) run_id, window_start, window_end, status, coalesce(events, 0), coalesce(error, '')
FROM audit_runs WHERE schedule = $1
ORDER BY run_id, CASE status WHEN 'started' THEN 0 ELSE 1 END DESC`
	rows, err := db.Query(ctx, q, schedule)
	if err != nil {
		return nil, fmt.Errorf("list runs of %s: %w", schedule, err)
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Run, error) {
		var run Run
		err := r.Scan(&run.ID, &run.Window.Start, &run.Window.End, &run.Status, &run.Events, &run.Err)
		run.Window.Start, run.Window.End = run.Window.Start.UTC(), run.Window.End.UTC()
		return run, err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs of %s: %w", schedule, err)
	}
	// run ids are UUIDv7: time-ordered; sort by window for readers.
	sortRuns(runs)
	return runs, nil
}

func sortRuns(runs []Run) {
	slices.SortFunc(runs, func(a, b Run) int {
		return cmp.Or(a.Window.Start.Compare(b.Window.Start), strings.Compare(a.ID.String(), b.ID.String()))
	})
}

// cronLogger adapts zerolog to cron.Logger.
type cronLogger struct{ log zerolog.Logger }

func (l cronLogger) Info(msg string, kv ...any) {
	l.log.Debug().Fields(kv).Msg("cron: " + msg)
}

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error().Err(err).Fields(kv).Str("stack", string(debug.Stack())).Msg("cron: " + msg)
}
