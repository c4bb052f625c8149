package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sessions logbook starts itself keep their own record (migration 00210, issue 48): each
// opening's post as the log knows it (opening_posts), each run of a schedule's tick or a
// hook's delivery (automation_runs), and each pause and resume (automation_pauses).

// OpeningRecord is what the log knows of an opening's post (Store.OpeningPosts).
type OpeningRecord struct {
	// TS is the post's ts when an attempt recorded it ("" when none did).
	TS string
	// Posting are the times of attempts that were about to post and recorded no ts: each may
	// have posted (a crash, or the database gone, between Slack's answer and the record).
	Posting []time.Time
}

const sqlOpeningPost = `INSERT INTO opening_posts (kind, key, marker, state, channel, ts) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING`

// RecordPosting records that attempt marker of opening (kind, key) is about to post in
// channel: appended before chat.postMessage, so a retry knows whether anything may have been
// sent. Errors: ErrInvalidEvent when a name is empty.
func (s *Store) RecordPosting(ctx context.Context, kind, key, marker, channel string) error {
	if kind == "" || key == "" || marker == "" {
		return fmt.Errorf("record the posting of %s %s: %w: kind, key and marker are required", kind, key, ErrInvalidEvent)
	}
	if _, err := s.pool.Exec(ctx, sqlOpeningPost, kind, key, marker, "posting", channel, ""); err != nil {
		return fmt.Errorf("record the posting of %s %s: %w", kind, key, err)
	}
	return nil
}

// RecordPosted records that attempt marker of opening (kind, key) posted ts in channel.
// Recording it twice keeps the first. Errors: ErrInvalidEvent when a name or ts is empty.
func (s *Store) RecordPosted(ctx context.Context, kind, key, marker, channel, ts string) error {
	if kind == "" || key == "" || marker == "" || ts == "" {
		return fmt.Errorf("record the post of %s %s: %w: kind, key, marker and ts are required", kind, key, ErrInvalidEvent)
	}
	if _, err := s.pool.Exec(ctx, sqlOpeningPost, kind, key, marker, "posted", channel, ts); err != nil {
		return fmt.Errorf("record the post of %s %s: %w", kind, key, err)
	}
	return nil
}

const sqlOpeningPosts = `SELECT state, ts, at FROM opening_posts p WHERE kind = $1 AND key = $2
  AND (state = 'posted' OR NOT EXISTS (SELECT 1 FROM opening_posts q
       WHERE q.kind = p.kind AND q.key = p.key AND q.marker = p.marker AND q.state = 'posted'))
ORDER BY at`

// OpeningPosts is what the log knows of opening (kind, key)'s post: the first recorded ts, and
// the attempts that were about to post and recorded none.
func (s *Store) OpeningPosts(ctx context.Context, kind, key string) (OpeningRecord, error) {
	var r OpeningRecord
	rows, err := s.pool.Query(ctx, sqlOpeningPosts, kind, key)
	if err != nil {
		return r, fmt.Errorf("read the post of %s %s: %w", kind, key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var state, ts string
		var at time.Time
		if err := rows.Scan(&state, &ts, &at); err != nil {
			return r, fmt.Errorf("read the post of %s %s: %w", kind, key, err)
		}
		if state == "posted" && r.TS == "" {
			r.TS = ts
		} else if state == "posting" {
			r.Posting = append(r.Posting, at)
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read the post of %s %s: %w", kind, key, err)
	}
	return r, nil
}

// Kinds of automation (automation_runs.kind, automation_pauses.kind).
const (
	AutomationSchedule = "schedule"
	AutomationHook     = "hook"
)

// AutomationRun is one ended run of a schedule's tick or a hook's delivery.
type AutomationRun struct {
	ID            int64
	Kind, Name    string // AutomationSchedule and the schedule's id, or AutomationHook and its name
	Team, Channel string
	Ref           string // the tick's id, or the delivery's
	OK            bool
	Late          bool   // a tick that ran after its grace
	Error         string // why it failed ("" when OK)
	TS            string // its post
	Session       ID     // uuid.Nil when it started none
	At            time.Time
	// CostMicros is its session's model spend so far, in millionths of the prices' currency
	// (read by AutomationRuns).
	CostMicros int64
}

const sqlRecordRun = `INSERT INTO automation_runs (kind, name, team, channel, ref, ok, late, error, ts, session_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id, at`

// sqlFailuresInARow counts the failed runs of (kind, name) after its newest ok run and its
// newest resume.
const sqlFailuresInARow = `SELECT count(*) FROM automation_runs r WHERE r.kind = $1 AND r.name = $2 AND NOT r.ok
  AND r.id > coalesce((SELECT max(o.id) FROM automation_runs o WHERE o.kind = $1 AND o.name = $2 AND o.ok), 0)
  AND r.at > coalesce((SELECT max(p.at) FROM automation_pauses p WHERE p.kind = $1 AND p.name = $2 AND p.action = 'resumed'), '-infinity')`

// RecordRun records run r and returns how many runs of its schedule or hook have failed in a
// row since its last ok run or resume (0 when r is ok). Errors: ErrInvalidEvent when kind or
// name is empty.
func (s *Store) RecordRun(ctx context.Context, r AutomationRun) (AutomationRun, int, error) {
	if (r.Kind != AutomationSchedule && r.Kind != AutomationHook) || r.Name == "" {
		return r, 0, fmt.Errorf("record a run: %w: kind %q and a name are required", ErrInvalidEvent, r.Kind)
	}
	var sid *ID
	if r.Session != (ID{}) {
		sid = &r.Session
	}
	if err := s.pool.QueryRow(ctx, sqlRecordRun, r.Kind, clip(r.Name, 100), r.Team, r.Channel, clip(r.Ref, 400), r.OK, r.Late,
		clipReason(r.Error), r.TS, sid).Scan(&r.ID, &r.At); err != nil {
		return r, 0, fmt.Errorf("record a run of %s %s: %w", r.Kind, r.Name, err)
	}
	if r.OK {
		return r, 0, nil
	}
	var n int
	if err := s.pool.QueryRow(ctx, sqlFailuresInARow, r.Kind, r.Name).Scan(&n); err != nil {
		return r, 0, fmt.Errorf("count the failures of %s %s: %w", r.Kind, r.Name, err)
	}
	return r, n, nil
}

// RunFilter selects runs (AutomationRuns); empty fields select all.
type RunFilter struct {
	Kind, Name, Channel string
	// PerName keeps the newest PerName runs of each schedule or hook (0: all).
	PerName int
	// Limit keeps the newest Limit runs in all (default 200).
	Limit int
}

const sqlRuns = `SELECT id, kind, name, team, channel, ref, ok, late, error, ts, session_id, at, cost FROM (
  SELECT r.id, r.kind, r.name, r.team, r.channel, r.ref, r.ok, r.late, r.error, r.ts, r.session_id, r.at,
         coalesce((SELECT sum(m.cost_micros) FROM model_spend m WHERE m.session_id = r.session_id AND (m.kind = 'charge' OR
           (m.kind = 'hold' AND NOT EXISTS (SELECT 1 FROM model_spend c WHERE c.call_id = m.call_id AND c.kind = 'charge')))), 0)::bigint AS cost,
         row_number() OVER (PARTITION BY r.kind, r.name ORDER BY r.id DESC) AS n
  FROM automation_runs r
  WHERE ($1 = '' OR r.kind = $1) AND ($2 = '' OR r.name = $2) AND ($3 = '' OR r.channel = $3)
) x WHERE $4 = 0 OR n <= $4
ORDER BY id DESC LIMIT $5`

// AutomationRuns returns the runs f selects, newest first, each with its session's model
// spend.
func (s *Store) AutomationRuns(ctx context.Context, f RunFilter) ([]AutomationRun, error) {
	if f.Limit <= 0 {
		f.Limit = 200
	}
	rows, err := s.pool.Query(ctx, sqlRuns, f.Kind, f.Name, f.Channel, f.PerName, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AutomationRun, error) {
		var r AutomationRun
		var sid *ID
		err := row.Scan(&r.ID, &r.Kind, &r.Name, &r.Team, &r.Channel, &r.Ref, &r.OK, &r.Late, &r.Error, &r.TS, &sid, &r.At, &r.CostMicros)
		if sid != nil {
			r.Session = *sid
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	return out, nil
}

// Pause actions (automation_pauses.action).
const (
	Paused  = "paused"
	Resumed = "resumed"
)

// Pause is a schedule's or hook's newest pause or resume.
type Pause struct {
	Kind, Name string
	Channel    string // the schedule's or hook's channel
	Action     string // Paused or Resumed
	Actor      string // "system" for a pause after failures in a row; the admin who resumed
	Reason     string
	At         time.Time
}

const sqlLockAutomation = `SELECT pg_advisory_xact_lock(hashtextextended($1, $2))`

const sqlNewestPause = `SELECT kind, name, channel, action, actor, reason, at FROM automation_pauses
WHERE kind = $1 AND name = $2 ORDER BY id DESC LIMIT 1`

// sqlRecordPause records a pause or resume and returns it with its channel's ledger.
const sqlRecordPause = `INSERT INTO automation_pauses (kind, name, channel, action, actor, reason, at)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, clock_timestamp())) RETURNING id, at, logbook_ledger('', channel)`

// PauseAutomation records that logbook paused (p.Kind, p.Name) in p.Channel itself, and why
// (p.Reason), unless it is paused already: ok says this call paused it (one caller across
// replicas). The actor is the system.
func (s *Store) PauseAutomation(ctx context.Context, p Pause) (Pause, bool, error) {
	p.Action, p.Actor, p.At = Paused, "system", time.Time{}
	return s.changePause(ctx, p)
}

// ResumeAutomation records that p.Actor resumed (p.Kind, p.Name) at p.At (the database's
// clock, Now: a schedule ticks on from then; zero: the database's clock now). Errors:
// ErrNotFound when it is not paused.
func (s *Store) ResumeAutomation(ctx context.Context, p Pause) (Pause, error) {
	p.Action = Resumed
	p, ok, err := s.changePause(ctx, p)
	if err == nil && !ok {
		err = fmt.Errorf("resume %s %s: %w: it is not paused", p.Kind, p.Name, ErrNotFound)
	}
	return p, err
}

func (s *Store) changePause(ctx context.Context, p Pause) (Pause, bool, error) {
	if (p.Kind != AutomationSchedule && p.Kind != AutomationHook) || p.Name == "" || p.Actor == "" || p.Channel == "" {
		return p, false, fmt.Errorf("%s %s %s: %w: kind, name, channel and actor are required", p.Action, p.Kind, p.Name, ErrInvalidEvent)
	}
	ok := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockAutomation, p.Kind+"/"+p.Name, LockAutomationSeed); err != nil {
			return err
		}
		var cur Pause
		err := tx.QueryRow(ctx, sqlNewestPause, p.Kind, p.Name).Scan(&cur.Kind, &cur.Name, &cur.Channel, &cur.Action, &cur.Actor, &cur.Reason, &cur.At)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		paused := err == nil && cur.Action == Paused
		if (p.Action == Paused) == paused {
			return nil
		}
		ok = true
		var at *time.Time
		if !p.At.IsZero() {
			u := p.At.UTC()
			at = &u
		}
		var id int64
		var ledger ID
		p.Reason = clipReason(p.Reason)
		if err := tx.QueryRow(ctx, sqlRecordPause, p.Kind, p.Name, p.Channel, p.Action, p.Actor, p.Reason, at).Scan(&id, &p.At, &ledger); err != nil {
			return err
		}
		// On the channel's ledger, in the same transaction: a pause changes what the channel's
		// agent does as a removal does.
		typ, via := TypeAutomationResumed, ViaSlash
		if p.Action == Paused {
			typ, via = TypeAutomationPaused, ViaLogbook
		}
		_, err = s.appendLedger(ctx, tx, ledger, typ, ledgerActor(p.Actor, via), "pause/"+strconv.FormatInt(id, 10),
			AutomationPauseChanged{ID: id, Kind: p.Kind, Name: p.Name, By: p.Actor, Reason: p.Reason, Via: via, At: p.At})
		return err
	})
	if err != nil {
		return p, false, fmt.Errorf("%s %s %s: %w", p.Action, p.Kind, p.Name, err)
	}
	return p, ok, nil
}

const sqlPauses = `SELECT DISTINCT ON (kind, name) kind, name, channel, action, actor, reason, at FROM automation_pauses
WHERE ($1 = '' OR kind = $1) ORDER BY kind, name, id DESC`

// Pauses returns the newest pause or resume of every schedule and hook of kind ("" for both)
// that has one, by kind/name ("schedule/3", "hook/alerts").
func (s *Store) Pauses(ctx context.Context, kind string) (map[string]Pause, error) {
	rows, err := s.pool.Query(ctx, sqlPauses, kind)
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Pause, error) {
		var p Pause
		err := row.Scan(&p.Kind, &p.Name, &p.Channel, &p.Action, &p.Actor, &p.Reason, &p.At)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	out := make(map[string]Pause, len(ps))
	for _, p := range ps {
		out[p.Kind+"/"+p.Name] = p
	}
	return out, nil
}
