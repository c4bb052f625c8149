package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// sqlWindow is the start of a poll's window ($1 back from the database's clock), read once:
// at, and hour, its hour in UTC as session_work.last_message_hour is.
const sqlWindow = `
WITH win AS MATERIALIZED (
    SELECT t AS at, date_trunc('hour', t AT TIME ZONE 'UTC') AS hour
    FROM (SELECT clock_timestamp() - $1::interval AS t) c
)`

// sqlNotAwaiting is the part of a session's work test that leaves out a session suspended
// waiting for a person (00008_awaiting.sql), shared by every statement that asks for work.
const sqlNotAwaiting = `  AND (w.awaiting_until IS NULL OR w.awaiting_until <= clock_timestamp() OR w.last_message_seq > w.awaiting_through)`

// sqlPending reads session_work (migrations/00004_pending.sql), which the append keeps as it
// appends user_message events and turn markers (00060_append_keeps_work.sql, 00170): its cost grows with the sessions that have
// pending work, not with the size of the log. The window's start is computed once (a CTE) so
// that it bounds the scan of the partial index session_work_pending (a volatile expression
// in the condition could only filter every pending session ever). The index is keyed by the
// hour of the last message (00011_work_hot.sql: so that most appends update the row in
// place), so the scan starts at the hour of the window's start and last_message_at is then
// checked exactly.
const sqlPending = sqlWindow + `
SELECT w.session_id FROM session_work w
WHERE w.pending
  AND w.last_message_hour >= (SELECT hour FROM win)
  AND w.last_message_at > (SELECT at FROM win)
` + sqlNotAwaiting + `
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = w.session_id
                  AND l.expires_at > clock_timestamp() AND l.owner <> $2
                  AND NOT (l.claimed AND logbook_claim_free(l.owner)))`

// Pending returns the sessions with work nobody runs: a user_message newer than window whose
// seq is above the Through of the session's latest turn_completed (0 when none), not
// suspended waiting for a person (turn_suspended, until its deadline passes, a user message
// arrives, or approval_decided or stop_requested is appended; 00008_awaiting.sql), and no
// unexpired lease held by a live owner other than owner (a claimed lease whose owner's
// liveness claim is free counts as nobody's; see LeaseOptions). window is measured on the
// database's clock. The order is unspecified.
func (s *Store) Pending(ctx context.Context, owner string, window time.Duration) ([]ID, error) {
	return column[ID](ctx, s, "list sessions with pending work", sqlPending, window, owner)
}

// WakeOptions bound PendingWith and OrphanedWith, for a replica that wakes only so many
// cells at once (LOGBOOK_WAKE_LIMIT): the sessions come oldest first (by their last user
// message), at most Limit of them (0: all), none of Skip (the sessions it runs already).
type WakeOptions struct {
	Limit int
	Skip  []ID
}

// sqlBounded bounds the candidates of sqlPending or sqlOrphaned ($3: sessions to skip, $4:
// the most rows, NULL for all), oldest first: the scan of session_work_pending is in its key
// order already (the hour), and only the candidates of one hour are sorted.
const sqlBounded = `
  AND NOT (w.session_id = ANY($3::uuid[]))
ORDER BY w.last_message_hour, w.last_message_at, w.session_id
LIMIT $4::bigint`

// PendingWith is Pending, bounded by o.
func (s *Store) PendingWith(ctx context.Context, owner string, window time.Duration, o WakeOptions) ([]ID, error) {
	return column[ID](ctx, s, "list sessions with pending work", sqlPending+sqlBounded, window, owner, skipIDs(o), wakeLimit(o))
}

// sqlPendingAmong is sqlPending's test of a session's work for a few sessions named by id
// (session_work's key), without the lease: they are the caller's own.
const sqlPendingAmong = `
SELECT w.session_id FROM session_work w
WHERE w.session_id = ANY($2::uuid[]) AND w.pending
  AND w.last_message_at > clock_timestamp() - $1::interval
` + sqlNotAwaiting

// PendingAmong returns which of ids, sessions a replica runs, have work as Pending counts it
// (within window): work their cells may not have heard of (a wake lost on its way: a post
// that failed, a NOTIFY sent while nobody listened). The poll skips the sessions it runs
// (PendingWith's Skip), so without it such a session waits for its idle cell to end. One
// lookup by key per id.
func (s *Store) PendingAmong(ctx context.Context, window time.Duration, ids []ID) ([]ID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return column[ID](ctx, s, "list the pending sessions among those run here", sqlPendingAmong, window, ids)
}

func skipIDs(o WakeOptions) []ID {
	if o.Skip == nil {
		return []ID{}
	}
	return o.Skip
}

func wakeLimit(o WakeOptions) any {
	if o.Limit <= 0 {
		return nil
	}
	return int64(o.Limit)
}

// sqlOrphaned is sqlPending restricted to sessions whose unexpired lease belongs to a dead
// owner: the same partial-index scan of pending sessions, then one lease row and one lock
// try per candidate, so it may run far more often than the poll.
const sqlOrphaned = sqlWindow + `
SELECT w.session_id FROM session_work w JOIN leases l ON l.session_id = w.session_id
WHERE w.pending
  AND w.last_message_hour >= (SELECT hour FROM win)
  AND w.last_message_at > (SELECT at FROM win)
` + sqlNotAwaiting + `
  AND l.expires_at > clock_timestamp() AND l.owner <> $2 AND l.claimed
  AND logbook_claim_free(l.owner)`

// Orphaned returns the sessions with pending work (as Pending) whose lease is unexpired but
// held by another owner that is dead: it took the lease with its liveness claim, and the
// claim is free now. AcquireLeaseWith takes such a lease at once. The order is unspecified.
func (s *Store) Orphaned(ctx context.Context, owner string, window time.Duration) ([]ID, error) {
	return column[ID](ctx, s, "list sessions of dead owners", sqlOrphaned, window, owner)
}

// OrphanedWith is Orphaned, bounded by o.
func (s *Store) OrphanedWith(ctx context.Context, owner string, window time.Duration, o WakeOptions) ([]ID, error) {
	return column[ID](ctx, s, "list sessions of dead owners", sqlOrphaned+sqlBounded, window, owner, skipIDs(o), wakeLimit(o))
}

// notifyChannel is the PostgreSQL NOTIFY channel of session signals. A payload is the
// session id, a space, and the sender's name; a signal for one replica (NotifyOwner) adds a
// tab and that replica's name, and the other replicas' listeners drop it unread.
const notifyChannel = "logbook_session"

// sqlPeerOf reads the routed replica's peer row (replica_peers) beside it; pg_notify runs
// only when it has none ($3 true: the caller posts wakes itself). A CASE's branches are
// evaluated only when taken.
const sqlPeerOf = `coalesce(p.addr, ''), coalesce(p.token, ''),
       CASE WHEN p.owner IS NULL OR NOT $3::boolean THEN pg_notify('` + notifyChannel + `', `

// sqlNotifyOwner signals the live owner of the session's lease, other than the sender, and
// names it; no row (nothing sent) when there is none: no lease, an expired one, the sender's
// own, or a claimed one whose owner's liveness claim is free (a dead replica). An owner that
// takes wakes over HTTP (a replica_peers row) gets no NOTIFY: its address and token come back.
const sqlNotifyOwner = `
SELECT l.owner, ` + sqlPeerOf + `l.session_id::text || ' ' || $2::text || E'\t' || l.owner) END
FROM leases l LEFT JOIN replica_peers p ON p.owner = l.owner
WHERE l.session_id = $1::uuid AND l.expires_at > clock_timestamp() AND l.owner <> $2
  AND NOT (l.claimed AND logbook_claim_free(l.owner))`

// Route is the replica a signal is for. Owner "" means none: nothing was sent. When Addr is
// set, the replica takes wakes over HTTP (LOGBOOK_PEER_ADDR) and no NOTIFY was sent: the
// caller posts the wake to Addr with Token as its bearer token, and on failure signals it
// with NotifyTo. Token is a secret: it is never logged.
type Route struct {
	Owner string
	Addr  string
	Token string
}

// NotifyOwner signals session id's new work to the one replica that runs it: the live owner
// of its lease, when that is not sender, which it returns. It returns Route{} and sends
// nothing when no other live owner holds the lease: the caller runs the session itself (it
// takes the lease). One statement, whatever the number of replicas. With direct, an owner
// that takes wakes over HTTP is returned with its address and not NOTIFYed (see Route);
// without, every owner is NOTIFYed. A NOTIFY wakes every replica's listener in PostgreSQL
// 15 (each reads the queue in a transaction), though only the owner acts on it
// (ListenClaimed drops a signal for another owner). As with Notify, the signal is a hint
// that may be lost.
func (s *Store) NotifyOwner(ctx context.Context, id ID, sender string, direct bool) (Route, error) {
	return s.notifyOne(ctx, sqlNotifyOwner, "the owner", id, sender, direct)
}

// sqlNotifyPeer signals one live replica other than the sender and names it: of the owners
// of claimed, unexpired leases whose liveness claim is held (alive), the one with the fewest;
// no row (nothing sent) when there is none. The owners are looked up first (a CTE, so the
// lock try runs once per owner, not per lease), then the claim is tried on the few, busiest
// last, and the first that is held gets the signal (by NOTIFY, unless it has a peer row).
const sqlNotifyPeer = `
WITH owners AS MATERIALIZED (
    SELECT l.owner, count(*) AS n FROM leases l
    WHERE l.expires_at > clock_timestamp() AND l.claimed AND l.owner <> $2
    GROUP BY l.owner
), live AS MATERIALIZED (
    SELECT o.owner, o.n FROM owners o WHERE NOT logbook_claim_free(o.owner)
), peer AS (
    SELECT v.owner FROM live v ORDER BY v.n, v.owner LIMIT 1
)
SELECT v.owner, ` + sqlPeerOf + `$1::uuid::text || ' ' || $2::text || E'\t' || v.owner) END
FROM peer v LEFT JOIN replica_peers p ON p.owner = v.owner`

// NotifyPeer signals session id's work to one live replica other than sender (the one that
// runs the fewest sessions, among those that run any), which it returns: a graceful stop
// hands a session over to one peer instead of waking every replica to race for its lease
// (issue 33). It returns Route{} and sends nothing when it knows of no live peer (none holds
// a claimed lease); the caller then falls back to Notify. direct is as for NotifyOwner. As
// with Notify, the signal is a hint.
func (s *Store) NotifyPeer(ctx context.Context, id ID, sender string, direct bool) (Route, error) {
	return s.notifyOne(ctx, sqlNotifyPeer, "a peer", id, sender, direct)
}

// notifyOne runs q, a statement that signals at most one replica about session id and names
// it ($1 the session, $2 sender, $3 direct), and returns its route: Route{} when no row
// (nothing was sent). whom names the replica in the error.
func (s *Store) notifyOne(ctx context.Context, q, whom string, id ID, sender string, direct bool) (Route, error) {
	var r Route
	err := s.pool.QueryRow(ctx, q, id, sender, direct).Scan(&r.Owner, &r.Addr, &r.Token, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return Route{}, nil
	}
	if err != nil {
		return Route{}, fmt.Errorf("notify %s of session %s: %w", whom, id, err)
	}
	if !direct {
		r.Addr, r.Token = "", ""
	}
	return r, nil
}

// NotifyTo signals session id's work to owner alone by NOTIFY (the other replicas' listeners
// drop it): the fallback when a wake posted to owner's address failed.
func (s *Store) NotifyTo(ctx context.Context, id ID, sender, owner string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify('`+notifyChannel+`', $1::uuid::text || ' ' || $2::text || E'\t' || $3::text)`, id, sender, owner); err != nil {
		return fmt.Errorf("notify %s of session %s: %w", owner, id, err)
	}
	return nil
}

// sqlForgetDeadPeers deletes the peer rows of replicas other than $1 whose liveness claim is
// free (dead ones, and stopped ones that could not say so), as part of a statement that
// records $1's.
const sqlForgetDeadPeers = `
WITH gone AS (DELETE FROM replica_peers p WHERE p.owner <> $1 AND logbook_claim_free(p.owner))`

// sqlRecordPeer records owner's address and wake token, and deletes the rows of replicas
// whose liveness claim is free (dead ones, and stopped ones that could not say so). The
// caller holds owner's claim on another connection, so its own row is never taken as dead.
const sqlRecordPeer = sqlForgetDeadPeers + `
INSERT INTO replica_peers (owner, addr, token) VALUES ($1, $2, $3)
ON CONFLICT (owner) DO UPDATE SET addr = excluded.addr, token = excluded.token, recorded_at = clock_timestamp()`

// RecordPeer says that owner, which holds its liveness claim, takes wakes over HTTP at addr
// (host:port) with token as the bearer token: NotifyOwner and NotifyPeer return them to a
// direct sender instead of NOTIFYing owner. It also forgets dead replicas' rows.
func (s *Store) RecordPeer(ctx context.Context, owner, addr, token string) error {
	if _, err := s.pool.Exec(ctx, sqlRecordPeer, owner, addr, token); err != nil {
		return fmt.Errorf("record the peer address of %s: %w", owner, err)
	}
	return nil
}

// ForgetPeer deletes owner's peer row (a graceful stop): signals go to it by NOTIFY again,
// until it records one.
func (s *Store) ForgetPeer(ctx context.Context, owner string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM replica_peers WHERE owner = $1`, owner); err != nil {
		return fmt.Errorf("forget the peer address of %s: %w", owner, err)
	}
	return nil
}

// Notify signals every Listen on the database that session id has new work. sender names
// the signalling process (e.g. a lease owner) so that its own listener can ignore the
// signal. A signal is a hint: it is lost when nobody listens, and readers must not depend on
// it (Pending finds the work).
func (s *Store) Notify(ctx context.Context, id ID, sender string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify('`+notifyChannel+`', $1)`, id.String()+" "+sender); err != nil {
		return fmt.Errorf("notify session %s: %w", id, err)
	}
	return nil
}

// Listen holds one dedicated connection to dsn (not a pooled one: LISTEN belongs to a
// connection) that LISTENs for Notify's signals, until ctx ends or the connection fails.
// Once LISTEN is in place it calls listening, on its own goroutine, before it reads any
// signal: a caller that catches up there (e.g. with Pending) loses nothing signalled while it
// was not listening. Then it calls notified with each signal's session and sender, in order.
// Payloads that do not name a session are skipped. Listen always returns an error: ctx's
// error once ctx ends, otherwise why the connection failed (reconnecting is the caller's).
// The connection is checked as ListenOptions' zero value says.
func Listen(ctx context.Context, dsn string, listening func(), notified func(id ID, sender string)) error {
	return listen(ctx, dsn, "", ListenOptions{}, listening, notified)
}

// ListenOptions says how the LISTEN connection proves it is alive. A connection whose server
// went away without a word (a failover, a cut network) reads nothing forever: TCP keepalive
// (every few seconds once idle) makes the kernel notice a peer that stopped answering, and a
// round trip every CheckEvery, which must be answered within CheckEvery, notices a server
// that is stalled or a path that drops everything. A failed check ends Listen with
// ErrListenUnresponsive.
type ListenOptions struct {
	// CheckEvery is the time between two round trips, and how long one may take (5 s).
	CheckEvery time.Duration
	// After times the checks (nil: time.After): a test's clock.
	After func(time.Duration) <-chan time.Time
}

// ErrListenUnresponsive: the LISTEN connection did not answer its check in time.
var ErrListenUnresponsive = errors.New("the LISTEN connection did not answer its check in time")

// ListenClaimed is Listen on a connection that first takes owner's liveness claim: a
// session-scoped advisory lock (LockLivenessSeed) that PostgreSQL frees the moment the
// connection ends, however the process ends. It waits for the claim while an earlier
// connection of the same owner still holds it. listening is called once both the claim and
// LISTEN are in place: from then until ListenClaimed returns, owner may take leases with
// LeaseOptions.Claimed. When it returns the claim is gone, or can no longer be proven held (a
// connection that failed its check: the server, or a new primary after a failover, may have
// freed it already), so the caller must stop what it does under the claim at once. Signals
// NotifyOwner sent to another owner are dropped without a call to notified.
func ListenClaimed(ctx context.Context, dsn, owner string, opt ListenOptions, listening func(), notified func(id ID, sender string)) error {
	if owner == "" {
		return errors.New("listen claimed: no owner")
	}
	return listen(ctx, dsn, owner, opt, listening, notified)
}

func listen(ctx context.Context, dsn, owner string, opt ListenOptions, listening func(), notified func(id ID, sender string)) error {
	conn, err := dedicatedConn(ctx, dsn, listenApplication)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dead := false
	if owner != "" {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, $2))`, owner, LockLivenessSeed); err != nil {
			return fmt.Errorf("take the liveness claim of %s: %w", owner, err)
		}
		// A stop lets go of the claim before the connection closes: the server ends a closed
		// connection's backend a moment later, and a peer must not see the claim held
		// meanwhile. (A crash frees it when the connection drops; a dead connection is not
		// asked.)
		defer func() {
			if dead {
				return
			}
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, _ = conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, $2))`, owner, LockLivenessSeed)
		}()
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening()
	err = wait(ctx, conn, owner, opt, notified)
	dead = errors.Is(err, ErrListenUnresponsive)
	return err
}

// dedicatedConn opens a connection of its own (not a pooled one) to dsn, named application:
// it notices a server that went away without a word (TCP keepalive, a
// connect timeout), and a cancelled wait sets a deadline on the socket at once instead of
// sending the server a cancel request (which opens a connection of its own).
func dedicatedConn(ctx context.Context, dsn, application string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", redactedError{err})
	}
	cfg.RuntimeParams["application_name"] = application
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second // a silent network must not hold a reconnect forever
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}}
	cfg.DialFunc = dialer.DialContext
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// wait reads signals and checks the connection every opt.CheckEvery, until either fails or
// ctx ends. A signal for one replica (NotifyOwner) that is not owner is dropped (owner "":
// none is).
func wait(ctx context.Context, conn *pgx.Conn, owner string, opt ListenOptions, notified func(id ID, sender string)) error {
	every := opt.CheckEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	after := opt.After
	if after == nil {
		after = time.After
	}
	due := after(every)
	for {
		// The wait ends when a signal comes or the check is due, whichever is first.
		var n *pgconn.Notification
		isDue, err := untilFires(ctx, due, func(wctx context.Context) error {
			var err error
			n, err = conn.WaitForNotification(wctx)
			return err
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !(isDue && errors.Is(err, context.Canceled)) {
			return err
		}
		if isDue {
			if err := check(ctx, conn, every, after); err != nil {
				return err
			}
			due = after(every)
		}
		if n == nil {
			continue
		}
		sid, sender, _ := strings.Cut(n.Payload, " ")
		id, err := ParseID(sid)
		if err != nil {
			continue
		}
		sender, to, targeted := strings.Cut(sender, "\t")
		if targeted && owner != "" && to != owner {
			continue // for another replica, which holds the session's lease
		}
		notified(id, sender)
	}
}

// check makes one round trip on conn, which must answer within timeout (on after's clock).
func check(ctx context.Context, conn *pgx.Conn, timeout time.Duration, after func(time.Duration) <-chan time.Time) error {
	late, err := untilFires(ctx, after(timeout), conn.Ping)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if late {
		return fmt.Errorf("%w (%s)", ErrListenUnresponsive, timeout)
	}
	if err != nil {
		return fmt.Errorf("check the LISTEN connection: %w", err)
	}
	return nil
}

// untilFires runs f with a context of ctx's that is cancelled when fire delivers, and says
// whether it did (an error of f's may then be that cancellation). It returns once f has and
// the goroutine watching fire has ended; a value fire did not deliver is left in it.
func untilFires(ctx context.Context, fire <-chan time.Time, f func(context.Context) error) (fired bool, err error) {
	fctx, cancel := context.WithCancel(ctx)
	var isFired atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-fire:
			isFired.Store(true)
			cancel()
		case <-fctx.Done():
		}
	}()
	err = f(fctx)
	cancel()
	<-done
	return isFired.Load(), err
}

const sqlMissingTables = `SELECT array_remove(ARRAY[
	CASE WHEN to_regclass('events') IS NULL THEN 'events' END,
	CASE WHEN to_regclass('session_work') IS NULL THEN 'session_work' END,
	CASE WHEN NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('session_work')
	     AND attname = 'awaiting_until' AND NOT attisdropped) THEN 'session_work.awaiting_until' END,
	CASE WHEN NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('session_work')
	     AND attname = 'last_message_hour' AND NOT attisdropped) THEN 'session_work.last_message_hour' END,
	CASE WHEN NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('session_work')
	     AND attname = 'lease_epoch' AND NOT attisdropped) THEN 'session_work.lease_epoch' END], NULL)
	|| ARRAY(SELECT t FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NULL)`

// MissingTables returns the log's tables that the database lacks, and those of also (the
// tables of other parts, such as search_docs or audit_access), none when it has every
// migration the store needs (session_work came with migration 00004, its awaiting columns
// with 00008, the columns its poll index is on with 00011, the head and lease epoch the
// one-event append moves with 00170). It reads the catalog, which every
// role may, whatever its grants on the tables (information_schema would hide a column from a
// role without them).
func (s *Store) MissingTables(ctx context.Context, also ...string) ([]string, error) {
	var missing []string
	if err := s.pool.QueryRow(ctx, sqlMissingTables, append([]string{}, also...)).Scan(&missing); err != nil {
		return nil, fmt.Errorf("check the log's tables: %w", err)
	}
	return missing, nil
}
