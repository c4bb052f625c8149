package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schedule is a schedule an admin added (`/logbook schedule add`, bot/schedule): each tick of
// Spec posts in Channel and runs a session on Prompt. Removed says it no longer ticks.
type Schedule struct {
	ID            int64
	Team, Channel string
	Spec, Prompt  string
	AddedBy       string
	AddedAt       time.Time
	Removed       bool
	RemovedBy     string
	RemovedAt     time.Time
	// RemovedWhy is why logbook stopped it itself (RemovedBy "system"); "" when an admin
	// removed it.
	RemovedWhy string
	// LastTick is the newest tick claimed (zero: none yet).
	LastTick time.Time
}

// Tick is one claimed tick of a schedule (migration 00100: schedule_ticks and its attempts).
type Tick struct {
	Schedule Schedule
	At       time.Time // the tick's time, as the spec gives it
	Late     bool      // it ran after its grace
	Missed   int       // older ticks of the same outage that were skipped
	Attempt  int       // 1 for the claim, then one more per retry after a dead replica
	// ClaimedAt is when the tick was first claimed: a retry looks for the first attempt's post
	// from then on.
	ClaimedAt time.Time
}

// ID is the tick's name, the same on every replica: "<schedule id>/<unix seconds>".
func (t Tick) ID() string { return fmt.Sprintf("%d/%d", t.Schedule.ID, t.At.Unix()) }

// Now is the database's clock (clock_timestamp()): the one clock every replica reads, so a
// replica whose own clock is off neither runs ticks early nor takes over attempts still
// running.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

const sqlAddSchedule = `INSERT INTO schedules (team, channel, spec, prompt, added_by) VALUES ($1, $2, $3, $4, $5)
RETURNING id, added_at, logbook_ledger($1, $2)`

// AddSchedule records a new schedule (a schedule_added event of the channel's ledger and, in
// the same transaction, its row) and returns it with its id. Errors: ErrInvalidEvent when a
// field is empty.
func (s *Store) AddSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	if sc.Team == "" || sc.Channel == "" || sc.Spec == "" || sc.Prompt == "" || sc.AddedBy == "" {
		return sc, fmt.Errorf("add schedule: %w: team, channel, spec, prompt and who added it are required", ErrInvalidEvent)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ledger ID
		if err := tx.QueryRow(ctx, sqlAddSchedule, sc.Team, sc.Channel, sc.Spec, sc.Prompt, sc.AddedBy).Scan(&sc.ID, &sc.AddedAt, &ledger); err != nil {
			return err
		}
		_, err := s.appendLedger(ctx, tx, ledger, TypeScheduleAdded, ledgerActor(sc.AddedBy, ViaSlash), "schedule/"+strconv.FormatInt(sc.ID, 10),
			ScheduleAdded{ID: sc.ID, Team: sc.Team, Spec: sc.Spec, Prompt: sc.Prompt, By: sc.AddedBy, Via: ViaSlash, At: sc.AddedAt})
		return err
	})
	if err != nil {
		return sc, fmt.Errorf("add schedule in %s: %w", sc.Channel, err)
	}
	return sc, nil
}

// sqlRemoveSchedule records a removal (by a person, or by logbook with a reason) and returns
// the schedule's channel ledger.
const sqlRemoveSchedule = `WITH sc AS (SELECT id, team, channel FROM schedules WHERE id = $1 AND team = $2),
r AS (
    INSERT INTO schedule_removals (schedule_id, removed_by, reason) SELECT id, $3, $4 FROM sc
    ON CONFLICT (schedule_id) DO NOTHING RETURNING removed_at
)
SELECT r.removed_at, logbook_ledger(sc.team, sc.channel) FROM r, sc`

// removeSchedule appends the schedule_removed event and its row, in one transaction.
func (s *Store) removeSchedule(ctx context.Context, team string, id int64, who, reason, via string) (time.Time, error) {
	var at time.Time
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ledger ID
		if err := tx.QueryRow(ctx, sqlRemoveSchedule, id, team, who, reason).Scan(&at, &ledger); err != nil {
			return err
		}
		_, err := s.appendLedger(ctx, tx, ledger, TypeScheduleRemoved, ledgerActor(who, via), "unschedule/"+strconv.FormatInt(id, 10),
			ScheduleRemoved{Schedule: id, By: who, Reason: reason, Via: via, At: at})
		return err
	})
	return at, err
}

// RemoveSchedule records that who removed schedule id of team (a schedule_removed event of
// the channel's ledger and its row). Errors: ErrNotFound when team has no such schedule or it
// was removed already.
func (s *Store) RemoveSchedule(ctx context.Context, team string, id int64, who string) (time.Time, error) {
	at, err := s.removeSchedule(ctx, team, id, who, "", ViaSlash)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, fmt.Errorf("remove schedule %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return at, fmt.Errorf("remove schedule %d: %w", id, err)
	}
	return at, nil
}

// StopSchedule records that logbook stopped schedule id of team itself (removed_by system),
// and why, on the channel's ledger as RemoveSchedule does. Errors: ErrNotFound when team has
// no such schedule or it was removed already.
func (s *Store) StopSchedule(ctx context.Context, team string, id int64, reason string) error {
	_, err := s.removeSchedule(ctx, team, id, "system", clipReason(reason), ViaLogbook)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("stop schedule %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("stop schedule %d: %w", id, err)
	}
	return nil
}

const sqlSchedules = `SELECT s.id, s.team, s.channel, s.spec, s.prompt, s.added_by, s.added_at,
       r.removed_by, r.removed_at, r.reason,
       (SELECT max(t.tick) FROM schedule_ticks t WHERE t.schedule_id = s.id)
FROM schedules s LEFT JOIN schedule_removals r ON r.schedule_id = s.id
WHERE ($1 = '' OR s.team = $1) AND ($2 = '' OR s.channel = $2) AND ($3 OR r.schedule_id IS NULL)
ORDER BY s.id`

// Schedules returns the schedules of team and channel ("" for every team or channel), oldest
// first; removed ones too when withRemoved is set.
func (s *Store) Schedules(ctx context.Context, team, channel string, withRemoved bool) ([]Schedule, error) {
	rows, err := s.pool.Query(ctx, sqlSchedules, team, channel, withRemoved)
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Schedule, error) {
		var sc Schedule
		var by, reason *string
		var at, last *time.Time
		err := row.Scan(&sc.ID, &sc.Team, &sc.Channel, &sc.Spec, &sc.Prompt, &sc.AddedBy, &sc.AddedAt, &by, &at, &reason, &last)
		if by != nil {
			sc.Removed, sc.RemovedBy, sc.RemovedAt, sc.RemovedWhy = true, *by, *at, *reason
		}
		if last != nil {
			sc.LastTick = *last
		}
		return sc, err
	})
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", err)
	}
	return out, nil
}

// sqlLockScheduleTicks serialises the claims of one schedule's ticks (transaction-scoped).
const sqlLockScheduleTicks = `SELECT pg_advisory_xact_lock(hashtextextended($1::bigint::text, $2))`

// sqlClaimTick claims a tick of a schedule that is still there, when no tick as new or newer
// is claimed: ticks are claimed in order, once each.
const sqlClaimTick = `INSERT INTO schedule_ticks (schedule_id, tick, late, missed, claimed_by)
SELECT s.id, $2, $3, $4, $5 FROM schedules s
WHERE s.id = $1
  AND NOT EXISTS (SELECT 1 FROM schedule_removals r WHERE r.schedule_id = s.id)
  AND NOT EXISTS (SELECT 1 FROM schedule_ticks t WHERE t.schedule_id = s.id AND t.tick >= $2)
ON CONFLICT DO NOTHING
RETURNING claimed_at`

const sqlFirstAttempt = `INSERT INTO schedule_tick_attempts (schedule_id, tick, attempt, owner, expires_at) VALUES ($1, $2, 1, $3, $4)`

// ClaimTick claims tick t (t.Schedule.ID, t.At, t.Late, t.Missed) for owner until expires:
// exactly one caller across replicas gets ok. It is refused (ok false, no error) when the tick,
// or a newer one, is claimed already, or the schedule was removed.
func (s *Store) ClaimTick(ctx context.Context, t Tick, owner string, expires time.Time) (Tick, bool, error) {
	ok := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockScheduleTicks, t.Schedule.ID, LockScheduleTicksSeed); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, sqlClaimTick, t.Schedule.ID, t.At.UTC(), t.Late, t.Missed, owner).Scan(&t.ClaimedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlFirstAttempt, t.Schedule.ID, t.At.UTC(), owner, expires.UTC()); err != nil {
			return err
		}
		ok, t.Attempt = true, 1
		return nil
	})
	if err != nil {
		return t, false, fmt.Errorf("claim tick %s: %w", t.ID(), err)
	}
	return t, ok, nil
}

// MaxTickAttempts is how many attempts a tick gets: after that it is left unposted (its
// channel refuses the post, say), and the schedule's next tick runs as usual.
const MaxTickAttempts = 5

// sqlStaleTicks are claimed ticks without a run whose newest attempt expired before $1, below
// MaxTickAttempts, whose schedule is still there, and which are newer than $2 or their
// schedule's newest, oldest first. The candidates are read from the tick index and each
// schedule's newest tick, not from every tick ever claimed.
const sqlStaleTicks = `WITH cand AS (
  SELECT schedule_id, tick FROM schedule_ticks WHERE tick > $2
  UNION
  SELECT n.schedule_id, n.tick FROM schedules s
  JOIN LATERAL (SELECT t.schedule_id, t.tick FROM schedule_ticks t WHERE t.schedule_id = s.id ORDER BY t.tick DESC LIMIT 1) n ON true
  WHERE NOT EXISTS (SELECT 1 FROM schedule_removals r WHERE r.schedule_id = s.id)
)
SELECT t.schedule_id, t.tick, t.late, t.missed, t.claimed_at, a.attempt,
       s.team, s.channel, s.spec, s.prompt, s.added_by, s.added_at
FROM cand c
JOIN schedule_ticks t ON t.schedule_id = c.schedule_id AND t.tick = c.tick
JOIN schedules s ON s.id = t.schedule_id
JOIN LATERAL (SELECT attempt, expires_at FROM schedule_tick_attempts a
              WHERE a.schedule_id = t.schedule_id AND a.tick = t.tick ORDER BY attempt DESC LIMIT 1) a ON true
WHERE a.expires_at < $1 AND a.attempt < $3
  AND NOT EXISTS (SELECT 1 FROM schedule_tick_runs r WHERE r.schedule_id = t.schedule_id AND r.tick = t.tick)
  AND NOT EXISTS (SELECT 1 FROM schedule_tick_failures f WHERE f.schedule_id = t.schedule_id AND f.tick = t.tick)
  AND NOT EXISTS (SELECT 1 FROM schedule_removals r WHERE r.schedule_id = t.schedule_id)
ORDER BY t.claimed_at LIMIT 50`

const sqlNextAttempt = `INSERT INTO schedule_tick_attempts (schedule_id, tick, attempt, owner, expires_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`

// RetryTicks takes over the ticks whose post was never recorded and whose last attempt expired
// before now (its replica died, or gave up) — those after since, and any schedule's newest
// (an older one was superseded by a newer tick: a missed tick runs at most once): each is
// returned to one caller only, with its next attempt, owned by owner until expires. A tick
// gets MaxTickAttempts attempts at most.
func (s *Store) RetryTicks(ctx context.Context, owner string, now, since, expires time.Time) ([]Tick, error) {
	rows, err := s.pool.Query(ctx, sqlStaleTicks, now.UTC(), since.UTC(), MaxTickAttempts)
	if err != nil {
		return nil, fmt.Errorf("read unfinished ticks: %w", err)
	}
	stale, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tick, error) {
		var t Tick
		sc := &t.Schedule
		err := row.Scan(&sc.ID, &t.At, &t.Late, &t.Missed, &t.ClaimedAt, &t.Attempt,
			&sc.Team, &sc.Channel, &sc.Spec, &sc.Prompt, &sc.AddedBy, &sc.AddedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read unfinished ticks: %w", err)
	}
	var out []Tick
	for _, t := range stale {
		t.Attempt++
		tag, err := s.pool.Exec(ctx, sqlNextAttempt, t.Schedule.ID, t.At, t.Attempt, owner, expires.UTC())
		if err != nil {
			return out, fmt.Errorf("retry tick %s: %w", t.ID(), err)
		}
		if tag.RowsAffected() == 1 {
			out = append(out, t)
		}
	}
	return out, nil
}

const sqlTickRun = `INSERT INTO schedule_tick_runs (schedule_id, tick, ts, session_id, found) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`

// TickRan records that tick t was posted at ts and started session id (found: the post was an
// earlier attempt's). Recording it twice keeps the first.
func (s *Store) TickRan(ctx context.Context, t Tick, ts string, id ID, found bool) error {
	if _, err := s.pool.Exec(ctx, sqlTickRun, t.Schedule.ID, t.At.UTC(), ts, id.String(), found); err != nil {
		return fmt.Errorf("record the run of tick %s: %w", t.ID(), err)
	}
	return nil
}

const sqlTickFailed = `INSERT INTO schedule_tick_failures (schedule_id, tick, attempt, error) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`

// TickFailed records that tick t can never be posted (Slack refused it for good: the bot is
// not in the channel, the channel is archived or gone): no attempt follows.
func (s *Store) TickFailed(ctx context.Context, t Tick, why string) error {
	if why == "" {
		why = "refused"
	}
	if _, err := s.pool.Exec(ctx, sqlTickFailed, t.Schedule.ID, t.At.UTC(), max(t.Attempt, 1), clipReason(why)); err != nil {
		return fmt.Errorf("record the failure of tick %s: %w", t.ID(), err)
	}
	return nil
}

// TickRun is a tick with what came of it, as TickRuns lists them.
type TickRun struct {
	Tick
	TS      string // "" while it has not run
	Session ID
	Found   bool
	RanAt   time.Time
	Failed  string // why it can never be posted (TickFailed); "" otherwise
}

const sqlTickRuns = `SELECT t.schedule_id, t.tick, t.late, t.missed, t.claimed_at,
       (SELECT max(attempt) FROM schedule_tick_attempts a WHERE a.schedule_id = t.schedule_id AND a.tick = t.tick),
       r.ts, r.session_id, r.found, r.at, coalesce(f.error, '')
FROM schedule_ticks t LEFT JOIN schedule_tick_runs r ON r.schedule_id = t.schedule_id AND r.tick = t.tick
LEFT JOIN schedule_tick_failures f ON f.schedule_id = t.schedule_id AND f.tick = t.tick
WHERE t.schedule_id = $1 ORDER BY t.tick`

// TickRuns returns every claimed tick of schedule id, oldest first.
func (s *Store) TickRuns(ctx context.Context, id int64) ([]TickRun, error) {
	rows, err := s.pool.Query(ctx, sqlTickRuns, id)
	if err != nil {
		return nil, fmt.Errorf("read the ticks of schedule %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TickRun, error) {
		var r TickRun
		var ts *string
		var sid *ID
		var found *bool
		var at *time.Time
		r.Schedule.ID = id
		err := row.Scan(&r.Schedule.ID, &r.At, &r.Late, &r.Missed, &r.ClaimedAt, &r.Attempt, &ts, &sid, &found, &at, &r.Failed)
		if ts != nil {
			r.TS, r.Session, r.Found, r.RanAt = *ts, *sid, *found, *at
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the ticks of schedule %d: %w", id, err)
	}
	return out, nil
}

// Hook delivery outcomes (hook_deliveries.outcome).
const (
	HookAccepted     = "accepted"
	HookReplay       = "replay"
	HookBadSignature = "bad_signature"
	HookUnknown      = "unknown_hook"
	HookTooLarge     = "too_large"
	HookFailed       = "failed"
)

// HookDelivery is one request to POST /hooks/<name> (bot/hooks).
type HookDelivery struct {
	ID         int64
	Hook       string
	DeliveryID string // X-Logbook-Delivery ("" when absent)
	BodySHA256 string // hex
	BodyBytes  int64
	SignedAt   time.Time // X-Logbook-Timestamp (zero: none)
	Outcome    string
	Channel    string
	RemoteAddr string
	Reason     string
	At         time.Time
	// Of is, for a failed delivery, the accepted one that failed.
	Of int64
	// Set once an accepted delivery has posted and started its session.
	TS      string
	Session ID
}

// sqlLockHook serialises the acceptance of one hook's deliveries (transaction-scoped), so two
// replicas given the same delivery at once accept it once.
const sqlLockHook = `SELECT pg_advisory_xact_lock(hashtextextended($1, $2))`

// sqlMatchHook is a hook_deliveries row d of hook $1 with the same delivery id ($3) or the
// same body signed at the same time ($4, $5), accepted within the window ($2 microseconds
// back from the database's clock).
const sqlMatchHook = `d.hook = $1 AND d.outcome = 'accepted' AND d.at >= clock_timestamp() - $2::bigint * interval '1 microsecond'
  AND (($3 <> '' AND d.delivery_id = $3) OR (d.body_sha256 = $4 AND d.signed_at IS NOT DISTINCT FROM $5))`

// sqlHookSeen finds the newest matching acceptance that did not fail, whether it started its
// session, and whether it is older than the in-flight time ($6 microseconds, by the
// database's clock).
const sqlHookSeen = `SELECT d.id, EXISTS (SELECT 1 FROM hook_delivery_runs r WHERE r.delivery = d.id),
       d.at < clock_timestamp() - $6::bigint * interval '1 microsecond'
FROM hook_deliveries d
WHERE ` + sqlMatchHook + `
  AND NOT EXISTS (SELECT 1 FROM hook_deliveries f WHERE f.of = d.id)
ORDER BY d.id DESC LIMIT 1`

const sqlRecordHook = `INSERT INTO hook_deliveries (hook, delivery_id, body_sha256, body_bytes, outcome, channel, remote_addr, reason, of, signed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id, at`

// AcceptHook records delivery d as accepted unless the hook accepted the same delivery id, or
// the same body signed at the same time (d.SignedAt), within window (a replay: recorded as
// such, accepted false). An accepted one that neither started its session nor failed counts
// only while younger than inFlight (its replica may still be starting it); an older one (its
// replica died) lets d in; its earlier post, if any, is found in the log by the opening's key
// (bot.Starter). Ages are measured by the database's clock. Errors: ErrInvalidEvent when the hook is unnamed.
func (s *Store) AcceptHook(ctx context.Context, d HookDelivery, window, inFlight time.Duration) (HookDelivery, bool, error) {
	if d.Hook == "" {
		return d, false, fmt.Errorf("accept hook delivery: %w: no hook name", ErrInvalidEvent)
	}
	var signed *time.Time
	if !d.SignedAt.IsZero() {
		u := d.SignedAt.UTC()
		signed = &u
	}
	accepted := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockHook, d.Hook, LockHookSeed); err != nil {
			return err
		}
		var seen int64
		var ran, stale bool
		err := tx.QueryRow(ctx, sqlHookSeen, d.Hook, window.Microseconds(), d.DeliveryID, d.BodySHA256, signed, inFlight.Microseconds()).Scan(&seen, &ran, &stale)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			d.Outcome, accepted = HookAccepted, true
		case err != nil:
			return err
		case !ran && stale:
			d.Outcome, accepted = HookAccepted, true
			d.Reason = fmt.Sprintf("delivery %d with the same delivery id or body never finished", seen)
		default:
			d.Outcome = HookReplay
			d.Reason = fmt.Sprintf("delivery %d had the same delivery id or body", seen)
		}
		return tx.QueryRow(ctx, sqlRecordHook, d.Hook, d.DeliveryID, d.BodySHA256, d.BodyBytes, d.Outcome, d.Channel,
			d.RemoteAddr, clipReason(d.Reason), nil, signed).Scan(&d.ID, &d.At)
	})
	if err != nil {
		return d, false, fmt.Errorf("accept a delivery of hook %s: %w", d.Hook, err)
	}
	return d, accepted, nil
}

// RecordHook records an accepted delivery that failed (outcome failed, Of the accepted one: the
// sender's retry is then no replay). Refused requests are not recorded here (bot/hooks counts
// them): an unauthenticated request adds no row to an append-only table.
func (s *Store) RecordHook(ctx context.Context, d HookDelivery) (HookDelivery, error) {
	var of *int64
	if d.Of != 0 {
		of = &d.Of
	}
	var signed *time.Time
	if !d.SignedAt.IsZero() {
		u := d.SignedAt.UTC()
		signed = &u
	}
	err := s.pool.QueryRow(ctx, sqlRecordHook, clip(d.Hook, 100), clip(d.DeliveryID, 200), d.BodySHA256, d.BodyBytes, d.Outcome, d.Channel,
		clip(d.RemoteAddr, 200), clipReason(d.Reason), of, signed).Scan(&d.ID, &d.At)
	if err != nil {
		return d, fmt.Errorf("record a delivery of hook %q: %w", clip(d.Hook, 100), err)
	}
	return d, nil
}

const sqlHookRan = `INSERT INTO hook_delivery_runs (delivery, ts, session_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

// HookRan records that accepted delivery id posted at ts and started session sid.
func (s *Store) HookRan(ctx context.Context, id int64, ts string, sid ID) error {
	if _, err := s.pool.Exec(ctx, sqlHookRan, id, ts, sid.String()); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" {
			return fmt.Errorf("record the run of hook delivery %d: %w", id, ErrNotFound)
		}
		return fmt.Errorf("record the run of hook delivery %d: %w", id, err)
	}
	return nil
}

const sqlHookDeliveries = `SELECT d.id, d.hook, d.delivery_id, d.body_sha256, d.body_bytes, d.outcome, d.channel, d.remote_addr, d.reason, d.at,
       r.ts, r.session_id
FROM hook_deliveries d LEFT JOIN hook_delivery_runs r ON r.delivery = d.id
WHERE ($1 = '' OR d.hook = $1) ORDER BY d.id`

// HookDeliveries returns every delivery of hook ("" for all), oldest first.
func (s *Store) HookDeliveries(ctx context.Context, hook string) ([]HookDelivery, error) {
	rows, err := s.pool.Query(ctx, sqlHookDeliveries, hook)
	if err != nil {
		return nil, fmt.Errorf("read hook deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (HookDelivery, error) {
		var d HookDelivery
		var ts *string
		var sid *ID
		err := row.Scan(&d.ID, &d.Hook, &d.DeliveryID, &d.BodySHA256, &d.BodyBytes, &d.Outcome, &d.Channel, &d.RemoteAddr, &d.Reason, &d.At, &ts, &sid)
		if ts != nil {
			d.TS, d.Session = *ts, *sid
		}
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read hook deliveries: %w", err)
	}
	return out, nil
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

func clipReason(s string) string { return clip(s, 500) }
