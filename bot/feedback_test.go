package bot_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/feedback"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// feedbackHarness delivers replies with feedback buttons and records their clicks, as serve
// wires it.
func feedbackHarness(t *testing.T, o harnessOptions) *harness {
	return feedbackHarnessWith(t, &echoAgent{}, o)
}

func feedbackHarnessWith(t *testing.T, agent bot.Agent, o harnessOptions) *harness {
	o.delivery.Actions = feedback.Buttons
	o.surfaceWith = func(store *session.Store, _ *slack.Client) bot.Surface {
		return &feedback.Surface{Store: store, Log: zerolog.New(zerolog.NewTestWriter(t))}
	}
	return newHarness(t, agent, o)
}

// A reply the model wrote carries 👍/👎 buttons (Slack's feedback_buttons, in a
// context_actions block the emulator checks as Slack documents it); each click through the
// unmodified slack-go client is a feedback event of the reply's session with who clicked, and
// the count per channel and model takes each person's latest click on the reply.
func TestFeedbackClicksAreRecordedWithWhoClicked(t *testing.T) {
	t.Parallel()
	h := feedbackHarness(t, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	reply := h.replies(general, top.TS, 1)[0]
	var blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(reply.Blocks, &blocks); err != nil || len(blocks) == 0 {
		t.Fatalf("the reply has no blocks (%v): %s", err, reply.Blocks)
	}
	last := blocks[len(blocks)-1]
	if last.Type != "context_actions" || len(last.Elements) != 1 || last.Elements[0].Type != "feedback_buttons" ||
		last.Elements[0].ActionID != feedback.ActionID {
		t.Fatalf("the reply's last block is not the feedback buttons: %s", reply.Blocks)
	}
	sess := h.session(general, top.TS)
	answer := h.events(sess.ID, session.TypeAssistantMessage)[0]

	click := func(user, value string, want int) {
		t.Helper()
		sent, err := h.emu.ClickButton(slackemu.Click{Channel: general, TS: reply.TS, ActionID: feedback.ActionID, User: user, Value: value})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.emu.WaitForAck(h.waitCtx(), sent.ID); err != nil {
			t.Fatal(err)
		}
		h.waitFor("feedback recorded", func() bool { return len(h.events(sess.ID, session.TypeFeedback)) == want })
	}
	click(ada, session.FeedbackPositive, 1)
	click(grace, session.FeedbackNegative, 2)
	click(ada, session.FeedbackNegative, 3) // ada changed her mind: her latest click counts

	evs := h.events(sess.ID, session.TypeFeedback)
	for i, want := range []struct{ who, rating string }{{ada, "positive"}, {grace, "negative"}, {ada, "negative"}} {
		var f session.Feedback
		if err := evs[i].Decode(&f); err != nil {
			t.Fatal(err)
		}
		if evs[i].Actor != (session.Actor{Kind: session.ActorUser, ID: want.who}) || f.Rating != want.rating ||
			f.Reply != answer.ID.String() || f.MessageTS != reply.TS || f.ActionTS == "" {
			t.Fatalf("click %d recorded as %v %+v, want %s %s on reply %s (%s)", i, evs[i].Actor, f, want.who, want.rating, answer.ID, reply.TS)
		}
	}
	now := time.Now()
	rows, err := h.store.Feedback(context.Background(), now, now.AddDate(0, 0, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0] != (session.FeedbackRow{Channel: general, Model: "", Positive: 0, Negative: 2}) {
		t.Fatalf("feedback per channel and model = %+v, want ada's and grace's latest: 0 positive, 2 negative in %s", rows, general)
	}
	if len(h.emu.Ephemerals()) != 0 {
		t.Fatalf("a recorded click was answered: %+v", h.emu.Ephemerals())
	}
}

// A feedback block copied into another thread's message rates nothing there: the click is
// told so, and no session gets an event.
func TestFeedbackFromAnotherThreadIsRefused(t *testing.T) {
	t.Parallel()
	h := feedbackHarness(t, harnessOptions{})
	first := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, first.TS, 1)
	second := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> two"})
	h.replies(general, second.TS, 1)
	firstSess := h.session(general, first.TS)
	answer := h.events(firstSess.ID, session.TypeAssistantMessage)[0]
	// grace posts, in the second thread, a message carrying the first thread's feedback block.
	block := feedback.Buttons(firstSess, answer, session.AssistantMessage{Text: "x"})
	raw, err := json.Marshal([]any{block})
	if err != nil {
		t.Fatal(err)
	}
	forged := h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: second.TS, Text: "look", Blocks: raw})
	sent, err := h.emu.ClickButton(slackemu.Click{Channel: general, TS: forged.TS, ActionID: feedback.ActionID, User: ada})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), sent.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) == 1 }); err != nil {
		t.Fatalf("the refused click was not answered: %v", err)
	}
	if got := h.emu.Ephemerals()[0].Text; !strings.Contains(got, "does not belong") {
		t.Fatalf("the refused click was told %q", got)
	}
	for _, ts := range []string{first.TS, second.TS} {
		if evs := h.events(h.session(general, ts).ID, session.TypeFeedback); len(evs) != 0 {
			t.Fatalf("a forged click was recorded in %s: %+v", ts, evs)
		}
	}
}

// A streamed reply gets its feedback buttons as its stream stops (chat.stopStream's blocks),
// and a click on them is recorded like any other.
func TestFeedbackUnderAStreamedReply(t *testing.T) {
	t.Parallel()
	agent := &liveAgent{pieces: []string{"streamed ", "answer"}, step: make(chan struct{})}
	h := feedbackHarnessWith(t, agent, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> stream it"})
	// The rest of the reply once its first piece is streaming (at load the turn could finish
	// before the live view flushed, and post the reply whole).
	h.waitFor("the reply's stream", func() bool { return h.emu.Calls("chat.startStream") == 1 })
	agent.step <- struct{}{}
	sess := h.session(general, top.TS)
	h.turns(sess.ID, 1)
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || !strings.Contains(string(msgs[0].Blocks), `"feedback_buttons"`) {
		t.Fatalf("the streamed reply has no feedback buttons: %+v", msgs)
	}
	if n := h.emu.Calls("chat.startStream"); n != 1 {
		t.Fatalf("%d streams started; the test wants the reply streamed", n)
	}
	sent, err := h.emu.ClickButton(slackemu.Click{Channel: general, TS: msgs[0].TS, ActionID: feedback.ActionID, User: grace, Value: session.FeedbackPositive})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), sent.ID); err != nil {
		t.Fatal(err)
	}
	h.waitFor("feedback recorded", func() bool { return len(h.events(sess.ID, session.TypeFeedback)) == 1 })
}
