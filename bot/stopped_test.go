package bot_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// streamText waits until the thread's live message shows text containing want, and returns
// that message's ts.
func (h *harness) streamText(thread, want string) string {
	h.t.Helper()
	var ts string
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		for _, m := range h.botMessages(thread) {
			if strings.Contains(m.Text, want) {
				ts = m.TS
				return true
			}
		}
		return false
	}); err != nil {
		h.t.Fatalf("the thread never showed %q: %v", want, err)
	}
	return ts
}

// lastUser is the text of the last user message of a model request.
func lastUser(c fakeprovider.Call) string {
	for i := len(c.Messages) - 1; i >= 0; i-- {
		if m := c.Messages[i]; m.Role == "user" {
			var parts []string
			for _, b := range m.Blocks {
				parts = append(parts, b.Text)
			}
			return strings.Join(parts, "\n")
		}
	}
	return ""
}

// Issue 28, end to end (emulator, real brain, fake Anthropic server): a reply stopped while it
// streams is in the model's next request as itself — the text the thread showed, then a note
// that grace (by her Slack name) stopped it — and the next message is answered for itself: the model is not asked
// for the stopped report again.
func TestStoppedTurnIsNotRedoneByTheNextMessage(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{})
	hold := make(chan struct{})
	defer close(hold)
	model.Push(
		fakeprovider.Reply{Text: "# Report on every service\n\n## api\nThe api service handles logins. ## billing next",
			Stream: fakeprovider.Stream{Chunk: 12, BeforeLast: hold}},
		fakeprovider.Reply{Text: "There are two services: api and billing."},
	)
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> write the long report on every service"})
	h.streamText(top.TS, "handles logins")
	if _, err := h.emu.StopAgentSession(general, top.TS, grace); err != nil {
		t.Fatal(err)
	}
	s := h.session(general, top.TS)
	st := h.stopped(s.ID)
	if st.By != grace || !strings.Contains(st.Shown, "The api service handles logins.") {
		t.Fatalf("turn_stopped %+v; want Grace and the text the thread showed", st)
	}
	h.turns(s.ID, 1)
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "never mind, just how many services are there?"})
	h.streamText(top.TS, "There are two services: api and billing.")
	h.turns(s.ID, 2)
	calls := model.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d model calls; want the stopped one and the answer", len(calls))
	}
	next := calls[1]
	if got := lastUser(next); strings.Contains(got, "long report") || !strings.Contains(got, "how many services") {
		t.Fatalf("the next request's last user message %q: the stopped request is asked again", got)
	}
	var stopped *fakeprovider.Message
	for i, m := range next.Messages {
		if m.Role == "assistant" {
			stopped = &next.Messages[i]
		}
	}
	if stopped == nil {
		t.Fatalf("no assistant message in the next request: %+v", next.Messages)
	}
	var said []string
	for _, b := range stopped.Blocks {
		said = append(said, b.Text)
	}
	text := strings.Join(said, "\n")
	if !strings.Contains(text, "The api service handles logins.") || !strings.Contains(text, "grace stopped this turn") ||
		strings.Contains(text, "billing next") {
		t.Fatalf("the stopped turn in the next request: %q; want what was shown and who stopped it", text)
	}
}

// haltAgent streams text as the test feeds it, until its context ends (a stop) or the test
// says to finish; then it answers.
type haltAgent struct {
	echoAgent
	more    chan string
	finish  chan struct{}
	started chan struct{}
	once    sync.Once
}

func (a *haltAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.once.Do(func() { close(a.started) })
	for {
		select {
		case s := <-a.more:
			t.Live.Text(s)
		case <-a.finish:
			return appendReply(ctx, t, "the whole long reply, which must not be posted after a stop")
		case <-ctx.Done():
			return brain.Reply{}, ctx.Err()
		}
	}
}

// Issue 28: when Slack answers an append with stopped_by_user (its stop button halted the
// stream) and the agent_session_stopped event is lost, the turn is stopped all the same — by
// the person the stream is for — and its reply is never posted: whether the agent is still
// writing (the append fails) or has finished (the stream's stop fails).
func TestSlackHaltedStreamStopsTheTurn(t *testing.T) {
	t.Parallel()
	for _, finished := range []bool{false, true} {
		t.Run(map[bool]string{false: "while writing", true: "after the answer"}[finished], func(t *testing.T) {
			t.Parallel()
			agent := &haltAgent{more: make(chan string), finish: make(chan struct{}), started: make(chan struct{})}
			h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> write the long report"})
			<-agent.started
			agent.more <- "Working through every file, "
			h.streamText(top.TS, "Working through")
			// The button's event is lost on the way, and so are Slack's three retries of it.
			h.emu.InjectDeliveryFault(slackemu.DeliveryFault{Kind: slackemu.FaultDrop, EventType: slackemu.SubAgentSessionStopped, Times: 4})
			if _, err := h.emu.StopAgentSession(general, top.TS, grace); err != nil {
				t.Fatal(err)
			}
			if finished {
				close(agent.finish)
			} else {
				agent.more <- "and then some more."
			}
			s := h.session(general, top.TS)
			st := h.stopped(s.ID)
			if st.By != ada || st.Source != bot.StopSourceStream {
				t.Fatalf("turn_stopped %+v; want a stop from the stream, the recipient's", st)
			}
			h.turns(s.ID, 1)
			for _, m := range h.botMessages(top.TS) {
				if strings.Contains(m.Text, "must not be posted") || m.Streaming {
					t.Fatalf("after the stop the thread shows %+v", m)
				}
			}
			var tc session.TurnCompleted
			if err := h.events(s.ID, session.TypeTurnCompleted)[0].Decode(&tc); err != nil || tc.Status != session.StatusStopped {
				t.Fatalf("turn_completed %+v %v", tc, err)
			}
		})
	}
}

// Issue 28: a command a stop cancels while it runs gets its result with the stop — stopped,
// and by whom — and the transcript says so, not that its outcome is unknown after a crash.
func TestStoppedCommandShowsAsStopped(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{})
	model.Push(fakeprovider.Reply{Text: "Running the suite.", ToolCalls: []fakeprovider.ToolCall{
		{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo started; sleep 600"}`},
		{ID: "toolu_2", Name: "run_command", Input: `{"command":"echo never"}`}}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run the whole test suite"})
	s := h.session(general, top.TS)
	h.waitFor("the command running", func() bool {
		for _, st := range h.emu.Streams() {
			for _, task := range st.Tasks {
				if task.Status == "in_progress" {
					return true
				}
			}
		}
		return false
	})
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "stop"})
	if st := h.stopped(s.ID); st.By != grace {
		t.Fatalf("turn_stopped %+v", st)
	}
	r1, r2 := h.toolResult(s.ID, "toolu_1"), h.toolResult(s.ID, "toolu_2")
	if r1.StoppedBy != grace || !r1.IsError || !strings.Contains(r1.Content, "while it ran") {
		t.Fatalf("result of the running command: %+v", r1)
	}
	if r2.StoppedBy != "" || !strings.Contains(r2.Content, "not run") {
		t.Fatalf("result of the command that never began: %+v", r2)
	}
	var out strings.Builder
	if err := transcript.Render(&out, s, h.events(s.ID), transcript.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "stopped by "+grace+" while it ran") || strings.Contains(out.String(), "after a crash") {
		t.Fatalf("transcript:\n%s", out.String())
	}
}
