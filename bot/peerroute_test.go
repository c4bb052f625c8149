package bot_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/bot/slackemu"
)

// #53: a follow-up that reaches a replica which does not run its session is posted to the
// peer inbox of the replica that does, not NOTIFYed (a NOTIFY costs every replica listening
// in the database a transaction): while both replicas take wakes over HTTP, no NOTIFY names
// the session. When the inboxes cannot be reached the wake goes by NOTIFY after all, and every
// follow-up is still answered.
func TestAFollowUpIsPostedToTheReplicaThatRunsItsSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{replicas: 2, peers: true})
	ctx := context.Background()
	watch, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { watch.Close(context.Background()) })
	if _, err := watch.Exec(ctx, "LISTEN logbook_session"); err != nil {
		t.Fatal(err)
	}

	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	replies := 1
	followUpsUntil := func(how string) { replies = h.followUpsUntil(top.TS, replies, how) }
	followUpsUntil("posted")

	// The negative check waits on a signal: a marker NOTIFY sent now is the first the
	// watcher reads unless one named the session before it.
	if _, err := h.pool.Exec(ctx, `SELECT pg_notify('logbook_session', 'marker')`); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := watch.WaitForNotification(h.waitCtx())
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == "marker" {
			break
		}
		if strings.HasPrefix(n.Payload, s.ID.String()) {
			t.Fatalf("a NOTIFY named the session (%q) while its owner takes wakes over HTTP", n.Payload)
		}
	}

	// Neither inbox can be reached: the wake is NOTIFYed, and the follow-up answered.
	for _, r := range h.reps {
		r.peer.CloseClientConnections()
		r.peer.Listener.Close()
	}
	followUpsUntil("notified")
	h.answered(s.ID)
}

// followUpsUntil posts follow-ups in general's thread top (which has replies answers so far)
// until the replicas' peer_wakes_total{how} moves, each answered before the next, and returns
// the thread's answers. Each envelope goes to one of the sockets, picked at random: twenty all
// reaching the owner would be a one-in-a-million draw.
func (h *harness) followUpsUntil(top string, replies int, how string) int {
	h.t.Helper()
	before := h.metric("logbook_peer_wakes_total", "how", how)
	for h.metric("logbook_peer_wakes_total", "how", how) == before {
		if replies > 40 {
			h.t.Fatalf("%d follow-ups and no wake %s: none reached the replica that does not run the session", replies, how)
		}
		h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top, Text: fmt.Sprintf("follow-up %d", replies)})
		replies++
		h.replies(general, top, replies)
	}
	return replies
}

// #53: a replica's peer inbox follows its liveness claim. It is recorded (replica_peers)
// once the claim is held and takes posted wakes; when the claim is lost (here its LISTEN
// connection goes silent and stays so) it refuses them (503: a peer may run the sessions
// now, and the sender NOTIFYs instead) until the claim is held again; a replica that stops
// takes its address back, so peers NOTIFY instead of posting to a replica that is gone.
func TestAPeerInboxFollowsTheLivenessClaim(t *testing.T) {
	t.Parallel()
	lost := make(chan error, 1)
	probe := &bot.Probe{ClaimLost: func(err error) {
		select {
		case lost <- err:
		default:
		}
	}}
	h := newHarness(t, &echoAgent{}, harnessOptions{listenProxy: true, peers: true, claimCheck: 2 * time.Second,
		poll: time.Hour, probe: probe})
	ctx := context.Background()
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)

	var addr, token string
	h.waitFor("the replica's peer address", func() bool {
		return h.pool.QueryRow(ctx, `SELECT addr, token FROM replica_peers`).Scan(&addr, &token) == nil
	})
	if addr != h.reps[0].peer.Listener.Addr().String() {
		t.Fatalf("recorded peer address %q, want the inbox's %q", addr, h.reps[0].peer.Listener.Addr())
	}
	send := func() error {
		snd := peerwake.NewSender(peerwake.SenderOptions{})
		defer snd.CloseIdle()
		return snd.Send(ctx, addr, token, s.ID, "another-replica")
	}
	if err := send(); err != nil {
		t.Fatalf("a wake posted while the replica holds its claim: %v", err)
	}

	h.reps[0].listen.Stall()
	select {
	case <-lost:
	case <-h.waitCtx().Done():
		t.Fatal("the claim was not reported lost after its connection went silent")
	}
	if err := send(); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a wake posted after the claim was lost: %v, want 503 (refused: the sender NOTIFYs)", err)
	}

	h.stop()
	var left int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM replica_peers`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d peer addresses left after the replica stopped, want 0", left)
	}
}
