package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// HoldScope says what a legal hold covers.
type HoldScope string

// Hold scopes.
const (
	HoldSession HoldScope = "session" // one session, by id
	HoldChannel HoldScope = "channel" // every session of a Slack channel id
	HoldActor   HoldScope = "actor"   // every session in which an actor id has an event
)

// Hold is an open legal hold: while it stands, retention purges nothing it covers.
type Hold struct {
	ID     uuid.UUID
	Scope  HoldScope
	Value  string
	Reason string
	Who    string
	At     time.Time
}

// sqlHoldLock serialises hold changes with purges (the purge function takes the same key,
// session.LockRetention), so a purge never misses a hold committed just before it.
const sqlHoldLock = `SELECT pg_advisory_xact_lock($1)`

const sqlAddHold = `
INSERT INTO audit_holds (hold_id, action, scope, value, reason, who) VALUES ($1, 'add', $2, $3, $4, $5)
RETURNING at`

// AddHold opens a legal hold and records the change (and the access) append-only. A hold
// names something that exists: a session of the log, a channel some session is in, an actor
// of some event; a typo would hold nothing and let what was meant be purged. db must be
// allowed to read the log and insert into audit_holds and audit_access (logbook_auditor is).
// Errors: ErrInvalid for an unknown scope, an empty value, reason or who, or a malformed
// session id; ErrNotFound, naming it, for a session, channel or actor the log does not have.
func AddHold(ctx context.Context, db *pgxpool.Pool, who Who, scope HoldScope, value, reason string) (Hold, error) {
	switch scope {
	case HoldSession:
		if _, err := session.ParseID(value); err != nil {
			return Hold{}, fmt.Errorf("add hold: %w: %v", ErrInvalid, err)
		}
	case HoldChannel, HoldActor:
	default:
		return Hold{}, fmt.Errorf("add hold: %w: scope %q (use session, channel or actor)", ErrInvalid, scope)
	}
	if value == "" || strings.TrimSpace(reason) == "" || who.Name == "" {
		return Hold{}, fmt.Errorf("add hold: %w: value, reason and who are required", ErrInvalid)
	}
	if err := holdTargetExists(ctx, session.NewStore(db, session.Options{}), scope, value); err != nil {
		return Hold{}, fmt.Errorf("add hold: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Hold{}, fmt.Errorf("add hold: new id: %w", err)
	}
	h := Hold{ID: id, Scope: scope, Value: value, Reason: reason, Who: who.Name}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := RecordAccess(ctx, tx, who, "hold-add",
			map[string]any{"hold_id": id, "scope": scope, "value": value, "reason": reason}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlHoldLock, session.LockRetention); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sqlAddHold, id, scope, value, reason, who.Name).Scan(&h.At)
	})
	if err != nil {
		return Hold{}, fmt.Errorf("add %s hold on %s: %w", scope, value, err)
	}
	return h, nil
}

// holdTargetExists fails with ErrNotFound when the log has no session, channel or actor
// value (by scope).
func holdTargetExists(ctx context.Context, log *session.Store, scope HoldScope, value string) error {
	var found bool
	var err error
	switch scope {
	case HoldSession:
		id, _ := session.ParseID(value) // checked by the caller
		_, err = log.Session(ctx, id)
		found = err == nil
		if errors.Is(err, session.ErrNotFound) {
			err = nil
		}
	case HoldChannel:
		found, err = log.ChannelAppears(ctx, value)
	case HoldActor:
		found, err = log.ActorAppears(ctx, value)
	}
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: no %s %q in the log", ErrNotFound, scope, value)
	}
	return nil
}

const sqlRemoveHold = `
INSERT INTO audit_holds (hold_id, action, scope, value, reason, who)
SELECT h.hold_id, 'remove', h.scope, h.value, $2, $3 FROM audit_holds h
WHERE h.hold_id = $1 AND h.action = 'add'
  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = $1 AND r.action = 'remove')`

// RemoveHold ends an open hold, recording who and why. Errors: ErrNotFound when no open
// hold has the id; ErrInvalid for an empty reason or who.
func RemoveHold(ctx context.Context, db *pgxpool.Pool, who Who, id uuid.UUID, reason string) error {
	if strings.TrimSpace(reason) == "" || who.Name == "" {
		return fmt.Errorf("remove hold %s: %w: reason and who are required", id, ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := RecordAccess(ctx, tx, who, "hold-remove", map[string]any{"hold_id": id, "reason": reason}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlHoldLock, session.LockRetention); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlRemoveHold, id, reason, who.Name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("no open hold: %w", ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove hold %s: %w", id, err)
	}
	return nil
}

const sqlOpenHolds = `
SELECT h.hold_id, h.scope, h.value, h.reason, h.who, h.at FROM audit_holds h
WHERE h.action = 'add'
  AND NOT EXISTS (SELECT 1 FROM audit_holds r WHERE r.hold_id = h.hold_id AND r.action = 'remove')
ORDER BY h.at, h.hold_id`

// Holds lists the open holds, oldest first.
func Holds(ctx context.Context, db dbtx) ([]Hold, error) {
	rows, err := db.Query(ctx, sqlOpenHolds)
	if err != nil {
		return nil, fmt.Errorf("list holds: %w", err)
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hold, error) {
		var h Hold
		var scope string
		err := r.Scan(&h.ID, &scope, &h.Value, &h.Reason, &h.Who, &h.At)
		h.Scope = HoldScope(scope)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("list holds: %w", err)
	}
	return hs, nil
}

// Purge is the record of one session's payloads removed by retention.
type Purge struct {
	ID          int64
	Session     session.ID
	FromSeq     int64
	ToSeq       int64
	Purged      int64 // events whose payload was removed
	HeadSeq     int64
	HeadHash    string // hex
	LastEventAt time.Time
}

// Retention removes the payloads of expired sessions through logbook_purge_expired. Its pool
// must act as logbook_retention (the only role that may execute the function).
type Retention struct {
	pool  *pgxpool.Pool
	keep  time.Duration
	files FileRemover
}

// FileRemover deletes the bucket copy of a file's content (filestore.Store has it).
type FileRemover interface {
	Delete(ctx context.Context, sha string) error
}

// WithFiles makes Purge delete, after the purge function ran, the bucket objects of content
// it left unreferenced (marked purged: session.Store.PurgedBucketFiles), then their rows
// (session.Store.SweepPurgedFile). bucket must be the store the content was written to
// (LOGBOOK_BLOB_URL): without it, marked content stays marked, its objects in the bucket,
// until a retention run that has it. Content kept in the database needs none of this: the
// purge function removes it. It returns r.
func (r *Retention) WithFiles(bucket FileRemover) *Retention {
	r.files = bucket
	return r
}

// NewRetention returns a retention that keeps sessions whose last event is younger than
// keep. keep must be positive.
func NewRetention(pool *pgxpool.Pool, keep time.Duration) (*Retention, error) {
	if keep <= 0 {
		return nil, fmt.Errorf("retention: %w: the period must be positive, got %s", ErrInvalid, keep)
	}
	return &Retention{pool: pool, keep: keep}, nil
}

// Keep is the retention period.
func (r *Retention) Keep() time.Duration { return r.keep }

const sqlPurge = `
SELECT purge_id, purged_session, from_seq, to_seq, purged, head_seq, head_hash, last_event_at
FROM logbook_purge_expired($1, $2, $3)`

// Purge removes the payloads of every session whose last event is older than now - Keep
// and that no open hold covers, and returns the purge records written. Each event's
// skeleton and hashes stay, so chains still verify.
func (r *Retention) Purge(ctx context.Context, who Who, now time.Time) ([]Purge, error) {
	cutoff := now.Add(-r.keep)
	reason := "retention " + FormatRetention(r.keep)
	rows, err := r.pool.Query(ctx, sqlPurge, cutoff, reason, who.Name)
	if err != nil {
		return nil, fmt.Errorf("purge sessions older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Purge, error) {
		var p Purge
		var h []byte
		err := row.Scan(&p.ID, &p.Session, &p.FromSeq, &p.ToSeq, &p.Purged, &p.HeadSeq, &h, &p.LastEventAt)
		p.HeadHash = hex.EncodeToString(h)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("purge sessions older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	if _, err := r.PurgeMemory(ctx, now); err != nil {
		return ps, err
	}
	if r.files != nil {
		if _, err := r.DeletePurgedFiles(ctx); err != nil {
			return ps, fmt.Errorf("purge sessions older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
	}
	return ps, nil
}

const sqlPurgeMemory = `SELECT logbook_purge_memory($1)`

// PurgeMemory empties the text of every channel memory note older than now - Keep that no
// open hold covers (its channel, who asked, the session it came from), and returns how many;
// Purge calls it after the sessions. A purged note is never offered to the model again.
func (r *Retention) PurgeMemory(ctx context.Context, now time.Time) (int64, error) {
	cutoff := now.Add(-r.keep)
	var n int64
	if err := r.pool.QueryRow(ctx, sqlPurgeMemory, cutoff).Scan(&n); err != nil {
		return 0, fmt.Errorf("purge channel memory older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// DeletePurgedFiles deletes the bucket objects of content a purge left unreferenced, then
// forgets them, and returns their hashes; Purge calls it when WithFiles was given one. Content
// a session references again since it was marked is left alone. What fails stays marked, for
// the next run. Without WithFiles it deletes nothing.
func (r *Retention) DeletePurgedFiles(ctx context.Context) ([]string, error) {
	if r.files == nil {
		return nil, nil
	}
	st := session.NewStore(r.pool, session.Options{})
	shas, err := st.PurgedBucketFiles(ctx)
	if err != nil {
		return nil, err
	}
	var deleted []string
	for _, sha := range shas {
		removed, err := st.SweepPurgedFile(ctx, sha, func(ctx context.Context) error { return r.files.Delete(ctx, sha) })
		if err != nil {
			return deleted, err
		}
		if removed {
			deleted = append(deleted, sha)
		}
	}
	return deleted, nil
}

// PendingFiles returns the hashes of bucket content a purge marked whose objects are not
// deleted yet (a run without WithFiles, or one that failed midway).
func (r *Retention) PendingFiles(ctx context.Context) ([]string, error) {
	return session.NewStore(r.pool, session.Options{}).PurgedBucketFiles(ctx)
}

// ParseRetention parses a retention period: "400d", "36h", "off" or "" (0: off). Errors
// wrap ErrInvalid.
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "off" || s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("retention %q: %w: use a positive period: days like 400d, or hours and minutes like 36h or 90m", s, ErrInvalid)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("retention %q: %w: use a positive period: days like 400d, or hours and minutes like 36h or 90m", s, ErrInvalid)
	}
	return d, nil
}

// FormatRetention renders a period as days when whole ("400d"), else as a Go duration.
func FormatRetention(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}
