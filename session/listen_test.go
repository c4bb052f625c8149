package session_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// manualAfter is a clock whose timers fire only when the test says: each After call is handed
// to the test on asked.
type manualAfter struct{ asked chan chan time.Time }

func (m manualAfter) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	m.asked <- ch
	return ch
}

func (m manualAfter) next(t *testing.T, what string) chan time.Time {
	t.Helper()
	select {
	case ch := <-m.asked:
		return ch
	case <-time.After(30 * time.Second):
		t.Fatalf("no timer for %s", what)
		return nil
	}
}

// A LISTEN connection that goes silent (a failover leaving the socket open, here a proxy that
// stops forwarding) fails its next check: ListenClaimed returns ErrListenUnresponsive once
// the round trip's deadline passes on the injected clock, so the caller knows it can no
// longer prove its claim. A live connection passes the same check.
func TestListenClaimedNoticesASilentConnection(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	proxy, via := pgtest.NewProxy(t, dbURL)
	clock := manualAfter{asked: make(chan chan time.Time, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- session.ListenClaimed(ctx, via, "replica-a", session.ListenOptions{CheckEvery: time.Second, After: clock.After},
			func() { close(held) }, func(session.ID, string) {})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("ListenClaimed: %v", err)
	}
	// Alive: the check is answered (its deadline never fires) and the next one is scheduled.
	clock.next(t, "the first check") <- time.Now()
	clock.next(t, "the first check's deadline")
	second := clock.next(t, "the second check")
	select {
	case err := <-done:
		t.Fatalf("a live connection failed its check: %v", err)
	default:
	}

	proxy.Stall()
	second <- time.Now()
	deadline := clock.next(t, "the second check's deadline")
	select {
	case err := <-done:
		t.Fatalf("ListenClaimed ended before the check's deadline: %v", err)
	default:
	}
	deadline <- time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, session.ErrListenUnresponsive) {
			t.Fatalf("ListenClaimed over a silent connection = %v, want ErrListenUnresponsive", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ListenClaimed still holds a silent connection after its check's deadline")
	}
}
