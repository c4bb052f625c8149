package bot_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// pollClock is the wall clock that counts the runner's poll waits (the After calls of the
// poll interval), so a test can wait for N polls instead of sleeping.
type pollClock struct {
	poll time.Duration
	mu   sync.Mutex
	n    int
}

func (c *pollClock) Now() time.Time { return time.Now() }

func (c *pollClock) After(d time.Duration) <-chan time.Time {
	if d == c.poll {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return time.After(d)
}

// polls returns how many polls have run since the first wait (each wait after the first
// follows a poll).
func (c *pollClock) polls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.n-1, 0)
}

// recorder is a model that answers every reply request with a numbered text and keeps the
// requests.
type recorder struct {
	mu   sync.Mutex
	reqs []brain.Request
}

func (r *recorder) Name() string  { return "anthropic" }
func (r *recorder) Model() string { return "recorder" }
func (r *recorder) Complete(_ context.Context, req brain.Request) (brain.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Purpose != brain.PurposeReply {
		return brain.Response{Text: "a title"}, nil
	}
	r.reqs = append(r.reqs, req)
	return brain.Response{Text: "answer " + string(rune('0'+len(r.reqs)))}, nil
}

func (r *recorder) replies() []brain.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]brain.Request(nil), r.reqs...)
}

func requestText(req brain.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		for _, bl := range m.Blocks {
			b.WriteString(bl.Text + "\n")
		}
	}
	return b.String()
}

// After a short retention (under the poll's seven-day window) purges a thread, no replica
// wakes it again and again (issue 17: the pending-work poll read turn_completed.through from
// the purged payload, so every replica woke and evicted each purged session every poll), and
// a new message in the thread is answered once, the model being told that the earlier
// history was removed under retention.
func TestPurgedThreadNeitherLoopsNorLosesTheNextReply(t *testing.T) {
	t.Parallel()
	model := &recorder{}
	b, err := brain.New(brain.Config{Provider: model})
	if err != nil {
		t.Fatal(err)
	}
	clock := &pollClock{poll: 40 * time.Millisecond}
	// A minute's ack window: Slack's redelivery of a slowly acked message (at load, past the
	// default 3 s) signals the session, a wake this test does not count on.
	h := newHarness(t, b, harnessOptions{idle: 200 * time.Millisecond, poll: clock.poll, clock: clock,
		emu: slackemu.Options{AckTimeout: time.Minute}})
	ctx := context.Background()

	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> the zanzibar rollout is stuck"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.answered(s.ID)
	h.waitFor("the cell's eviction", func() bool { return len(h.events(s.ID, session.TypeCellEvicted)) == 1 })

	// Retention of 1ms (the 72h of the issue, shortened): the real purge, as `logbook audit purge` runs it.
	pool, err := session.Connect(ctx, h.dbURL, session.PoolOptions{Role: "logbook_retention"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ret, err := audit.NewRetention(pool, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // let the 1ms retention period pass (not a timing assertion)
	ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, time.Now())
	if err != nil || len(ps) != 1 || ps[0].Session != s.ID {
		t.Fatalf("purge: %+v, %v", ps, err)
	}
	if pending, err := h.store.Pending(ctx, "anyone", 7*24*time.Hour); err != nil || len(pending) != 0 {
		t.Fatalf("Store.Pending after the purge: %v, %v; want nothing", pending, err)
	}

	// Ten polls later nothing has woken the purged session: the log is as the purge left it.
	before := len(h.events(s.ID))
	from := clock.polls()
	h.waitFor("ten polls", func() bool { return clock.polls() >= from+10 })
	if n := len(h.events(s.ID)); n != before {
		t.Fatalf("the purged session grew from %d to %d events in ten polls: %s", before, n, payloadsOf(h.events(s.ID)[before:]))
	}

	// The positive control, and the purged thread's next message: appended without a signal
	// (as if its replica had died before signalling), so only the poll can find it.
	if _, err := h.store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: ada}, IdempotencyKey: h.emu.TeamID() + "/" + general + "/1900000000.000100",
		Payload: session.UserMessage{Team: h.emu.TeamID(), Channel: general, ThreadTS: top.TS, TS: "1900000000.000100",
			User: ada, UserName: "ada", Text: "is it still stuck?"}}); err != nil {
		t.Fatal(err)
	}
	replies := h.replies(general, top.TS, 2)
	h.answered(s.ID)
	if !strings.Contains(replies[1].Text, "answer") {
		t.Errorf("the reply in the purged thread is %q, want the model's answer", replies[1].Text)
	}
	reqs := model.replies()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2 (one per message)", len(reqs))
	}
	got := requestText(reqs[1])
	if !strings.Contains(got, "removed under the workspace's retention policy") || !strings.Contains(got, "is it still stuck?") ||
		strings.Contains(got, "zanzibar") {
		t.Errorf("the model was sent:\n%s\nwant the retention note and the new message, nothing purged", got)
	}

	// Answered once, and then quiet again: ten more polls add nothing.
	h.waitFor("the cell's second eviction", func() bool { return len(h.events(s.ID, session.TypeCellEvicted)) == 2 })
	before = len(h.events(s.ID))
	from = clock.polls()
	h.waitFor("ten more polls", func() bool { return clock.polls() >= from+10 })
	if n := len(h.events(s.ID)); n != before {
		t.Errorf("after its answer the purged session grew from %d to %d events: %s", before, n, payloadsOf(h.events(s.ID)[before:]))
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Errorf("%d replies in the thread, want 2", n)
	}
	if n := len(h.events(s.ID, session.TypeCellWoken)); n != 2 {
		t.Errorf("%d cell_woken markers, want 2 (the first message, the one after the purge)", n)
	}
}
