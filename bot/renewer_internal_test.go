package bot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// A batch that could not be renewed is logged once, with the number of leases it held and of
// those whose cells stop, not once per lease; per lease nothing changes: a lease that may have
// expired stops its cell (errLeaseLost) and is no longer kept, the others are kept for the
// next renewal.
func TestRenewerLogsAFailedBatchOnce(t *testing.T) {
	t.Parallel()
	// A closed pool refuses every query at once: the renewal fails without a database.
	pool, err := pgxpool.New(context.Background(), "postgres://logbook@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	var out bytes.Buffer
	log := zerolog.New(&out)
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	const ttl = 20 * time.Second
	r := newRenewer(session.NewStore(pool, session.Options{}), &fakeClock{now: now}, ttl, log)
	type held struct {
		h     *leaseHold
		cause error
	}
	var holds []*held
	for _, left := range []time.Duration{ttl, ttl, ttl / 8, ttl / 8, ttl / 8} { // until validUntil
		x := &held{}
		var id session.ID
		id[0] = byte(len(holds) + 1)
		x.h = &leaseHold{lease: session.Lease{Session: id, Owner: "r1", Epoch: 1}, validUntil: now.Add(left), log: log,
			cancel: func(cause error) { x.cause = cause }}
		r.keep(x.h)
		holds = append(holds, x)
	}
	r.renewAll(context.Background())

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"leases":5`) || !strings.Contains(lines[0], `"expired":3`) ||
		!strings.Contains(lines[0], "lease could not be renewed") || !strings.Contains(lines[0], `"level":"warn"`) {
		t.Fatalf("want one warning for the batch (5 leases, 3 expired), got %d lines:\n%s", len(lines), out.String())
	}
	for i, x := range holds {
		_, kept := r.held[x.h]
		expired := i >= 2
		if expired != errors.Is(x.cause, errLeaseLost) || expired == kept {
			t.Errorf("lease %d (expired %v): kept %v, cancelled with %v", i, expired, kept, x.cause)
		}
	}

	// None may have expired: one line again, and every cell goes on.
	out.Reset()
	r.renewAll(context.Background())
	if got := strings.TrimSpace(out.String()); strings.Count(got, "\n") != 0 || !strings.Contains(got, `"leases":2`) ||
		!strings.Contains(got, `"expired":0`) || !strings.Contains(got, "renew lease; retrying") {
		t.Fatalf("want one retry warning for the 2 leases left:\n%s", out.String())
	}
	if len(r.held) != 2 || holds[0].cause != nil || holds[1].cause != nil {
		t.Fatalf("a retried lease was dropped or cancelled: %d kept, causes %v %v", len(r.held), holds[0].cause, holds[1].cause)
	}
}

// #53: a replica holding more leases than one batch renews them all, in one transaction per
// batch (the server's lock table is shared: 12,300 advisory locks in one transaction filled a
// default server's), and a batch the server refuses loses none of its leases: they are kept,
// not cancelled, and retried at the next interval, while the other batches are renewed.
func TestRenewerRenewsInBoundedBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	now := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	const ttl, leases, batch = time.Hour, 8, 4
	clock := &fakeClock{now: now}
	var out bytes.Buffer
	r := newRenewer(store, clock, ttl, zerolog.New(&out))
	r.batch = batch
	type held struct {
		h     *leaseHold
		cause error
	}
	all := map[session.ID]*held{}
	for i := range leases {
		s, err := store.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: fmt.Sprintf("1.%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := store.AcquireLease(ctx, s.ID, "r1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		x := &held{}
		x.h = &leaseHold{lease: l, validUntil: now.Add(ttl / 2), fence: newLeaseFence(clock, now.Add(ttl/2), ttl/4, l.Epoch),
			cancel: func(cause error) { x.cause = cause }}
		all[s.ID] = x
		r.keep(x.h)
	}
	var before time.Time
	if err := pool.QueryRow(ctx, `SELECT max(expires_at) FROM leases`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	clock.now = now.Add(time.Minute)
	r.renewAll(ctx)
	// Each batch is one statement, an implicit transaction: the rows it renewed carry its xid.
	var txs, renewed int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text), count(*) FILTER (WHERE expires_at > $1)
		FROM leases`, before).Scan(&txs, &renewed); err != nil {
		t.Fatal(err)
	}
	if txs != 2 || renewed != leases {
		t.Fatalf("%d leases in batches of %d: renewed %d in %d transactions, want all in 2", leases, batch, renewed, txs)
	}
	for id, x := range all {
		if x.cause != nil || !x.h.validUntil.Equal(now.Add(time.Minute+ttl)) {
			t.Fatalf("lease of %s: cancelled with %v, valid until %v, want renewed", id, x.cause, x.h.validUntil)
		}
	}

	// One lease the server refuses (an owner name no text column takes) fails its batch alone.
	var bad *held
	for _, x := range all {
		bad = x
		break
	}
	bad.h.lease.Owner = "r1\x00"
	out.Reset()
	clock.now = now.Add(2 * time.Minute)
	r.renewAll(ctx)
	failedBatch, renewedNow := 0, 0
	for _, x := range all {
		if x.cause != nil {
			t.Fatalf("a lease was cancelled (%v) though none may have expired", x.cause)
		}
		if _, kept := r.held[x.h]; !kept {
			t.Fatalf("lease of %s dropped after a failed batch; want it retried", x.h.lease.Session)
		}
		switch x.h.validUntil {
		case now.Add(2*time.Minute + ttl):
			renewedNow++
		case now.Add(time.Minute + ttl):
			failedBatch++
		}
	}
	if failedBatch != batch || renewedNow != leases-batch {
		t.Fatalf("after one refused lease: %d leases not renewed (want its batch, %d) and %d renewed (want %d)",
			failedBatch, batch, renewedNow, leases-batch)
	}
	if got := out.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `"leases":4`) || !strings.Contains(got, "retrying") {
		t.Fatalf("want one retry warning for the refused batch of 4:\n%s", got)
	}
}

// A lease taken with a heartbeat claim stops Slack writes once the claim's trust has passed on
// the cell's clock, though the lease itself still holds and nothing has cancelled the cell (a
// process paused past it writes nothing before its heartbeat notices); a lock's claim (the
// zero time) bounds nothing.
func TestLeaseFenceStopsAtTheHeartbeatClaimsTrust(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	f := newLeaseFence(clock, clock.Now().Add(time.Hour), 15*time.Second, 1)
	trusted := clock.Now().Add(12 * time.Second)
	f.claimUntil = func() time.Time { return trusted }
	ctx := context.Background()
	if err := f.check(ctx); err != nil {
		t.Fatalf("within the claim's trust: %v", err)
	}
	clock.advance(12 * time.Second)
	if err := f.check(ctx); !errors.Is(err, errLeaseEnding) {
		t.Fatalf("at the claim's trust: %v, want errLeaseEnding", err)
	}
	trusted = time.Time{}
	if err := f.check(ctx); err != nil {
		t.Fatalf("a claim with no trust bound: %v", err)
	}
}
