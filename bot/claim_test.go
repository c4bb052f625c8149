package bot_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// blocksUntilCancelled is an agent whose first run waits until its context ends and says so
// on cancelled; later runs answer at once.
type blocksUntilCancelled struct {
	echoAgent
	started, cancelled chan struct{}
	once               sync.Once
}

func (a *blocksUntilCancelled) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	first := false
	a.once.Do(func() { first = true; close(a.started) })
	if first {
		<-ctx.Done()
		close(a.cancelled)
		return brain.Reply{}, ctx.Err()
	}
	return a.echoAgent.Run(ctx, t)
}

// The connection that holds a replica's liveness claim goes silent (a failover that leaves
// its socket open; here the proxy in front of it stops forwarding): the replica notices at its
// next check, reports the claim lost, and cancels the turn it runs under that claim at once —
// a peer may already run the session.
func TestSilentClaimConnectionCancelsTheRunningTurn(t *testing.T) {
	t.Parallel()
	lost := make(chan error, 1)
	exited := make(chan string, 8)
	probe := &bot.Probe{
		ClaimLost:  func(err error) { lost <- err },
		CellExited: func(_ session.ID, reason string) { exited <- reason },
	}
	agent := &blocksUntilCancelled{started: make(chan struct{}), cancelled: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{listenProxy: true, claimCheck: 2 * time.Second, poll: time.Hour,
		leaseTTL: time.Hour, probe: probe})
	h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> long job"})
	select {
	case <-agent.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not start")
	}
	select {
	case err := <-lost:
		t.Fatalf("the claim was lost while its connection was fine: %v", err)
	case <-agent.cancelled:
		t.Fatal("the turn was cancelled while the claim's connection was fine")
	default:
	}
	stalled := time.Now()
	h.reps[0].listen.Stall()
	select {
	case err := <-lost:
		if !errors.Is(err, session.ErrListenUnresponsive) {
			t.Fatalf("claim lost because %v, want ErrListenUnresponsive", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replica still believes it holds its claim 30s after its connection went silent")
	}
	select {
	case <-agent.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the claim was reported lost but the turn run under it goes on")
	}
	t.Logf("connection silent to turn cancelled: %v (checks every 2s)", time.Since(stalled).Round(time.Millisecond))
	for reason := range exited {
		if reason == "claim_lost" {
			break
		}
		if reason != "held" {
			t.Fatalf("the cell exited %q, want claim_lost", reason)
		}
	}
	if got := h.reps[0].metric(t, "logbook_liveness_claims_lost_total"); got != 1 {
		t.Fatalf("logbook_liveness_claims_lost_total = %v, want 1", got)
	}
}
