package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenApplication is the application_name of ListenClaimed's connection, the one that
// holds a replica's liveness claim; watchApplication is WatchPeers'.
const (
	listenApplication = "logbook-listen"
	watchApplication  = "logbook-watch"
)

// sqlNextClaim is the liveness claim WatchPeers waits on: of the claims held now in this
// database (session-scoped exclusive advisory locks held by a LISTEN connection: pg_locks
// shows a bigint key as classid, its high 32 bits, and objid, its low ones, with objsubid 1),
// the next after owner's own key in key order, wrapping round: each live replica is then
// watched by one peer. No row when owner is alone. $1 owner, $2 LockLivenessSeed, $3 the
// LISTEN connections' application_name.
const sqlNextClaim = `
WITH me AS (SELECT hashtextextended($1::text, $2::bigint) AS k),
claims AS (
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS k, l.pid
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.mode = 'ExclusiveLock' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND a.application_name = $3::text
)
SELECT c.k, c.pid FROM claims c, me WHERE c.k <> me.k ORDER BY c.k < me.k, c.k LIMIT 1`

// sqlWaitNextClaim finds the next claim (sqlNextClaim) and waits on it in one statement
// ($4 the wait in ms; logbook_wait_claim, migrations/00160_wait_claim.sql): true once the
// claim is free (the shared lock it got is let go as the statement ends), false when the wait
// timed out with the peer alive. No row when owner is alone. Issue 53: the pick and the wait
// as two statements were two transactions a second on every idle replica of a fleet. The
// LIMIT in a subquery picks the one peer before the wait runs.
const sqlWaitNextClaim = `SELECT n.k, n.pid, logbook_wait_claim(n.k, $4::integer) FROM (` + sqlNextClaim + `) n`

// WatchOptions configures WatchPeers.
type WatchOptions struct {
	// Repick bounds one wait on a peer's claim: the peer is chosen again after it, so a replica
	// that joined the ring meanwhile gets its watcher (1 s; at most 0.9 × deadlock_timeout).
	Repick time.Duration
	// After times the wait while no peer is alive (nil: time.After): a test's clock.
	After func(time.Duration) <-chan time.Time
}

// WatchPeers holds a dedicated connection to dsn (application_name logbook-watch) that waits
// on one live peer's liveness claim — the next after owner's (sqlNextClaim) — and calls died
// with that peer's LISTEN backend pid the moment PostgreSQL frees the claim: its connection
// ended (a kill -9, a crash, a cut network), or it stopped. The caller then takes the dead
// replica's sessions at once, instead of finding them on its next orphan scan. The wait is a
// shared lock request (pg_advisory_lock_shared), which conflicts only with the owner's
// exclusive hold: logbook_claim_free's shared tries still read the owner as alive meanwhile,
// and the lock is let go as soon as it is granted. Each wait lasts at most Repick, and less
// than the server's deadlock_timeout. died is a hint, never needed for
// correctness: the orphan scan finds what a missed death leaves. WatchPeers returns ctx's
// error once ctx ends, otherwise why the connection failed (reconnecting is the caller's).
func WatchPeers(ctx context.Context, dsn, owner string, opt WatchOptions, died func(pid int)) error {
	if owner == "" {
		return errors.New("watch peers: no owner")
	}
	repick := opt.Repick
	if repick <= 0 {
		repick = time.Second
	}
	after := opt.After
	if after == nil {
		after = time.After
	}
	conn, err := dedicatedConn(ctx, dsn, watchApplication)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A wait stays below the server's deadlock_timeout: past it, PostgreSQL runs its deadlock
	// check, which locks the whole lock table, for every waiting backend.
	var deadlockMS int64
	if err := conn.QueryRow(ctx, `SELECT (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint`).Scan(&deadlockMS); err != nil {
		return fmt.Errorf("read deadlock_timeout: %w", err)
	}
	waitMS := min(repick.Milliseconds(), deadlockMS*9/10)
	waitMS = max(waitMS, 10)
	for {
		var key int64
		var pid int
		var free bool
		// A timeout is no error (logbook_wait_claim catches it), so the server logs nothing.
		err := conn.QueryRow(ctx, sqlWaitNextClaim, owner, LockLivenessSeed, listenApplication, waitMS).Scan(&key, &pid, &free)
		if errors.Is(err, pgx.ErrNoRows) {
			select { // alone: look again later
			case <-ctx.Done():
				return ctx.Err()
			case <-after(repick):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("wait on a peer's liveness claim: %w", err)
		}
		if free {
			died(pid)
		}
	}
}
