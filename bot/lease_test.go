package bot_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// failRenewals makes logbook_renew_lease fail (as a statement timed out under load would)
// until the returned func restores it.
func failRenewals(t *testing.T, h *harness) (restore func()) {
	t.Helper()
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	var original string
	if err := admin.QueryRow(context.Background(),
		`SELECT pg_get_functiondef('logbook_renew_lease(uuid, text, bigint, interval)'::regprocedure)`).Scan(&original); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(context.Background(), `CREATE OR REPLACE FUNCTION logbook_renew_lease(p_session uuid, p_owner text, p_epoch bigint, p_ttl interval)
RETURNS TABLE (expires_at timestamptz) LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014'; END $$`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if _, err := admin.Exec(context.Background(), original); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// #33: a cell whose lease renewals failed (a busy pool, a slow database) stops, as it must
// once the lease may expire; its replica takes the session again at once instead of leaving
// it to a poll (an hour here; in production 5 s, by whichever replica polls first: the
// session moved to another live replica). The turn is resumed here and answered once.
func TestLeaseLostToFailedRenewalsIsRetakenAtOnce(t *testing.T) {
	t.Parallel()
	lost := make(chan session.ID, 16)
	probe := &bot.Probe{CellExited: func(id session.ID, reason string) {
		if reason == "lease_lost" {
			lost <- id
		}
	}}
	agent := &firstRunBlocks{started: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{leaseTTL: time.Second, poll: time.Hour, orphan: time.Hour, probe: probe})
	restore := failRenewals(t, h)
	p := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> long job"})
	<-agent.started
	select {
	case <-lost:
	case <-h.waitCtx().Done():
		t.Fatal("the cell kept running although its lease could not be renewed")
	}
	restore()
	r := h.replies(general, p.TS, 1)
	if r[0].Text != "seen: long job" || len(h.emu.BotReplies(general, p.TS)) != 1 {
		t.Fatalf("replies %+v", h.emu.BotReplies(general, p.TS))
	}
	s := h.session(general, p.TS)
	h.answered(s.ID)
	var w session.CellWoken
	woken := h.events(s.ID, session.TypeCellWoken)
	if err := woken[len(woken)-1].Decode(&w); err != nil || w.Reason != "retake" {
		t.Fatalf("the cell that answered: %+v %v, want one woken to retake the lease", w, err)
	}
}

// #33 (chaos: kill -9 every few seconds): a replica that stored a message and died before it
// signalled the session leaves the message to Slack's retry of the envelope it did not ack.
// The retry is a duplicate, and must still wake the session's cell — here idle on a live
// replica, whose poll (an hour here) skips sessions whose cell runs.
func TestRedeliveryOfAStoredMessageWakesTheSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{poll: time.Hour, orphan: time.Hour,
		emu: slackemu.Options{RetrySchedule: []time.Duration{time.Hour}}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.answered(s.ID)

	// The envelope reaches a replica that stores the message and dies before it acks or
	// signals: here it is lost on the way, and the test stores the message as that replica
	// did.
	h.emu.InjectDeliveryFault(slackemu.DeliveryFault{Kind: slackemu.FaultDrop, EventType: "message"})
	p := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "two"})
	h.awaitingRetry(p)
	if _, err := h.store.Append(context.Background(), s.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: ada}, IdempotencyKey: s.Key.Team + "/" + general + "/" + p.TS,
		Payload: session.UserMessage{Team: s.Key.Team, Channel: general, ThreadTS: top.TS, TS: p.TS, User: ada, Text: "two"}}); err != nil {
		t.Fatal(err)
	}
	if n := h.emu.FireRetries(); n != 1 {
		t.Fatalf("%d retries sent, want the one", n)
	}
	r := h.replies(general, top.TS, 2)
	if r[1].Text != "seen: one | two" {
		t.Fatalf("reply %q", r[1].Text)
	}
	h.answered(s.ID)
}
