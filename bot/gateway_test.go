package bot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// One post delivered as app_mention + message, duplicated and retried, gives one
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
	// Every copy of every envelope (each was sent twice) is handled, and every stored
	// message answered: a second user_message or reply would be there by now.
	h.everyEnvelopeAcked()
	h.answered(s.ID)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user_message events, want 1", n)
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 || agent.Runs() != 1 {
		t.Fatalf("%d replies and %d agent runs, want 1 and 1", n, agent.Runs())
	}
}

// The bot's own posts and other bots' posts are acked and never stored.
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

// Edits and deletions become new events; the original row is untouched.
func TestEditsAndDeletionsBecomeEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> help me deploy"})
	h.replies(general, top.TS, 1)
	m := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "deploy to staging"})
	h.replies(general, top.TS, 2)
	s := h.session(general, top.TS)

	edit, err := h.emu.Edit(general, m.TS, "deploy to prod")
	if err != nil {
		t.Fatal(err)
	}
	same, err := h.emu.Edit(general, m.TS, "deploy to prod") // same text: ignored
	if err != nil {
		t.Fatal(err)
	}
	// Both edits are handled (the gateway acks after it stored what it keeps).
	h.acked(edit)
	h.acked(same)
	if n := len(h.events(s.ID, session.TypeUserMessageEdited)); n != 1 {
		t.Fatalf("%d user_message_edited events, want 1 (an edit that keeps the text is ignored)", n)
	}
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

// Content only in blocks reaches the log as text; a bare mention is stored empty.
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

// The public-channels-only rule: nothing from a private channel or a DM is stored;
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

// After refresh_requested (and after a socket silently dropped), the bot reconnects and
// later events still arrive.
func TestReconnectsAfterDisconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	h.replies(general, top.TS, 1)
	opened := h.emu.ConnectionsOpened()
	if _, err := h.emu.DisconnectAll("refresh_requested"); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a new connection", func() bool { return h.emu.ConnectionsOpened() > opened })
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "two"})
	h.replies(general, top.TS, 2)

	opened = h.emu.ConnectionsOpened()
	if err := h.emu.DropConnection(0); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a new connection after the drop", func() bool { return h.emu.ConnectionsOpened() > opened })
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "three"})
	h.replies(general, top.TS, 3)
}

// A database that goes away: appends fail, envelopes are not acked, Slack redelivers, and once
// the database is back the message is stored once and answered once.
func TestDatabaseGoesAwayNothingLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		// Retries fire only when the test says so (FireRetries), like Slack's minutes; the
		// ack window that precedes them is short.
		AckTimeout: time.Second, RetrySchedule: []time.Duration{time.Hour, time.Hour, time.Hour},
	}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> before the outage"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)

	su, err := pgxpool.New(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	exec := func(sql string) {
		t.Helper()
		if _, err := su.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	// The outage: the app's connections are cut and it may not write.
	exec(`REVOKE INSERT ON events FROM logbook_app`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	p := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "during the outage"})
	h.waitFor("the delivery to fail", func() bool { return h.emu.DeliveryState(p.EventIDs[0]) == "awaiting_retry" })
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user messages during the outage", n)
	}
	exec(`GRANT INSERT ON events TO logbook_app`)
	h.emu.FireRetries()
	replies := h.replies(general, top.TS, 2)
	h.acked(p)
	if replies[1].Text != "seen: before the outage | during the outage" {
		t.Fatalf("reply after the outage: %q", replies[1].Text)
	}
	h.turns(s.ID, 2)
	h.answered(s.ID)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("%d user messages, want 2", n)
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d replies, want 2", n)
	}
}

// The database refuses the append: the gateway must not ack, must keep running, and the
// redelivery must store the message once and answer once.
func TestGatewayDatabaseRefusesAppendThenRecovers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		// A short ack window, and retries only when the test fires them.
		AckTimeout: time.Second, RetrySchedule: []time.Duration{time.Hour, time.Hour, time.Hour}}})
	h.waitFor("socket", func() bool { return len(h.emu.Connections()) > 0 })
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `REVOKE INSERT ON events FROM logbook_app`); err != nil {
		t.Fatal(err)
	}
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> during an outage"})
	// The gateway has decided about every envelope once it counted each as not persisted.
	h.waitMetric(float64(len(top.EventIDs)), "logbook_persist_failures_total")
	for _, a := range h.emu.Acks() {
		if !a.Stale {
			t.Fatalf("acked %s while the database refused the append", a.EventID)
		}
	}
	if _, err := admin.Exec(context.Background(), `GRANT INSERT ON events TO logbook_app`); err != nil {
		t.Fatal(err)
	}
	h.awaitingRetry(top)
	h.emu.FireRetries()
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 1 {
		t.Fatalf("%d user messages", n)
	}
	// Every redelivery is stored and answered: nothing more is posted from here on.
	h.acked(top)
	h.answered(s.ID)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d replies", n)
	}
}

// REVIEW-3: the session's first message is redelivered (its first delivery failed: dropped,
// socket down, or a DB blip so it was not acked) and a follow-up in its thread arrives before
// the retry. The follow-up is acked as "no_session" and lost for good.
func TestGatewayThreadReplyBeforeSessionIsNotLost(t *testing.T) {
	t.Parallel()
	// Slack's ack window and retries are the test's to end (ExpireAcks, FireRetries): with a
	// 1 s window the follow-up's own ack, which waits for the thread's session first, came
	// too late on a loaded machine and the follow-up went to a retry an hour away.
	h := newHarness(t, &echoAgent{}, harnessOptions{emu: slackemu.Options{
		AckTimeout: time.Hour, RetrySchedule: []time.Duration{time.Hour, time.Hour, time.Hour}}})
	h.waitFor("socket", func() bool { return len(h.emu.Connections()) > 0 })
	h.emu.InjectDeliveryFault(slackemu.DeliveryFault{Kind: slackemu.FaultDrop, Times: 2}) // message + app_mention of the parent
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> the deploy failed"})
	follow := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "here is the log: build 1234"})
	// The follow-up is handled (and acked) while its thread has no session yet; only then is
	// the parent, whose envelopes were dropped, redelivered.
	h.acked(follow)
	if n := h.emu.ExpireAcks(top.EventIDs...); n != len(top.EventIDs) {
		t.Fatalf("%d of the parent's %d dropped envelopes were awaiting an ack", n, len(top.EventIDs))
	}
	h.awaitingRetry(top)
	h.emu.FireRetries()
	h.acked(top)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	// Every envelope is acked, and the gateway acks only after it stored what it keeps.
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("%d user_message events, want 2 (the thread reply was acked and dropped as no_session)", n)
	}
}

// REVIEW-4: a message_deleted without previous_message (Slack omits it in some cases) for a
// reply inside a session's thread is resolved to thread = deleted_ts, finds no session, and
// is acked and dropped: the deleted text ("sk-...") stays in transcripts and search.
func TestGatewayDeleteWithoutPreviousMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hi"})
	h.replies(general, top.TS, 1)
	sec := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "token is sk-XXXX"})
	h.replies(general, top.TS, 2)
	s := h.session(general, top.TS)
	inner := map[string]any{"type": "message", "subtype": "message_deleted", "hidden": true, "channel": general,
		"channel_type": "channel", "ts": "1800000000.000001", "deleted_ts": sec.TS, "event_ts": "1800000000.000001"}
	id, err := h.emu.PublishEvent(mustJSON(t, inner))
	if err != nil {
		t.Fatal(err)
	}
	// The gateway acks only after it stored what it keeps.
	if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events(s.ID, session.TypeUserMessageDeleted)); n != 1 {
		t.Fatalf("%d user_message_deleted events, want 1: the deletion of %s was dropped", n, sec.TS)
	}
}

// REVIEW-5: an event that can never be stored (NUL in the user id / ts) is a permanent
// error, yet the gateway answers it like a DB outage: no ack, error log, Slack retries it
// until it gives up. It must be acked (and counted) instead.
func TestGatewayPoisonEnvelopeIsAcked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	inner := map[string]any{"type": "message", "channel": general, "channel_type": "channel",
		"user": "U000\u00001", "text": "<@" + botUser + "> hi", "ts": "1700000000.000900", "event_ts": "1700000000.000900"}
	id, err := h.emu.PublishEvent(mustJSON(t, inner))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if _, err := h.emu.WaitForAck(ctx, id); err != nil {
		t.Fatalf("poison envelope never acked (state %s): %v", h.emu.DeliveryState(id), err)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Malformed frames: each envelope must be acked and nothing may panic.
func TestGatewayMalformedEnvelopesAreAcked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.waitFor("socket", func() bool { return len(h.emu.Connections()) > 0 })
	cb := func(event string) string {
		return `{"type":"event_callback","team_id":"T0000001","api_app_id":"A0000001","event_id":"EvX","event_time":1700000000,"event":` + event + `}`
	}
	frames := map[string]string{
		"m1": `{"envelope_id":"m1","type":"events_api","accepts_response_payload":false,"retry_attempt":0,"retry_reason":"","payload":"junk"}`,
		"m2": `{"envelope_id":"m2","type":"events_api","payload":` + cb(`{"type":"foo_bar","x":1}`) + `}`,
		"m3": `{"envelope_id":"m3","type":"events_api","payload":` + cb(`{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1.2"}`) + `}`,
		"m4": `{"envelope_id":"m4","type":"events_api","payload":` + cb(`{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1.3"}`) + `}`,
		"m5": `{"envelope_id":"m5","type":"events_api","payload":` + cb(`{"type":"message","text":"no channel no user"}`) + `}`,
		"m6": `{"envelope_id":"m6","type":"slash_commands","accepts_response_payload":true,"payload":{"command":7}}`,
		"m7": `{"envelope_id":"m7","type":"events_api","payload":{"type":"event_callback"}}`,
		"m9": `{"envelope_id":"m9","type":"interactive","accepts_response_payload":true,"payload":{"type":"shortcut","callback_id":"x","trigger_id":"1.2","team":{"id":"T0000001"},"user":{"id":"U0000001"}}}`,
		"m8": `{"envelope_id":"m8","type":"events_api","payload":` + cb(`{"type":"app_mention","user":"U0000001","text":"<@UB000001> x","ts":"1700000000.7","channel":"C_NOPE"}`) + `}`,
	}
	for _, f := range frames {
		if err := h.emu.SendRaw(0, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	var missing []string
	unacked := func() []string {
		acked := map[string]bool{}
		for _, a := range h.emu.Acks() {
			acked[a.EnvelopeID] = true
		}
		var out []string
		for id := range frames {
			if !acked[id] {
				out = append(out, id)
			}
		}
		return out
	}
	_ = h.emu.Wait(h.waitCtx(), func() bool { missing = unacked(); return len(missing) == 0 })
	if len(missing) > 0 {
		t.Fatalf("envelopes never acked: %v", missing)
	}
}

// REVIEW-9: the Web API client has no timeout (slack.New's default http.Client{}) and the
// gateway calls users.info (and conversations.info) on the ack path with the gateway's
// lifetime context. One hung users.info call and the envelope is never acked; every retry
// hangs the same way and the message is lost. "A name is a nicety, never a reason to lose a
// message" (directory.UserName).
func TestGatewayHungUsersInfoDoesNotBlockAck(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	h := newHarness(t, &echoAgent{}, harnessOptions{apiProxy: func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/users.info") {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		next.ServeHTTP(w, r)
	}})
	t.Cleanup(func() { close(hang) }) // before the proxy closes: it waits for the hung calls

	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> are you there?"})
	wctx, wcancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer wcancel()
	for _, id := range top.EventIDs {
		if _, err := h.emu.WaitForAck(wctx, id); err != nil {
			t.Fatalf("event %s never acked while users.info hangs (state %s): %v", id, h.emu.DeliveryState(id), err)
		}
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
	top, _, mention := threadBeforeMention(h)
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.acked(mention) // both envelopes of the mention handled: the backfill is in the log
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

// R-E: a rate limit on the backfill's conversations.replies call must not lose the thread's
// earlier messages: withThread waits out a Retry-After that fits its budget and reads again.
// (Were it to give up, the mention would be stored alone, and its other envelope — app_mention
// and message arrive together — would find the session no longer empty and backfill nothing:
// 1 message instead of 3.)
func TestDeliveryReviewBackfillAfterARateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "conversations.replies", Status: 429, RetryAfter: 1, Times: 1})
	top, _, mention := threadBeforeMention(h)
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	// The backfill is part of handling the mention's envelopes: once both are acked, what it
	// stores is in the log.
	h.acked(mention)
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
		AckTimeout: time.Second, RetrySchedule: []time.Duration{time.Hour, time.Hour, time.Hour}}})
	admin, err := pgx.Connect(context.Background(), h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "prod deploy failed with exit 137"})
	r1 := h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "OOM killer in the logs"})
	h.acked(top)
	h.acked(r1)
	if _, err := admin.Exec(context.Background(), `REVOKE INSERT ON events FROM logbook_app`); err != nil {
		t.Fatal(err)
	}
	mention := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> what should we do?"})
	s := h.session(general, top.TS) // Open committed; the append failed
	h.waitMetric(float64(len(mention.EventIDs)), "logbook_persist_failures_total")
	if _, err := admin.Exec(context.Background(), `GRANT INSERT ON events TO logbook_app`); err != nil {
		t.Fatal(err)
	}
	h.awaitingRetry(mention)
	h.emu.FireRetries()
	h.replies(general, top.TS, 1)
	h.acked(mention) // the redeliveries are stored, backfill included
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 3 {
		t.Fatalf("%d user messages stored, want 3 (the thread's two earlier messages were never backfilled); reply: %q",
			n, h.emu.BotReplies(general, top.TS)[0].Text)
	}
}

// R-F: the backfill races the poll (and live messages): when conversations.replies is slow,
// the poll starts a turn on the mention alone before the backfill appends the thread's
// earlier messages; the backfill's messages then start a second turn: two replies, the first
// without the context.
func TestDeliveryReviewSlowBackfillAnswersOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := newHarness(t, &echoAgent{}, harnessOptions{apiProxy: func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/conversations.replies") {
			// As slow as the caller lets it be: answered only once the caller gave up.
			select {
			case <-r.Context().Done():
				return
			case <-release:
			}
		}
		next.ServeHTTP(w, r)
	}})
	t.Cleanup(func() { close(release) }) // before the proxy closes
	top, _, mention := threadBeforeMention(h)
	h.replies(general, top.TS, 1)
	// Every envelope of the mention is handled and every stored message answered: a second
	// reply, if any, has been posted by now.
	h.acked(mention)
	h.answered(h.session(general, top.TS).ID)
	var texts []string
	for _, m := range h.emu.BotReplies(general, top.TS) {
		texts = append(texts, m.Text)
	}
	if len(texts) != 1 {
		t.Fatalf("%d replies to one mention: %q", len(texts), texts)
	}
}

// stalledLog is the gateway's log with appends held until release is closed: a database
// that has stopped answering.
type stalledLog struct {
	*session.Store
	release chan struct{}
	once    sync.Once
}

func (l *stalledLog) Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error) {
	select {
	case <-l.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Store.Append(ctx, id, evs...)
}

// AppendBatch is the gateway's grouped appends (groupcommit.go), held as Append is.
func (l *stalledLog) AppendBatch(ctx context.Context, items []session.Batched) {
	select {
	case <-l.release:
		l.Store.AppendBatch(ctx, items)
	case <-ctx.Done():
		for i := range items {
			items[i].Stored, items[i].Err = nil, ctx.Err()
		}
	}
}

func (l *stalledLog) open() { l.once.Do(func() { close(l.release) }) }

// While the database stalls, the gateway keeps reading the socket (so pings are answered and
// Slack keeps the connection), leaves what it cannot store unacked, and once the database is
// back every message is stored exactly once from Slack's redeliveries — more envelopes arrive
// than the handlers, the backlog and slack-go's own buffer hold together.
func TestGatewayKeepsReadingWhileTheDatabaseStalls(t *testing.T) {
	// Not parallel: 120 envelopes and their redeliveries on one gateway; alone it checks the
	// gateway, not the machine.
	const posts = 120
	// Slack's redeliveries are fired by the test (FireRetries), each round once no envelope
	// waits for its ack, instead of on a schedule of real time: on a loaded machine a fixed
	// schedule (it was 15.5 s in all) ran out before the backlog drained, the gateway doing
	// nothing wrong. The gateway's part — reading on, acking only what is stored — is what
	// this test checks, not Slack's retry budget; the rounds are bounded by the schedule's
	// length.
	retries := make([]time.Duration, 20)
	for i := range retries {
		retries[i] = time.Hour // fired by the test, never by the schedule
	}
	// Slack's own ack window (3 s): a shorter one failed envelopes the gateway was about to
	// ack on a loaded machine, and their redeliveries crowded out the ones it had deferred.
	emu := slackemu.MustStart(t, slackemu.Options{PingInterval: 50 * time.Millisecond, AckTimeout: 3 * time.Second,
		RetrySchedule: retries})
	pool, err := pgxpool.New(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	stalled := &stalledLog{Store: store, release: make(chan struct{})}
	t.Cleanup(stalled.open)

	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw := bot.NewGateway(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), stalled, api, sm, me,
		func(session.ID, bool) {}, bot.NewMetrics(reg), nil, bot.GatewayConfig{MaxInFlight: 2, Backlog: 64, HandleTimeout: 20 * time.Second})
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		stalled.open()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	// A bound on the whole test, not a figure it checks: every wait below is for an event.
	wait, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	if err := emu.Wait(wait, func() bool { return len(emu.Connections()) == 1 }); err != nil {
		t.Fatal(err)
	}

	var events []string
	for i := range posts {
		p, err := emu.Post(slackemu.Post{Channel: "C0000001", Text: fmt.Sprintf("<@%s> question %d", me.UserID, i)})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, p.EventIDs...)
	}
	// Every envelope reached the gateway and the socket still answers pings, though nothing
	// could be stored: the read loop did not wait for the handlers.
	first := emu.Connections()[0]
	if err := emu.Wait(wait, func() bool {
		c := emu.Connections()
		return len(c) == 1 && c[0].ID == first.ID && c[0].Pongs >= first.Pongs+5 && deferred(t, reg) > 0
	}); err != nil {
		t.Fatalf("the socket stopped being read while the database stalled (pongs %d → %d, deferred %v): %v",
			first.Pongs, emu.Connections()[0].Pongs, deferred(t, reg), err)
	}
	if n := len(emu.Acks()); n != 0 {
		t.Fatalf("%d envelopes acked while nothing could be stored", n)
	}

	stalled.open()
	awaitingAck := func() bool {
		return slices.ContainsFunc(events, func(id string) bool { return emu.DeliveryState(id) == slackemu.StateAwaitingAck })
	}
	for {
		// A round ends when every envelope sent is acked or its ack window passed.
		if err := emu.Wait(wait, func() bool { return !awaitingAck() }); err != nil {
			t.Fatalf("envelopes still awaiting their ack: %v", err)
		}
		n := countUserMessages(t, pool)
		if n == posts {
			break
		}
		if emu.FireRetries() == 0 {
			states := map[string]int{}
			for _, id := range events {
				states[emu.DeliveryState(id)]++
			}
			attempts := map[string]int{}
			for _, d := range emu.Deliveries() {
				attempts[d.EventID]++
			}
			hist := map[int]int{}
			for _, id := range events {
				hist[attempts[id]]++
			}
			t.Fatalf("%d of %d messages stored after the database came back, and Slack has nothing left to redeliver (states %v, attempts per event %v)", n, posts, states, hist)
		}
	}
	if opened := emu.ConnectionsOpened(); opened != 1 {
		t.Fatalf("%d sockets opened: the connection was dropped", opened)
	}
}

func deferred(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "logbook_envelopes_deferred_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func countUserMessages(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = 'user_message'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A slash command is acked at once, before its answer is ready (Slack allows 3 s and a
// search may take longer), and answered through its response_url.
func TestGatewaySlashCommandAckedAtOnceAnsweredThroughResponseURL(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slash := func(ctx context.Context, cmd slack.SlashCommand) string {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "answer to " + cmd.Text
	}
	h := newHarness(t, &echoAgent{}, harnessOptions{slash: slash})
	sent, err := h.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: "search deploy"})
	if err != nil {
		t.Fatal(err)
	}
	// The ack comes while the handler is still held: it did not wait for the answer.
	ack, err := h.emu.WaitForAck(h.waitCtx(), sent.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ack.Payload) > 0 && string(ack.Payload) != "null" && string(ack.Payload) != "{}" {
		t.Fatalf("ack carried a payload %s; the answer belongs on the response_url", ack.Payload)
	}
	close(release)
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) == 1 }); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if e := h.emu.Ephemerals()[0]; e.Source != "response_url" || e.Text != "answer to search deploy" {
		t.Fatalf("answer %+v; want the text through the response_url", e)
	}
}

// The "Open transcript" message shortcut on any message of a session's thread answers the
// person, and only them, with the link to that session's web transcript.
func TestGatewayTranscriptShortcut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{footer: bot.Footer{Mode: bot.FooterOff, PublicURL: "https://lb.example"}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	reply := h.replies(general, top.TS, 1)[0]
	s := h.session(general, top.TS)
	other := h.post(slackemu.Post{Channel: general, User: grace, Text: "a message outside any session"})
	for i, c := range []struct{ ts, want string }{
		{reply.TS, "<https://lb.example/sessions/" + s.ID.String() + "|"}, // the bot's reply in the thread
		{top.TS, "<https://lb.example/sessions/" + s.ID.String() + "|"},   // the thread's parent
		{other.TS, "not a logbook session"},
	} {
		sent, err := h.emu.SendMessageShortcut(slackemu.MessageShortcut{CallbackID: bot.TranscriptShortcut, Channel: general, TS: c.ts, User: grace})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.emu.WaitForAck(h.waitCtx(), sent.ID); err != nil {
			t.Fatal(err)
		}
		if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) == i+1 }); err != nil {
			t.Fatalf("shortcut %d: no answer: %v", i, err)
		}
		e := h.emu.Ephemerals()[i]
		if !strings.Contains(e.Text, c.want) || e.User != grace || e.Source != "response_url" {
			t.Fatalf("shortcut on %s: %+v; want %q to %s through the response_url", c.ts, e, c.want, grace)
		}
	}
}

// A Socket Mode client that fails for good (the app token refused) ends Run with the error:
// the workers stop with it, and Run does not wait for the caller's ctx to end.
func TestGatewayRunReturnsWhenTheAppTokenIsRefused(t *testing.T) {
	t.Parallel()
	emu := slackemu.MustStart(t, slackemu.Options{})
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken("xapp-wrong"))
	sm := socketmode.New(api)
	me, err := bot.WhoAmI(context.Background(), api)
	if err != nil {
		t.Fatal(err)
	}
	gw := bot.NewGateway(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), nil, api, sm, me,
		func(session.ID, bool) {}, bot.NewMetrics(prometheus.NewRegistry()), nil, bot.GatewayConfig{MaxInFlight: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil for a refused app token")
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatal("Run did not return after the app token was refused")
	}
}

// creatorLast is a log whose Open, when it creates the session, returns only once another
// append has stored the session's first event: the envelope that opened the session is not
// the one that stores its first message.
type creatorLast struct {
	*session.Store
	stored chan struct{} // closed by the first append that stores an event
	once   sync.Once
}

func (l *creatorLast) Open(ctx context.Context, key session.ThreadKey) (session.Session, error) {
	sess, err := l.Store.Open(ctx, key)
	if err == nil && sess.Created {
		select {
		case <-l.stored:
		case <-ctx.Done():
			return session.Session{}, ctx.Err()
		}
	}
	return sess, err
}

func (l *creatorLast) Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error) {
	out, err := l.Store.Append(ctx, id, evs...)
	if slices.ContainsFunc(out, func(e session.Event) bool { return !e.Duplicate }) {
		l.once.Do(func() { close(l.stored) })
	}
	return out, err
}

// A mention fires two envelopes (message and app_mention), handled at once. Whichever of them
// stores the message first began the session's log, so its signal says the session was just
// opened — no replica can hold its lease, and the cell starts with no routing round trip —
// even when the other envelope's Open is the one that created the session (the race behind
// TestAckCost's failure in CI, stop 41).
func TestGatewaySignalsOpenedWhenItsAppendBeganTheLog(t *testing.T) {
	emu := slackemu.MustStart(t, slackemu.Options{RetrySchedule: []time.Duration{time.Minute}})
	pool, err := pgxpool.New(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := &creatorLast{Store: session.NewStore(pool, session.Options{}), stored: make(chan struct{})}
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	type sig struct {
		id     session.ID
		opened bool
	}
	var mu sync.Mutex
	var sigs []sig
	gw := bot.NewGateway(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), store, api, sm, me,
		func(id session.ID, opened bool) {
			mu.Lock()
			defer mu.Unlock()
			sigs = append(sigs, sig{id, opened})
		}, bot.NewMetrics(prometheus.NewRegistry()), nil, bot.GatewayConfig{})
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	if err := emu.Wait(ctx, func() bool { return emu.ConnectionsOpened() > 0 }); err != nil {
		t.Fatal(err)
	}
	p, err := emu.Post(slackemu.Post{Channel: "C0000001", User: "U0000001", Text: "<@" + me.UserID + "> hello"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.EventIDs) != 2 {
		t.Fatalf("the mention fired %d envelopes, want message and app_mention", len(p.EventIDs))
	}
	// Both envelopes are acked only after their appends (one stored, one a duplicate) and
	// their signals.
	if err := emu.Wait(ctx, func() bool {
		acked := 0
		for _, a := range emu.Acks() {
			if slices.Contains(p.EventIDs, a.EventID) {
				acked++
			}
		}
		return acked >= len(p.EventIDs)
	}); err != nil {
		t.Fatal(err)
	}
	sess, err := store.SessionByThread(ctx, session.ThreadKey{Team: me.Team, Channel: "C0000001", ThreadTS: p.TS})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []sig{{sess.ID, true}}; !slices.Equal(sigs, want) {
		t.Errorf("signals %v, want %v: one, saying the session was just opened", sigs, want)
	}
}
