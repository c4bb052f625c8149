package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The reads below serve audits: verification, checkpoints and exports. They read the whole
// log, so an auditor's role (SELECT on sessions and events) is enough.

// SessionFilter selects sessions for SessionIDs.
type SessionFilter struct {
	ID    ID        // only this session; zero: every session
	Since time.Time // only sessions with an event at or after Since; zero: all
}

const sqlSessionIDs = `
SELECT s.id FROM sessions s
WHERE ($1::uuid IS NULL OR s.id = $1)
  AND ($2::timestamptz IS NULL OR EXISTS (
        SELECT 1 FROM events e WHERE e.session_id = s.id AND e.created_at >= $2))
ORDER BY s.created_at, s.id`

// SessionIDs returns the ids of the sessions f selects, in creation order. An unknown
// f.ID yields no ids and no error.
func (s *Store) SessionIDs(ctx context.Context, f SessionFilter) ([]ID, error) {
	var only *ID
	if f.ID != (ID{}) {
		only = &f.ID
	}
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	return column[ID](ctx, s, "list sessions", sqlSessionIDs, only, since)
}

// SessionHead is one session's last event.
type SessionHead struct {
	Session ID
	Seq     int64
	Hash    []byte
}

const sqlHeads = `
SELECT DISTINCT ON (session_id) session_id, seq, hash FROM events ORDER BY session_id, seq DESC`

// Heads reads the head of every session that has events, in one snapshot (a read-only
// repeatable-read transaction), passing each to fn in session id order, and returns the
// database's clock at the snapshot. An error from fn stops the read and is returned.
func (s *Store) Heads(ctx context.Context, fn func(SessionHead) error) (time.Time, error) {
	var at time.Time
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, sqlHeads)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var h SessionHead
				if err := rows.Scan(&h.Session, &h.Seq, &h.Hash); err != nil {
					return err
				}
				if err := fn(h); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	if err != nil {
		return time.Time{}, fmt.Errorf("read session heads: %w", err)
	}
	return at, nil
}

const sqlHashAt = `SELECT hash FROM events WHERE session_id = $1 AND seq = $2`

// HashAt returns the hash of the session's event at seq, or ErrNotFound.
func (s *Store) HashAt(ctx context.Context, id ID, seq int64) ([]byte, error) {
	var hash []byte
	err := s.pool.QueryRow(ctx, sqlHashAt, id, seq).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("event %d of session %s: %w", seq, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("event %d of session %s: %w", seq, id, err)
	}
	return hash, nil
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// EventFilter selects events for ScanEventText: a half-open time window by created_at,
// optionally some actors and one channel.
type EventFilter struct {
	From, To time.Time // created_at >= From and < To
	Actors   []string  // actor ids; empty: every actor
	Channel  string    // a Slack channel id; empty: every channel
}

// eventTextColumns is how many values ScanEventText passes for each event.
const eventTextColumns = 16

const sqlEventText = `
SELECT e.position, e.session_id, s.channel_id, s.thread_ts, e.seq, e.event_id, e.type,
       e.actor_kind, e.actor_id, to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
       e.payload::text, encode(e.payload_hash, 'hex'), encode(e.prev_hash, 'hex'), encode(e.hash, 'hex'),
       e.idempotency_key, e.sanitized
FROM events e JOIN sessions s ON s.id = e.session_id
WHERE e.created_at >= $1 AND e.created_at < $2`

// SQL returns the statement ScanEventText runs for f, with $n placeholders (From, To, then
// Actors and Channel when set), for records such as an export's manifest.
func (f EventFilter) SQL() string {
	q, _ := f.query()
	return strings.TrimSpace(q)
}

func (f EventFilter) query() (string, []any) {
	var b strings.Builder
	b.WriteString(sqlEventText)
	args := []any{f.From.UTC(), f.To.UTC()}
	if len(f.Actors) > 0 {
		args = append(args, f.Actors)
		b.WriteString("\n  AND e.actor_id = ANY($" + strconv.Itoa(len(args)) + "::text[])")
	}
	if f.Channel != "" {
		args = append(args, f.Channel)
		b.WriteString("\n  AND s.channel_id = $" + strconv.Itoa(len(args)))
	}
	b.WriteString("\nORDER BY e.position")
	return b.String(), args
}

// ScanEventText streams the events f selects, in position order, through db: pass a
// read-only repeatable-read transaction to read them in the snapshot of the caller's other
// reads. For each event fn gets 16 values, in this order: position, session_id, channel_id,
// thread_ts, seq, event_id, type, actor_kind, actor_id, created_at, payload, payload_hash,
// prev_hash, hash, idempotency_key, sanitized, as PostgreSQL renders them as text (created_at in UTC as 2006-01-02T15:04:05.000000Z, hashes in hex, payload as
// the stored jsonb text whose sha256 is payload_hash, sanitized as t or f); a nil value is
// SQL NULL (a purged payload, no idempotency key). The values alias the driver's buffer:
// they are valid only during the call, so memory stays constant however many events are
// read. An error from fn stops the scan and is returned as it is.
func ScanEventText(ctx context.Context, db Querier, f EventFilter, fn func(v [][]byte) error) error {
	q, args := f.query()
	rows, err := db.Query(ctx, q, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		v := rows.RawValues()
		if len(v) != eventTextColumns {
			return fmt.Errorf("read events: %d columns, want %d", len(v), eventTextColumns)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	return nil
}
