package bot_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// openTurn stores, as a replica that died mid-turn would have left it, a session for a new
// top-level post in general: the user message, turn_started, and one cell_woken per earlier
// cell. The post does not mention the bot, so the gateway itself stores nothing for it.
// extra events are appended with them.
func openTurn(t *testing.T, h *harness, text string, cells int, extra ...session.NewEvent) (session.Session, slackemu.Posted) {
	t.Helper()
	ctx := context.Background()
	p := h.post(slackemu.Post{Channel: general, User: ada, Text: text})
	h.acked(p)
	s, err := h.store.Open(ctx, session.ThreadKey{Team: h.emu.TeamID(), Channel: general, ThreadTS: p.TS})
	if err != nil {
		t.Fatal(err)
	}
	evs := []session.NewEvent{
		{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: ada}, IdempotencyKey: "test/" + p.TS,
			Payload: session.UserMessage{Team: h.emu.TeamID(), Channel: general, ThreadTS: p.TS, TS: p.TS, User: ada, Text: text}},
		{Type: session.TypeTurnStarted, Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"}, Payload: session.TurnStarted{Through: 1, Reason: "message"}},
	}
	for i := range cells {
		evs = append(evs, session.NewEvent{Type: session.TypeCellWoken, Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"},
			Payload: session.CellWoken{Host: "gone", PID: 1, Reason: "message", Epoch: int64(i + 1)}})
	}
	if _, err := h.store.Append(ctx, s.ID, append(evs, extra...)...); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// A replica that dies mid-turn (its process gone: its database connections, the liveness
// claim's among them, end without a goodbye) leaves a claimed, unexpired lease. A live
// replica takes the session at once — not after the lease's TTL, and not by the slow poll
// (an hour here): by the dead-owner poll — and finishes the turn exactly once.
func TestDeadReplicasTurnResumesAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{poll: time.Hour, leaseTTL: time.Hour})
	s, p := openTurn(t, h, "deploy the fix", 1)

	// The dead replica held its claim and took the lease with it, as a runner does; then its
	// process died: the lease stays, unexpired for an hour.
	lease := deadOwner(t, h, s.ID)
	died := time.Now()
	r := h.replies(general, p.TS, 1)
	took := time.Since(died)
	t.Logf("a dead replica's turn resumed and answered %v after its claim dropped", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("took %v to resume a dead replica's turn (the lease had an hour left)", took)
	}
	if r[0].Text != "seen: deploy the fix" {
		t.Fatalf("reply %q", r[0].Text)
	}
	h.answered(s.ID)
	woken := h.events(s.ID, session.TypeCellWoken)
	var w session.CellWoken
	if err := woken[len(woken)-1].Decode(&w); err != nil || w.Epoch != lease.Epoch+1 || w.Reason != "orphan" {
		t.Fatalf("the resuming cell: %+v %v, want epoch %d woken by the dead-owner poll", w, err, lease.Epoch+1)
	}
	if n := len(h.emu.BotReplies(general, p.TS)); n != 1 {
		t.Fatalf("%d replies", n)
	}
}

// firstRunBlocks is an agent whose first run waits until its context ends (a model call in
// flight when the replica stops); later runs answer at once.
type firstRunBlocks struct {
	echoAgent
	started chan struct{}
	once    sync.Once
}

func (a *firstRunBlocks) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	first := false
	a.once.Do(func() { first = true; close(a.started) })
	if first {
		<-ctx.Done()
		return brain.Reply{}, ctx.Err()
	}
	return a.echoAgent.Run(ctx, t)
}

// SIGTERM (a rolling deploy) of the replica running a turn: the turn may finish for the
// drain timeout, then it is handed over — the lease released and a peer woken through
// NOTIFY — and the peer resumes it at once (its poll is an hour here): one reply.
func TestGracefulStopHandsTheTurnOver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var handedOver time.Time
	probe := &bot.Probe{CellExited: func(id session.ID, reason string) {
		if reason == "shutdown" || reason == "drain" {
			mu.Lock()
			handedOver = time.Now()
			mu.Unlock()
		}
	}}
	agent := &firstRunBlocks{started: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{replicas: 2, poll: time.Hour, drain: 300 * time.Millisecond, probe: probe})
	p := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> long job"})
	<-agent.started
	// The replica whose cell took the lease (and so runs the turn) counted a rehydration; the
	// other may have a cell too for a moment, on its way out because the lease is held.
	var running *replica
	for _, r := range h.reps {
		if r.metric(t, "logbook_cell_rehydrations_total") == 1 {
			running = r
		}
	}
	if running == nil {
		t.Fatal("no replica runs the turn")
	}
	stopped := time.Now()
	running.cancel()
	r := h.replies(general, p.TS, 1)
	<-running.done
	mu.Lock()
	resumeIn := time.Since(handedOver)
	mu.Unlock()
	t.Logf("SIGTERM to reply %v (drain timeout 300ms); hand-over to reply %v",
		time.Since(stopped).Round(time.Millisecond), resumeIn.Round(time.Millisecond))
	if resumeIn > 3*time.Second {
		t.Fatalf("the peer answered %v after the hand-over", resumeIn)
	}
	if r[0].Text != "seen: long job" || len(h.emu.BotReplies(general, p.TS)) != 1 {
		t.Fatalf("replies %+v", h.emu.BotReplies(general, p.TS))
	}
	s := h.session(general, p.TS)
	h.answered(s.ID)
	if n := len(h.events(s.ID, session.TypeTurnStarted)); n != 1 {
		t.Fatalf("%d turns, want the one turn resumed", n)
	}
}

// A turn taken up by more than three cells is not closed silently: the thread is told once,
// through the delivery path (stored, then posted, then delivered), and the error says why.
// A notice stored by a cell that died before posting it is posted once, not stored again.
func TestAbandonedTurnTellsTheThreadOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	check := func(s session.Session, p slackemu.Posted) {
		t.Helper()
		r := h.replies(general, p.TS, 1)
		h.answered(s.ID)
		if r[0].Text != bot.AbandonedText || len(h.emu.BotReplies(general, p.TS)) != 1 {
			t.Fatalf("replies %+v", h.emu.BotReplies(general, p.TS))
		}
		if n := len(h.events(s.ID, session.TypeAssistantMessage)); n != 1 {
			t.Fatalf("%d assistant messages, want the one notice", n)
		}
		var tc session.TurnCompleted
		tcs := h.events(s.ID, session.TypeTurnCompleted)
		if err := tcs[0].Decode(&tc); err != nil || tc.Status != session.StatusError || tc.Reason != "abandoned" {
			t.Fatalf("turn_completed %+v %v", tc, err)
		}
		var e session.ErrorEvent
		errs := h.events(s.ID, session.TypeError)
		if len(errs) != 1 || errs[0].Decode(&e) != nil || e.Code != "abandoned" || e.Message == "" {
			t.Fatalf("error events %+v", errs)
		}
		if n := len(h.events(s.ID, session.TypeDelivered)); n != 1 {
			t.Fatalf("%d delivered", n)
		}
	}
	s, p := openTurn(t, h, "first", 4)
	check(s, p)

	// The cell before died after storing the notice, before posting it.
	s2, p2 := openTurn(t, h, "second", 4, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: botUser}, IdempotencyKey: "abandoned/2", // turn_started is seq 2
		Payload: session.AssistantMessage{Text: bot.AbandonedText}})
	check(s2, p2)
}

// The dead-owner poll runs far more often than the poll for unowned work; it must not put
// that poll off: a session with work and no lease, never signalled, is still found.
func TestFrequentOrphanPollLeavesThePollRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{poll: 300 * time.Millisecond, orphan: 20 * time.Millisecond})
	s, p := openTurn(t, h, "anyone there?", 0)
	if r := h.replies(general, p.TS, 1); r[0].Text != "seen: anyone there?" {
		t.Fatalf("reply %q", r[0].Text)
	}
	h.answered(s.ID)
}

// deadOwner takes the session's lease as a replica holding its liveness claim, then ends that
// replica's connection without releasing anything, as kill -9 would. It returns the lease.
func deadOwner(t *testing.T, h *harness, id session.ID) session.Lease {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	held, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- session.ListenClaimed(ctx, h.dbURL, "dead-replica", session.ListenOptions{}, func() { close(held) }, func(session.ID, string) {})
	}()
	select {
	case <-held:
	case err := <-done:
		cancel()
		t.Fatalf("claim: %v", err)
	}
	lease, err := h.store.AcquireLeaseWith(context.Background(), id, "dead-replica", time.Hour, session.LeaseOptions{Claimed: true})
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// A thread merely idle on a replica that died (its lease unexpired for an hour) answers its
// next message at once: the gateway's signal wakes a cell that takes the dead owner's lease.
// Both polls are an hour here, so nothing else can.
func TestIdleThreadOfADeadReplicaAnswersAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{poll: time.Hour, orphan: time.Hour, leaseTTL: time.Hour})
	s, p := openTurn(t, h, "first", 0, session.NewEvent{Type: session.TypeTurnCompleted,
		Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"}, Payload: session.TurnCompleted{Turn: 2, Status: "ok", Through: 1}})
	deadOwner(t, h, s.ID)
	start := time.Now()
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: p.TS, Text: "second"})
	r := h.replies(general, p.TS, 1)
	t.Logf("idle thread of a dead replica answered in %v", time.Since(start).Round(time.Millisecond))
	if r[0].Text != "seen: first | second" {
		t.Fatalf("reply %q", r[0].Text)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("answered after %v", took)
	}
}

// A turn abandoned after its cells kept dying mid-stream: the live message the last dead cell
// left is not left streaming, half-written, above the notice.
func TestAbandonedTurnRemovesTheLiveMessagesLeftBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	ctx := context.Background()
	p := h.post(slackemu.Post{Channel: general, User: ada, Text: "why did the deploy fail?"})
	h.acked(p)
	api := slack.New(h.emu.BotToken(), slack.OptionAPIURL(h.emu.APIURL()))
	_, live, err := api.StartStreamContext(ctx, general, slack.MsgOptionTS(p.TS),
		slack.MsgOptionRecipientUserID(ada), slack.MsgOptionRecipientTeamID(h.emu.TeamID()),
		slack.MsgOptionChunks(slack.NewMarkdownTextChunk("The deploy failed ")))
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.store.Open(ctx, session.ThreadKey{Team: h.emu.TeamID(), Channel: general, ThreadTS: p.TS})
	if err != nil {
		t.Fatal(err)
	}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	evs := []session.NewEvent{
		{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: ada}, IdempotencyKey: "test/" + p.TS,
			Payload: session.UserMessage{Team: h.emu.TeamID(), Channel: general, ThreadTS: p.TS, TS: p.TS, User: ada, Text: "why?"}},
		{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: 1, Reason: "message"}},
		{Type: session.TypeStreamStarted, Actor: cell, IdempotencyKey: "stream/" + live,
			Payload: session.StreamStarted{Turn: 2, Channel: general, TS: live, Mode: "stream"}},
	}
	for i := range 4 {
		evs = append(evs, session.NewEvent{Type: session.TypeCellWoken, Actor: cell,
			Payload: session.CellWoken{Host: "gone", PID: 1, Reason: "message", Epoch: int64(i + 1)}})
	}
	if _, err := h.store.Append(ctx, s.ID, evs...); err != nil {
		t.Fatal(err)
	}
	h.turns(s.ID, 1)
	msgs := h.emu.BotReplies(general, p.TS)
	if len(msgs) != 1 || msgs[0].Text != bot.AbandonedText {
		t.Fatalf("bot messages %+v; want the notice alone", msgs)
	}
	if st, ok := h.emu.StreamState(general, live); ok && st.Streaming() {
		t.Fatalf("the dead cell's live message is still streaming: %q", st.Text)
	}
}
