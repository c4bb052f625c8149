package bot_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

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
	time.Sleep(12 * time.Second)
	evs := h.events(s.ID)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 || len(h.events(s.ID, session.TypeTurnCompleted)) != 1 {
		t.Fatalf("after one transient post failure: %d replies, %d turn_completed (want 1, 1); %d conversations.replies calls; log: %s",
			n, len(h.events(s.ID, session.TypeTurnCompleted)), h.emu.Calls("conversations.replies"), typesOf(evs))
	}
}

// threadBeforeMention: a human thread with two messages the bot never saw, then a mention
// inside it (the session opens late and the gateway backfills).
func threadBeforeMention(h *harness) (top, r1, mention slackemu.Posted) {
	top = h.post(slackemu.Post{Channel: general, User: ada, Text: "prod deploy failed with exit 137"})
	r1 = h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "OOM killer in the logs"})
	for _, id := range append(top.EventIDs, r1.EventIDs...) {
		if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
			h.t.Fatal(err)
		}
	}
	mention = h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> what should we do?"})
	return
}

// R-D: the backfilled messages are appended after the mention that opened the session, so the
// model's history (seq order) puts the question first and the context after it; the last
// user message the model sees is not the question.
func TestDeliveryReviewBackfillOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top, _, _ := threadBeforeMention(h)
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	msgs := h.events(s.ID, session.TypeUserMessage)
	var ts []string
	for _, e := range msgs {
		var m session.UserMessage
		if err := e.Decode(&m); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, m.TS)
	}
	reply := h.emu.BotReplies(general, top.TS)[0].Text
	if len(ts) != 3 || !sort.StringsAreSorted(ts) {
		t.Fatalf("user messages in log order have ts %v (want 3, in thread order); the model saw: %q", ts, reply)
	}
}

// R-E: one rate limit (or any error) on the backfill's conversations.replies call and the
// backfill gives up for good: the thread's earlier messages are never stored.
func TestDeliveryReviewBackfillAfterARateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "conversations.replies", Status: 429, RetryAfter: 1, Times: 1})
	top, _, _ := threadBeforeMention(h)
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	time.Sleep(2 * time.Second)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 3 {
		t.Fatalf("%d user messages stored, want 3: the backfill stopped at one 429", n)
	}
}

// R-C: the Created flag lives only in the memory of the Open call. When that call's append
// fails (DB blip: the envelope is not acked) — or the process dies between Open and Append —
// the redelivery finds the session (cached, Created=false) and never backfills.
func TestDeliveryReviewBackfillSurvivesAFailedAppend(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		RetrySchedule: []time.Duration{time.Second, time.Second, time.Second}}})
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "prod deploy failed with exit 137"})
	r1 := h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "OOM killer in the logs"})
	for _, id := range append(top.EventIDs, r1.EventIDs...) {
		if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(context.Background(), `REVOKE INSERT ON events FROM logbook_app`); err != nil {
		t.Fatal(err)
	}
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> what should we do?"})
	s := h.session(general, top.TS) // Open committed; the append failed
	time.Sleep(500 * time.Millisecond)
	if _, err := admin.Exec(context.Background(), `GRANT INSERT ON events TO logbook_app`); err != nil {
		t.Fatal(err)
	}
	h.replies(general, top.TS, 1)
	time.Sleep(time.Second)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 3 {
		t.Fatalf("%d user messages stored, want 3 (the thread's two earlier messages were never backfilled); reply: %q",
			n, h.emu.BotReplies(general, top.TS)[0].Text)
	}
	_ = strings.TrimSpace
}

// R-F: the backfill races the poll (and live messages): when conversations.replies is slow,
// the poll starts a turn on the mention alone before the backfill appends the thread's
// earlier messages; the backfill's messages then start a second turn: two replies, the first
// without the context.
func TestDeliveryReviewSlowBackfillAnswersOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{apiProxy: func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/conversations.replies") {
			time.Sleep(1500 * time.Millisecond)
		}
		next.ServeHTTP(w, r)
	}})
	top, _, _ := threadBeforeMention(h)
	h.replies(general, top.TS, 1)
	time.Sleep(3 * time.Second)
	var texts []string
	for _, m := range h.emu.BotReplies(general, top.TS) {
		texts = append(texts, m.Text)
	}
	if len(texts) != 1 {
		t.Fatalf("%d replies to one mention: %q", len(texts), texts)
	}
}
