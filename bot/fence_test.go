package bot_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// fencedAgent's first run (the cell that loses its lease) waits on write before it writes
// the reply's beginning, then on store before it stores the reply; later runs (the new owner)
// answer at once.
type fencedAgent struct {
	started, returned chan struct{} // closed when the first run starts, and once it returned
	write, store      chan struct{}
	mu                sync.Mutex
	runs              int
}

func (a *fencedAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.mu.Lock()
	a.runs++
	first := a.runs == 1
	a.mu.Unlock()
	reply := session.AssistantMessage{Text: "The deploy failed because the image tag is wrong.", Turn: t.TurnSeq}
	if first {
		defer close(a.returned)
		close(a.started)
		<-a.write
		t.Live.Text("The deploy failed ")
		<-a.store
	} else {
		t.Live.Text(reply.Text)
	}
	t.Live.EndRound(true)
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}, Payload: reply})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: reply, Status: session.StatusOK}, nil
}

// A cell that is alive but lost its lease (another replica took the session over, searched
// the thread and answered) starts a stream after that: its stream_started is refused as
// fenced, and it removes the stream rather than leave it beside the new owner's reply. The
// thread shows one reply (issue 33: doubles with every replica alive).
func TestFencedCellRemovesTheStreamItCouldNotRecord(t *testing.T) {
	t.Parallel()
	// An hour's lease: the first cell never renews during the test, so it cannot learn of the
	// takeover but by its appends.
	h, agent, top, s := takenOverMidTurn(t, harnessOptions{})
	if msgs := h.botMessages(top.TS); len(msgs) != 1 {
		t.Fatalf("the new owner's reply: %+v", msgs)
	}
	// Now the first cell writes: a stream the new owner's search could not have seen.
	agent.write <- struct{}{}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.Calls("chat.startStream") >= 2 }); err != nil {
		t.Fatalf("the fenced cell never started its stream: %v", err)
	}
	close(agent.store)
	<-agent.returned
	whole := "The deploy failed because the image tag is wrong."
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		msgs := h.botMessages(top.TS)
		return len(msgs) == 1 && msgs[0].Text == whole
	}); err != nil {
		t.Fatalf("bot messages %+v: want the new owner's reply alone", h.botMessages(top.TS))
	}
	for _, st := range h.emu.Streams() {
		if st.ThreadTS == top.TS && st.Streaming() {
			t.Fatalf("stream %s left streaming: %q", st.TS, st.Text)
		}
	}
	if n := len(h.events(s.ID, session.TypeDelivered)); n != 1 {
		t.Fatalf("%d delivered events", n)
	}
}

// chat.startStream whose answer is lost after Slack made the stream (the connection drops):
// the view looks for the stream in the thread rather than start another, and the reply shows
// once, in that stream.
func TestLiveLostStartAnswerIsFoundNotStartedAgain(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{pieces: []string{"The tests ", "pass: ", "all 42 of them."}, step: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.startStream", ApplyFirst: true, Drop: true, Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> do the tests pass?"})
	if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.Calls("chat.startStream") >= 1 }); err != nil {
		t.Fatal(err)
	}
	agent.step <- struct{}{}
	agent.step <- struct{}{}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "The tests pass: all 42 of them.") {
		t.Fatalf("bot messages %+v: want the reply once", msgs)
	}
	if n := h.emu.Calls("chat.startStream"); n != 1 {
		t.Fatalf("chat.startStream called %d times after its answer was lost", n)
	}
	var ss session.StreamStarted
	if st := h.events(s.ID, session.TypeStreamStarted); len(st) != 1 || st[0].Decode(&ss) != nil || ss.TS != msgs[0].TS {
		t.Fatalf("stream_started %s %+v: want the found stream %s", typesOf(st), ss, msgs[0].TS)
	}
}

// A dead cell left a stream the log does not name, and the next cell's first search of the
// thread fails: it searches again (bounded, on the clock) instead of posting the reply beside
// the stream; while the search keeps failing, nothing is posted and the turn stays open.
func TestFailedOrphanSearchPostsNothing(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"once", "until cleared"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			agent := &crashAgent{storeFirst: true, shown: make(chan struct{})}
			o := harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond}
			first := o
			var landed <-chan struct{}
			first.apiProxy, landed = lostStartAnswer() // the cell dies before it records the stream
			h := newHarness(t, agent, first)
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why did the deploy fail?"})
			<-agent.shown
			<-landed
			h.reps[0].cancel()
			<-h.reps[0].done
			s := h.session(general, top.TS)
			if n := len(h.events(s.ID, session.TypeStreamStarted)); n != 0 {
				t.Fatalf("%d stream_started: the dead cell was to leave its stream unrecorded", n)
			}
			times := 1
			if name != "once" {
				times = 0
			}
			h.emu.InjectMethodFault(slackemu.MethodFault{Method: "conversations.replies", Error: "internal_error", Times: times})
			before := h.emu.Calls("conversations.replies")
			h.startReplica(o)
			if name != "once" {
				// Two cells' worth of failed searches, and still only the dead cell's stream.
				if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.Calls("conversations.replies") >= before+8 }); err != nil {
					t.Fatal(err)
				}
				if msgs := h.botMessages(top.TS); len(msgs) != 1 || h.emu.Calls("chat.postMessage") != 0 {
					t.Fatalf("bot messages %+v while the thread cannot be searched: want only the dead cell's stream", msgs)
				}
				h.emu.ClearFaults()
			}
			h.turns(s.ID, 1)
			msgs := h.botMessages(top.TS)
			if len(msgs) != 1 || msgs[0].Text != "The deploy failed because the image tag is wrong." {
				t.Fatalf("bot messages %+v: want the reply once", msgs)
			}
			for _, st := range h.emu.Streams() {
				if st.ThreadTS == top.TS && st.Streaming() {
					t.Fatalf("stream %s left streaming: %q", st.TS, st.Text)
				}
			}
		})
	}
}

// Finding 1 of the fence review: a fenced append (here the live view's stream_started) says
// the lease is lost whatever the cell's renewals say. The cell stops at once ("lease_lost"),
// rather than count a turn failure and run the turn again with its fence still open (a
// re-run's orphan search would remove the new owner's message not recorded yet).
func TestFencedAppendStopsTheCellAtOnce(t *testing.T) {
	t.Parallel()
	exits := make(chan string, 16)
	probe := &bot.Probe{CellExited: func(_ session.ID, reason string) { exits <- reason }}
	// A short idle timeout: without the fix the first cell's re-run finds no work and exits
	// "idle".
	h, agent, top, _ := takenOverMidTurn(t, harnessOptions{idle: time.Second, probe: probe})
	agent.write <- struct{}{}
	close(agent.store)
	<-agent.returned
	var seen []string
	for {
		select {
		case r := <-exits:
			seen = append(seen, r)
		case <-h.waitCtx().Done():
			t.Fatalf("cell exits %v: the fenced cell never stopped", seen)
		}
		if slices.Contains(seen, "lease_lost") {
			break
		}
		if len(seen) >= 2 {
			t.Fatalf("cell exits %v: want the fenced cell to exit lease_lost", seen)
		}
	}
	agent.mu.Lock()
	runs := agent.runs
	agent.mu.Unlock()
	if runs != 2 {
		t.Fatalf("agent ran %d times: want once per cell", runs)
	}
	if msgs := h.botMessages(top.TS); len(msgs) != 1 {
		t.Fatalf("bot messages %+v: want the new owner's reply alone", msgs)
	}
}

// takenOverMidTurn starts two replicas with o (an hour's lease: the first cell cannot learn
// of a takeover but by its appends), asks a question, and once the first cell's agent runs,
// ends its lease (as one whose renewals failed under load): the other replica's poll takes
// the session and answers. The first cell's agent waits on write and store.
func takenOverMidTurn(t *testing.T, o harnessOptions) (*harness, *fencedAgent, slackemu.Posted, session.Session) {
	t.Helper()
	agent := &fencedAgent{started: make(chan struct{}), returned: make(chan struct{}), write: make(chan struct{}), store: make(chan struct{})}
	o.replicas, o.leaseTTL, o.poll, o.live = 2, time.Hour, 50*time.Millisecond, bot.LiveConfig{Interval: 1}
	h := newHarness(t, agent, o)
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why did the deploy fail?"})
	<-agent.started
	s := h.session(general, top.TS)
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `UPDATE leases SET expires_at = clock_timestamp() WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	h.turns(s.ID, 1)
	return h, agent, top, s
}
