package session

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A heartbeat claim is a replica's liveness claim held as a row, not as a lock on a
// connection of its own (migrations/00400_liveness_heartbeat.sql): the replica's
// replica_peers row with alive_until, which the replica moves forward through its pool. It
// is for a fleet behind PgBouncer, where a connection per replica to PostgreSQL itself is
// what fills the server (issue 53). A replica that holds one LISTENs for nothing: it takes
// its wakes over HTTP (the row's addr and token), and peers find its work by the poll
// otherwise.
//
// The trade: a replica that dies without a word keeps its claim until alive_until passes
// (HeartbeatOptions.TTL), where a lock is freed the moment its connection drops.

// DefaultHeartbeatTTL is how long a heartbeat claim lives in the database past each renewal.
const DefaultHeartbeatTTL = 15 * time.Second

// HeartbeatOptions say how a heartbeat claim is kept.
type HeartbeatOptions struct {
	// TTL is how long past each renewal the database holds the claim (DefaultHeartbeatTTL).
	// The holder renews it every TTL/3 and trusts it for TTL × 4/5 after it sent the
	// renewal that set it: a fifth of TTL is left for the clocks' rates and the statement's
	// way back.
	TTL time.Duration
	// After times the renewals and the trust (nil: time.After): a test's clock.
	After func(time.Duration) <-chan time.Time
	// Failed, when set, is told of each renewal that failed (it is tried again).
	Failed func(error)
	// Trusted, when set, is told until when (on Now's clock) the claim is trusted, once it is
	// taken and after each renewal: the holder checks it before each write that needs the
	// claim, so a process that was paused past it writes nothing before it notices.
	Trusted func(until time.Time)
	// Now is the clock Trusted's times are on (nil: time.Now); After must keep its time.
	Now func() time.Time
}

// ErrHeartbeatLate: a heartbeat claim's renewal did not come back before the claim's trust
// ended (the database may free it at any moment now).
var ErrHeartbeatLate = errors.New("the liveness claim's heartbeat was not renewed in time")

// ErrHeartbeatExpired: the database found the heartbeat claim expired when it was renewed
// (peers may have taken its sessions already).
var ErrHeartbeatExpired = errors.New("the liveness claim's heartbeat had expired in the database")

// sqlTakeHeartbeat records owner's address and token with a claim that lives $4 from now,
// and deletes the rows of replicas whose claim is free (as sqlRecordPeer).
const sqlTakeHeartbeat = sqlForgetDeadPeers + `
INSERT INTO replica_peers (owner, addr, token, alive_until) VALUES ($1, $2, $3, clock_timestamp() + $4::interval)
ON CONFLICT (owner) DO UPDATE SET addr = excluded.addr, token = excluded.token,
    alive_until = excluded.alive_until, recorded_at = clock_timestamp()`

// sqlRenewHeartbeat moves an unexpired claim on; an expired one is not brought back.
const sqlRenewHeartbeat = `
UPDATE replica_peers SET alive_until = clock_timestamp() + $2::interval
WHERE owner = $1 AND alive_until > clock_timestamp()`

// HoldHeartbeat takes owner's liveness claim as a heartbeat row, which also says where peers
// post owner's wakes (addr, token: see RecordPeer), and keeps it until ctx ends or the claim
// is lost, which it returns: ctx's error after it deleted the row (a graceful end frees the
// claim at once; a lost claim's row is left to expire), ErrHeartbeatLate or
// ErrHeartbeatExpired, or the error of the statement that took it. held is called once the
// claim is taken, before the first renewal, and must return at once (the claim's trust runs
// meanwhile): from then until HoldHeartbeat returns, owner may take leases with
// LeaseOptions.Claimed. When it returns the claim may be free already, so the caller must
// stop what it does under it at once. A renewal that fails is tried again, sooner, while the
// claim is trusted.
func (s *Store) HoldHeartbeat(ctx context.Context, owner, addr, token string, opt HeartbeatOptions, held func()) error {
	if owner == "" {
		return errors.New("hold a heartbeat claim: no owner")
	}
	ttl := opt.TTL
	if ttl <= 0 {
		ttl = DefaultHeartbeatTTL
	}
	after := opt.After
	if after == nil {
		after = time.After
	}
	trust := ttl * 4 / 5
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	tell := func(sent time.Time) {
		if opt.Trusted != nil {
			opt.Trusted(sent.Add(trust))
		}
	}
	interval := fmt.Sprintf("%d microseconds", ttl.Microseconds())
	sent, trusted := now(), after(trust) // counted from before the statement is sent
	late, err := untilFires(ctx, trusted, func(tctx context.Context) error {
		_, err := s.pool.Exec(tctx, sqlTakeHeartbeat, owner, addr, token, interval)
		return err
	})
	switch {
	case late:
		// Taken, perhaps, but too late to be trusted: it is left to expire.
		return fmt.Errorf("take the liveness claim of %s: %w", owner, ErrHeartbeatLate)
	case err != nil:
		return fmt.Errorf("take the liveness claim of %s: %w", owner, err)
	}
	select {
	case <-trusted: // it came back just as its trust ended
		return fmt.Errorf("take the liveness claim of %s: %w", owner, ErrHeartbeatLate)
	default:
	}
	tell(sent)
	// A graceful end frees the claim at once. A lost one is left to expire: the caller has
	// yet to stop the turns run under it.
	release := func() error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = s.pool.Exec(dctx, `DELETE FROM replica_peers WHERE owner = $1`, owner)
		return ctx.Err()
	}
	held()
	wait := ttl / 3
	for {
		select {
		case <-ctx.Done():
			return release()
		case <-trusted:
			return ErrHeartbeatLate
		case <-after(wait):
		}
		sent, next := now(), after(trust)
		var renewed int64
		late, err := untilFires(ctx, trusted, func(rctx context.Context) error {
			tag, err := s.pool.Exec(rctx, sqlRenewHeartbeat, owner, interval)
			renewed = tag.RowsAffected()
			return err
		})
		switch {
		case ctx.Err() != nil:
			return release()
		case late:
			return ErrHeartbeatLate
		case err != nil:
			if opt.Failed != nil {
				opt.Failed(err)
			}
			wait = ttl / 15 // try again soon, while the claim is still trusted
			continue
		case renewed == 0:
			return ErrHeartbeatExpired
		}
		trusted, wait = next, ttl/3
		tell(sent)
	}
}
