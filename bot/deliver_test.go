package bot_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// Replies thread under the parent, never under a reply's ts, without broadcast.
func TestRepliesThreadUnderTheParent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> revenue?"})
	h.replies(general, top.TS, 1)
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "<@" + botUser + "> and for Q3?"})
	replies := h.replies(general, top.TS, 2)
	for _, r := range replies {
		if r.ThreadTS != top.TS || r.Subtype == "thread_broadcast" {
			t.Fatalf("reply %+v not threaded under %s", r, top.TS)
		}
	}
	for _, req := range h.emu.Requests("chat.postMessage") {
		if req.Params.Get("thread_ts") != top.TS || req.Params.Get("reply_broadcast") == "true" {
			t.Fatalf("chat.postMessage params %v", req.Params)
		}
	}
}

// A long reply is posted in parts under the cap, in order, one assistant_message
// holding the full text and a delivered event linking every part's ts.
func TestLongReplyIsSplit(t *testing.T) {
	t.Parallel()
	var long strings.Builder
	for i := 0; long.Len() < 45000; i++ {
		long.WriteString("This is a sentence of prose in a long answer. ")
		if i%20 == 19 {
			long.WriteString("\n\n")
		}
	}
	long.WriteString("\n```go\n" + strings.Repeat("x := f(i) // i\n", 300) + "```\nDone")
	h := newHarness(t, &echoAgent{reply: func([]string) string { return long.String() }}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> write a lot"})
	s := h.session(general, top.TS)
	h.waitFor("delivered", func() bool { return len(h.events(s.ID, session.TypeDelivered)) == 1 })
	var d session.Delivered
	if err := h.events(s.ID, session.TypeDelivered)[0].Decode(&d); err != nil {
		t.Fatal(err)
	}
	parts := h.emu.BotReplies(general, top.TS)
	if len(parts) < 13 || len(parts) != len(d.TS) {
		t.Fatalf("%d parts posted, delivered lists %d", len(parts), len(d.TS))
	}
	for i, p := range parts {
		if n := utf8.RuneCountInString(p.Text); n > 3900 {
			t.Fatalf("part %d has %d characters", i, n)
		}
		if strings.Count(p.Text, "```")%2 != 0 {
			t.Fatalf("part %d breaks a code fence", i)
		}
		if p.TS != d.TS[i] {
			t.Fatalf("part %d ts %s, delivered says %s", i, p.TS, d.TS[i])
		}
	}
	if n := len(h.events(s.ID, session.TypeAssistantMessage)); n != 1 {
		t.Fatalf("%d assistant messages, want 1", n)
	}
}

// A 429 is waited out; an ambiguous failure (posted, but the client saw an error) is
// looked up by metadata before posting again: one visible message.
func TestRateLimitAndAmbiguousFailureShowOneMessage(t *testing.T) {
	t.Parallel()
	sleep := &scaledSleep{}
	h := newHarness(t, &echoAgent{}, harnessOptions{delivery: bot.DeliveryConfig{Sleep: sleep.Sleep}})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Status: 429, RetryAfter: 1, Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	if n := sleep.longWaits(900 * time.Millisecond); n != 1 {
		t.Fatalf("%d waits of about Retry-After (1s) before posting again, want 1", n)
	}

	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "internal_error", ApplyFirst: true, Times: 1})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "two"})
	s := h.session(general, top.TS)
	h.waitFor("two turns completed", func() bool { return len(h.events(s.ID, session.TypeTurnCompleted)) == 2 })
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d visible replies, want 2", n)
	}
	if n := len(h.events(s.ID, session.TypeDelivered)); n != 2 {
		t.Fatalf("%d delivered events, want 2", n)
	}
}

func TestGatewayReplySurvivesRateLimitBurst(t *testing.T) {
	t.Parallel()
	sleep := &scaledSleep{}
	h := newHarness(t, &echoAgent{}, harnessOptions{delivery: bot.DeliveryConfig{Sleep: sleep.Sleep}})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Status: 429, RetryAfter: 1, Times: 3})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if _, err := h.emu.WaitForReplies(ctx, general, top.TS, 1); err != nil {
		t.Fatalf("reply never posted after a burst of 3 rate limits: %v; log: %s", err, typesOf(conversation(h.events(s.ID))))
	}
	if n := sleep.longWaits(900 * time.Millisecond); n != 3 {
		t.Fatalf("%d waits of about Retry-After (1s), want one per rate limit (3)", n)
	}
}

// REVIEW-6: an ambiguous chat.postMessage failure (the post landed, the client saw an error)
// followed by a failed conversations.replies lookup: Deliverer.post ignores the lookup error
// and posts again, so the reply is shown twice.
func TestGatewayAmbiguousPostWithFailedLookupPostsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "internal_error", ApplyFirst: true, Times: 1})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "conversations.replies", Error: "internal_error", Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> once please"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d visible replies, want 1", n)
	}
}

// Slack answers msg_too_long; the part must be re-split and retried once,
// never dropped. Deliverer treats it as permanent: the user sees nothing, ever.
func TestGatewayMsgTooLongIsResplit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "msg_too_long", Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	s := h.session(general, top.TS)
	// turn_completed is appended with delivered, after every post of the turn: nothing more
	// is posted for it.
	h.turns(s.ID, 1)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d visible replies after one msg_too_long, want 1; log: %s", n, typesOf(conversation(h.events(s.ID))))
	}
}

// R-B: a thread search that can never succeed (conversations.replies answers missing_scope —
// or channel_not_found after the channel went away) turns one transient chat.postMessage
// failure into a turn that is never delivered and never completed: every resume has
// fresh=false, lookup fails, the error is "retryable", the cell backs off, exits after 6
// failures, the poll wakes it again — forever (7 days of WakeWindow).
func TestDeliveryReviewTransientPostFailureWithUnsearchableThreadIsDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{RepliesForbidden: true}})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "internal_error", Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	s := h.session(general, top.TS)
	// Before the fix the turn never completed (the 20 s wait fails); the turn_completed is
	// appended after every post of the turn, so the count of replies is final then.
	h.turns(s.ID, 1)
	evs := h.events(s.ID)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 || len(h.events(s.ID, session.TypeTurnCompleted)) != 1 {
		t.Fatalf("after one transient post failure: %d replies, %d turn_completed (want 1, 1); %d conversations.replies calls; log: %s",
			n, len(h.events(s.ID, session.TypeTurnCompleted)), h.emu.Calls("conversations.replies"), typesOf(evs))
	}
}

// With LOGBOOK_REPLY_FOOTER=usage the final reply carries a context line: the link to the
// session's web transcript, the turn's model and tokens, and its cost from the price table.
func TestDeliverFooterLinksTheTranscript(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{usage: &session.Usage{Provider: "anthropic", Model: "claude-sonnet-4-5", InputTokens: 1200, OutputTokens: 300}}
	h := newHarness(t, agent, harnessOptions{footer: bot.Footer{Mode: bot.FooterUsage, PublicURL: "https://lb.example/",
		Price: func(m string) (bot.Price, bool) {
			return bot.Price{Input: 3, Output: 15}, strings.HasPrefix(m, "claude-sonnet-4-5")
		}}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	msg := h.replies(general, top.TS, 1)[0]
	s := h.session(general, top.TS)
	var blocks []struct {
		Type     string                  `json:"type"`
		Text     struct{ Text string }   `json:"text"`
		Elements []struct{ Text string } `json:"elements"`
	}
	if err := json.Unmarshal(msg.Blocks, &blocks); err != nil || len(blocks) != 2 {
		t.Fatalf("blocks %s: %v", msg.Blocks, err)
	}
	if blocks[0].Type != "section" || !strings.Contains(blocks[0].Text.Text, "seen: hello") {
		t.Fatalf("the reply's text is not the first block: %s", msg.Blocks)
	}
	want := "<https://lb.example/sessions/" + s.ID.String() + "|Transcript> · claude-sonnet-4-5 · 1,200 in · 300 out · $0.0081"
	if blocks[1].Type != "context" || len(blocks[1].Elements) != 1 || blocks[1].Elements[0].Text != want {
		t.Fatalf("footer %s; want %q", msg.Blocks, want)
	}
	if !strings.Contains(msg.Text, "seen: hello") {
		t.Fatalf("the notification text %q lost the reply", msg.Text)
	}
}
