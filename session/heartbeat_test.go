package session_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// timedAfter is a clock whose timers fire only when the test says, handed to the test with
// the duration each was asked for.
type timedAfter struct{ asked chan timer }

type timer struct {
	d  time.Duration
	ch chan time.Time
}

func (m timedAfter) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	m.asked <- timer{d, ch}
	return ch
}

func (m timedAfter) next(t *testing.T, what string, want time.Duration) chan time.Time {
	t.Helper()
	select {
	case tm := <-m.asked:
		if tm.d != want {
			t.Fatalf("timer for %s: %s, want %s", what, tm.d, want)
		}
		return tm.ch
	case <-time.After(30 * time.Second):
		t.Fatalf("no timer for %s", what)
		return nil
	}
}

const heartbeatToken = "0123456789abcdef0123456789abcdef"

func claimFree(t *testing.T, db *pgxpool.Pool, owner string) bool {
	t.Helper()
	var free bool
	if err := db.QueryRow(context.Background(), `SELECT logbook_claim_free($1)`, owner).Scan(&free); err != nil {
		t.Fatal(err)
	}
	return free
}

func aliveFor(t *testing.T, db *pgxpool.Pool, owner string) time.Duration {
	t.Helper()
	var secs float64
	if err := db.QueryRow(context.Background(),
		`SELECT extract(epoch FROM alive_until - clock_timestamp()) FROM replica_peers WHERE owner = $1`, owner).Scan(&secs); err != nil {
		t.Fatal(err)
	}
	return time.Duration(secs * float64(time.Second))
}

func holdHeartbeat(ctx context.Context, t *testing.T, st *session.Store, owner string, clock timedAfter) (held chan struct{}, done chan error) {
	return holdHeartbeatWith(ctx, t, st, owner, session.HeartbeatOptions{TTL: 15 * time.Second, After: clock.After})
}

func holdHeartbeatWith(ctx context.Context, t *testing.T, st *session.Store, owner string, opt session.HeartbeatOptions) (held chan struct{}, done chan error) {
	held, done = make(chan struct{}), make(chan error, 1)
	go func() {
		done <- st.HoldHeartbeat(ctx, owner, "10.0.0.7:8080", heartbeatToken, opt, func() { close(held) })
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("HoldHeartbeat: %v", err)
	}
	return held, done
}

// waitOnLock waits for the signal that a statement of the test's database holding text
// (what) is in flight and stalled: its backend waits on a lock.
func waitOnLock(t *testing.T, db *pgxpool.Pool, text, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, text).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited on the locked row", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ended(t *testing.T, done chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("HoldHeartbeat did not end: %s", what)
		return nil
	}
}

// A heartbeat claim is held without a connection of its own: while its row is unexpired the
// owner is alive to every check (a claimed lease of its is not taken), a renewal moves the
// row on, an expired row frees the claim (the lease is taken at once) and is not brought
// back by a late renewal, and a graceful end deletes the row.
func TestHeartbeatClaimIsHeldRenewedAndFreed(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	db := superuser(t, dbURL)
	bg := context.Background()
	a := openSession(t, st, "1700000000.000100")
	mustAppend(t, st, a.ID, msg("one"))
	clock := timedAfter{asked: make(chan timer, 4)}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()

	if !claimFree(t, db, "replica-h") {
		t.Fatal("a replica that never claimed reads as alive")
	}
	// The trust it reports is counted from before each statement is sent, on Now's clock: the
	// take is sent at t0, the renewal at t0 + 5s.
	t0 := time.Unix(1_700_000_000, 0)
	var nows atomic.Int64
	told := make(chan time.Time, 4)
	_, done := holdHeartbeatWith(ctx, t, st, "replica-h", session.HeartbeatOptions{TTL: 15 * time.Second, After: clock.After,
		Now:     func() time.Time { return t0.Add(time.Duration(nows.Add(1)-1) * 5 * time.Second) },
		Trusted: func(until time.Time) { told <- until }})
	trusted := clock.next(t, "the claim's trust", 12*time.Second)
	if got := <-told; !got.Equal(t0.Add(12 * time.Second)) {
		t.Fatalf("the take's trust is told as %v, want t0 + 12s", got.Sub(t0))
	}
	if claimFree(t, db, "replica-h") {
		t.Fatal("a held heartbeat claim reads as free")
	}
	if _, err := st.AcquireLeaseWith(bg, a.ID, "replica-h", time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLeaseWith(bg, a.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); !errors.Is(err, session.ErrLeaseHeld) {
		t.Fatalf("a live heartbeat owner's lease was taken: %v", err)
	}
	route, err := st.NotifyOwner(bg, a.ID, "replica-b", true)
	if err != nil || route.Owner != "replica-h" || route.Addr != "10.0.0.7:8080" || route.Token != heartbeatToken {
		t.Fatalf("route to the heartbeat owner = %+v, %v", route, err)
	}

	// A renewal moves a nearly expired row on by the TTL.
	if _, err := db.Exec(bg, `UPDATE replica_peers SET alive_until = clock_timestamp() + interval '1 second' WHERE owner = 'replica-h'`); err != nil {
		t.Fatal(err)
	}
	clock.next(t, "the first renewal", 5*time.Second) <- time.Now()
	clock.next(t, "the renewed trust", 12*time.Second)
	second := clock.next(t, "the second renewal", 5*time.Second) // asked once the first came back
	if got := <-told; !got.Equal(t0.Add(17 * time.Second)) {
		t.Fatalf("the renewal's trust is told as %v, want t0 + 17s (sent at t0 + 5s)", got.Sub(t0))
	}
	if left := aliveFor(t, db, "replica-h"); left < 14*time.Second {
		t.Fatalf("after a renewal the claim lives %s more, want about 15s", left)
	}
	select {
	case trusted <- time.Now(): // the first trust was replaced: firing it must change nothing
	default:
	}

	// The row expires (the replica was paused, say): the claim is free, the lease is taken,
	// and the next renewal is refused rather than bringing the claim back.
	if _, err := db.Exec(bg, `UPDATE replica_peers SET alive_until = clock_timestamp() - interval '1 second' WHERE owner = 'replica-h'`); err != nil {
		t.Fatal(err)
	}
	if !claimFree(t, db, "replica-h") {
		t.Fatal("an expired heartbeat claim reads as held")
	}
	if _, err := st.AcquireLeaseWith(bg, a.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
		t.Fatalf("a dead heartbeat owner's lease was not taken: %v", err)
	}
	second <- time.Now()
	if err := ended(t, done, "after its row expired"); !errors.Is(err, session.ErrHeartbeatExpired) {
		t.Fatalf("HoldHeartbeat after its row expired = %v, want ErrHeartbeatExpired", err)
	}
	if !claimFree(t, db, "replica-h") {
		t.Fatal("a refused renewal brought the claim back")
	}

	// Taken again, then ended gracefully: the row goes with it.
	clock2 := timedAfter{asked: make(chan timer, 4)}
	ctx2, cancel2 := context.WithCancel(bg)
	_, done2 := holdHeartbeat(ctx2, t, st, "replica-h", clock2)
	if claimFree(t, db, "replica-h") {
		t.Fatal("a claim taken again reads as free")
	}
	cancel2()
	if err := ended(t, done2, "after its context ended"); !errors.Is(err, context.Canceled) {
		t.Fatalf("HoldHeartbeat after cancel = %v", err)
	}
	var rows int
	if err := db.QueryRow(bg, `SELECT count(*) FROM replica_peers WHERE owner = 'replica-h'`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("a graceful end left %d rows (%v)", rows, err)
	}
}

// A renewal that does not come back before the claim's trust ends (the database stalls; here
// the row is locked by another transaction) ends the hold with ErrHeartbeatLate at once, on
// the holder's clock, without waiting for the database; the row is left to expire, since the
// holder has yet to stop its turns.
func TestHeartbeatClaimStopsTrustingAStalledRenewal(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	db := superuser(t, dbURL)
	bg := context.Background()
	clock := timedAfter{asked: make(chan timer, 4)}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	_, done := holdHeartbeat(ctx, t, st, "replica-s", clock)
	trusted := clock.next(t, "the claim's trust", 12*time.Second)

	tx, err := db.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg) //nolint:errcheck
	if _, err := tx.Exec(bg, `SELECT 1 FROM replica_peers WHERE owner = 'replica-s' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	clock.next(t, "the first renewal", 5*time.Second) <- time.Now()
	clock.next(t, "the renewed trust", 12*time.Second)
	waitOnLock(t, db, "UPDATE replica_peers SET alive_until", "the renewal")
	select {
	case err := <-done:
		t.Fatalf("HoldHeartbeat ended before its trust did: %v", err)
	default:
	}
	trusted <- time.Now()
	if err := ended(t, done, "after its trust ended"); !errors.Is(err, session.ErrHeartbeatLate) || !strings.Contains(err.Error(), "not renewed in time") {
		t.Fatalf("HoldHeartbeat with a stalled renewal = %v, want ErrHeartbeatLate", err)
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if claimFree(t, db, "replica-s") {
		t.Fatal("a late claim's row was deleted before its holder stopped its turns")
	}
}

// A take that comes back only after the claim's trust ended (here the owner's old row is
// locked by another transaction) is not trusted: HoldHeartbeat ends with ErrHeartbeatLate and
// never calls held, so no lease is taken as claimed under a row that may be expired already.
func TestHeartbeatClaimTakenTooLateIsNotHeld(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	db := superuser(t, dbURL)
	bg := context.Background()
	if _, err := db.Exec(bg, `INSERT INTO replica_peers (owner, addr, token, alive_until)
		VALUES ('replica-l', '10.0.0.7:8080', $1, clock_timestamp() - interval '1 minute')`, heartbeatToken); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg) //nolint:errcheck
	if _, err := tx.Exec(bg, `SELECT 1 FROM replica_peers WHERE owner = 'replica-l' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	clock := timedAfter{asked: make(chan timer, 4)}
	held, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- st.HoldHeartbeat(bg, "replica-l", "10.0.0.7:8080", heartbeatToken,
			session.HeartbeatOptions{TTL: 15 * time.Second, After: clock.After}, func() { close(held) })
	}()
	trusted := clock.next(t, "the claim's trust", 12*time.Second)
	waitOnLock(t, db, "INSERT INTO replica_peers", "the take")
	trusted <- time.Now()
	if err := ended(t, done, "after its trust ended during the take"); !errors.Is(err, session.ErrHeartbeatLate) {
		t.Fatalf("HoldHeartbeat with a late take = %v, want ErrHeartbeatLate", err)
	}
	select {
	case <-held:
		t.Fatal("held was called for a claim taken after its trust ended")
	default:
	}
}
