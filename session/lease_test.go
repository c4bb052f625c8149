package session_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session"
)

// holdClaim runs ListenClaimed for owner until the returned stop is called, and returns once
// the claim is held. stop ends the connection, as a process death would.
func holdClaim(t *testing.T, dbURL, owner string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- session.ListenClaimed(ctx, dbURL, owner, session.ListenOptions{}, func() { close(held) }, func(session.ID, string) {})
	}()
	select {
	case <-held:
	case err := <-done:
		cancel()
		t.Fatalf("ListenClaimed for %s: %v", owner, err)
	}
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// A claimed lease whose owner's liveness connection is gone may be taken at once, with a new
// epoch, and the dead owner's appends are fenced; while the owner lives, nobody takes it
// before it expires; an unclaimed lease waits for its expiry whatever becomes of its owner.
func TestLeaseOfADeadOwnerIsFreeAtOnce(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	a := openSession(t, st, "1700000000.000100")
	b := openSession(t, st, "1700000000.000200")
	mustAppend(t, st, a.ID, msg("one"))
	mustAppend(t, st, b.ID, msg("one"))
	const week = 7 * 24 * time.Hour

	stopA := holdClaim(t, dbURL, "replica-a")
	la, err := st.AcquireLeaseWith(ctx, a.ID, "replica-a", time.Hour, session.LeaseOptions{Claimed: true})
	if err != nil {
		t.Fatal(err)
	}
	// An owner without a claim: its lease is never taken early.
	lb, err := st.AcquireLease(ctx, b.ID, "replica-old", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLeaseWith(ctx, a.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); !errors.Is(err, session.ErrLeaseHeld) {
		t.Fatalf("took a live owner's lease: %v", err)
	}
	mustPending(t, st, "replica-b", week)
	if got, err := st.Orphaned(ctx, "replica-b", week); err != nil || len(got) != 0 {
		t.Fatalf("orphaned %v %v while the owner lives", got, err)
	}
	// The liveness check must not leave the taker holding the claim: the owner's next
	// connection can take it again.
	stopA()
	if got, err := st.Orphaned(ctx, "replica-b", week); err != nil || len(got) != 1 || got[0] != a.ID {
		t.Fatalf("orphaned %v %v, want %s", got, err, a.ID)
	}
	mustPending(t, st, "replica-b", week, a.ID)
	again := holdClaim(t, dbURL, "replica-a") // would block if a check had kept the lock
	again()

	lb2, err := st.AcquireLeaseWith(ctx, a.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true})
	if err != nil {
		t.Fatalf("dead owner's lease: %v", err)
	}
	if lb2.Epoch != la.Epoch+1 {
		t.Fatalf("epoch %d, want %d", lb2.Epoch, la.Epoch+1)
	}
	if _, err := st.AppendWith(ctx, a.ID, session.AppendOptions{Epoch: la.Epoch}, msg("late")); !errors.Is(err, session.ErrFenced) {
		t.Fatalf("the dead owner's append: %v, want ErrFenced", err)
	}
	if _, err := st.AcquireLeaseWith(ctx, b.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); !errors.Is(err, session.ErrLeaseHeld) {
		t.Fatalf("took an unclaimed lease before its expiry: %v", err)
	}
	_ = lb
}

// #33: RenewLeases renews a replica's leases in one statement, each only while its session,
// owner and epoch still hold it: a lease taken by another owner, or passed as an older epoch,
// is neither renewed nor extended.
func TestRenewLeasesRenewsOnlyLeasesStillHeld(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	a := openSession(t, st, "1700000000.000100")
	b := openSession(t, st, "1700000000.000200")
	c := openSession(t, st, "1700000000.000300")
	la, err := st.AcquireLease(ctx, a.ID, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := st.AcquireLease(ctx, b.ID, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// c's lease was released and taken by another owner: replica-a's epoch is stale.
	lc, err := st.AcquireLease(ctx, c.ID, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(ctx, lc); err != nil {
		t.Fatal(err)
	}
	taken, err := st.AcquireLease(ctx, c.ID, "replica-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stale := lb
	stale.Epoch-- // an epoch b's lease no longer has
	renewed, err := st.RenewLeases(ctx, []session.Lease{lc, la, stale, lb}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got := map[session.ID]session.Lease{}
	for _, l := range renewed {
		got[l.Session] = l
	}
	if len(renewed) != 2 || got[a.ID].Epoch != la.Epoch || got[b.ID].Epoch != lb.Epoch {
		t.Fatalf("renewed %+v, want a's and b's current leases only", renewed)
	}
	for _, l := range []session.Lease{la, lb} {
		if !got[l.Session].ExpiresAt.After(l.ExpiresAt.Add(50 * time.Minute)) {
			t.Errorf("lease of %s expires %v, want about an hour on (was %v)", l.Session, got[l.Session].ExpiresAt, l.ExpiresAt)
		}
	}
	// replica-b's lease of c was not extended, and its appends still go through.
	if _, err := st.RenewLease(ctx, taken, time.Minute); err != nil {
		t.Fatalf("replica-b's lease: %v", err)
	}
	if _, err := st.AcquireLease(ctx, c.ID, "replica-a", time.Minute); !errors.Is(err, session.ErrLeaseHeld) {
		t.Fatalf("c taken back by replica-a: %v, want ErrLeaseHeld", err)
	}
	if none, err := st.RenewLeases(ctx, nil, time.Minute); err != nil || none != nil {
		t.Fatalf("no leases: %v %v", none, err)
	}
}

// #33: checks of a dead owner's claim do not get in one another's way. A peer's check in
// flight (its orphan scan's statement, or another lease take of the same owner's sessions,
// held here open in a transaction) must not make the claim look held: every session of the
// dead owner is taken at once, by whichever replica asks, not one per poll. While the owner
// lives, such a check still finds its claim held.
func TestConcurrentChecksOfADeadOwnerAllFindItDead(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	var ids []session.ID
	for _, ts := range []string{"1700000000.000100", "1700000000.000200", "1700000000.000300"} {
		s := openSession(t, st, ts)
		mustAppend(t, st, s.ID, msg("one"))
		ids = append(ids, s.ID)
	}
	peer, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close(context.Background()) })
	check := func() (free bool, done func()) {
		t.Helper()
		tx, err := peer.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, `SELECT logbook_claim_free('replica-a')`).Scan(&free); err != nil {
			t.Fatal(err)
		}
		return free, func() { _ = tx.Rollback(ctx) }
	}

	stopA := holdClaim(t, dbURL, "replica-a")
	for _, id := range ids {
		if _, err := st.AcquireLeaseWith(ctx, id, "replica-a", time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
			t.Fatal(err)
		}
	}
	free, done := check()
	if free {
		t.Fatal("a live owner's claim was found free")
	}
	if _, err := st.AcquireLeaseWith(ctx, ids[0], "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); !errors.Is(err, session.ErrLeaseHeld) {
		t.Fatalf("took a live owner's lease during a peer's check: %v", err)
	}
	done()

	stopA()
	free, done = check() // a peer's check of the dead owner, still in its transaction
	if !free {
		t.Fatal("a dead owner's claim was found held")
	}
	for _, id := range ids {
		if _, err := st.AcquireLeaseWith(ctx, id, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
			t.Fatalf("a dead owner's lease, during a peer's check: %v", err)
		}
	}
	done()
	// The owner, back under the same name, takes its claim again: no check kept the key.
	holdClaim(t, dbURL, "replica-a")()
}

// LeaseSession is Session, AcquireLeaseWith and Events in one round trip: with the lease it
// returns the session and its whole log; a lease held elsewhere returns ErrLeaseHeld (and the
// session, no events); an unknown session returns ErrNotFound and takes no lease.
func TestLeaseSessionReadsTheSessionTakesTheLeaseAndReadsTheLog(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	a := openSession(t, st, "1700000000.000100")
	mustAppend(t, st, a.ID, msg("one"))
	mustAppend(t, st, a.ID, msg("two"))

	sess, l, evs, err := st.LeaseSession(ctx, a.ID, "replica-a", time.Hour, session.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sess.ID != a.ID || sess.Key != a.Key || l.Session != a.ID || l.Owner != "replica-a" || l.Epoch != 1 {
		t.Errorf("LeaseSession = %+v, %+v; want session %+v with epoch 1 for replica-a", sess, l, a)
	}
	want, err := st.Events(ctx, a.ID, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || len(want) != 2 || !bytes.Equal(evs[0].Hash, want[0].Hash) || !bytes.Equal(evs[1].Hash, want[1].Hash) || evs[1].Seq != 2 {
		t.Errorf("the log read with the lease: %d events, want the 2 Events reads", len(evs))
	}
	if _, err := st.RenewLease(ctx, l, time.Hour); err != nil {
		t.Errorf("the lease LeaseSession took does not renew: %v", err)
	}

	sess, _, evs, err = st.LeaseSession(ctx, a.ID, "replica-b", time.Hour, session.LeaseOptions{})
	if !errors.Is(err, session.ErrLeaseHeld) || sess.ID != a.ID || evs != nil {
		t.Errorf("LeaseSession of a held lease = %v (session %v, %d events), want ErrLeaseHeld with the session", err, sess.ID, len(evs))
	}

	unknown := session.ID{1, 2, 3}
	if _, _, _, err := st.LeaseSession(ctx, unknown, "replica-a", time.Hour, session.LeaseOptions{}); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("LeaseSession of an unknown session = %v, want ErrNotFound", err)
	}
	if _, err := st.AcquireLease(ctx, a.ID, "replica-a", time.Hour); err != nil {
		t.Errorf("the owner takes its lease again: %v", err)
	}
}

// #53: RenewLeases never takes more than MaxLeasesPerRenewal advisory locks in one
// transaction (a default server's lock table holds 6,400 for everyone): more is refused with
// an error that says to batch, before anything is sent.
func TestRenewLeasesRefusesMoreThanOneBatch(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ls := make([]session.Lease, session.MaxLeasesPerRenewal+1)
	for i := range ls {
		ls[i].Session[0], ls[i].Session[1] = byte(i), byte(i>>8)
		ls[i].Owner, ls[i].Epoch = "r1", 1
	}
	_, err := st.RenewLeases(context.Background(), ls, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "batches") {
		t.Fatalf("renewing %d leases at once: %v, want a refusal naming batches", len(ls), err)
	}
	if _, err := st.RenewLeases(context.Background(), ls[:session.MaxLeasesPerRenewal], time.Minute); err != nil {
		t.Fatalf("renewing %d leases (none held): %v", session.MaxLeasesPerRenewal, err)
	}
}
