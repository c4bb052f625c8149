package bot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/repo"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

const (
	partner     = "C0000007" // a Slack Connect channel hosted by the other organisation
	partnerTeam = "T0000002" // the other organisation
	bob         = "U0000003" // a person of the other organisation
	extShared   = "C0000008" // a channel of ours shared with the other organisation
)

// connectEmu is the default workspace plus a channel hosted by another organisation and a
// channel of ours shared with it, and a person of that organisation in both.
func connectEmu() slackemu.Options {
	return slackemu.Options{
		Users: []slackemu.User{
			{ID: ada, Name: "ada", RealName: "Ada Lovelace"},
			{ID: grace, Name: "grace", RealName: "Grace Hopper"},
			{ID: bob, Name: "bob", RealName: "Bob of Partner", Team: partnerTeam},
		},
		Channels: []slackemu.Channel{
			{ID: general, Name: "general", Members: []string{ada, grace, botUser}},
			{ID: partner, Name: "partner-shared", HostTeam: partnerTeam, Members: []string{ada, bob, botUser}},
			{ID: extShared, Name: "ours-shared", ExtShared: true, SharedTeams: []string{partnerTeam}, Members: []string{ada, bob, botUser}},
		},
	}
}

// A thread in a Slack Connect channel hosted by another organisation, end to end: its
// envelopes carry that organisation's team_id; the session is the thread's, recording the host
// as its team; a reply through our own team's look-ups (the transcript shortcut, /logbook
// repo, catch-up after an outage) finds the same session, and catch-up stores the message
// Slack could not deliver in it rather than opening a second one.
func TestSlackConnectThreadInAChannelHostedByAnotherOrganisation(t *testing.T) {
	t.Parallel()
	o := harnessOptions{emu: connectEmu(), repoAdmins: []string{ada}, footer: bot.Footer{Mode: bot.FooterOff, PublicURL: "https://lb.example"},
		catchUp: bot.CatchUpConfig{Interval: 200 * time.Millisecond}}
	o.emu.AckTimeout, o.emu.RetrySchedule = time.Minute, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	h := newHarness(t, &echoAgent{}, o)
	ctx := context.Background()

	top := h.post(slackemu.Post{Channel: partner, User: bob, Text: "<@" + botUser + "> can you look at the shared rollout?"})
	h.replies(partner, top.TS, 1)
	s := h.session(partner, top.TS)
	if s.Key.Team != partnerTeam {
		t.Fatalf("session %+v; want the channel's host %s as its team", s.Key, partnerTeam)
	}
	h.post(slackemu.Post{Channel: partner, User: ada, ThreadTS: top.TS, Text: "and the canary too"})
	if r := h.replies(partner, top.TS, 2); r[1].Text != "seen: can you look at the shared rollout? | and the canary too" {
		t.Fatalf("second reply %q", r[1].Text)
	}

	// The transcript shortcut, chosen by a person of our organisation.
	sent, err := h.emu.SendMessageShortcut(slackemu.MessageShortcut{CallbackID: bot.TranscriptShortcut, Channel: partner, TS: top.TS, User: ada})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), sent.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) == 1 }); err != nil {
		t.Fatalf("no answer to the shortcut: %v", err)
	}
	if e := h.emu.Ephemerals()[0]; !strings.Contains(e.Text, "https://lb.example/sessions/"+s.ID.String()) {
		t.Fatalf("transcript shortcut in the shared channel: %q; want the session's link", e.Text)
	}

	// /logbook repo, set by our admin in the channel, is the channel's for its sessions.
	if _, err := h.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: "repo https://github.com/acme/shared.git main", User: ada, Channel: partner}); err != nil {
		t.Fatal(err)
	}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) == 2 }); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := (&repo.Channels{Store: h.store}).For(ctx, s.Key.Team, s.Key.Channel); err != nil || !ok || r.URL != "https://github.com/acme/shared.git" {
		t.Fatalf("the session's repository: %+v %v %v; want what ada set in the channel", r, ok, err)
	}

	// An outage longer than Slack's redeliveries: bob's next message is only caught up.
	su, err := pgxpool.New(ctx, h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	exec := func(sql string) {
		t.Helper()
		if _, err := su.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`REVOKE INSERT ON events FROM logbook_app`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	during := h.post(slackemu.Post{Channel: partner, User: bob, ThreadTS: top.TS, Text: "any news?"})
	h.failForGood(during.EventIDs...)
	exec(`GRANT INSERT ON events TO logbook_app`)
	if r := h.replies(partner, top.TS, 3); r[2].Text != "seen: can you look at the shared rollout? | and the canary too | any news?" {
		t.Fatalf("reply after the outage %q", r[2].Text)
	}
	h.answered(s.ID)
	var n int
	if err := su.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE channel_id = $1 AND thread_ts = $2`, partner, top.TS).Scan(&n); err != nil || n != 1 {
		t.Fatalf("sessions of the thread: %d (%v); want one", n, err)
	}
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 3 {
		t.Fatalf("%d user messages in the session, want 3", n)
	}
}

// A file shared in a Slack Connect channel arrives as Slack sends it there — file_access
// check_file_info, no name, no URL —: logbook asks files.info and the model gets the content,
// instead of being told it was not fetched.
func TestSlackConnectFileIsAskedOfFilesInfo(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{emu: connectEmu(), files: true})
	model.Push(fakeprovider.Reply{Text: "The partner's log says the queue is stuck."})
	logText := "2026-12-01 10:00:01 ERROR queue stuck at offset 42\n"
	top := h.post(slackemu.Post{Channel: extShared, User: bob, Text: "<@" + botUser + "> what does our log say?", Files: []slackemu.File{
		{ID: "F00000LOG7", Name: "partner.log", Mimetype: "text/plain", Content: []byte(logText)},
	}})
	s := h.session(extShared, top.TS)
	h.answered(s.ID)
	var ref session.FileRef
	if evs := h.events(s.ID, session.TypeFileRef); len(evs) != 1 || evs[0].Decode(&ref) != nil || ref.URL != "" || ref.Access != "check_file_info" {
		t.Fatalf("file_ref %+v; want the file as Slack Connect sends it (check_file_info, no URL)", ref)
	}
	ff := h.fetched(s.ID, 1)["F00000LOG7"]
	if ff.Status != session.FileStored || ff.SHA256 != session.FileHash([]byte(logText)) || ff.Name != "partner.log" {
		t.Fatalf("file_fetched %+v; want the content stored under the name files.info gave", ff)
	}
	if h.emu.Calls("files.info") == 0 {
		t.Fatal("files.info was never asked")
	}
	found := false
	for _, b := range blocksOf(model.Calls()[0], "user") {
		found = found || (b.Type == "text" && strings.Contains(b.Text, "queue stuck at offset 42"))
	}
	if !found {
		t.Fatalf("the model's request lacks the file's content: %+v", model.Calls()[0].Messages)
	}
}

// People of the other organisation in a Slack Connect channel may talk to the agent: bob's
// mention starts a session and is answered. By default they may not approve its tool calls,
// though bob asked and posted in the thread; someone of ours who posted there may. Listed in
// LOGBOOK_TOOL_APPROVERS (LOGBOOK_APPROVERS), bob may.
func TestPeopleOfAnotherOrganisationTalkButApproveOnlyWhenListed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, approvers, refused, decider string
	}{
		{"default", "", bob, ada},
		{"listed", bob, ada, bob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			approvers, err := bot.ParseApprovers(tc.approvers)
			if err != nil {
				t.Fatal(err)
			}
			emu := connectEmu()
			emu.Channels = []slackemu.Channel{{ID: general, Name: "general", ExtShared: true, SharedTeams: []string{partnerTeam}, Members: []string{ada, bob, botUser}}}
			h, model := modelHarness(t, harnessOptions{emu: emu, approval: bot.ApprovalConfig{Policy: askFor(t, "run_command=ask"), Approvers: approvers}})
			model.Push(
				fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo hi"}`}}},
				fakeprovider.Reply{Text: "done"})
			top := h.post(slackemu.Post{Channel: general, User: bob, Text: "<@" + botUser + "> say hi"})
			h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "(aside) fine by me"})
			h.click(top.TS, bot.ActionApprove, tc.refused)
			h.waitFor("a note to "+tc.refused, func() bool {
				for _, e := range h.emu.Ephemerals() {
					if e.User == tc.refused && strings.Contains(e.Text, "Only ") {
						return true
					}
				}
				return false
			})
			s := h.session(general, top.TS)
			if n := len(h.events(s.ID, session.TypeApprovalDecided)); n != 0 {
				t.Fatalf("%d decisions after a click by someone not permitted", n)
			}
			h.click(top.TS, bot.ActionApprove, tc.decider)
			if dec := decisionOf(t, h, s.ID); dec.Actor.ID != tc.decider {
				t.Fatalf("decided by %s; want %s", dec.Actor.ID, tc.decider)
			}
			h.answered(s.ID)
		})
	}
}
