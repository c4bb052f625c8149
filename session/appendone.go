package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// One event, one statement (migrations/00170_append_one_statement.sql): the append of a single
// event that logbook_append would write with nothing but its chain and, for a message,
// session_work's message columns. The UPDATE moves the session's head in session_work under the
// session's append lock and the row's lock (and, fenced, compares the lease's epoch kept on
// that row); the INSERT writes the event from what it returned.
// The SQL is logbook_append's, expression for expression: the header's format, the payload's
// hash, created_at read from the clock after the lock. It returns only what the server
// decided (the rest is the call's own: returned, each column costs the server its output).
//
// The statement answers no row when logbook_append must decide: the session has no
// session_work row (or does not exist), the expected seq or the epoch differs, the key is
// stored already.
//
// $1 session, $2 expected seq (NULL: none), $3 event id, $4 type, $5 actor kind, $6 actor id,
// $7 payload, $8 idempotency key (NULL: none), $9 sanitized; fenced, $10 the lease epoch.
const appendOneTemplate = `
WITH h AS (
    UPDATE session_work AS w
       SET (head_seq, head_at, head_prev, head_hash{{message columns}}) = (
           SELECT w.head_seq + 1, c.t, w.head_hash,
                  sha256(w.head_hash
                      || convert_to(format('logbook-event-v1|%s|%s|%s|%s:%s|%s:%s|%s:%s|%s|%s',
                             $1::uuid, w.head_seq + 1, $3::uuid, octet_length($4::text), $4::text,
                             octet_length($5::text), $5::text, octet_length($6::text), $6::text,
                             (extract(epoch FROM c.t) * 1000000)::bigint, {{key part}}), 'UTF8')
                      || sha256(convert_to($7::jsonb::text, 'UTF8'))){{message values}}
             FROM (SELECT t, greatest(w.last_message_at, t) AS last_at
                     FROM (SELECT clock_timestamp() AS t) n) c)
     WHERE w.session_id = $1 AND ($2::bigint IS NULL OR w.head_seq = $2)
       AND pg_advisory_xact_lock(hashtextextended($1::text, 7461)) IS NOT NULL{{epoch}}{{key absent}}
    RETURNING w.head_seq, w.head_at, w.head_prev, w.head_hash
)
INSERT INTO events AS e (session_id, seq, event_id, type, actor_kind, actor_id, created_at,
                         payload, payload_hash, idempotency_key, prev_hash, hash, sanitized)
SELECT $1, h.head_seq, $3, $4, $5, $6, h.head_at,
       $7, sha256(convert_to($7::jsonb::text, 'UTF8')), $8::text, h.head_prev, h.head_hash, $9
  FROM h
RETURNING e.seq, e.created_at, e.payload_hash, e.prev_hash, e.hash, e.position`

// appendOneSQL returns the statement for an event of a message type or not, with a key or
// not, fenced or not: eight texts, each prepared once per connection.
func appendOneSQL(message, keyed, fenced bool) string {
	r := []string{
		"{{message columns}}", "",
		"{{message values}}", "",
		"{{key part}}", "'-'",
		"{{key absent}}", "",
		"{{epoch}}", "",
	}
	if fenced {
		// session_work.lease_epoch is the lease's (a trigger on leases keeps it, 00170).
		r[9] = "\n       AND w.lease_epoch = $10::bigint"
	}
	if message {
		// session_work's message columns as logbook_append sets them (00140).
		r[1] = ",\n                last_message_seq, last_message_at, pending, last_message_hour"
		r[3] = `,
                  w.head_seq + 1, c.last_at, w.head_seq + 1 > w.answered_through,
                  date_trunc('hour', c.last_at AT TIME ZONE 'UTC')`
	}
	if keyed {
		r[5] = "octet_length($8::text) || ':' || $8::text"
		r[7] = `
       AND NOT EXISTS (SELECT 1 FROM events k WHERE k.session_id = $1 AND k.idempotency_key = $8::text)`
	}
	return strings.NewReplacer(r...).Replace(appendOneTemplate)
}

// errNoRow is readOne's answer to a statement that returned no row.
var errNoRow = errors.New("no row for the event")

// oneStatement returns the one-event statement and its arguments for c, or false when c is
// logbook_append's: several events, or a turn marker (logbook_track_turn's).
func (c *appendCall) oneStatement() (string, []any, bool) {
	if len(c.evs) != 1 {
		return "", nil, false
	}
	ev := c.evs[0]
	// The types logbook_append gives session_work (migrations/00170): the turn markers go to
	// logbook_track_turn, the messages move the message columns.
	switch ev.Type {
	case TypeTurnCompleted, TypeTurnSuspended, TypeApprovalDecided, TypeStopRequested:
		return "", nil, false
	}
	message := ev.Type == TypeUserMessage || ev.Type == TypeFollowupSignal
	var expected *int64
	if c.opts.CheckSeq {
		expected = &c.opts.ExpectedSeq
	}
	key, fenced := c.keys[0], c.opts.Epoch != 0
	args := []any{
		pgtype.UUID{Bytes: c.id, Valid: true}, expected, c.ids[0],
		string(ev.Type), string(ev.Actor.Kind), ev.Actor.ID, c.payloads[0], key, c.sanitized[0],
	}
	if fenced {
		args = append(args, c.opts.Epoch)
	}
	return c.s.appendOne[b2i(message)][b2i(key.Valid)][b2i(fenced)], args, true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sendOneStatement tries c as its one statement (sql, args). done is false when
// logbook_append must write it instead: the statement wrote nothing (no row), or collided with a stored key or seq (a
// duplicate sent meanwhile, a head behind the log), which logbook_append answers or repairs.
func (s *Store) sendOneStatement(ctx context.Context, q querier, c *appendCall, sql string, args []any) (out []Event, done bool, err error) {
	rows, err := q.Query(ctx, sql, args...)
	if err == nil {
		out, err = c.readOne(rows)
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return out, true, nil
	case errors.Is(err, errNoRow):
		return nil, false, nil
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return nil, false, nil
	}
	return nil, true, s.appendError(c.id, c.opts, err)
}

// readRows reads rows of c as sent: the one-event statement's or logbook_append's.
func (c *appendCall) readRows(rows pgx.Rows) ([]Event, error) {
	if c.statement {
		return c.readOne(rows)
	}
	return c.read(rows)
}

// readOne reads the one-event statement's row into the stored event, and closes rows;
// errNoRow when it returned none.
func (c *appendCall) readOne(rows pgx.Rows) ([]Event, error) {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, errNoRow
	}
	ev := c.evs[0]
	e := Event{SessionID: c.id, ID: c.ids[0].Bytes, Type: ev.Type, Actor: ev.Actor,
		Payload: json.RawMessage(c.payloads[0]), IdempotencyKey: ev.IdempotencyKey, Sanitized: c.sanitized[0]}
	if err := rows.Scan(&e.Seq, &e.CreatedAt, &e.PayloadHash, &e.PrevHash, &e.Hash, &e.Position); err != nil {
		return nil, err
	}
	if rows.Next() {
		return nil, errors.New("more than one row for one event")
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
