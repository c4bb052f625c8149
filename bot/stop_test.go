package bot_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// runawayAgent writes the start of a reply, then works until its context ends — a turn that
// only a stop ends. Later runs answer at once.
type runawayAgent struct {
	echoAgent
	started chan struct{}
}

func (a *runawayAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.mu.Lock()
	a.runs++
	first := a.runs == 1
	a.mu.Unlock()
	if !first {
		return appendReply(ctx, t, "answered after the stop")
	}
	if t.Live != nil {
		t.Live.Text("Working through every file, ")
	}
	close(a.started)
	<-ctx.Done()
	return brain.Reply{}, ctx.Err()
}

// appendReply stores text as the turn's reply, as the brain does.
func appendReply(ctx context.Context, t brain.Turn, text string) (brain.Reply, error) {
	msg := session.AssistantMessage{Text: text, Turn: t.TurnSeq}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}, Payload: msg})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: msg, Status: session.StatusOK}, nil
}

// stopped waits for the session's turn_stopped and returns it.
func (h *harness) stopped(id session.ID) session.TurnStopped {
	h.t.Helper()
	h.waitFor("turn_stopped", func() bool { return len(h.events(id, session.TypeTurnStopped)) == 1 })
	var ts session.TurnStopped
	if err := h.events(id, session.TypeTurnStopped)[0].Decode(&ts); err != nil {
		h.t.Fatal(err)
	}
	return ts
}

// Slack's stop button (agent_session_stopped), on one replica and across two: whichever
// replica runs the turn cancels it, the live message ends with a "stopped by" note, the log
// says who stopped it, nothing more is posted, and the next message is answered normally.
func TestStopButtonStopsTheRunningTurn(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{1, 2} {
		t.Run(map[int]string{1: "one replica", 2: "two replicas"}[replicas], func(t *testing.T) {
			t.Parallel()
			agent := &runawayAgent{started: make(chan struct{})}
			h := newHarness(t, agent, harnessOptions{replicas: replicas, live: bot.LiveConfig{Interval: 1}})
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> refactor everything"})
			<-agent.started
			if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.botMessages(top.TS)) == 1 }); err != nil {
				t.Fatal(err)
			}
			asked := time.Now()
			if _, err := h.emu.StopAgentSession(general, top.TS, grace); err != nil {
				t.Fatal(err)
			}
			s := h.session(general, top.TS)
			st := h.stopped(s.ID)
			t.Logf("%d replica(s): stop button → turn_stopped in %v", replicas, time.Since(asked).Round(time.Millisecond))
			if st.By != grace || st.Source != "button" {
				t.Fatalf("turn_stopped %+v; want by %s from the button", st, grace)
			}
			h.turns(s.ID, 1)
			msgs := h.botMessages(top.TS)
			if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "Stopped by <@"+grace+">") || !strings.Contains(msgs[0].Text, "Working through") {
				t.Fatalf("bot messages after the stop: %+v", msgs)
			}
			var tc session.TurnCompleted
			if err := h.events(s.ID, session.TypeTurnCompleted)[0].Decode(&tc); err != nil || tc.Status != session.StatusStopped {
				t.Fatalf("turn_completed %+v %v", tc, err)
			}
			// The status is set back as the turn's last step, just after turn_completed.
			if err := h.emu.Wait(h.waitCtx(), func() bool {
				got := h.emu.AgentSessionStatuses(general, top.TS)
				return len(got) > 0 && got[len(got)-1] == "active"
			}); err != nil {
				t.Fatalf("agent session statuses %v: not set back", h.emu.AgentSessionStatuses(general, top.TS))
			}
			h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "ok, just the README then"})
			msgs = h.replies(general, top.TS, 2)
			if !strings.Contains(msgs[1].Text, "answered after the stop") {
				t.Fatalf("the next message got %q", msgs[1].Text)
			}
		})
	}
}

// A thread message that is exactly "stop" (mention or not) stops the running turn and is not
// answered itself; "stop" when nothing runs gets one short note.
func TestStopMessage(t *testing.T) {
	t.Parallel()
	agent := &runawayAgent{started: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> refactor everything"})
	<-agent.started
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> STOP"})
	s := h.session(general, top.TS)
	if st := h.stopped(s.ID); st.By != ada || st.Source != "message" {
		t.Fatalf("turn_stopped %+v", st)
	}
	h.answered(s.ID)
	if n := len(h.botMessages(top.TS)); n > 1 {
		t.Fatalf("%d bot messages: the stop was answered", n)
	}
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "stop"})
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		for _, m := range h.botMessages(top.TS) {
			if strings.Contains(m.Text, "Nothing is running") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no note for a stop with nothing running: %v", err)
	}
	if agent.Runs() != 1 {
		t.Fatalf("the model was called %d times; the stops call it never", agent.Runs())
	}
}

// The octagonal_sign reaction on any message of the thread — here the bot's own live message,
// whose thread Slack's event does not name — stops the running turn.
func TestStopReaction(t *testing.T) {
	t.Parallel()
	agent := &runawayAgent{started: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> refactor everything"})
	<-agent.started
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.botMessages(top.TS)) == 1 }); err != nil {
		t.Fatal(err)
	}
	live := h.botMessages(top.TS)[0]
	id, err := h.emu.PublishEvent([]byte(`{"type":"reaction_added","user":"` + grace + `","reaction":"` + bot.StopReaction +
		`","item":{"type":"message","channel":"` + general + `","ts":"` + live.TS + `"},"event_ts":"1700000000.123456"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
		t.Fatal(err)
	}
	s := h.session(general, top.TS)
	if st := h.stopped(s.ID); st.By != grace || st.Source != "reaction" {
		t.Fatalf("turn_stopped %+v", st)
	}
	// Another reaction is only a reaction.
	other, err := h.emu.PublishEvent([]byte(`{"type":"reaction_added","user":"` + grace + `","reaction":"eyes","item":{"type":"message","channel":"` +
		general + `","ts":"` + top.TS + `"},"event_ts":"1700000000.223456"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), other); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events(s.ID, session.TypeStopRequested)); n != 1 {
		t.Fatalf("%d stop requests", n)
	}
}

// steerAgent, in its first turn, waits for a message written meanwhile, asks the turn to steer
// (as the brain does before its next model call) and answers what it then sees.
type steerAgent struct {
	written chan struct{} // the test has posted the mid-turn messages
	started chan struct{}
	mu      sync.Mutex
	saw     []int64 // the Through each Steer returned
}

func (a *steerAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	select {
	case <-a.started:
	default:
		close(a.started)
		select {
		case <-a.written:
		case <-ctx.Done():
			return brain.Reply{}, ctx.Err()
		}
	}
	through := t.Through
	if t.Steer != nil {
		var err error
		if through, err = t.Steer(ctx, t.Through); err != nil {
			return brain.Reply{}, err
		}
	}
	a.mu.Lock()
	a.saw = append(a.saw, through)
	a.mu.Unlock()
	r, err := appendReply(ctx, t, fmt.Sprintf("answered through #%d", through))
	r.Through = through
	return r, err
}

// LOGBOOK_MIDTURN=steer: a message written while a turn runs is handed to the model at its
// next call in the same turn, recorded as steered; an aside written meanwhile is not; no
// second turn answers them again. queue keeps them for the next turn.
func TestSteerHandsMidTurnMessagesToTheRunningTurn(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{bot.MidTurnSteer, bot.MidTurnQueue} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			agent := &steerAgent{written: make(chan struct{}), started: make(chan struct{})}
			h := newHarness(t, agent, harnessOptions{midTurn: mode})
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> check the build"})
			<-agent.started
			h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "only the linux job"}))
			h.acked(h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "(aside) coffee?"}))
			s := h.session(general, top.TS)
			// The cell has seen both (its queued markers) before the agent goes on.
			h.waitFor("queued markers", func() bool { return len(h.events(s.ID, session.TypeQueued)) == 2 })
			close(agent.written)
			h.answered(s.ID)
			steered := h.events(s.ID, session.TypeSteered)
			turns := len(h.events(s.ID, session.TypeTurnStarted))
			switch mode {
			case bot.MidTurnSteer:
				if len(steered) != 1 || turns != 1 {
					t.Fatalf("%d steered, %d turns; want the message handed to the one turn", len(steered), turns)
				}
				var p session.Steered
				if err := steered[0].Decode(&p); err != nil || p.MessageSeq != h.events(s.ID, session.TypeUserMessage)[1].Seq {
					t.Fatalf("steered %+v", p)
				}
				if n := len(h.events(s.ID, session.TypeNotAddressed)); n != 1 {
					t.Fatalf("%d not_addressed; the aside written meanwhile is not for the model", n)
				}
			case bot.MidTurnQueue:
				if len(steered) != 0 || turns != 2 {
					t.Fatalf("%d steered, %d turns; want the message kept for the next turn", len(steered), turns)
				}
			}
		})
	}
}
