package bot_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// An outage that outlasts Slack's redeliveries: a reply in a session's thread, a new
// top-level mention and a reply in the new thread are posted while the log refuses writes,
// and every delivery of them fails for good. Once the log is back the gateway catches up
// from Slack (conversations.history and conversations.replies): each is stored once and
// answered once.
func TestGatewayCatchesUpAfterAnOutageLongerThanTheRedeliveries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{
		emu:     slackemu.Options{AckTimeout: time.Minute, RetrySchedule: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}},
		catchUp: bot.CatchUpConfig{Interval: 200 * time.Millisecond},
	})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> before the outage"})
	h.replies(general, top.TS, 1)
	old := h.session(general, top.TS)
	h.turns(old.ID, 1)

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
	exec(`REVOKE INSERT ON events FROM logbook_app`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	reply := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "during the outage"})
	fresh := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> a new question in the outage"})
	follow := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: fresh.TS, Text: "and its detail"})
	var lost []string
	for _, p := range []slackemu.Posted{reply, fresh, follow} {
		lost = append(lost, p.EventIDs...)
	}
	h.failForGood(lost...)
	exec(`GRANT INSERT ON events TO logbook_app`)

	if r := h.replies(general, top.TS, 2); r[1].Text != "seen: before the outage | during the outage" {
		t.Fatalf("reply in the old thread after the outage: %q", r[1].Text)
	}
	if r := h.replies(general, fresh.TS, 1); r[0].Text != "seen: a new question in the outage | and its detail" &&
		r[0].Text != "seen: a new question in the outage" {
		t.Fatalf("reply in the new thread: %q", r[0].Text)
	}
	s := h.session(general, fresh.TS)
	h.answered(old.ID)
	h.answered(s.ID)
	if n := len(h.events(old.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("old thread: %d user messages, want 2", n)
	}
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("new thread: %d user messages, want 2", n)
	}
	// Once answered, nothing more: each thread's replies are what its turns delivered.
	h.turns(s.ID, len(h.events(s.ID, session.TypeTurnCompleted)))
	if n, want := len(h.emu.BotReplies(general, top.TS)), 2; n != want {
		t.Fatalf("old thread: %d replies, want %d", n, want)
	}
	if n, want := len(h.emu.BotReplies(general, fresh.TS)), len(h.events(s.ID, session.TypeDelivered)); n != want || n == 0 || n > 2 {
		t.Fatalf("new thread: %d replies for %d delivered", n, want)
	}
	t.Logf("CATCH-UP stored %v messages in %v catch-ups (persist failures %v)", h.metric("logbook_caught_up_messages_total"),
		h.metric("logbook_catch_ups_total"), h.metric("logbook_persist_failures_total"))
	if got := h.metric("logbook_caught_up_messages_total"); got != 2 {
		t.Fatalf("catch-up stored %v messages, want 2 (the reply, the mention with its thread's reply in the same append)", got)
	}
}

// Catch-up after a gap reads each active channel's history for threads with new replies, so
// a quiet older thread that got a reply during the outage is found even when it is no
// session active in the window (CatchUpConfig.Sessions 1 leaves only the newest), and the
// edits and deletions made during the gap in the threads it reads are recorded.
func TestCatchUpFindsQuietThreadsAndRecordsEditsAndDeletions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{
		emu:     slackemu.Options{AckTimeout: time.Minute, RetrySchedule: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}},
		catchUp: bot.CatchUpConfig{Interval: 200 * time.Millisecond, Sessions: 1},
	})
	quiet := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> an older question"})
	h.replies(general, quiet.TS, 1)
	q := h.session(general, quiet.TS)
	h.answered(q.ID)
	recent := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> a newer question"})
	h.replies(general, recent.TS, 1)
	edited := h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: recent.TS, Text: "deploy to staging (aside)"})
	deleted := h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: recent.TS, Text: "my token is sk-XXXX"})
	r := h.session(general, recent.TS)
	h.answered(r.ID)
	h.waitFor("both later messages stored", func() bool { return len(h.events(r.ID, session.TypeUserMessage)) == 3 })

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
	exec(`REVOKE INSERT ON events FROM logbook_app`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	var lost []string
	reply := h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: quiet.TS, Text: "any news on the older one?"})
	lost = append(lost, reply.EventIDs...)
	e, err := h.emu.Edit(general, edited.TS, "deploy to prod (aside)")
	if err != nil {
		t.Fatal(err)
	}
	lost = append(lost, e.EventIDs...)
	d, err := h.emu.Delete(general, deleted.TS)
	if err != nil {
		t.Fatal(err)
	}
	lost = append(lost, d.EventIDs...)
	h.failForGood(lost...)
	exec(`GRANT INSERT ON events TO logbook_app`)

	if got := h.replies(general, quiet.TS, 2); got[1].Text != "seen: an older question | any news on the older one?" {
		t.Fatalf("reply in the quiet thread after the outage: %q", got[1].Text)
	}
	h.answered(q.ID)
	h.waitFor("the edit and the deletion recorded", func() bool {
		return len(h.events(r.ID, session.TypeUserMessageEdited)) == 1 && len(h.events(r.ID, session.TypeUserMessageDeleted)) == 1
	})
	var ed session.UserMessageEdited
	var del session.UserMessageDeleted
	if err := h.events(r.ID, session.TypeUserMessageEdited)[0].Decode(&ed); err != nil || ed.OrigTS != edited.TS || ed.Text != "deploy to prod (aside)" {
		t.Fatalf("edit %+v %v", ed, err)
	}
	if err := h.events(r.ID, session.TypeUserMessageDeleted)[0].Decode(&del); err != nil || del.DeletedTS != deleted.TS || del.User != grace {
		t.Fatalf("deletion %+v %v", del, err)
	}
	if n := len(h.events(q.ID, session.TypeUserMessage)); n != 2 {
		t.Fatalf("quiet thread: %d user messages, want 2", n)
	}
}
