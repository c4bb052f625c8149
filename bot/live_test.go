package bot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// liveAgent drives the live view as the brain does: a tool round (text, then a tool call's
// card from pending to complete), then the reply's text in pieces. Before each piece after the
// first it waits on step, so a test can look at Slack between pieces; then it stores the
// reply, the pieces joined (or final, when set: a reply that differs from what streamed).
type liveAgent struct {
	preamble string
	pieces   []string
	final    string
	step     chan struct{}
	mu       sync.Mutex
	runs     int
}

func (a *liveAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.mu.Lock()
	a.runs++
	a.mu.Unlock()
	bot := session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}
	if live := t.Live; live != nil && a.preamble != "" {
		live.Status("thinking")
		live.Text(a.preamble)
		live.EndRound(false)
		live.Tool(brain.ToolProgress{CallID: "call_1", Name: "run_command", Title: "run_command: make test", Status: brain.ToolPending})
		live.Status("running `make test`")
		live.Tool(brain.ToolProgress{CallID: "call_1", Name: "run_command", Title: "run_command: make test", Status: brain.ToolInProgress})
		live.Tool(brain.ToolProgress{CallID: "call_1", Name: "run_command", Title: "run_command: make test", Status: brain.ToolComplete, Output: "ok"})
	}
	for i, p := range a.pieces {
		if i > 0 && a.step != nil {
			select {
			case <-a.step:
			case <-ctx.Done():
				return brain.Reply{}, ctx.Err()
			}
		}
		if t.Live != nil {
			t.Live.Text(p)
		}
	}
	text := strings.Join(a.pieces, "")
	if a.final != "" {
		text = a.final
	}
	if t.Live != nil {
		t.Live.EndRound(true)
	}
	msg := session.AssistantMessage{Text: text, Turn: t.TurnSeq}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: msg})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: msg, Status: session.StatusOK}, nil
}

// botMessages is every message the bot has in the thread (replies and live messages).
func (h *harness) botMessages(thread string) []slackemu.Message {
	h.t.Helper()
	return h.emu.BotReplies(general, thread)
}

// Where the workspace has no streaming, the live view posts the reply's beginning and updates
// that message as the text grows; at the end the same message shows the whole reply with its
// metadata, exactly once, and the log records the message from start to end.
func TestLiveFallbackPostsThenUpdates(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{preamble: "Let me run the tests.", pieces: []string{"The tests ", "pass: ", "all 42 of them."}, step: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.startStream", Error: "not_allowed_token_type"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> do the tests pass?"})
	// The reply's first piece is visible while the model still writes.
	msgs := h.replies(general, top.TS, 1)
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		m := h.botMessages(top.TS)
		return len(m) == 1 && strings.Contains(m[0].Text, "The tests")
	}); err != nil {
		t.Fatalf("the first piece never showed: %v (%+v)", err, h.botMessages(top.TS))
	}
	if strings.Contains(h.botMessages(top.TS)[0].Text, "all 42") {
		t.Fatal("the end of the reply showed before the model wrote it")
	}
	agent.step <- struct{}{}
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		m := h.botMessages(top.TS)
		return len(m) == 1 && strings.Contains(m[0].Text, "The tests pass:")
	}); err != nil {
		t.Fatalf("the second piece never showed: %v", err)
	}
	agent.step <- struct{}{}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	msgs = h.botMessages(top.TS)
	if len(msgs) != 1 {
		t.Fatalf("%d bot messages; want the one live message", len(msgs))
	}
	if got := msgs[0].Text; !strings.Contains(got, "The tests pass: all 42 of them.") || strings.Contains(got, "make test") {
		t.Fatalf("final text %q: want the reply, whole, without the live view's cards", got)
	}
	if !strings.Contains(string(msgs[0].Metadata), "logbook_reply") {
		t.Fatalf("the final message lacks the reply's metadata: %s", msgs[0].Metadata)
	}
	if h.emu.Calls("chat.update") < 2 {
		t.Fatalf("chat.update called %d times: the message did not grow", h.emu.Calls("chat.update"))
	}
	started, stopped := h.events(s.ID, session.TypeStreamStarted), h.events(s.ID, session.TypeStreamStopped)
	if len(started) != 1 || len(stopped) != 1 {
		t.Fatalf("stream events %s", typesOf(h.events(s.ID, session.TypeStreamStarted, session.TypeStreamStopped)))
	}
	var ss session.StreamStarted
	if err := started[0].Decode(&ss); err != nil || ss.Mode != "update" || ss.TS != msgs[0].TS {
		t.Fatalf("stream_started %+v %v; want mode update on %s", ss, err, msgs[0].TS)
	}
	var d session.Delivered
	if err := h.events(s.ID, session.TypeDelivered)[0].Decode(&d); err != nil || len(d.TS) != 1 || d.TS[0] != msgs[0].TS {
		t.Fatalf("delivered %+v: want the live message", d)
	}
}

// LOGBOOK_STREAM=off: nothing shows before the end, and the reply is posted as before.
func TestLiveOffPostsTheReplyAtTheEnd(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{pieces: []string{"one ", "two"}}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Mode: bot.StreamOff}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> count"})
	msgs := h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if msgs[0].Text != "one two" || h.emu.Calls("chat.update") != 0 || len(h.events(s.ID, session.TypeStreamStarted)) != 0 {
		t.Fatalf("reply %q, %d updates, %d live messages", msgs[0].Text, h.emu.Calls("chat.update"), len(h.events(s.ID, session.TypeStreamStarted)))
	}
}

// crashAgent shows part of a reply, then (first run) stores the whole reply or not, and
// waits for its cell to die; a later run answers at once.
type crashAgent struct {
	storeFirst bool
	shown      chan struct{} // closed when the first run has shown its first piece
	mu         sync.Mutex
	runs       int
}

func (a *crashAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.mu.Lock()
	a.runs++
	first := a.runs == 1
	a.mu.Unlock()
	botActor := session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}
	reply := session.AssistantMessage{Text: "The deploy failed because the image tag is wrong.", Turn: t.TurnSeq}
	if t.Live != nil {
		t.Live.Text("The deploy failed ")
	}
	if first {
		if a.storeFirst {
			if _, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage, Actor: botActor, Payload: reply}); err != nil {
				return brain.Reply{}, err
			}
		}
		close(a.shown)
		<-ctx.Done() // the cell dies before the reply is delivered
		return brain.Reply{}, ctx.Err()
	}
	if t.Live != nil {
		t.Live.Text("because the image tag is wrong.")
		t.Live.EndRound(true)
	}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage, Actor: botActor, Payload: reply})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: reply, Status: session.StatusOK}, nil
}

// A cell that dies while its live message shows part of the reply: the next cell finishes
// from the log. With the reply stored, the live message is made to show it whole; without,
// the partial message is removed and the turn runs again. Either way the thread ends with
// the whole reply exactly once and nothing left half-written.
func TestLiveCrashMidStreamIsFinishedFromTheLog(t *testing.T) {
	t.Parallel()
	for _, storeFirst := range []bool{true, false} {
		name := map[bool]string{true: "reply stored", false: "reply not stored"}[storeFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			agent := &crashAgent{storeFirst: storeFirst, shown: make(chan struct{})}
			o := harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond}
			h := newHarness(t, agent, o)
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why did the deploy fail?"})
			<-agent.shown
			if err := h.emu.Wait(h.waitCtx(), func() bool {
				m := h.botMessages(top.TS)
				return len(m) == 1 && strings.Contains(m[0].Text, "The deploy failed")
			}); err != nil {
				t.Fatalf("the partial reply never showed: %v", err)
			}
			partial := h.botMessages(top.TS)[0].TS
			// The replica dies (its cell is cancelled mid-turn, the turn stays open); another
			// takes the session over.
			h.reps[0].cancel()
			<-h.reps[0].done
			h.startReplica(o)
			s := h.session(general, top.TS)
			h.turns(s.ID, 1)
			msgs := h.botMessages(top.TS)
			if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "The deploy failed because the image tag is wrong.") {
				t.Fatalf("bot messages after the crash: %+v; want the whole reply once", msgs)
			}
			if storeFirst != (msgs[0].TS == partial) {
				t.Fatalf("reply stored %v: the reply is in %s, the partial message was %s", storeFirst, msgs[0].TS, partial)
			}
			var reasons []string
			for _, e := range h.events(s.ID, session.TypeStreamStopped) {
				var p session.StreamStopped
				_ = e.Decode(&p)
				reasons = append(reasons, p.Reason)
			}
			want := map[bool]string{true: "recovered", false: "deleted done"}[storeFirst]
			if strings.Join(reasons, " ") != want {
				t.Fatalf("stream_stopped reasons %v, want %s", reasons, want)
			}
			if n := len(h.events(s.ID, session.TypeDelivered)); n != 1 {
				t.Fatalf("%d delivered events", n)
			}
		})
	}
}

// A cell that dies between Slack's answer to chat.startStream and its stream_started record,
// after the person already wrote again (they saw the reply begin): the next cell finds the
// message the log does not know among the bot's messages after the one the turn answers —
// not after the newest message, which came later — and finishes the reply in it. The thread
// shows the first turn's reply once (chaos run: "re: t6.3-m3" twice, the first left
// streaming without metadata).
func TestLiveCrashBeforeTheRecordAfterANewerMessage(t *testing.T) {
	t.Parallel()
	agent := &crashAgent{storeFirst: true, shown: make(chan struct{})}
	proxy, landed := lostStartAnswer()
	first := harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond, apiProxy: proxy}
	h := newHarness(t, agent, first)
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why did the deploy fail?"})
	<-agent.shown
	<-landed
	s := h.session(general, top.TS)
	h.post(slackemu.Post{Channel: general, User: ada, Text: "and how do I fix it?", ThreadTS: top.TS})
	h.waitFor("the second message in the log", func() bool { return len(h.events(s.ID, session.TypeUserMessage)) == 2 })
	h.reps[0].cancel()
	<-h.reps[0].done
	h.startReplica(harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond})
	h.turns(s.ID, 2)
	msgs := h.botMessages(top.TS)
	whole := "The deploy failed because the image tag is wrong."
	if len(msgs) != 2 || msgs[0].Text != whole || msgs[1].Text != whole {
		t.Fatalf("bot messages after the crash: %+v; want each turn's reply once", msgs)
	}
	for _, st := range h.emu.Streams() {
		if st.ThreadTS == top.TS && st.Streaming() {
			t.Fatalf("stream %s left streaming: %q", st.TS, st.Text)
		}
	}
}

// lostStartAnswer is an apiProxy under which Slack starts the first stream but its answer
// never reaches the cell: the call hangs until the cell gives up on it (it dies). landed is
// closed once the stream is in Slack.
func lostStartAnswer() (proxy func(w http.ResponseWriter, r *http.Request, next http.Handler), landed <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		held := false
		if strings.HasSuffix(r.URL.Path, "/chat.startStream") {
			once.Do(func() { held = true })
		}
		if !held {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(httptest.NewRecorder(), r)
		close(done)
		<-r.Context().Done()
	}, done
}

// The reply streams as it is written (chat.startStream, appends), with a task card per tool
// call; the stream stops with the rest of the reply and its metadata, and the thread has one
// message: the reply, whole, once.
func TestLiveStreamsTheReplyWithTaskCards(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{preamble: "Let me run the tests, <!here> @channel.", pieces: []string{"The tests ", "pass: ", "all 42 of them."}, step: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> do the tests pass?"})
	var ts string
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		for _, st := range h.emu.Streams() {
			if st.ThreadTS == top.TS && strings.Contains(st.Text, "The tests") {
				ts = st.TS
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the reply never started streaming: %v", err)
	}
	st, _ := h.emu.StreamState(general, ts)
	if !st.Streaming() || strings.Contains(st.Text, "all 42") {
		t.Fatalf("stream %+v: want it streaming, the reply not complete yet", st)
	}
	if lines := strings.Join(st.TaskLines(), "\n"); !strings.Contains(lines, "make test") {
		t.Fatalf("no task card for the tool call: %q", lines)
	}
	agent.step <- struct{}{}
	agent.step <- struct{}{}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	st, _ = h.emu.StreamState(general, ts)
	if st.Streaming() || !strings.Contains(st.Text, "The tests pass: all 42 of them.") || !strings.Contains(string(st.Metadata), "logbook_reply") {
		t.Fatalf("after the turn: %+v; want the stream stopped with the whole reply and its metadata", st)
	}
	if strings.Contains(st.Text, "<!here>") || strings.Contains(st.Text, "@channel") || !strings.Contains(st.Text, "channel") {
		t.Fatalf("the model's broadcast mentions reached the stream live (or vanished): %q", st.Text)
	}
	if n := strings.Count(st.Text, "all 42 of them."); n != 1 {
		t.Fatalf("the reply's end shows %d times: %q", n, st.Text)
	}
	if msgs := h.botMessages(top.TS); len(msgs) != 1 || msgs[0].TS != ts {
		t.Fatalf("bot messages %+v; want only the stream", msgs)
	}
	if n := h.emu.Calls("chat.startStream"); n != 1 {
		t.Fatalf("%d streams started", n)
	}
	if got := h.emu.AgentSessionStatuses(general, top.TS); len(got) < 2 || got[0] != "processing" || got[len(got)-1] != "active" {
		t.Fatalf("agent session statuses %v; want processing, then active at the end", got)
	}
}

// A stream Slack stops taking (its age limit, or an unexpected message_not_in_streaming_state)
// rolls over into a new message; nothing is lost, the reply's text is whole across them, and
// the log records the rollover.
func TestLiveRollsOverWhenTheStreamCloses(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{pieces: []string{"one ", "two ", "three"}, step: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> count"})
	var first string
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		for _, st := range h.emu.Streams() {
			if st.ThreadTS == top.TS {
				first = st.TS
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.emu.ExpireStream(general, first); err != nil {
		t.Fatal(err)
	}
	agent.step <- struct{}{}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.botMessages(top.TS)) == 2 }); err != nil {
		t.Fatalf("no new message after the stream closed: %v", err)
	}
	agent.step <- struct{}{}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	var all strings.Builder
	for _, m := range h.botMessages(top.TS) {
		all.WriteString(m.Text)
	}
	if got := strings.Join(strings.Fields(all.String()), " "); got != "one two three" {
		t.Fatalf("the thread shows %q across %d messages; want the reply once", got, len(h.botMessages(top.TS)))
	}
	var reasons []string
	for _, e := range h.events(s.ID, session.TypeStreamStopped) {
		var p session.StreamStopped
		_ = e.Decode(&p)
		reasons = append(reasons, p.Reason)
	}
	if strings.Join(reasons, " ") != "rollover done" {
		t.Fatalf("stream_stopped reasons %v", reasons)
	}
}

// Near the age or size limit (MaxAge, MaxChars) the live view rolls over to a new message before Slack would
// refuse; an unexpected message_not_in_streaming_state does the same. The reply is whole
// across the messages, once.
func TestLiveRollsOverAtTheSizeLimitAndOnAnUnexpectedClose(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]struct {
		live  bot.LiveConfig
		fault bool
	}{
		"size":  {live: bot.LiveConfig{Interval: 1, MaxChars: 12}},
		"age":   {live: bot.LiveConfig{Interval: 1, MaxAge: time.Nanosecond}},
		"fault": {live: bot.LiveConfig{Interval: 1}, fault: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			agent := &liveAgent{pieces: []string{"alpha beta ", "gamma delta ", "epsilon"}, step: make(chan struct{})}
			h := newHarness(t, agent, harnessOptions{live: cfg.live})
			if cfg.fault {
				h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.appendStream", Error: "message_not_in_streaming_state", Times: 1})
			}
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> letters"})
			for i := range 2 {
				if err := h.emu.Wait(h.waitCtx(), func() bool {
					var all strings.Builder
					for _, m := range h.botMessages(top.TS) {
						all.WriteString(m.Text)
					}
					return strings.Contains(all.String(), []string{"alpha", "gamma"}[i])
				}); err != nil {
					t.Fatalf("piece %d never showed: %v", i, err)
				}
				agent.step <- struct{}{}
			}
			s := h.session(general, top.TS)
			h.turns(s.ID, 1)
			var all strings.Builder
			for _, m := range h.botMessages(top.TS) {
				all.WriteString(m.Text + " ")
			}
			if got := strings.Join(strings.Fields(all.String()), " "); got != "alpha beta gamma delta epsilon" {
				t.Fatalf("the thread shows %q", got)
			}
			if n := len(h.botMessages(top.TS)); n < 2 {
				t.Fatalf("%d messages: no rollover", n)
			}
		})
	}
}

// A live view that gives up (Slack keeps refusing appends) has a message in the thread
// already: the turn still ends with the reply shown once, in that message, and nothing left
// streaming or half-written — not the partial stream plus the reply posted anew.
func TestLiveGivingUpLeavesNoPartialMessage(t *testing.T) {
	t.Parallel()
	// Each failing append is waited for before the next piece; the last piece comes after
	// the third failure, so the view has given up before the turn ends (were the third piece
	// the last, the turn could end before the view tried it).
	agent := &liveAgent{pieces: []string{"one ", "two ", "three ", "four ", "five"}, step: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> count"})
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		m := h.botMessages(top.TS)
		return len(m) == 1 && strings.Contains(m[0].Text, "one")
	}); err != nil {
		t.Fatalf("the stream never started: %v", err)
	}
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.appendStream", Error: "internal_error", Times: 3})
	for i := 1; i <= 3; i++ {
		agent.step <- struct{}{}
		if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.Calls("chat.appendStream") >= i }); err != nil {
			t.Fatalf("append %d never tried: %v", i, err)
		}
	}
	agent.step <- struct{}{}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "one two three four five") {
		t.Fatalf("bot messages %+v; want the reply once", msgs)
	}
	for _, st := range h.emu.Streams() {
		if st.ThreadTS == top.TS && st.Streaming() {
			t.Fatalf("stream %s left streaming: %q", st.TS, st.Text)
		}
	}
}

// restartAgent writes text, and while the live view is sending it (the first chat.startStream
// is held by the test) the model call is retried: Restart, then the retried call's text.
type restartAgent struct {
	inflight chan struct{} // closed by the proxy when the first startStream arrives
	release  chan struct{} // closed by the agent to let it through
}

func (a *restartAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	t.Live.Text("Hello world. ")
	select {
	case <-a.inflight:
	case <-ctx.Done():
		return brain.Reply{}, ctx.Err()
	}
	t.Live.Restart()
	t.Live.Text("Hi")
	close(a.release)
	t.Live.EndRound(true)
	msg := session.AssistantMessage{Text: "Hi", Turn: t.TurnSeq}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}, Payload: msg})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: msg, Status: session.StatusOK}, nil
}

// A retried model call (Restart) while the live view is sending the void text: the text in
// flight reaches Slack, so it counts as sent — the view neither loses track of its buffer
// (slicing past its end) nor shows the void text in the final reply.
func TestLiveRestartWhileSending(t *testing.T) {
	t.Parallel()
	agent := &restartAgent{inflight: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1},
		apiProxy: func(w http.ResponseWriter, r *http.Request, next http.Handler) {
			if strings.HasSuffix(r.URL.Path, "/chat.startStream") {
				once.Do(func() {
					close(agent.inflight)
					<-agent.release
				})
			}
			next.ServeHTTP(w, r)
		}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> greet"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || strings.Contains(msgs[0].Text, "Hello") || strings.Count(msgs[0].Text, "Hi") != 1 {
		t.Fatalf("bot messages %+v; want the reply, Hi, once and without the void text", msgs)
	}
	for _, st := range h.emu.Streams() {
		if st.ThreadTS == top.TS && st.Streaming() {
			t.Fatalf("stream %s left streaming: %q", st.TS, st.Text)
		}
	}
}

// preambleAgent writes a tool round's text in two pieces — the second never flushed before
// the round ends — then the reply at once: what earlier rounds left unsent must still reach
// the message, before the reply, when the stream stops.
type preambleAgent struct{ shown chan struct{} }

func (a *preambleAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	t.Live.Text("First part of the preamble, ")
	select {
	case <-a.shown:
	case <-ctx.Done():
		return brain.Reply{}, ctx.Err()
	}
	t.Live.Text("second part.")
	t.Live.EndRound(false)
	t.Live.Tool(brain.ToolProgress{CallID: "c1", Name: "run_command", Title: "run_command: true", Status: brain.ToolComplete})
	t.Live.Text("The reply, whole.")
	t.Live.EndRound(true)
	return appendReply(ctx, t, "The reply, whole.")
}

func TestLiveKeepsEarlierRoundsUnsentText(t *testing.T) {
	t.Parallel()
	agent := &preambleAgent{shown: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: time.Hour}}) // one flush, then none until the end
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> go"})
	if err := h.emu.Wait(h.waitCtx(), func() bool {
		m := h.botMessages(top.TS)
		return len(m) == 1 && strings.Contains(m[0].Text, "First part")
	}); err != nil {
		t.Fatal(err)
	}
	close(agent.shown)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	got := h.botMessages(top.TS)
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	text := got[0].Text
	if !strings.Contains(text, "First part of the preamble, second part.") || strings.Count(text, "The reply, whole.") != 1 ||
		strings.Index(text, "second part.") > strings.Index(text, "The reply") {
		t.Fatalf("the message shows %q; want the whole preamble, then the reply once", text)
	}
}
