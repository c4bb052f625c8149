package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The record streamed out (issue 51, migration 00270): each sink (a webhook, the audit stream)
// follows the log with ReadAll from a durable cursor of its own (stream_cursors), under a lease
// held by one replica at a time; what a webhook could not deliver is a dead letter
// (stream_dead_letters).

// ErrStreamLeaseLost is returned by AdvanceStream when another replica holds the sink's lease.
var ErrStreamLeaseLost = errors.New("the stream's lease is held by another replica")

// StreamLease is a sink's lease, held by Owner, and its cursor when it was claimed.
type StreamLease struct {
	Sink   string
	Owner  string
	Cursor Cursor
	Until  time.Time // by the database's clock
}

// A new sink starts after every event of transactions older than the oldest one running when it
// was first claimed: the log before it was configured is not streamed, except the events of
// transactions that started after that oldest one (a long transaction anywhere on the server
// makes that window longer). Nothing appended after the first claim is missed.
const sqlClaimStream = `
INSERT INTO stream_cursors AS c (sink, tx_id, position, owner, lease_until)
VALUES ($1, (pg_snapshot_xmin(pg_current_snapshot())::text::numeric - 1)::text::xid8, 9223372036854775807,
        $2, clock_timestamp() + make_interval(secs => $3))
ON CONFLICT (sink) DO UPDATE SET owner = $2, lease_until = clock_timestamp() + make_interval(secs => $3)
    WHERE c.owner IS NULL OR c.owner = $2 OR c.lease_until IS NULL OR c.lease_until < clock_timestamp()
RETURNING c.tx_id::text, c.position, c.lease_until`

// ClaimStream claims (or renews) sink's lease for owner for ttl and returns it with the
// sink's cursor: ok is false when another owner holds an unexpired lease. A sink claimed for
// the first time starts at the end of the log as it is then.
func (s *Store) ClaimStream(ctx context.Context, sink, owner string, ttl time.Duration) (StreamLease, bool, error) {
	if sink == "" || owner == "" {
		return StreamLease{}, false, fmt.Errorf("claim stream %q: %w: sink and owner are required", sink, ErrInvalidEvent)
	}
	l := StreamLease{Sink: sink, Owner: owner}
	var tx string
	err := s.pool.QueryRow(ctx, sqlClaimStream, sink, owner, ttl.Seconds()).Scan(&tx, &l.Cursor.Position, &l.Until)
	if errors.Is(err, pgx.ErrNoRows) {
		return StreamLease{}, false, nil
	}
	if err != nil {
		return StreamLease{}, false, fmt.Errorf("claim stream %s: %w", sink, err)
	}
	if l.Cursor.TxID, err = strconv.ParseUint(tx, 10, 64); err != nil {
		return StreamLease{}, false, fmt.Errorf("claim stream %s: transaction id %q: %w", sink, tx, err)
	}
	return l, true, nil
}

const sqlAdvanceStream = `
UPDATE stream_cursors SET tx_id = $3::text::xid8, position = $4, updated_at = clock_timestamp(),
    lease_until = clock_timestamp() + make_interval(secs => $5)
WHERE sink = $1 AND owner = $2
RETURNING lease_until`

// AdvanceStream moves sink's cursor to c and renews owner's lease for ttl: ErrStreamLeaseLost
// when another replica took the lease over (the cursor is not moved).
func (s *Store) AdvanceStream(ctx context.Context, sink, owner string, c Cursor, ttl time.Duration) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, sqlAdvanceStream, sink, owner, strconv.FormatUint(c.TxID, 10), c.Position, ttl.Seconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return until, fmt.Errorf("advance stream %s: %w", sink, ErrStreamLeaseLost)
	}
	if err != nil {
		return until, fmt.Errorf("advance stream %s: %w", sink, err)
	}
	return until, nil
}

// ReleaseStream gives up owner's lease of sink (a replica stopping): another may claim it at
// once.
func (s *Store) ReleaseStream(ctx context.Context, sink, owner string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE stream_cursors SET lease_until = NULL WHERE sink = $1 AND owner = $2`, sink, owner); err != nil {
		return fmt.Errorf("release stream %s: %w", sink, err)
	}
	return nil
}

// StreamState is a sink's row, for operators.
type StreamState struct {
	Sink       string
	Cursor     Cursor
	Owner      string
	LeaseUntil time.Time // zero: released
	UpdatedAt  time.Time
}

// Streams lists every sink's cursor and lease, by name.
func (s *Store) Streams(ctx context.Context) ([]StreamState, error) {
	rows, err := s.pool.Query(ctx, `SELECT sink, tx_id::text, position, coalesce(owner, ''), lease_until, updated_at
FROM stream_cursors ORDER BY sink`)
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	defer rows.Close()
	var out []StreamState
	for rows.Next() {
		var st StreamState
		var tx string
		var until *time.Time
		if err := rows.Scan(&st.Sink, &tx, &st.Cursor.Position, &st.Owner, &until, &st.UpdatedAt); err != nil {
			return nil, fmt.Errorf("list streams: %w", err)
		}
		st.Cursor.TxID, _ = strconv.ParseUint(tx, 10, 64)
		if until != nil {
			st.LeaseUntil = *until
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return out, nil
}

const sqlTailCursor = `
SELECT tx_id::text, position FROM events
WHERE tx_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY tx_id DESC, position DESC OFFSET $1 LIMIT 1`

// TailCursor is the cursor after which ReadAll returns the last n events readable now (in
// ReadAll's order): the zero Cursor when the log has no more than n.
func (s *Store) TailCursor(ctx context.Context, n int) (Cursor, error) {
	var c Cursor
	var tx string
	err := s.pool.QueryRow(ctx, sqlTailCursor, max(n, 0)).Scan(&tx, &c.Position)
	if errors.Is(err, pgx.ErrNoRows) {
		return Cursor{}, nil
	}
	if err != nil {
		return c, fmt.Errorf("read the log's tail: %w", err)
	}
	if c.TxID, err = strconv.ParseUint(tx, 10, 64); err != nil {
		return Cursor{}, fmt.Errorf("read the log's tail: transaction id %q: %w", tx, err)
	}
	return c, nil
}

// DeadLetter is an event a sink could not deliver (stream_dead_letters).
type DeadLetter struct {
	ID          int64
	Sink        string
	Session     ID
	Seq         int64
	EventType   Type
	WebhookType string
	Attempts    int
	LastError   string
	DeadAt      time.Time
	Redelivered time.Time // zero: not redelivered
}

const sqlRecordDeadLetter = `
INSERT INTO stream_dead_letters (sink, session_id, seq, event_type, webhook_type, attempts, last_error)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (sink, session_id, seq) DO UPDATE SET attempts = stream_dead_letters.attempts + EXCLUDED.attempts,
    last_error = EXCLUDED.last_error, dead_at = clock_timestamp(), redelivered_at = NULL
RETURNING id, dead_at`

// RecordDeadLetter records d (its ID and DeadAt are set from the row). The same event dead
// again for the same sink (a takeover delivered it twice) is one letter, its attempts added.
func (s *Store) RecordDeadLetter(ctx context.Context, d DeadLetter) (DeadLetter, error) {
	if d.Sink == "" || d.Session == (ID{}) || d.Seq <= 0 || d.Attempts <= 0 {
		return d, fmt.Errorf("record a dead letter of %s: %w: sink, session, seq and attempts are required", d.Sink, ErrInvalidEvent)
	}
	err := s.pool.QueryRow(ctx, sqlRecordDeadLetter, d.Sink, d.Session, d.Seq, string(d.EventType), d.WebhookType,
		d.Attempts, d.LastError).Scan(&d.ID, &d.DeadAt)
	if err != nil {
		return d, fmt.Errorf("record a dead letter of %s (session %s seq %d): %w", d.Sink, d.Session, d.Seq, err)
	}
	return d, nil
}

// DeadLetterFilter selects dead letters.
type DeadLetterFilter struct {
	Sink        string  // "": every sink
	IDs         []int64 // empty: every id
	Redelivered bool    // include the letters already redelivered
}

const sqlDeadLetters = `
SELECT id, sink, session_id, seq, event_type, webhook_type, attempts, last_error, dead_at, redelivered_at
FROM stream_dead_letters
WHERE ($1 = '' OR sink = $1) AND (cardinality($2::bigint[]) = 0 OR id = ANY($2)) AND ($3 OR redelivered_at IS NULL)
ORDER BY id`

// DeadLetters lists the dead letters f selects, oldest first.
func (s *Store) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	ids := f.IDs
	if ids == nil {
		ids = []int64{}
	}
	rows, err := s.pool.Query(ctx, sqlDeadLetters, f.Sink, ids, f.Redelivered)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		var d DeadLetter
		var typ string
		var re *time.Time
		if err := rows.Scan(&d.ID, &d.Sink, &d.Session, &d.Seq, &typ, &d.WebhookType, &d.Attempts, &d.LastError, &d.DeadAt, &re); err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		d.EventType = Type(typ)
		if re != nil {
			d.Redelivered = *re
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// DeadLetterRedelivered records that dead letter id was delivered (ok), or one more failed
// attempt with its error.
func (s *Store) DeadLetterRedelivered(ctx context.Context, id int64, ok bool, lastError string) error {
	q := `UPDATE stream_dead_letters SET redelivered_at = clock_timestamp() WHERE id = $1`
	args := []any{id}
	if !ok {
		q = `UPDATE stream_dead_letters SET attempts = attempts + 1, last_error = $2 WHERE id = $1`
		args = append(args, lastError)
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("record the redelivery of dead letter %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("dead letter %d: %w", id, ErrNotFound)
	}
	return nil
}
