package session

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Range selects events of one session for Events.
type Range struct {
	From  int64  // first seq, inclusive; 0: from the start
	To    int64  // last seq, inclusive; 0: to the head
	Types []Type // only these types; empty: all
	Limit int    // at most this many; 0: no limit
	Desc  bool   // newest first
	// Before, when > 0, selects the Limit events (of Types) just before seq Before — the
	// lead-up to an action. They are returned oldest first unless Desc.
	Before int64
}

const eventColumns = `session_id, seq, event_id, type, actor_kind, actor_id, created_at, payload,
payload_hash, coalesce(idempotency_key, ''), prev_hash, hash, sanitized, position`

// queryEvents runs q, a query of eventColumns, with args and scans the events it returns.
func (s *Store) queryEvents(ctx context.Context, q string, args []any) ([]Event, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
}

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var typ, kind string
	var payload []byte
	err := row.Scan(&e.SessionID, &e.Seq, &e.ID, &typ, &kind, &e.Actor.ID, &e.CreatedAt, &payload,
		&e.PayloadHash, &e.IdempotencyKey, &e.PrevHash, &e.Hash, &e.Sanitized, &e.Position)
	e.Type, e.Actor.Kind = Type(typ), ActorKind(kind)
	if payload != nil {
		e.Payload = payload
	}
	return e, err
}

// Events returns events of one session selected by r, oldest first unless r.Desc.
// An unknown session yields no events and no error; use Session to tell.
func (s *Store) Events(ctx context.Context, id ID, r Range) ([]Event, error) {
	if id == (ID{}) {
		return nil, ErrEmptySessionID
	}
	var q strings.Builder
	args := []any{id}
	q.WriteString("SELECT " + eventColumns + " FROM events WHERE session_id = $1")
	add := func(cond string, v any) {
		args = append(args, v)
		q.WriteString(" AND " + strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if r.From > 0 {
		add("seq >= ?", r.From)
	}
	if r.To > 0 {
		add("seq <= ?", r.To)
	}
	if r.Before > 0 {
		add("seq < ?", r.Before)
	}
	if len(r.Types) > 0 {
		ts := make([]string, len(r.Types))
		for i, t := range r.Types {
			ts[i] = string(t)
		}
		add("type = ANY(?)", ts)
	}
	desc := r.Desc || r.Before > 0
	if desc {
		q.WriteString(" ORDER BY seq DESC")
	} else {
		q.WriteString(" ORDER BY seq")
	}
	if r.Limit > 0 {
		args = append(args, r.Limit)
		q.WriteString(" LIMIT $" + strconv.Itoa(len(args)))
	}
	evs, err := s.queryEvents(ctx, q.String(), args)
	if err != nil {
		return nil, fmt.Errorf("read events of session %s: %w", id, err)
	}
	if r.Before > 0 && !r.Desc {
		slices.Reverse(evs)
	}
	return evs, nil
}

// Select applies r to known, a prefix of one session's log (known[i].Seq == i+1), in memory
// exactly as Events does in SQL: a reader that holds the log (a cell) answers a Range without
// a round trip. The result shares known's events.
func Select(known []Event, r Range) []Event {
	lo, hi := int64(1), int64(len(known))
	if r.From > lo {
		lo = r.From
	}
	if r.To > 0 && r.To < hi {
		hi = r.To
	}
	if r.Before > 0 && r.Before-1 < hi {
		hi = r.Before - 1
	}
	var out []Event
	if lo > hi {
		return out
	}
	want := func(e Event) bool { return len(r.Types) == 0 || slices.Contains(r.Types, e.Type) }
	desc := r.Desc || r.Before > 0
	if desc {
		for s := hi; s >= lo && (r.Limit <= 0 || len(out) < r.Limit); s-- {
			if e := known[s-1]; want(e) {
				out = append(out, e)
			}
		}
		if r.Before > 0 && !r.Desc {
			slices.Reverse(out)
		}
		return out
	}
	for s := lo; s <= hi && (r.Limit <= 0 || len(out) < r.Limit); s++ {
		if e := known[s-1]; want(e) {
			out = append(out, e)
		}
	}
	return out
}

// Cursor is a position in the cross-session stream read by ReadAll. The zero Cursor is the
// start of the stream.
type Cursor struct {
	TxID     uint64 // transaction id (xid8) of the last event read
	Position int64  // global position of the last event read
}

const sqlReadAll = `
SELECT ` + eventColumns + `, tx_id::text
FROM events
WHERE (tx_id, position) > ($1::text::xid8, $2)
  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY tx_id, position
LIMIT $3`

// ReadAll returns up to limit events of every session after the cursor, and the cursor to
// pass next time. It reads only events of transactions that have finished (below the oldest
// running transaction), in (transaction, position) order, so a transaction that commits late
// with a lower position is never skipped: every committed event is returned exactly once
// across calls. An event becomes readable once every transaction that started before its
// own has finished.
func (s *Store) ReadAll(ctx context.Context, after Cursor, limit int) ([]Event, Cursor, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.pool.Query(ctx, sqlReadAll, strconv.FormatUint(after.TxID, 10), after.Position, limit)
	if err != nil {
		return nil, after, fmt.Errorf("read all events after %+v: %w", after, err)
	}
	defer rows.Close()
	var out []Event
	next := after
	for rows.Next() {
		var e Event
		var typ, kind, tx string
		var payload []byte
		if err := rows.Scan(&e.SessionID, &e.Seq, &e.ID, &typ, &kind, &e.Actor.ID, &e.CreatedAt, &payload,
			&e.PayloadHash, &e.IdempotencyKey, &e.PrevHash, &e.Hash, &e.Sanitized, &e.Position, &tx); err != nil {
			return nil, after, fmt.Errorf("read all events after %+v: %w", after, err)
		}
		e.Type, e.Actor.Kind = Type(typ), ActorKind(kind)
		if payload != nil {
			e.Payload = payload
		}
		txID, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return nil, after, fmt.Errorf("read all events: transaction id %q: %w", tx, err)
		}
		e.TxID = txID
		next = Cursor{TxID: txID, Position: e.Position}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read all events after %+v: %w", after, err)
	}
	return out, next, nil
}

// Latest returns the newest event of each of the given types in the session, in one round
// trip; a type with no event is absent from the map.
func (s *Store) Latest(ctx context.Context, id ID, types ...Type) (map[Type]Event, error) {
	if id == (ID{}) {
		return nil, ErrEmptySessionID
	}
	out := make(map[Type]Event, len(types))
	if len(types) == 0 {
		return out, nil
	}
	var q strings.Builder
	args := []any{id}
	for i, t := range types {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		args = append(args, string(t))
		fmt.Fprintf(&q, "(SELECT %s FROM events WHERE session_id = $1 AND type = $%d ORDER BY seq DESC LIMIT 1)", eventColumns, len(args))
	}
	evs, err := s.queryEvents(ctx, q.String(), args)
	if err != nil {
		return nil, fmt.Errorf("latest events of session %s: %w", id, err)
	}
	for _, e := range evs {
		out[e.Type] = e
	}
	return out, nil
}

// FirstRecord is the first event of evs in r whose payload, decoded as a P, matches: the
// record a step left in the log (an upload, a pull request), looked for before the step is
// taken again.
func FirstRecord[P any](evs []Event, r Range, match func(P) bool) (P, bool) {
	for _, e := range Select(evs, r) {
		var p P
		if e.Decode(&p) == nil && match(p) {
			return p, true
		}
	}
	var zero P
	return zero, false
}
