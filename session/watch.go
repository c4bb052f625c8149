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

// WatchOptions configures WatchPeers.
type WatchOptions struct {
	// Repick bounds one wait on a peer's claim (lock_timeout): the peer is chosen again after
	// it, so a replica that joined the ring meanwhile gets its watcher (1 s).
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
// and the lock is let go as soon as it is granted. died is a hint, never needed for
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
	cfg, err := dedicatedConfig(dsn, watchApplication)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(repick.Milliseconds(), 1), 10)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var key int64
		var pid int
		err := conn.QueryRow(ctx, sqlNextClaim, owner, LockLivenessSeed, listenApplication).Scan(&key, &pid)
		if errors.Is(err, pgx.ErrNoRows) {
			select { // alone: look again later
			case <-ctx.Done():
				return ctx.Err()
			case <-after(repick):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("find a peer's liveness claim: %w", err)
		}
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock_shared($1)`, key)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: the peer lives
			continue
		}
		if err != nil {
			return fmt.Errorf("wait on a peer's liveness claim: %w", err)
		}
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock_shared($1)`, key); err != nil {
			return fmt.Errorf("let go of a dead peer's liveness claim: %w", err)
		}
		died(pid)
	}
}
