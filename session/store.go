package session

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultMaxPayload is the default limit of one event's encoded payload: 1 MiB.
const DefaultMaxPayload = 1 << 20

// Store is the session log over a PostgreSQL pool. It is safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	maxPayload int
	appendOne  [2][2][2]string // appendOneSQL's texts, [message][keyed][fenced]
}

// Options configure a Store. Zero values take defaults.
type Options struct {
	MaxPayload int // bytes; default DefaultMaxPayload
}

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool, opts Options) *Store {
	s := &Store{pool: pool, maxPayload: cmp.Or(opts.MaxPayload, DefaultMaxPayload)}
	for m := range 2 {
		for k := range 2 {
			for f := range 2 {
				s.appendOne[m][k][f] = appendOneSQL(m == 1, k == 1, f == 1)
			}
		}
	}
	return s
}

// ThreadKey identifies a Slack thread: the session's natural key is Channel and ThreadTS
// (Slack's channel ids are global: a Slack Connect channel has one id in every organisation).
// Team is the team that owns (hosts) the channel, recorded when the session is opened; it is
// no part of the key, and lookups by thread ignore it.
type ThreadKey struct {
	Team     string
	Channel  string
	ThreadTS string // the parent message's ts
}

func (k ThreadKey) valid() bool {
	return k.Team != "" && k.Channel != "" && k.ThreadTS != "" &&
		cleanText(k.Team) && cleanText(k.Channel) && cleanText(k.ThreadTS)
}

// Session is a session's identity.
type Session struct {
	ID        ID
	Key       ThreadKey
	CreatedAt time.Time
	// Created is set on the Session returned by the Open call that created it.
	Created bool
}

// Head is a session's last event: seq 0 and the zero hash for an empty session.
type Head struct {
	Seq  int64
	Hash []byte
}

// sqlOpenInsert makes the session and its session_work row (no message yet, head 0 and the
// zero hash: migrations/00170), which the one-event append statement moves.
const sqlOpenInsert = `
WITH s AS (
    INSERT INTO sessions (id, team_id, channel_id, thread_ts) VALUES ($1, $2, $3, $4)
    ON CONFLICT DO NOTHING
    RETURNING id, team_id, channel_id, thread_ts, created_at
), w AS (
    INSERT INTO session_work (session_id, pending) SELECT s.id, false FROM s
)
SELECT id, team_id, channel_id, thread_ts, created_at FROM s`

// Open returns the session of the thread (channel and thread ts, whatever key.Team says),
// creating it with key.Team as the channel's owner if it has none. Two callers opening the
// same thread concurrently (on any replicas, through any organisation) get the same session.
func (s *Store) Open(ctx context.Context, key ThreadKey) (Session, error) {
	if !key.valid() {
		return Session{}, fmt.Errorf("open session for %+v: %w: team, channel and thread ts are required", key, ErrInvalidEvent)
	}
	if key.Replay() {
		return Session{}, fmt.Errorf("open session for %+v: %w: a thread ts starting %q is an eval record's (OpenReplay)", key, ErrInvalidEvent, ReplayThreadPrefix)
	}
	// A thread's session from before 00050 is not under the unique index: look first.
	if sess, err := s.SessionByThread(ctx, key); !errors.Is(err, ErrNotFound) {
		return sess, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Session{}, fmt.Errorf("open session: new id: %w", err)
	}
	sess, err := scanSession(s.pool.QueryRow(ctx, sqlOpenInsert, id, key.Team, key.Channel, key.ThreadTS))
	if err == nil {
		sess.Created = true
		return sess, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("open session for %s/%s: %w", key.Channel, key.ThreadTS, err)
	}
	return s.SessionByThread(ctx, key)
}

// The thread's session: the oldest, where sessions from before 00050 gave a thread two; else,
// when the channel is a session's code channel (its code_channel_created event, index
// events_code_channel), that session — one statement either way.
const sqlSessionByThread = `
SELECT id, team_id, channel_id, thread_ts, created_at FROM (
  (SELECT id, team_id, channel_id, thread_ts, created_at, 0 AS pri FROM sessions
   WHERE channel_id = $1 AND thread_ts = $2
   ORDER BY created_at, id
   LIMIT 1)
  UNION ALL
  (SELECT s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at, 1 AS pri
   FROM events e JOIN sessions s ON s.id = e.session_id
   WHERE e.type = 'code_channel_created' AND e.payload->>'channel_id' = $1
   ORDER BY e.created_at
   LIMIT 1)
) found
ORDER BY pri
LIMIT 1`

// SessionByThread returns the session of a thread (channel and thread ts; key.Team is not
// looked at), or ErrNotFound. Every thread of a session's code channel (bot/codechannel) is
// that session's: the code channel is the same session, and the same log.
func (s *Store) SessionByThread(ctx context.Context, key ThreadKey) (Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, sqlSessionByThread, key.Channel, key.ThreadTS))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("session for %s/%s: %w", key.Channel, key.ThreadTS, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("session for %s/%s: %w", key.Channel, key.ThreadTS, err)
	}
	return sess, nil
}

// A stored Slack message's idempotency key is its session's team/channel/ts.
const sqlSessionByMessage = `
SELECT s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at
FROM sessions s JOIN events e ON e.session_id = s.id AND e.idempotency_key = s.team_id || '/' || s.channel_id || '/' || $2
WHERE s.channel_id = $1
ORDER BY s.created_at, s.id
LIMIT 1`

// SessionByMessage returns the session of the channel that stored the Slack message ts (a
// user_message), or ErrNotFound. It probes each session of the channel; meant for rare lookups
// such as a deletion that does not name its thread.
func (s *Store) SessionByMessage(ctx context.Context, channel, ts string) (Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, sqlSessionByMessage, channel, ts))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("session with message %s in %s: %w", ts, channel, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("session with message %s in %s: %w", ts, channel, err)
	}
	return sess, nil
}

const sqlSession = `SELECT id, team_id, channel_id, thread_ts, created_at FROM sessions WHERE id = $1`

// Session returns a session by id, or ErrNotFound.
func (s *Store) Session(ctx context.Context, id ID) (Session, error) {
	if id == (ID{}) {
		return Session{}, ErrEmptySessionID
	}
	sess, err := scanSession(s.pool.QueryRow(ctx, sqlSession, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("session %s: %w", id, err)
	}
	return sess, nil
}

const sqlSessions = `SELECT id, team_id, channel_id, thread_ts, created_at FROM sessions WHERE id = ANY($1::uuid[])`

// Sessions returns the sessions of ids that exist, by id, in one round trip (the streams
// place a batch of events in their threads with it).
func (s *Store) Sessions(ctx context.Context, ids []ID) (map[ID]Session, error) {
	out := make(map[ID]Session, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	rows, err := s.pool.Query(ctx, sqlSessions, strs)
	if err != nil {
		return nil, fmt.Errorf("%d sessions: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("%d sessions: %w", len(ids), err)
		}
		out[sess.ID] = sess
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%d sessions: %w", len(ids), err)
	}
	return out, nil
}

func scanSession(row pgx.Row) (Session, error) {
	var s Session
	err := row.Scan(&s.ID, &s.Key.Team, &s.Key.Channel, &s.Key.ThreadTS, &s.CreatedAt)
	return s, err
}

const sqlHead = `SELECT seq, hash FROM events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1`

// Head returns the session's last seq and hash (0 and 32 zero bytes when it has no events).
func (s *Store) Head(ctx context.Context, id ID) (Head, error) {
	var h Head
	err := s.pool.QueryRow(ctx, sqlHead, id).Scan(&h.Seq, &h.Hash)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := s.Session(ctx, id); err != nil {
			return Head{}, err
		}
		return Head{Seq: 0, Hash: make([]byte, 32)}, nil
	}
	if err != nil {
		return Head{}, fmt.Errorf("head of session %s: %w", id, err)
	}
	return h, nil
}

// AppendOptions make an append conditional.
type AppendOptions struct {
	// When CheckSeq is set, the append succeeds only if the session's head is ExpectedSeq
	// (0 for an empty session); otherwise it returns a *ConflictError and writes nothing.
	CheckSeq    bool
	ExpectedSeq int64
	// Epoch, when non-zero, is the caller's lease epoch (a fencing token): the append is
	// refused with ErrFenced unless it is the session's current lease epoch.
	Epoch int64
}

// Append appends evs to the session, in order, in one transaction, and returns the stored
// events (duplicates of an idempotency key are returned as stored earlier, with Duplicate
// set). Errors: ErrEmptySessionID, ErrNotFound, ErrUnknownType, ErrInvalidEvent,
// ErrInvalidPayload, *TooLargeError; on any error nothing is written.
func (s *Store) Append(ctx context.Context, id ID, evs ...NewEvent) ([]Event, error) {
	return s.AppendWith(ctx, id, AppendOptions{}, evs...)
}

const sqlAppend = `
SELECT seq, event_id, created_at, payload_hash, prev_hash, hash, position, duplicate,
       type, actor_kind, actor_id, payload, sanitized
FROM logbook_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// AppendWith is Append with an expected seq and/or a fencing epoch; see AppendOptions.
// Additional errors: *ConflictError (errors.Is ErrConflict), ErrFenced.
func (s *Store) AppendWith(ctx context.Context, id ID, opts AppendOptions, evs ...NewEvent) ([]Event, error) {
	c, err := s.newAppendCall(id, opts, evs)
	if err != nil || c == nil {
		return nil, err
	}
	return s.sendOne(ctx, c)
}

// sendOne sends c alone: as the one-event statement where it can be, else (or when that
// leaves it to logbook_append) as a call of logbook_append.
func (s *Store) sendOne(ctx context.Context, c *appendCall) ([]Event, error) {
	sql, args, ok := c.oneStatement()
	if !ok {
		return s.callAppend(ctx, s.pool, c)
	}
	// One connection for both: a duplicate (Slack sends a mention as app_mention and message)
	// must not wait for the pool twice.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.appendError(c.id, c.opts, err)
	}
	defer conn.Release()
	if out, done, err := s.sendOneStatement(ctx, conn, c, sql, args); done {
		return out, err
	}
	return s.callAppend(ctx, conn, c)
}

// querier is a pool or one of its connections.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// callAppend sends c as a call of logbook_append.
func (s *Store) callAppend(ctx context.Context, q querier, c *appendCall) ([]Event, error) {
	rows, err := q.Query(ctx, sqlAppend, c.args...)
	if err != nil {
		return nil, s.appendError(c.id, c.opts, err)
	}
	return c.scan(rows)
}

// appendCall is one logbook_append call: its events, checked and encoded before anything is
// sent, and its arguments.
type appendCall struct {
	s         *Store
	id        ID
	opts      AppendOptions
	evs       []NewEvent
	ids       []pgtype.UUID
	payloads  []string
	keys      []pgtype.Text
	sanitized []bool
	args      []any
	// statement: AppendBatch sent the call as the one-event statement.
	statement bool
}

// newAppendCall checks and encodes evs for an append to session id; nil (and no error) when
// there is nothing to append.
func (s *Store) newAppendCall(id ID, opts AppendOptions, evs []NewEvent) (*appendCall, error) {
	if id == (ID{}) {
		return nil, ErrEmptySessionID
	}
	if len(evs) == 0 {
		return nil, nil
	}
	n := len(evs)
	// The parameters are of types pgx encodes directly: a uuid.UUID is a driver.Valuer, which
	// pgx would turn into its text and parse back (after a failed plan and its error value);
	// a []*string goes through reflection.
	var (
		ids       = make([]pgtype.UUID, n)
		types     = make([]string, n)
		kinds     = make([]string, n)
		actors    = make([]string, n)
		payloads  = make([]string, n)
		keys      = make([]pgtype.Text, n)
		sanitized = make([]bool, n)
	)
	for i, ev := range evs {
		if !ev.Type.Known() {
			return nil, fmt.Errorf("append to session %s: event %d: %w %q", id, i, ErrUnknownType, ev.Type)
		}
		switch ev.Actor.Kind {
		case ActorUser, ActorBot, ActorSystem, ActorSandbox, ActorGitHub:
		default:
			return nil, fmt.Errorf("append to session %s: event %d: %w: actor kind %q", id, i, ErrInvalidEvent, ev.Actor.Kind)
		}
		if ev.Actor.ID == "" || !cleanText(ev.Actor.ID) {
			return nil, fmt.Errorf("append to session %s: event %d: %w: actor id must be non-empty UTF-8 without NUL", id, i, ErrInvalidEvent)
		}
		if ev.IdempotencyKey != "" && !cleanText(ev.IdempotencyKey) {
			return nil, fmt.Errorf("append to session %s: event %d: %w: idempotency key must be UTF-8 without NUL", id, i, ErrInvalidEvent)
		}
		b, san, err := encodePayload(ev.Payload)
		if err != nil {
			return nil, fmt.Errorf("append to session %s: event %d: %w", id, i, err)
		}
		if len(b) > s.maxPayload {
			return nil, fmt.Errorf("append to session %s: %w", id, &TooLargeError{Index: i, Size: len(b), Limit: s.maxPayload})
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("append to session %s: new event id: %w", id, err)
		}
		ids[i] = pgtype.UUID{Bytes: eventID, Valid: true}
		types[i], kinds[i], actors[i] = string(ev.Type), string(ev.Actor.Kind), ev.Actor.ID
		payloads[i], sanitized[i] = string(b), san
		keys[i] = pgtype.Text{String: ev.IdempotencyKey, Valid: ev.IdempotencyKey != ""}
	}
	var expected, epoch *int64
	if opts.CheckSeq {
		expected = &opts.ExpectedSeq
	}
	if opts.Epoch != 0 {
		epoch = &opts.Epoch
	}
	return &appendCall{s: s, id: id, opts: opts, evs: evs, ids: ids, payloads: payloads, keys: keys, sanitized: sanitized,
		args: []any{pgtype.UUID{Bytes: id, Valid: true}, expected, epoch, ids, types, kinds, actors, payloads, keys, sanitized}}, nil
}

// scan reads the call's rows into the stored events, and closes rows.
func (c *appendCall) scan(rows pgx.Rows) ([]Event, error) {
	out, err := c.read(rows)
	if err != nil {
		return nil, c.s.appendError(c.id, c.opts, err)
	}
	return out, nil
}

// read is scan with the database's error as it came.
func (c *appendCall) read(rows pgx.Rows) ([]Event, error) {
	n := len(c.evs)
	out := make([]Event, 0, n)
	for rows.Next() {
		e := Event{SessionID: c.id}
		var typ, kind, actor pgtype.Text // NULL but for a duplicate; a *string scans by reflection
		var payload []byte
		var eventID pgtype.UUID // a uuid.UUID scans through its text
		if err := rows.Scan(&e.Seq, &eventID, &e.CreatedAt, &e.PayloadHash, &e.PrevHash, &e.Hash, &e.Position,
			&e.Duplicate, &typ, &kind, &actor, &payload, &e.Sanitized); err != nil {
			rows.Close()
			return nil, err
		}
		e.ID = eventID.Bytes
		i := len(out)
		if i >= n {
			rows.Close()
			return nil, fmt.Errorf("%d rows for %d events", i+1, n)
		}
		if e.Duplicate && typ.Valid && kind.Valid && actor.Valid {
			e.Type, e.Actor, e.Payload = Type(typ.String), Actor{Kind: ActorKind(kind.String), ID: actor.String}, payload
		} else {
			e.Type, e.Actor, e.Payload = c.evs[i].Type, c.evs[i].Actor, json.RawMessage(c.payloads[i])
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("%d rows for %d events", len(out), n)
	}
	for i := range out {
		out[i].IdempotencyKey = c.keys[i].String
	}
	return out, nil
}

// appendError translates the database's answer to an append, once, into the package's errors.
func (s *Store) appendError(id ID, opts AppendOptions, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "LB001":
			actual, _ := strconv.ParseInt(pgErr.Detail, 10, 64)
			return &ConflictError{Session: id, Expected: opts.ExpectedSeq, Actual: actual}
		case "LB002":
			return fmt.Errorf("append to session %s with epoch %d: %w", id, opts.Epoch, ErrFenced)
		case "LB003":
			return fmt.Errorf("append to session %s: %w", id, ErrNotFound)
		case "22P05", "22021", "22P02":
			return fmt.Errorf("append to session %s: %w: %s", id, ErrInvalidPayload, pgErr.Message)
		}
	}
	return fmt.Errorf("append to session %s: %w", id, err)
}

// cleanText reports whether s can be stored as PostgreSQL text: valid UTF-8 without NUL.
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

const sqlRecent = `
SELECT s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at FROM sessions s
WHERE s.id IN (SELECT DISTINCT e.session_id FROM events e WHERE e.created_at >= $1)
  AND s.thread_ts <> '` + LedgerThread + `' AND s.kind = 'thread'
ORDER BY s.created_at DESC, s.id DESC
LIMIT $2`

// Recent returns the threads' sessions (channels' ledgers and eval records are not threads) with an event at or after since, whichever team owns their
// channel (a Slack Connect channel may be hosted by another organisation), newest session
// first, at most limit of them.
func (s *Store) Recent(ctx context.Context, since time.Time, limit int) ([]Session, error) {
	rows, err := s.pool.Query(ctx, sqlRecent, since, limit)
	if err != nil {
		return nil, fmt.Errorf("list sessions active since %s: %w", since.Format(time.RFC3339), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Session, error) { return scanSession(row) })
	if err != nil {
		return nil, fmt.Errorf("list sessions active since %s: %w", since.Format(time.RFC3339), err)
	}
	return out, nil
}

const sqlWritable = `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'`

// CheckWritable asks the server, in one round trip, whether this pool's connections may
// write: ErrReadOnly when the server is a standby or the session is read-only; the
// connection's error (wrapped) when the server does not answer within ctx. It takes no lock
// and writes nothing, so it does not show an append that is blocked on a lock or a full disk.
func (s *Store) CheckWritable(ctx context.Context) error {
	var readOnly bool
	if err := s.pool.QueryRow(ctx, sqlWritable).Scan(&readOnly); err != nil {
		return fmt.Errorf("check the database is writable: %w", err)
	}
	if readOnly {
		return ErrReadOnly
	}
	return nil
}
