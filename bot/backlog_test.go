package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// #33: a replica that comes back to a backlog wakes at most LOGBOOK_WAKE_LIMIT sessions at
// once, oldest first, and works through all of them. Twelve threads' turns are cut short on
// one replica (their messages stored, their turns open); a second replica with a limit of 4
// starts: its agent runs 4 turns, the next poll finds no room (it holds the rest back), and
// once the turns may finish every thread is answered, never more than 4 at once, each turn
// started no later than the limit allows by its session's age.
func TestWakeLimitWorksThroughABacklogOldestFirst(t *testing.T) {
	t.Parallel()
	const threads, limit = 12, 4
	agent := newGateAgent()
	h := newHarness(t, agent, harnessOptions{poll: time.Hour})
	var tops []slackemu.Posted
	for i := range threads {
		tops = append(tops, h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> question %d", botUser, i)}))
	}
	h.waitFor("every thread's turn to start", func() bool { return agent.started() == threads })
	h.reps[0].cancel() // the replica goes away: its turns are cut short, left open in the log
	<-h.reps[0].done

	// The sessions by age: the order of their one user message.
	var byAge []session.ID
	age := map[session.ID]time.Time{}
	for _, p := range tops {
		s := h.session(general, p.TS)
		byAge = append(byAge, s.ID)
		age[s.ID] = h.events(s.ID, session.TypeUserMessage)[0].CreatedAt
	}
	slices.SortFunc(byAge, func(a, b session.ID) int { return age[a].Compare(age[b]) })
	rank := map[session.ID]int{}
	for i, id := range byAge {
		rank[id] = i
	}

	agent.reset()
	r := h.startReplica(harnessOptions{poll: time.Hour, wakeLimit: limit})
	h.waitFor("the limit's turns to run", func() bool { return agent.active() == limit })
	// The start filled the room; a later poll (the dead-owner poll, every 500ms) found none.
	h.waitFor("a poll held back by the limit", func() bool { return r.metric(t, "logbook_wakes_deferred_total") >= 2 })
	if n := agent.active(); n != limit {
		t.Fatalf("%d turns running with a wake limit of %d", n, limit)
	}
	agent.release()
	for _, p := range tops {
		h.replies(general, p.TS, 1)
	}
	for _, id := range byAge {
		h.answered(id)
	}
	if peak := agent.peakActive(); peak > limit {
		t.Fatalf("%d turns ran at once with a wake limit of %d", peak, limit)
	}
	order := agent.sessions()
	if len(order) != threads {
		t.Fatalf("%d sessions' turns ran after the restart, want %d", len(order), threads)
	}
	for i, id := range order {
		if rank[id] >= i+limit {
			t.Fatalf("the %d-th turn to start was the session %d-th by age: not oldest first (order %v)", i, rank[id], order)
		}
	}
}

// gateAgent runs the echo agent once its gate opens, counting the runs waiting at it and
// recording the order in which sessions' first runs began.
type gateAgent struct {
	echoAgent
	mu        sync.Mutex
	gate      chan struct{}
	now, peak int
	runs      int
	firstRuns []session.ID
	seen      map[session.ID]bool
}

func newGateAgent() *gateAgent {
	return &gateAgent{gate: make(chan struct{}), seen: map[session.ID]bool{}}
}

func (a *gateAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.mu.Lock()
	a.now++
	a.runs++
	a.peak = max(a.peak, a.now)
	if !a.seen[t.Session.ID] {
		a.seen[t.Session.ID] = true
		a.firstRuns = append(a.firstRuns, t.Session.ID)
	}
	gate := a.gate
	a.mu.Unlock()
	defer func() { a.mu.Lock(); a.now--; a.mu.Unlock() }()
	select {
	case <-gate:
	case <-ctx.Done():
		return brain.Reply{}, ctx.Err()
	}
	return a.echoAgent.Run(ctx, t)
}

func (a *gateAgent) started() int    { a.mu.Lock(); defer a.mu.Unlock(); return len(a.firstRuns) }
func (a *gateAgent) active() int     { a.mu.Lock(); defer a.mu.Unlock(); return a.now }
func (a *gateAgent) peakActive() int { a.mu.Lock(); defer a.mu.Unlock(); return a.peak }
func (a *gateAgent) release()        { a.mu.Lock(); defer a.mu.Unlock(); close(a.gate) }
func (a *gateAgent) sessions() []session.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.firstRuns)
}

// reset forgets the runs so far (their turns were cut short); the gate stays closed.
func (a *gateAgent) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.peak, a.firstRuns, a.seen = a.now, nil, map[session.ID]bool{}
}

// capClock is the wall clock, except for the reply cap's wait (anything over capWait): it
// ends when the test releases it, and the test is told it began.
type capClock struct {
	waiting chan struct{}
	release chan time.Time
}

const capWait = 10 * time.Minute

func (c *capClock) Now() time.Time { return time.Now() }
func (c *capClock) After(d time.Duration) <-chan time.Time {
	if d < capWait {
		return time.After(d)
	}
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return c.release
}

// #33: messages a thread gets while it waits for its reply cap are answered by that one turn,
// all of them, instead of one capped turn each (with a cap of one reply an hour, the old turn
// answered only the message it began with and left the rest waiting another hour).
func TestReplyCapBatchesTheBurstIntoOneTurn(t *testing.T) {
	t.Parallel()
	clock := &capClock{waiting: make(chan struct{}, 1), release: make(chan time.Time)}
	h := newHarness(t, &echoAgent{}, harnessOptions{maxReplies: 1, replyWindow: time.Hour, clock: clock, midTurn: bot.MidTurnQueue})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "two"}))
	select {
	case <-clock.waiting:
	case <-h.waitCtx().Done():
		t.Fatal("the second turn never waited for the reply cap")
	}
	h.acked(h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "three"}))
	h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "four"}))
	close(clock.release)
	replies := h.replies(general, top.TS, 2)
	h.answered(s.ID)
	if got, want := replies[1].Text, "seen: one | two | three | four"; !strings.HasPrefix(got, want) {
		t.Fatalf("the capped turn answered %q, want %q: the burst in one turn", got, want)
	}
	if n := len(h.events(s.ID, session.TypeTurnStarted)); n != 2 {
		t.Fatalf("%d turns for a burst of three while capped, want 2 in all", n)
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d replies, want 2", n)
	}
}

// #33: a burst written while a turn runs is answered by one next turn, all its messages as
// that turn's input (queued, then taken up together), not one turn each.
func TestBurstWhileATurnRunsIsOneNextTurn(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{block: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{midTurn: bot.MidTurnQueue})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.waitFor("the first turn to run", func() bool { return agent.Runs() == 1 })
	s := h.session(general, top.TS)
	for _, text := range []string{"a", "b", "c"} {
		h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: text}))
	}
	h.waitFor("three queued markers", func() bool { return len(h.events(s.ID, session.TypeQueued)) == 3 })
	close(agent.block)
	replies := h.replies(general, top.TS, 2)
	h.answered(s.ID)
	if got, want := replies[1].Text, "seen: one | a | b | c"; !strings.HasPrefix(got, want) {
		t.Fatalf("the next turn answered %q, want %q", got, want)
	}
	if n := len(h.events(s.ID, session.TypeTurnStarted)); n != 2 {
		t.Fatalf("%d turns for one message and a burst of three, want 2", n)
	}
}

// #53: a cell woken to answer a backlog goes once its turn is done and nothing is pending,
// instead of keeping its session's cell and lease for LOGBOOK_IDLE_TIMEOUT (a 20,000-session
// backlog kept 12,300 leases and filled the server's lock table). Twelve sessions wait with
// a wake limit of 4 and an idle timeout of an hour: every one is answered, and every cell but
// the last poll's (at most the limit) leaves with "backlog" as its turn ends; its
// cell_evicted says so.
func TestBacklogCellsLeaveOnceTheirTurnIsDone(t *testing.T) {
	t.Parallel()
	const threads, limit = 12, 4
	agent := newGateAgent()
	h := newHarness(t, agent, harnessOptions{poll: time.Hour, idle: time.Hour})
	var tops []slackemu.Posted
	for i := range threads {
		tops = append(tops, h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> question %d", botUser, i)}))
	}
	h.waitFor("every thread's turn to start", func() bool { return agent.started() == threads })
	h.reps[0].cancel() // its turns are cut short, left open in the log: a backlog for the next replica
	<-h.reps[0].done

	var mu sync.Mutex
	exits := map[string]int{}
	probe := &bot.Probe{CellExited: func(_ session.ID, reason string) { mu.Lock(); exits[reason]++; mu.Unlock() }}
	exited := func(reason string) int { mu.Lock(); defer mu.Unlock(); return exits[reason] }
	agent.reset()
	r := h.startReplica(harnessOptions{poll: time.Hour, idle: time.Hour, wakeLimit: limit, probe: probe})
	agent.release()
	var ids []session.ID
	for _, p := range tops {
		h.replies(general, p.TS, 1)
		ids = append(ids, h.session(general, p.TS).ID)
	}
	for _, id := range ids {
		h.answered(id)
	}
	h.waitFor("the backlog's cells to leave", func() bool { return exited("backlog") >= threads-limit })
	if n := r.runner.Active(); n > limit {
		t.Fatalf("%d cells still held after the backlog, want at most the wake limit %d (the last poll's)", n, limit)
	}
	if n := exited("idle"); n != 0 {
		t.Fatalf("%d cells left idle within an idle timeout of an hour", n)
	}
	evicted := 0
	for _, id := range ids {
		for _, e := range h.events(id, session.TypeCellEvicted) {
			var p session.CellEvicted
			if err := e.Decode(&p); err != nil {
				t.Fatal(err)
			}
			if p.Reason == "backlog" {
				evicted++
			}
		}
	}
	if evicted < threads-limit {
		t.Fatalf("%d cell_evicted events say backlog, want at least %d", evicted, threads-limit)
	}
}
