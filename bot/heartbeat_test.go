package bot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// #53: replicas whose liveness claim is a heartbeat row (LOGBOOK_LIVENESS=heartbeat) hold no
// connection of their own to the database: no LISTEN, no watch, so a fleet behind PgBouncer
// needs none per replica. Their follow-ups are posted to the replica that runs the session.
// When a replica's row expires (it was paused past its TTL, say), it learns so at its next
// renewal, reports the claim lost and cancels the turn it ran under it, and the session is
// answered once.
func TestAHeartbeatFleetHoldsNoConnectionOfItsOwn(t *testing.T) {
	t.Parallel()
	lost := make(chan error, 4)
	probe := &bot.Probe{ClaimLost: func(err error) {
		select {
		case lost <- err:
		default:
		}
	}}
	agent := &blocksUntilCancelled{started: make(chan struct{}), cancelled: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{replicas: 2, peers: true, heartbeat: 10 * time.Second, probe: probe})
	ctx := context.Background()
	h.waitFor("both replicas' heartbeat claims", func() bool {
		var n int
		return h.pool.QueryRow(ctx, `SELECT count(*) FROM replica_peers WHERE alive_until > clock_timestamp()`).Scan(&n) == nil && n == 2
	})
	var own int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name IN ('logbook-listen', 'logbook-watch')`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if own != 0 {
		t.Fatalf("%d LISTEN or watch connections in a heartbeat fleet, want 0", own)
	}

	// The first turn blocks until it is cancelled; its replica's row then expires.
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> long job"})
	select {
	case <-agent.started:
	case <-h.waitCtx().Done():
		t.Fatal("the turn did not start")
	}
	s := h.session(general, top.TS)
	var owner string
	if err := h.pool.QueryRow(ctx, `SELECT owner FROM leases WHERE session_id = $1 AND claimed`, s.ID).Scan(&owner); err != nil {
		t.Fatalf("the running turn's lease is not claimed: %v", err)
	}
	select {
	case err := <-lost:
		t.Fatalf("a claim was lost while its heartbeat was fine: %v", err)
	default:
	}
	if _, err := h.pool.Exec(ctx, `UPDATE replica_peers SET alive_until = clock_timestamp() - interval '1 second' WHERE owner = $1`, owner); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, session.ErrHeartbeatExpired) {
			t.Fatalf("claim lost because %v, want ErrHeartbeatExpired", err)
		}
	case <-h.waitCtx().Done():
		t.Fatal("the replica did not notice its heartbeat claim had expired")
	}
	select {
	case <-agent.cancelled:
	case <-h.waitCtx().Done():
		t.Fatal("the claim was reported lost but the turn run under it goes on")
	}
	h.replies(general, top.TS, 1)

	// Follow-ups reach the session's owner by a post, not a NOTIFY (nobody LISTENs).
	replies := h.followUpsUntil(top.TS, 1, "posted")
	h.waitFor("both replicas' heartbeat claims again", func() bool {
		var n int
		return h.pool.QueryRow(ctx, `SELECT count(*) FROM replica_peers WHERE alive_until > clock_timestamp()`).Scan(&n) == nil && n == 2
	})
	h.answered(s.ID)
	if got := len(h.emu.BotReplies(general, top.TS)); got != replies {
		t.Fatalf("%d replies in the thread, want %d (one per message)", got, replies)
	}
}

// #53: a replica with a heartbeat claim LISTENs for nothing, so a wake posted to it that
// fails falls back to a NOTIFY nobody hears. Its own poll finds the follow-up its idle cell
// missed and pokes the cell: every follow-up is answered long before the cell's idle timeout
// (10 minutes here) would have ended it.
func TestAHeartbeatReplicasPollFindsAWakeItMissed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{replicas: 2, peers: true, heartbeat: 10 * time.Second, idle: 10 * time.Minute})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	for _, r := range h.reps {
		r.peer.CloseClientConnections()
		r.peer.Listener.Close()
	}
	// Each answered within waitCtx's minute. Three times: a follow-up that reaches the cell as
	// it finishes its last turn is read without a poke.
	replies := 1
	for range 3 {
		replies = h.followUpsUntil(top.TS, replies, "notified")
	}
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if got := len(h.emu.BotReplies(general, top.TS)); got != replies {
		t.Fatalf("%d replies in the thread, want %d (one per message)", got, replies)
	}
}

// A heartbeat claim without a peer inbox is refused: the replica would LISTEN for nothing and
// hear no wake at all.
func TestAHeartbeatClaimNeedsAPeerInbox(t *testing.T) {
	t.Parallel()
	api := slack.New("xoxb-test")
	store := session.NewStore(nil, session.Options{})
	d := bot.Deps{API: api, Socket: socketmode.New(api), Store: store, GatewayStore: store, Agent: &echoAgent{},
		Metrics: bot.NewMetrics(prometheus.NewRegistry())}
	_, err := bot.NewService(bot.ServiceConfig{Runner: bot.RunnerConfig{Heartbeat: 15 * time.Second}}, d)
	if err == nil || !strings.Contains(err.Error(), "needs a peer inbox") {
		t.Fatalf("NewService with a heartbeat claim and no peer inbox: %v", err)
	}
}
