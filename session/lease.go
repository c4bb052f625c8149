package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is a replica's ownership of a session. Epoch is a fencing token: pass it in
// AppendOptions.Epoch and the database refuses the append once another owner has taken the
// session.
type Lease struct {
	Session   ID
	Owner     string
	Epoch     int64
	ExpiresAt time.Time
}

// AcquireLease takes the session's lease for owner for ttl, or renews it if owner already
// holds it, as an owner without a liveness claim (see LeaseOptions). It returns ErrLeaseHeld
// when another owner holds an unexpired lease that may not be taken over. The epoch grows
// whenever the lease changes hands (or is taken again after it expired).
func (s *Store) AcquireLease(ctx context.Context, id ID, owner string, ttl time.Duration) (Lease, error) {
	return s.AcquireLeaseWith(ctx, id, owner, ttl, LeaseOptions{})
}

// LeaseOptions qualify AcquireLeaseWith.
type LeaseOptions struct {
	// Claimed says the caller holds its liveness claim (ListenClaimed with the same owner
	// name, listening). The lease is then recorded as claimed: other replicas may take it
	// over, before it expires, as soon as the claim is free (the owner's connection died).
	// Leave it false when unsure: the lease is then taken over only once it expires.
	Claimed bool
}

// AcquireLeaseWith is AcquireLease with options. Besides an expired lease it also takes over
// a claimed one whose owner's liveness claim is free (a dead replica), with a new epoch.
func (s *Store) AcquireLeaseWith(ctx context.Context, id ID, owner string, ttl time.Duration, o LeaseOptions) (Lease, error) {
	l := Lease{Session: id, Owner: owner}
	err := s.pool.QueryRow(ctx, `SELECT epoch, expires_at FROM logbook_acquire_lease($1, $2, $3, $4)`,
		id, owner, ttl, o.Claimed).Scan(&l.Epoch, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, fmt.Errorf("lease session %s for %s: %w", id, owner, ErrLeaseHeld)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("lease session %s for %s: %w", id, owner, err)
	}
	return l, nil
}

// RenewLease extends l by ttl. It returns ErrFenced when l is no longer the session's current
// lease (it expired, or another owner took it).
func (s *Store) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	err := s.pool.QueryRow(ctx, `SELECT expires_at FROM logbook_renew_lease($1, $2, $3, $4)`,
		l.Session, l.Owner, l.Epoch, ttl).Scan(&l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, fmt.Errorf("renew lease of session %s epoch %d: %w", l.Session, l.Epoch, ErrFenced)
	}
	if err != nil {
		return l, fmt.Errorf("renew lease of session %s epoch %d: %w", l.Session, l.Epoch, err)
	}
	return l, nil
}

// RenewLeases extends every lease of ls by ttl in one statement (one round trip however many
// leases a replica holds), each only while its session, owner and epoch still hold it, as
// RenewLease does. It returns the leases it renewed, with their new expiry; a lease missing
// from the answer is lost (RenewLease's ErrFenced). The sessions are locked in id order, so
// two replicas renewing at once never deadlock.
func (s *Store) RenewLeases(ctx context.Context, ls []Lease, ttl time.Duration) ([]Lease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	sorted := slices.SortedFunc(slices.Values(ls), func(a, b Lease) int { return bytes.Compare(a.Session[:], b.Session[:]) })
	ids, owners, epochs := make([]ID, len(sorted)), make([]string, len(sorted)), make([]int64, len(sorted))
	for i, l := range sorted {
		ids[i], owners[i], epochs[i] = l.Session, l.Owner, l.Epoch
	}
	rows, err := s.pool.Query(ctx, `SELECT u.i, r.expires_at
		FROM unnest($1::uuid[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(session_id, owner, epoch, i)
		CROSS JOIN LATERAL logbook_renew_lease(u.session_id, u.owner, u.epoch, $4) r`, ids, owners, epochs, ttl)
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(ls), err)
	}
	renewed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Lease, error) {
		var i int64
		var until time.Time
		if err := row.Scan(&i, &until); err != nil {
			return Lease{}, err
		}
		l := sorted[i-1]
		l.ExpiresAt = until
		return l, nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(ls), err)
	}
	return renewed, nil
}

// ReleaseLease ends l at once, so another replica may take the session without waiting for
// it to expire. Releasing a lease that is no longer held is not an error.
func (s *Store) ReleaseLease(ctx context.Context, l Lease) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT logbook_release_lease($1, $2, $3)`, l.Session, l.Owner, l.Epoch).Scan(&ok); err != nil {
		return fmt.Errorf("release lease of session %s epoch %d: %w", l.Session, l.Epoch, err)
	}
	return nil
}
