package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlPending reads session_work (migrations/00004_pending.sql), which the log keeps as it
// appends user_message and turn_completed events: its cost grows with the sessions that have
// pending work, not with the size of the log. The cutoff is a subquery, computed once, so
// that it bounds the scan of the partial index session_work_pending (a volatile expression
// in the condition could only filter every pending session ever).
const sqlPending = `
SELECT w.session_id FROM session_work w
WHERE w.last_message_seq > w.answered_through
  AND w.last_message_at > (SELECT clock_timestamp() - $1::interval)
  AND (w.awaiting_until IS NULL OR w.awaiting_until <= clock_timestamp() OR w.last_message_seq > w.awaiting_through)
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

// sqlOrphaned is sqlPending restricted to sessions whose unexpired lease belongs to a dead
// owner: the same partial-index scan of pending sessions, then one lease row and one lock
// try per candidate, so it may run far more often than the poll.
const sqlOrphaned = `
SELECT w.session_id FROM session_work w JOIN leases l ON l.session_id = w.session_id
WHERE w.last_message_seq > w.answered_through
  AND w.last_message_at > (SELECT clock_timestamp() - $1::interval)
  AND (w.awaiting_until IS NULL OR w.awaiting_until <= clock_timestamp() OR w.last_message_seq > w.awaiting_through)
  AND l.expires_at > clock_timestamp() AND l.owner <> $2 AND l.claimed
  AND logbook_claim_free(l.owner)`

// Orphaned returns the sessions with pending work (as Pending) whose lease is unexpired but
// held by another owner that is dead: it took the lease with its liveness claim, and the
// claim is free now. AcquireLeaseWith takes such a lease at once. The order is unspecified.
func (s *Store) Orphaned(ctx context.Context, owner string, window time.Duration) ([]ID, error) {
	return column[ID](ctx, s, "list sessions of dead owners", sqlOrphaned, window, owner)
}

// notifyChannel is the PostgreSQL NOTIFY channel of session signals. A payload is the
// session id, a space, and the sender's name.
const notifyChannel = "logbook_session"

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
func Listen(ctx context.Context, dsn string, listening func(), notified func(id ID, sender string)) error {
	return listen(ctx, dsn, "", listening, notified)
}

// ListenClaimed is Listen on a connection that first takes owner's liveness claim: a
// session-scoped advisory lock (LockLivenessSeed) that PostgreSQL frees the moment the
// connection ends, however the process ends. It waits for the claim while an earlier
// connection of the same owner still holds it. listening is called once both the claim and
// LISTEN are in place: from then until ListenClaimed returns, owner may take leases with
// LeaseOptions.Claimed. When it returns the claim is gone (or going: a connection cut off
// without a goodbye is freed when the server notices).
func ListenClaimed(ctx context.Context, dsn, owner string, listening func(), notified func(id ID, sender string)) error {
	if owner == "" {
		return errors.New("listen claimed: no owner")
	}
	return listen(ctx, dsn, owner, listening, notified)
}

func listen(ctx context.Context, dsn, owner string, listening func(), notified func(id ID, sender string)) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", redactedError{err})
	}
	cfg.RuntimeParams["application_name"] = "logbook-listen"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if owner != "" {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, $2))`, owner, LockLivenessSeed); err != nil {
			return fmt.Errorf("take the liveness claim of %s: %w", owner, err)
		}
		// A stop lets go of the claim before the connection closes: the server ends a closed
		// connection's backend a moment later, and a peer must not see the claim held
		// meanwhile. (A crash frees it when the connection drops.)
		defer func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, _ = conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, $2))`, owner, LockLivenessSeed)
		}()
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		sid, sender, _ := strings.Cut(n.Payload, " ")
		id, err := ParseID(sid)
		if err != nil {
			continue
		}
		notified(id, sender)
	}
}

const sqlMissingTables = `SELECT array_remove(ARRAY[
	CASE WHEN to_regclass('events') IS NULL THEN 'events' END,
	CASE WHEN to_regclass('session_work') IS NULL THEN 'session_work' END,
	CASE WHEN NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
	     AND table_name = 'session_work' AND column_name = 'awaiting_until') THEN 'session_work.awaiting_until' END], NULL)`

// MissingTables returns the log's tables that the database lacks, none when it has every
// migration the store needs (session_work came with migration 00004, its awaiting columns
// with 00008).
func (s *Store) MissingTables(ctx context.Context) ([]string, error) {
	var missing []string
	if err := s.pool.QueryRow(ctx, sqlMissingTables).Scan(&missing); err != nil {
		return nil, fmt.Errorf("check the log's tables: %w", err)
	}
	return missing, nil
}
