package bot

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// handClock stands still at now; each After is handed to the test in the order asked.
type handClock struct {
	now   time.Time
	asked chan chan time.Time
}

func (c *handClock) Now() time.Time { return c.now }
func (c *handClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.asked <- ch
	return ch
}

func (c *handClock) next(t *testing.T, what string) chan time.Time {
	t.Helper()
	select {
	case ch := <-c.asked:
		return ch
	case <-time.After(30 * time.Second):
		t.Fatalf("no timer for %s", what)
		return nil
	}
}

// The runner hands a heartbeat claim's trust to the cells' fences: a lease taken with the
// claim stops Slack writes at the trust the take reported, on the runner's clock; and once
// the claim is lost, that claim's trust is over at once, before its cells are cancelled,
// whatever a claim taken again reports.
func TestAHeartbeatClaimsTrustReachesTheFenceAndEndsWithTheClaim(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	in, err := peerwake.NewInbox("127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	clock := &handClock{now: t0, asked: make(chan chan time.Time, 8)}
	r := NewRunner(Deps{Log: zerolog.Nop(), Store: store, Clock: clock, Metrics: NewMetrics(prometheus.NewRegistry())},
		RunnerConfig{Owner: "replica-t", Heartbeat: 15 * time.Second, Peer: in})
	done := make(chan error, 1)
	go func() { done <- r.heartbeatOnce(ctx) }()
	clock.next(t, "the claim's trust")
	renewal := clock.next(t, "the first renewal") // asked once the claim is held
	claimed, hc := r.claim()
	if !claimed || hc == nil || !hc.trustedUntil().Equal(t0.Add(12*time.Second)) {
		t.Fatalf("claim %v, trusted until %v; want held, until t0 + 12s", claimed, hc.trustedUntil().Sub(t0))
	}
	f := newLeaseFence(clock, t0.Add(time.Hour), 0, 1)
	f.claimUntil = hc.trustedUntil
	if err := f.check(ctx); err != nil {
		t.Fatalf("a fence within the claim's trust: %v", err)
	}

	if _, err := pool.Exec(ctx, `UPDATE replica_peers SET alive_until = clock_timestamp() - interval '1 second' WHERE owner = 'replica-t'`); err != nil {
		t.Fatal(err)
	}
	renewal <- t0
	select {
	case err := <-done:
		if !errors.Is(err, session.ErrHeartbeatExpired) {
			t.Fatalf("heartbeatOnce after its row expired = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeat did not end after its row expired")
	}
	select {
	case <-hc.lost:
	default:
		t.Fatal("the lost claim's channel is open")
	}
	if err := f.check(ctx); !errors.Is(err, errLeaseEnding) {
		t.Fatalf("a fence of a lost heartbeat claim: %v, want errLeaseEnding", err)
	}
	if claimed, _ := r.claim(); claimed {
		t.Fatal("the runner still reports its claim held")
	}
}
