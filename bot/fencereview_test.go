package bot_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// botAPI is a Web API client with the bot's token, straight to the emulator: what another
// process of the bot (logbook takeover, another cell) posts.
func (h *harness) botAPI() *slack.Client {
	return slack.New(h.emu.BotToken(), slack.OptionAPIURL(h.emu.APIURL()))
}

// botPost posts text as the bot in thread with md as its metadata, and returns its ts.
func (h *harness) botPost(thread, text string, md slack.SlackMetadata) string {
	h.t.Helper()
	_, ts, err := h.botAPI().PostMessageContext(h.ctx, general, slack.MsgOptionText(text, false), slack.MsgOptionTS(thread),
		slack.MsgOptionMetadata(md))
	if err != nil {
		h.t.Fatal(err)
	}
	return ts
}

// liveMetadata is a live message's metadata as a cell of the lease epoch writes it.
func liveMetadata(s session.Session, turn, epoch int64) slack.SlackMetadata {
	return slack.SlackMetadata{EventType: bot.LiveMetadataType,
		EventPayload: map[string]any{"session": s.ID.String(), "turn": turn, "epoch": epoch}}
}

// deadCellTurn asks a question on a replica whose cell dies between Slack's answer to
// chat.startStream and its record (the reply not stored): the turn is left open with a
// stream the log does not name. It returns the question, the session, the dead cell's
// epoch, its turn, and the stream.
func deadCellTurn(t *testing.T, o harnessOptions) (h *harness, top slackemu.Posted, s session.Session, epoch, turn int64, stream string) {
	t.Helper()
	agent := &crashAgent{shown: make(chan struct{})}
	first := o
	var landed <-chan struct{}
	first.apiProxy, landed = lostStartAnswer()
	h = newHarness(t, agent, first)
	top = h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why did the deploy fail?"})
	<-agent.shown
	<-landed
	h.reps[0].cancel()
	<-h.reps[0].done
	s = h.session(general, top.TS)
	var w session.CellWoken
	if ev := h.events(s.ID, session.TypeCellWoken); len(ev) != 1 || ev[0].Decode(&w) != nil || w.Epoch < 1 {
		t.Fatalf("cell_woken %+v: want the dead cell's one", ev)
	}
	started := h.events(s.ID, session.TypeTurnStarted)
	if len(started) != 1 {
		t.Fatalf("%d turn_started", len(started))
	}
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || len(h.events(s.ID, session.TypeStreamStarted)) != 0 {
		t.Fatalf("bot messages %+v: want the dead cell's unrecorded stream alone", msgs)
	}
	return h, top, s, w.Epoch, started[0].Seq, msgs[0].TS
}

// Finding 5 of the fence review: an operator's note in the thread during an open turn
// (logbook takeover's, with its own metadata) is the bot's message and the log does not name
// it, but it is no turn's: the next cell's sweep of a dead cell's unrecorded messages leaves
// it, and removes the dead cell's stream.
func TestTakeoverNoteSurvivesTheSweep(t *testing.T) {
	t.Parallel()
	o := harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond}
	h, top, s, _, _, stream := deadCellTurn(t, o)
	text := "grace has taken this thread over; logbook records it but stays silent until it is handed back."
	note := h.botPost(top.TS, text, bot.NoteMetadata(s, "takeover"))
	h.startReplica(o)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	tss := timestamps(msgs)
	if !slices.Contains(tss, note) || slices.Contains(tss, stream) {
		t.Fatalf("bot messages %+v: want the note %s kept, the dead cell's stream %s removed", msgs, note, stream)
	}
	if len(msgs) != 2 || msgs[1].Text != "The deploy failed because the image tag is wrong." {
		t.Fatalf("bot messages %+v: want the note, then the reply once", msgs)
	}
	for _, e := range h.events(s.ID, session.TypeStreamStarted) {
		var p session.StreamStarted
		if e.Decode(&p) == nil && p.TS == note {
			t.Fatalf("the note was recorded as the turn's message: %+v", p)
		}
	}
}

// Finding 2 of the fence review: the sweep tells the cells apart by the lease epoch in the
// messages' metadata. An older owner's unrecorded message is an orphan and is removed; a
// message of a newer epoch (a newer owner's, not recorded yet) is never removed.
func TestSweepRemovesAnOlderEpochsMessageNeverANewerOnes(t *testing.T) {
	t.Parallel()
	o := harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond}
	h, top, s, epoch, turn, stream := deadCellTurn(t, o)
	older := h.botPost(top.TS, "The deploy failed (an older owner's)", liveMetadata(s, turn, epoch))
	newer := h.botPost(top.TS, "The deploy failed (a newer owner's)", liveMetadata(s, turn, epoch+1000))
	h.startReplica(o)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	tss := timestamps(msgs)
	if !slices.Contains(tss, newer) || slices.Contains(tss, older) || slices.Contains(tss, stream) {
		t.Fatalf("bot messages %+v: want the newer epoch's %s kept, the older's %s and the dead stream %s removed", msgs, newer, older, stream)
	}
	for _, e := range h.events(s.ID, session.TypeStreamStarted, session.TypeStreamStopped) {
		if strings.Contains(string(e.Payload), newer) {
			t.Fatalf("the newer epoch's message was recorded by the older cell: %s %s", e.Type, e.Payload)
		}
	}
	var woken session.CellWoken
	if ev := h.events(s.ID, session.TypeCellWoken); len(ev) != 2 || ev[1].Decode(&woken) != nil || woken.Epoch <= epoch {
		t.Fatalf("cell_woken %+v: want the new owner's, of a later epoch", ev)
	}
	// The reply carries the new owner's stamp.
	last := msgs[len(msgs)-1]
	var md slack.SlackMetadata
	if err := json.Unmarshal(last.Metadata, &md); err != nil || md.EventType != bot.MetadataEventType ||
		md.EventPayload["epoch"] != float64(woken.Epoch) || md.EventPayload["session"] != s.ID.String() || md.EventPayload["turn"] != float64(turn) {
		t.Fatalf("the reply's metadata %s: want session %s, turn %d, epoch %d", last.Metadata, s.ID, turn, woken.Epoch)
	}
}

// Finding 2, the adopting side: chat.startStream's answer is lost, and meanwhile a message of
// a newer epoch appeared in the thread after the stream. The view takes the stream it made
// (no epoch: a stream names none) as its own, never the newer owner's message, which it
// neither updates nor removes.
func TestLostStartAnswerNeverAdoptsANewerEpochsMessage(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{pieces: []string{"The tests ", "pass: ", "all 42 of them."}, step: make(chan struct{})}
	var h *harness
	var newer string
	var once sync.Once
	proxy := func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		held := false
		if strings.HasSuffix(r.URL.Path, "/chat.startStream") {
			once.Do(func() { held = true })
		}
		if !held {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		next.ServeHTTP(httptest.NewRecorder(), r) // the stream is made; its answer is lost
		thread := form.Get("thread_ts")
		s := h.session(general, thread)
		newer = h.botPost(thread, "a newer owner's live message", liveMetadata(s, 1, 1000))
		hj, ok := w.(http.Hijacker)
		if !ok {
			h.t.Error("cannot drop the answer")
			return
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
	}
	h = newHarness(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}, apiProxy: proxy})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> do the tests pass?"})
	if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.Calls("chat.startStream") >= 1 }); err != nil {
		t.Fatal(err)
	}
	agent.step <- struct{}{}
	agent.step <- struct{}{}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	if len(msgs) != 2 || msgs[1].TS != newer || msgs[1].Text != "a newer owner's live message" ||
		!strings.Contains(msgs[0].Text, "The tests pass: all 42 of them.") {
		t.Fatalf("bot messages %+v: want the reply once in the stream, and the newer owner's message %s as it was", msgs, newer)
	}
	var ss session.StreamStarted
	if st := h.events(s.ID, session.TypeStreamStarted); len(st) != 1 || st[0].Decode(&ss) != nil || ss.TS != msgs[0].TS {
		t.Fatalf("stream_started %s %+v: want the found stream %s", typesOf(st), ss, msgs[0].TS)
	}
}

// Finding 6 of the fence review: every delete that happened is recorded when it happened,
// also when another delete of the same step failed — so no message is deleted twice (a
// later attempt that believes it still there). The dead cell left three messages the log
// does not name; Slack fails the second chat.delete of the sweep, and the second of the next
// attempt's: chat.delete is called once per message plus once per failure, and each
// deletion has its record.
func TestEveryDeleteThatHappenedIsRecorded(t *testing.T) {
	t.Parallel()
	o := harnessOptions{live: bot.LiveConfig{Interval: 1}, poll: 50 * time.Millisecond}
	h, top, s, epoch, turn, stream := deadCellTurn(t, o)
	a := h.botPost(top.TS, "The deploy failed (a)", liveMetadata(s, turn, epoch))
	b := h.botPost(top.TS, "The deploy failed (b)", liveMetadata(s, turn, epoch))
	// The sweep deletes stream, a, b (the second fails); the next attempt, a and whatever
	// the first left (its second fails).
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.delete", Error: "internal_error", After: 1, Times: 1})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.delete", Error: "internal_error", After: 2, Times: 1})
	h.startReplica(o)
	h.turns(s.ID, 1)
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || msgs[0].Text != "The deploy failed because the image tag is wrong." {
		t.Fatalf("bot messages %+v: want the reply once", msgs)
	}
	if n := h.emu.Calls("chat.delete"); n != 3+2 {
		t.Fatalf("chat.delete called %d times for 3 messages and 2 failures: a deletion went unrecorded and was done again", n)
	}
	deleted := map[string]int{}
	for _, e := range h.events(s.ID, session.TypeStreamStopped) {
		var p session.StreamStopped
		if e.Decode(&p) == nil && p.Reason == session.StreamDeleted {
			deleted[p.TS]++
		}
	}
	for _, ts := range []string{stream, a, b} {
		if deleted[ts] != 1 {
			t.Fatalf("deletion records %v: want one for each of %s %s %s", deleted, stream, a, b)
		}
	}
}

// timestamps returns the ts of each of msgs, in order.
func timestamps(msgs []slackemu.Message) []string {
	tss := make([]string, len(msgs))
	for i, m := range msgs {
		tss[i] = m.TS
	}
	return tss
}
