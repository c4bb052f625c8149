package bot_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
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

// blocksUntil blocks every turn until release is closed (or its context ends), then echoes.
type blocksUntil struct {
	echoAgent
	started chan struct{}
	release chan struct{}
}

func (a *blocksUntil) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.started <- struct{}{}
	select {
	case <-a.release:
	case <-ctx.Done():
		return brain.Reply{}, ctx.Err()
	}
	return a.echoAgent.Run(ctx, t)
}

// blockedCells is a harness whose cells each run one turn that blocks (agent.release ends
// them), counting the lease renewal statements and the cells that lost their leases.
type blockedCells struct {
	h        *harness
	renewals *statementCounter
	agent    *blocksUntil
	posts    []slackemu.Posted
	lost     atomic.Int32
}

// startBlockedCells starts n such cells (o: poll, orphan, probe and statements are set here)
// and returns once every turn has started.
func startBlockedCells(t *testing.T, n int, o harnessOptions) *blockedCells {
	t.Helper()
	b := &blockedCells{renewals: newStatementCounter("logbook_renew_lease"),
		agent: &blocksUntil{started: make(chan struct{}, n), release: make(chan struct{})}}
	o.poll, o.orphan, o.statements = time.Hour, time.Hour, b.renewals
	o.probe = &bot.Probe{CellExited: func(id session.ID, reason string) {
		if reason == "lease_lost" {
			b.lost.Add(1)
		}
	}}
	b.h = newHarness(t, b.agent, o)
	for i := range n {
		b.posts = append(b.posts, b.h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> job %d", botUser, i)}))
	}
	for range n {
		select {
		case <-b.agent.started:
		case <-b.h.waitCtx().Done():
			t.Fatal("the turns did not start")
		}
	}
	return b
}

// #33: the leases of all of a replica's cells are renewed by one statement per interval (a
// quarter of the TTL), not one per cell: under load, each cell's renewal waited for a
// connection of the busy pool, timed out, and the session moved to another live replica.
func TestLeaseRenewalIsOneStatementPerIntervalForAllCells(t *testing.T) {
	t.Parallel()
	const cells = 6
	const ttl = 2 * time.Second
	interval := ttl / 4
	b := startBlockedCells(t, cells, harnessOptions{leaseTTL: ttl})
	h, renewals, agent, posts, lost := b.h, b.renewals, b.agent, b.posts, &b.lost
	const w = "logbook_renew_lease"
	first := renewals.count(w)
	h.waitFor("a renewal", func() bool { return renewals.count(w) > first })
	from, t0 := renewals.count(w), time.Now()
	const more = 4
	h.waitFor("more renewals", func() bool { return renewals.count(w) >= from+more })
	elapsed := time.Since(t0)
	t.Logf("%d cells: %d renewal statements in %v: %.2f per interval of %v",
		cells, renewals.count(w)-from, elapsed, float64(renewals.count(w)-from)/(float64(elapsed)/float64(interval)), interval)
	// Each statement waits for the next interval: one per cell would take a fraction of one.
	if elapsed < (more-1)*interval {
		t.Errorf("%d renewal statements took %v, want about %v: more than one per interval for %d cells", more, elapsed, more*interval, cells)
	}
	close(agent.release)
	for _, p := range posts {
		h.replies(general, p.TS, 1)
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("%d cells lost their leases", n)
	}
}

// #33: a main pool stalled by turn work (every connection taken) does not lose the leases of
// the cells waiting on it: they are renewed on the gateway's pool, as serve wires it.
func TestLeasesOutliveAStalledMainPool(t *testing.T) {
	t.Parallel()
	const cells = 3
	const ttl = 2 * time.Second
	b := startBlockedCells(t, cells, harnessOptions{leaseTTL: ttl, gatewayPool: true})
	h, renewals, agent, posts, lost := b.h, b.renewals, b.agent, b.posts, &b.lost
	// Stall the main pool: take every connection it may open.
	var taken []*pgxpool.Conn
	for range h.pool.Config().MaxConns {
		c, err := h.pool.Acquire(h.waitCtx())
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, c)
	}
	release := func() {
		for _, c := range taken {
			c.Release()
		}
		taken = nil
	}
	t.Cleanup(release)
	// Two TTLs' worth of renewals (one every quarter of the TTL) while the pool is stalled.
	from := renewals.count("logbook_renew_lease")
	h.waitFor("renewals", func() bool { return renewals.count("logbook_renew_lease") >= from+8 || lost.Load() > 0 })
	if n := lost.Load(); n != 0 {
		t.Fatalf("%d cells lost their leases while the main pool was stalled", n)
	}
	release()
	close(agent.release)
	for _, p := range posts {
		h.replies(general, p.TS, 1)
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("%d cells lost their leases", n)
	}
}
