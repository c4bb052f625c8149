package bot_test

import (
	"context"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/fork"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// lateSurface hands envelopes to a surface built once the harness (its store, its Slack) is.
type lateSurface struct{ p atomic.Pointer[fork.Surface] }

func (l *lateSurface) Interaction(ctx context.Context, cb slack.InteractionCallback) bool {
	if s := l.p.Load(); s != nil {
		return s.Interaction(ctx, cb)
	}
	return false
}

func (l *lateSurface) Event(ctx context.Context, ev slackevents.EventsAPIEvent) bool {
	if s := l.p.Load(); s != nil {
		return s.Event(ctx, ev)
	}
	return false
}

// forkHarness is a model harness whose surfaces answer the branch_from_here shortcut.
func forkHarness(t *testing.T, o harnessOptions) (*harness, *fakeprovider.Server) {
	t.Helper()
	late := &lateSurface{}
	o.surfaces = []bot.Surface{late}
	h, model := modelHarness(t, o)
	api := h.botAPI()
	late.p.Store(&fork.Surface{
		Forker:  &fork.Forker{Store: h.store, Starter: bot.NewStarter(api, h.store, func(session.ID) {}, "T0000001"), Link: fork.SlackLink(api)},
		Dir:     directory.New(api, time.Millisecond),
		Members: api,
		Log:     zerolog.New(zerolog.NewTestWriter(t)),
	})
	return h, model
}

// shortcut picks "Branch from here" on a message and returns the ephemeral answer.
func (h *harness) shortcut(channel, ts, user string) string {
	h.t.Helper()
	before := len(h.emu.Ephemerals())
	if _, err := h.emu.SendMessageShortcut(slackemu.MessageShortcut{CallbackID: fork.Shortcut, Channel: channel, TS: ts, User: user}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) > before }); err != nil {
		h.t.Fatalf("no answer to the branch shortcut: %v", err)
	}
	return h.emu.Ephemerals()[before].Text
}

func callText(c fakeprovider.Call) string {
	var sb strings.Builder
	for _, m := range c.Messages {
		for _, b := range m.Blocks {
			sb.WriteString(m.Role + ": " + b.Text + "\n")
		}
	}
	return sb.String()
}

// "Branch from here" on the bot's first reply starts a new thread in the same channel whose
// session begins with session_forked (the parent, the seq of the reply's delivered record, the
// hash of the parent's event there). The fork's model request holds the parent's messages
// through that seq and none after; the parent's thread gets no message and its log nothing.
func TestBranchFromHereContinuesTheParentsConversationThroughTheSeq(t *testing.T) {
	t.Parallel()
	h, model := forkHarness(t, harnessOptions{})
	model.Push(fakeprovider.Reply{Text: "Answer one: roll back the migration."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> the deploy timed out at the migration step"})
	parent := h.session(general, top.TS)
	h.turns(parent.ID, 1)
	first := h.replies(general, top.TS, 1)[0]
	model.Push(fakeprovider.Reply{Text: "Answer two: patched the lock timeout."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> second question: patch it instead"})
	h.turns(parent.ID, 2)
	h.replies(general, top.TS, 2)
	parentEvents := h.events(parent.ID)
	parentReplies := len(h.emu.BotReplies(general, top.TS))

	answer := h.shortcut(general, first.TS, ada)
	if !strings.Contains(answer, "Branched at event") || !strings.Contains(answer, "the new thread") {
		t.Fatalf("shortcut answer: %q", answer)
	}
	forks, err := h.store.Forks(h.waitCtx(), parent.ID)
	if err != nil || len(forks) != 1 || forks[0].Channel != general {
		t.Fatalf("forks of the parent: %+v, %v", forks, err)
	}
	fk := forks[0]
	post, ok := h.emu.Message(general, fk.ThreadTS)
	if !ok || !strings.Contains(post.Text, "Branched by <@"+ada+">") || !strings.Contains(post.Text, "at event") {
		t.Fatalf("the fork's top-level post: %+v", post)
	}
	evs := h.events(fk.Session)
	var ref session.SessionForked
	if len(evs) != 1 || evs[0].Type != session.TypeSessionForked || evs[0].Decode(&ref) != nil {
		t.Fatalf("the fork's log: %+v", evs)
	}
	var d session.Delivered
	at := parentEvents[ref.Seq-1]
	if ref.Parent != parent.ID || at.Type != session.TypeDelivered || at.Decode(&d) != nil || d.TS[0] != first.TS ||
		ref.Hash != hex.EncodeToString(at.Hash) || ref.At != first.TS || ref.By != ada {
		t.Fatalf("session_forked %+v; want the parent's delivered record of %s (event %+v)", ref, first.TS, at)
	}

	model.Push(fakeprovider.Reply{Text: "Fork answer: try the other fix."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: fk.ThreadTS, Text: "<@" + botUser + "> try the other fix"})
	h.turns(fk.Session, 1)
	h.replies(general, fk.ThreadTS, 1)
	calls := model.Calls()
	var req string
	for _, c := range calls {
		if strings.Contains(callText(c), "try the other fix") && !strings.Contains(c.System, "title") {
			req = callText(c)
			break
		}
	}
	for _, want := range []string{"the deploy timed out at the migration step", "Answer one: roll back the migration.", "try the other fix"} {
		if !strings.Contains(req, want) {
			t.Errorf("the fork's model request lacks %q:\n%s", want, req)
		}
	}
	for _, after := range []string{"second question", "Answer two"} {
		if strings.Contains(req, after) {
			t.Errorf("the fork's model request holds %q, after the seq it was branched at:\n%s", after, req)
		}
	}
	if got := h.events(parent.ID); len(got) != len(parentEvents) {
		t.Errorf("the parent's log grew from %d to %d events", len(parentEvents), len(got))
	}
	if got := len(h.emu.BotReplies(general, top.TS)); got != parentReplies {
		t.Errorf("the parent's thread got %d bot messages, had %d", got, parentReplies)
	}
	for _, e := range h.events(fk.Session) {
		if e.Type == session.TypeUserMessage && strings.Contains(string(e.Payload), "deploy timed out") {
			t.Errorf("the fork copied the parent's message: %+v", e)
		}
	}
}

// Only a member of the channel may branch, and only while the channel is public: each refusal
// is an ephemeral note that says why, and no thread is started.
func TestBranchFromHereRefusesNonMembersAndPrivateChannels(t *testing.T) {
	t.Parallel()
	h, model := forkHarness(t, harnessOptions{})
	model.Push(fakeprovider.Reply{Text: "Noted."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> remember the outage"})
	parent := h.session(general, top.TS)
	h.turns(parent.ID, 1)
	h.emu.AddUser(slackemu.User{ID: "U0000077", Name: "visitor", RealName: "Visitor"})
	if got := h.shortcut(general, top.TS, "U0000077"); !strings.Contains(got, "Only a member of this channel can branch") {
		t.Errorf("non-member: %q", got)
	}
	if _, err := h.emu.ConvertToPrivate(general, ada); err != nil {
		t.Fatal(err)
	}
	if got := h.shortcut(general, top.TS, ada); !strings.Contains(got, "not public") {
		t.Errorf("now-private channel: %q", got)
	}
	if forks, err := h.store.Forks(h.waitCtx(), parent.ID); err != nil || len(forks) != 0 {
		t.Errorf("forks after refusals: %+v, %v", forks, err)
	}
}

// A fork's sandbox starts from the newest work its parent saved at or before the fork's seq:
// the file the parent wrote in its first turn is there as it was then, not as the parent's
// second turn left it.
func TestForkSandboxStartsFromTheParentsWorkAtTheSeq(t *testing.T) {
	t.Parallel()
	base, _ := gittest.Serve(t, "repo.git", map[string]string{"main.go": "package main\n"})
	h, model := forkHarness(t, harnessOptions{repo: &sandbox.RepoSpec{URL: base + "/repo.git", Branch: "main"}})
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "write_file", Input: `{"path":"plan.txt","content":"plan A\n"}`}}},
		fakeprovider.Reply{Text: "Wrote plan A."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> write plan A"})
	parent := h.session(general, top.TS)
	h.turns(parent.ID, 1)
	first := h.replies(general, top.TS, 1)[0]
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "write_file", Input: `{"path":"plan.txt","content":"plan B\n"}`}}},
		fakeprovider.Reply{Text: "Wrote plan B."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> now plan B"})
	h.turns(parent.ID, 2)
	h.replies(general, top.TS, 2)

	if got := h.shortcut(general, first.TS, ada); !strings.Contains(got, "Branched at event") {
		t.Fatalf("shortcut: %q", got)
	}
	forks, err := h.store.Forks(h.waitCtx(), parent.ID)
	if err != nil || len(forks) != 1 {
		t.Fatalf("forks: %+v, %v", forks, err)
	}
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_3", Name: "read_file", Input: `{"path":"plan.txt"}`}}},
		fakeprovider.Reply{Text: "It says plan A."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: forks[0].ThreadTS, Text: "<@" + botUser + "> what does the plan say?"})
	h.turns(forks[0].Session, 1)
	if res := h.toolResult(forks[0].Session, "toolu_3"); res.IsError || !strings.Contains(res.Content, "plan A") || strings.Contains(res.Content, "plan B") {
		t.Fatalf("the fork read plan.txt as %+v; want the parent's plan A", res)
	}
}
