package session

import (
	"context"
	"errors"
	"fmt"
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

// ReleaseLease ends l at once, so another replica may take the session without waiting for
// it to expire. Releasing a lease that is no longer held is not an error.
func (s *Store) ReleaseLease(ctx context.Context, l Lease) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT logbook_release_lease($1, $2, $3)`, l.Session, l.Owner, l.Epoch).Scan(&ok); err != nil {
		return fmt.Errorf("release lease of session %s epoch %d: %w", l.Session, l.Epoch, err)
	}
	return nil
}
