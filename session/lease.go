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

// sqlLeaseSession reads a session and takes its lease in one statement: the lease function
// runs only when the session exists (LATERAL, for its one row), and a lease held by another
// owner leaves its columns NULL.
const sqlLeaseSession = `
SELECT s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at, l.epoch, l.expires_at
FROM sessions s LEFT JOIN LATERAL logbook_acquire_lease(s.id, $2, $3, $4) l ON true
WHERE s.id = $1`

// LeaseSession is, for a cell that starts, Session, AcquireLeaseWith and the session's whole
// log (Events) in one round trip: the session (ErrNotFound when there is none, and then no
// lease is taken), its lease (ErrLeaseHeld, with the session, when another owner holds it)
// and, with the lease, the events as of just after it was taken (the log is read in the same
// batch, after the lease statement: one implicit transaction). Issue 33: a takeover's cells
// queue for connections and CPU with every other turn of the replica, and each round trip
// they make waits its turn again.
func (s *Store) LeaseSession(ctx context.Context, id ID, owner string, ttl time.Duration, o LeaseOptions) (Session, Lease, []Event, error) {
	if id == (ID{}) {
		return Session{}, Lease{}, nil, ErrEmptySessionID
	}
	b := &pgx.Batch{}
	var sess Session
	var epoch *int64
	var until *time.Time
	b.Queue(sqlLeaseSession, id, owner, ttl, o.Claimed).QueryRow(func(row pgx.Row) error {
		return row.Scan(&sess.ID, &sess.Key.Team, &sess.Key.Channel, &sess.Key.ThreadTS, &sess.CreatedAt, &epoch, &until)
	})
	var evs []Event
	// Only with the lease: a cell refused it reads no log.
	b.Queue("SELECT "+eventColumns+` FROM events WHERE session_id = $1
		AND EXISTS (SELECT 1 FROM leases l WHERE l.session_id = $1 AND l.owner = $2 AND l.expires_at > clock_timestamp())
		ORDER BY seq`, id, owner).Query(func(rows pgx.Rows) error {
		var err error
		evs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
		return err
	})
	err := s.pool.SendBatch(ctx, b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, Lease{}, nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, Lease{}, nil, fmt.Errorf("lease session %s for %s: %w", id, owner, err)
	}
	if epoch == nil || until == nil {
		return sess, Lease{}, nil, fmt.Errorf("lease session %s for %s: %w", id, owner, ErrLeaseHeld)
	}
	return sess, Lease{Session: id, Owner: owner, Epoch: *epoch, ExpiresAt: *until}, evs, nil
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

// MaxLeasesPerRenewal is the most leases RenewLeases renews in one statement (one
// transaction). Each lease renewed takes an advisory lock on its session until the
// transaction ends, and PostgreSQL's lock table is shared by the whole server: by default
// max_locks_per_transaction (64) × (max_connections (100) + max_prepared_transactions (0)) =
// 6,400 locks. Issue 53: one replica renewing its 12,300 leases in one transaction failed
// with "out of shared memory" (SQLSTATE 53200) every time, its leases expired, and every
// other session's appends failed on the full table. 500 leaves ten replicas renewing in the
// same instant (5,000) room for everyone else's locks; a replica with more leases renews
// them in several transactions (bot's renewer does).
const MaxLeasesPerRenewal = 500

// RenewLeases extends every lease of ls by ttl in one statement (one round trip for up to
// MaxLeasesPerRenewal leases; more is refused), each only while its session, owner and epoch
// still hold it, as RenewLease does. It returns the leases it renewed, with their new expiry;
// a lease missing from the answer is lost (RenewLease's ErrFenced). The sessions are locked
// in id order, so two replicas renewing at once never deadlock.
func (s *Store) RenewLeases(ctx context.Context, ls []Lease, ttl time.Duration) ([]Lease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	if len(ls) > MaxLeasesPerRenewal {
		return nil, fmt.Errorf("renew %d leases: more than %d in one transaction would fill a default server's lock table; renew them in batches",
			len(ls), MaxLeasesPerRenewal)
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
