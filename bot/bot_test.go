package bot_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

const (
	general = "C0000001"
	secret  = "C0000002"
	dm      = "D0000001"
	ada     = "U0000001"
	grace   = "U0000002"
	botUser = "UB000001"
)

func TestThreadConversationOfSeveralTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what broke the build?"})
	first := h.replies(general, top.TS, 1)
	if first[0].Text != "seen: what broke the build?" || first[0].ThreadTS != top.TS {
		t.Fatalf("first reply %+v", first[0])
	}
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	// A follow-up without a mention continues the session; so does another person's.
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "and how do we fix it?"})
	h.replies(general, top.TS, 2)
	h.turns(s.ID, 2)
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "I can &amp; will help"})
	third := h.replies(general, top.TS, 3)
	h.turns(s.ID, 3)
	if want := "seen: what broke the build? | and how do we fix it? | I can &amp; will help"; third[2].Text != want {
		t.Fatalf("third reply %q, want %q", third[2].Text, want)
	}
	// A message in the channel that does not mention the bot and is not in a session's
	// thread is not stored.
	h.post(slackemu.Post{Channel: general, User: ada, Text: "lunch?"})

	got := typesOf(conversation(h.events(s.ID)))
	turn := "turn_started assistant_message delivered turn_completed"
	want := "user_message " + turn + " user_message " + turn + " user_message " + turn
	if got != want {
		t.Fatalf("log:\n%s\nwant:\n%s", got, want)
	}
	msgs := h.events(s.ID, session.TypeUserMessage)
	var um session.UserMessage
	if err := msgs[2].Decode(&um); err != nil || um.Text != "I can & will help" || um.Raw != "I can &amp; will help" || um.UserName == "" {
		t.Fatalf("third user_message %+v (%v)", um, err)
	}
	v, err := h.store.Verify(context.Background(), s.ID)
	if err != nil || !v.OK {
		t.Fatalf("verify: %+v %v", v, err)
	}
	// Nothing was redelivered or recovered, so the thread was never read back from Slack
	// (conversations.replies is 1 call a minute for many apps).
	if n := h.emu.Calls("conversations.replies"); n != 0 {
		t.Fatalf("%d conversations.replies calls in a plain conversation", n)
	}
}

// C01, C02: one post delivered as app_mention + message, duplicated and retried, gives one
// user_message and one reply; the envelope is acked while the model is still working.
func TestOnePostManyDeliveriesOneReply(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{block: make(chan struct{})}
	h := newHarness(t, agent, harnessOptions{replicas: 2})
	h.emu.InjectDeliveryFault(slackemu.DeliveryFault{Kind: slackemu.FaultDuplicate, Times: 4})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> summarize"})
	for _, id := range top.EventIDs {
		if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
			t.Fatalf("envelope of %s not acked while the model works: %v", id, err)
		}
	}
	h.waitFor("the agent to start", func() bool { return agent.Runs() == 1 })
	close(agent.block)
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.waitFor("turn_completed", func() bool { return len(h.events(s.ID, session.TypeTurnCompleted)) == 1 })
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user_message events, want 1", n)
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 || agent.Runs() != 1 {
		t.Fatalf("%d replies and %d agent runs, want 1 and 1", n, agent.Runs())
	}
}

// C04, C05: the bot's own posts and other bots' posts are acked and never stored.
func TestBotMessagesAreIgnored(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{}
	h := newHarness(t, agent, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	h.replies(general, top.TS, 1) // our own post echoes back as a message event
	other := h.post(slackemu.Post{Channel: general, User: "U0000009", Text: "<@" + botUser + "> status?"})
	legacy := h.post(slackemu.Post{Channel: general, User: "U0000009", BotMessage: true, Text: "<@" + botUser + "> status?"})
	inThread := h.post(slackemu.Post{Channel: general, User: "U0000009", ThreadTS: top.TS, Text: "<@" + botUser + "> ping"})
	for _, p := range []slackemu.Posted{other, legacy, inThread} {
		for _, id := range p.EventIDs {
			if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := h.session(general, top.TS)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user messages, want 1", n)
	}
	for _, ts := range []string{other.TS, legacy.TS} {
		if _, err := h.store.SessionByThread(context.Background(), session.ThreadKey{Team: h.emu.TeamID(), Channel: general, ThreadTS: ts}); err == nil {
			t.Fatalf("a bot's post %s started a session", ts)
		}
	}
	if agent.Runs() != 1 {
		t.Fatalf("agent ran %d times, want 1", agent.Runs())
	}
}

// C06: replies thread under the parent, never under a reply's ts, without broadcast.
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

// C07, C08: edits and deletions become new events; the original row is untouched.
func TestEditsAndDeletionsBecomeEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> help me deploy"})
	h.replies(general, top.TS, 1)
	m := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "deploy to staging"})
	h.replies(general, top.TS, 2)
	s := h.session(general, top.TS)

	if _, err := h.emu.Edit(general, m.TS, "deploy to prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.Edit(general, m.TS, "deploy to prod"); err != nil { // same text: ignored
		t.Fatal(err)
	}
	h.waitFor("user_message_edited", func() bool { return len(h.events(s.ID, session.TypeUserMessageEdited)) == 1 })
	var ed session.UserMessageEdited
	if err := h.events(s.ID, session.TypeUserMessageEdited)[0].Decode(&ed); err != nil || ed.OrigTS != m.TS || ed.Text != "deploy to prod" {
		t.Fatalf("edit event %+v %v", ed, err)
	}
	// The edited text is what the next turn sees.
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "go"})
	third := h.replies(general, top.TS, 3)
	if !strings.Contains(third[2].Text, "deploy to prod") {
		t.Fatalf("next turn did not see the edit: %q", third[2].Text)
	}

	secretMsg := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "token is sk-XXXX"})
	h.replies(general, top.TS, 4)
	if _, err := h.emu.Delete(general, secretMsg.TS); err != nil {
		t.Fatal(err)
	}
	h.waitFor("user_message_deleted", func() bool { return len(h.events(s.ID, session.TypeUserMessageDeleted)) == 1 })
	var del session.UserMessageDeleted
	if err := h.events(s.ID, session.TypeUserMessageDeleted)[0].Decode(&del); err != nil || del.DeletedTS != secretMsg.TS {
		t.Fatalf("delete event %+v %v", del, err)
	}
	// The original rows are untouched (the log is append-only).
	var orig session.UserMessage
	if err := h.events(s.ID, session.TypeUserMessage)[1].Decode(&orig); err != nil || orig.Text != "deploy to staging" {
		t.Fatalf("original user_message %+v %v", orig, err)
	}
}

// C09: content only in blocks reaches the log as text; a bare mention is stored empty.
func TestBlocksOnlyMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + ">"})
	h.replies(general, top.TS, 1)
	blocks := json.RawMessage(`[{"type":"rich_text","block_id":"b1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"rollback failed on "},{"type":"link","url":"https://ci.example/1"}]}]}]`)
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "", Blocks: blocks})
	h.replies(general, top.TS, 2)
	msgs := h.events(h.session(general, top.TS).ID, session.TypeUserMessage)
	var first, second session.UserMessage
	if err := msgs[0].Decode(&first); err != nil || first.Text != "" || !first.Mentioned {
		t.Fatalf("bare mention stored as %+v", first)
	}
	if err := msgs[1].Decode(&second); err != nil || second.Text != "rollback failed on https://ci.example/1" {
		t.Fatalf("blocks-only message stored as %q", second.Text)
	}
}

// C10, C11: a long reply is posted in parts under the cap, in order, one assistant_message
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

// C14: a 429 is waited out; an ambiguous failure (posted, but the client saw an error) is
// looked up by metadata before posting again: one visible message.
func TestRateLimitAndAmbiguousFailureShowOneMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Status: 429, RetryAfter: 1, Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)

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

// C15 and the public-channels-only rule: nothing from a private channel or a DM is stored;
// the user gets one note.
func TestPrivateConversationsAreNeverStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{
		privateNote: true,
		emu:         slackemu.Options{Subscriptions: []string{slackemu.SubAppMention, slackemu.SubMessageChannels, slackemu.SubMessageGroups, slackemu.SubMessageIM}},
	})
	var posts []slackemu.Posted
	posts = append(posts, h.post(slackemu.Post{Channel: secret, User: ada, Text: "<@" + botUser + "> my salary is 123"}))
	posts = append(posts, h.post(slackemu.Post{Channel: secret, User: ada, Text: "<@" + botUser + "> again"}))
	posts = append(posts, h.post(slackemu.Post{Channel: dm, User: ada, Text: "my salary is 123"}))
	for _, p := range posts {
		for _, id := range p.EventIDs {
			if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	su, err := pgxpool.New(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	var n int
	if err := su.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events stored from private conversations (%v)", n, err)
	}
	if eph := h.emu.Ephemerals(); len(eph) != 1 || eph[0].Channel != secret {
		t.Fatalf("ephemeral notes %+v, want one in the private channel", eph)
	}
}

// Idle eviction, then a reply that uses context from before it.
func TestIdleEvictionAndRehydration(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{idle: 300 * time.Millisecond})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> remember 42"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.waitFor("cell_evicted", func() bool { return len(h.events(s.ID, session.TypeCellEvicted)) == 1 })
	h.waitFor("no cell left", func() bool { return h.reps[0].runner.Active() == 0 })

	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "what did I say?"})
	replies := h.replies(general, top.TS, 2)
	if !strings.Contains(replies[1].Text, "remember 42") {
		t.Fatalf("reply after rehydration lacks earlier context: %q", replies[1].Text)
	}
	woken := h.events(s.ID, session.TypeCellWoken)
	if len(woken) != 2 {
		t.Fatalf("%d cell_woken markers, want 2", len(woken))
	}
}
