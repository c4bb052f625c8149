package bot_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/codechannel"
	"github.com/logbook/logbook/bot/followup"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// codeChannelOptions are a harness whose channel's sessions check out a repository and whose
// turns have the code channel part, with two of /logbook's subcommands as its commands.
func codeChannelOptions(t *testing.T) harnessOptions {
	base, _ := gittest.Serve(t, "repo.git", map[string]string{"README.md": "# api\n"})
	return harnessOptions{repo: &sandbox.RepoSpec{URL: base + "/repo.git", Branch: "main"}, channelAdmins: []string{ada},
		partsWith: func(api *slack.Client) []part.Part {
			return []part.Part{&codechannel.Part{Slack: api, Commands: []slack.AgentCommand{
				{Name: "config", Description: "a channel's settings"}, {Name: "budget", Description: "today's spend"}}}}
		}}
}

// readsTheRepo is a model turn that reads the repository (the sandbox is provisioned: the
// session works on the repository), then answers.
func readsTheRepo(model *fakeprovider.Server, id, answer string) {
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: "read_file", Input: `{"path":"README.md"}`}}},
		fakeprovider.Reply{Text: answer})
}

// lostCreate holds the first agents.conversations.create once Slack made the channel: the
// cell that called it never hears the answer (landed is closed when the channel exists).
func lostCreate() (proxy func(w http.ResponseWriter, r *http.Request, next http.Handler), landed <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		held := false
		if strings.HasSuffix(r.URL.Path, "/agents.conversations.create") {
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

// In a channel set to code_channel (/logbook config surface code_channel), a session that
// reads the repository gets one code channel, even when the cell dies between Slack making it
// and the log recording it: the next cell asks again with the same session_id, Slack answers
// the channel it made, and the reply links it.
func TestCodeChannelIsMadeOnceThroughACrash(t *testing.T) {
	t.Parallel()
	o := codeChannelOptions(t)
	first := o
	var landed <-chan struct{}
	first.apiProxy, landed = lostCreate()
	h, model := modelHarness(t, first)
	if got := h.slash(ada, "config surface code_channel"); !strings.Contains(got, "is now `code_channel`") {
		t.Fatalf("config surface: %s", got)
	}
	if got := h.slash(ada, "config surface somewhere"); !strings.Contains(got, "want thread or code_channel") {
		t.Fatalf("a bad surface was taken: %s", got)
	}
	readsTheRepo(model, "toolu_r", "It is the api.")
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	<-landed
	h.reps[0].cancel()
	<-h.reps[0].done
	if ccs := h.emu.CodeChannels(); len(ccs) != 1 || ccs[0].SessionID != s.ID.String() {
		t.Fatalf("code channels after the crash %+v: want the one Slack made", ccs)
	}
	if req, made := h.events(s.ID, session.TypeCodeChannelRequested), h.events(s.ID, session.TypeCodeChannelCreated); len(req) != 1 || len(made) != 0 {
		t.Fatalf("after the crash: %d requested, %d created; want the request alone", len(req), len(made))
	}

	h.startReplica(o)
	h.answered(s.ID)
	ccs := h.emu.CodeChannels()
	if len(ccs) != 1 {
		t.Fatalf("code channels %+v: want one", ccs)
	}
	cc := ccs[0]
	if n := h.emu.Calls("agents.conversations.create"); n != 2 {
		t.Fatalf("agents.conversations.create called %d times: want the lost call and its retry", n)
	}
	var c session.CodeChannelCreated
	if made := h.events(s.ID, session.TypeCodeChannelCreated); len(made) != 1 || made[0].Decode(&c) != nil || c.ChannelID != cc.ID ||
		c.OriginChannel != general || c.OriginTS != top.TS || strings.Join(c.Commands, ",") != "config,budget" {
		t.Fatalf("code_channel_created %+v: want channel %s from %s/%s with its commands", c, cc.ID, general, top.TS)
	}
	if cc.OriginChannel != general || cc.OriginTS != top.TS || len(cc.Commands) != 2 || cc.Commands[0].Name != "config" {
		t.Fatalf("the code channel in Slack: %+v", cc)
	}
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "It is the api.") || !strings.Contains(string(msgs[0].Blocks), `code channel: \u003c#`+cc.ID+`\u003e`) {
		t.Fatalf("replies %+v: want the answer once, linking the code channel", msgs)
	}
	if len(cc.ContextBar) == 0 || cc.ContextBar[0].Key != "repository" || cc.ContextBar[0].Label != "repo" {
		t.Fatalf("context bar %+v: want the repository first", cc.ContextBar)
	}
}

// What people write in the code channel is the same session and the same log, answered in
// the code channel; the channel's status follows the turn (processing, then active).
func TestCodeChannelMessagesAreTheSameSession(t *testing.T) {
	t.Parallel()
	o := codeChannelOptions(t)
	o.defaults = map[string]string{"surface": "code_channel"}
	h, model := modelHarness(t, o)
	readsTheRepo(model, "toolu_r", "It is the api.")
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	var c session.CodeChannelCreated
	if made := h.events(s.ID, session.TypeCodeChannelCreated); len(made) != 1 || made[0].Decode(&c) != nil {
		t.Fatalf("code_channel_created: %+v", made)
	}
	if cc, ok := h.emu.CodeChannel(c.ChannelID); !ok || cc.Status != "active" {
		t.Fatalf("code channel %+v: want it active once the turn answered", cc)
	}

	model.Push(fakeprovider.Reply{Text: "Next, the tests."})
	msg := h.post(slackemu.Post{Channel: c.ChannelID, User: ada, Text: "what next?"})
	h.waitFor("the code channel's message in the session's log", func() bool { return len(h.events(s.ID, session.TypeUserMessage)) == 2 })
	h.answered(s.ID)
	if got := h.session(c.ChannelID, msg.TS); got.ID != s.ID {
		t.Fatalf("the code channel's message went to session %s, not %s", got.ID, s.ID)
	}
	var um session.UserMessage
	if ums := h.events(s.ID, session.TypeUserMessage); len(ums) != 2 || ums[1].Decode(&um) != nil || um.Channel != c.ChannelID || um.Text != "what next?" {
		t.Fatalf("user messages of the session: %+v", ums)
	}
	replies := h.replies(c.ChannelID, msg.TS, 1)
	if !strings.Contains(replies[0].Text, "Next, the tests.") {
		t.Fatalf("reply in the code channel: %+v", replies)
	}
	if msgs := h.botMessages(top.TS); len(msgs) != 1 {
		t.Fatalf("the thread has %d replies: the code channel's answer went there too", len(msgs))
	}
	// The model read the whole session: the first exchange, then the code channel's message.
	calls := model.Calls()
	if last := string(calls[len(calls)-1].Body); !strings.Contains(last, "what is this repository?") || !strings.Contains(last, "what next?") {
		t.Fatalf("the code channel's turn did not see the session's log: %s", last)
	}
	st := h.emu.AgentSessionStatuses(c.ChannelID, "")
	if len(st) < 3 || st[len(st)-2] != "processing" || st[len(st)-1] != "active" {
		t.Fatalf("code channel statuses %v: want processing then active for its turn", st)
	}
}

// thread, the default, makes no code channel however much the session works on the
// repository.
func TestThreadSurfaceMakesNoCodeChannel(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, codeChannelOptions(t))
	readsTheRepo(model, "toolu_r", "It is the api.")
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if len(h.events(s.ID, session.TypeSandboxProvisioned)) != 1 {
		t.Fatal("the session never worked on the repository: the check below would prove nothing")
	}
	if n := h.emu.Calls("agents.conversations.create"); n != 0 || len(h.emu.CodeChannels()) != 0 {
		t.Fatalf("%d agents.conversations.create calls in thread mode", n)
	}
	if evs := h.events(s.ID, session.TypeCodeChannelRequested, session.TypeCodeChannelCreated); len(evs) != 0 {
		t.Fatalf("code channel events in thread mode: %+v", evs)
	}
	if msgs := h.botMessages(top.TS); len(msgs) != 1 || strings.Contains(msgs[0].Text, "code channel") {
		t.Fatalf("replies %+v", msgs)
	}
}

// The code channel's context bar follows the session's pull request through CI: the
// repository first, then the branch, the pull request and CI pending once it is opened, CI
// passing once follow-through saw its checks pass (a turn that runs no model); a turn that
// changes none of it sets nothing.
func TestCodeChannelContextBarFollowsAPullRequestThroughCI(t *testing.T) {
	t.Parallel()
	const branch = "logbook/fix-parse"
	gh := newFakeGitHub(t, branch)
	o := codeChannelOptions(t)
	o.defaults = map[string]string{"surface": "code_channel"}
	o.followup = followup.New(nil, nil, followup.Config{Max: 2})
	h, model := prHarness(t, gh, o)
	readsTheRepo(model, "toolu_r", "It is the api.")
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> fix the parser"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	var c session.CodeChannelCreated
	if made := h.events(s.ID, session.TypeCodeChannelCreated); len(made) != 1 || made[0].Decode(&c) != nil {
		t.Fatalf("code_channel_created: %+v", made)
	}
	bar := func() map[string]string {
		cc, _ := h.emu.CodeChannel(c.ChannelID)
		m := map[string]string{}
		for _, it := range cc.ContextBar {
			m[it.Key] = it.Label
		}
		return m
	}
	if b := bar(); b["repository"] != "repo" || b["pull_request"] != "" || b["ci"] != "" {
		t.Fatalf("context bar before the pull request: %v", b)
	}
	// The sandbox pushed the branch (as the egress proxy records it): the pull request is the
	// thread's, and followed.
	if _, err := h.store.Append(context.Background(), s.ID, session.NewEvent{Type: session.TypeEgressConnection,
		Actor: session.Actor{Kind: session.ActorSandbox, ID: "sandbox"}, Payload: session.EgressConnection{Kind: "git", Host: "127.0.0.1", Port: 80,
			Allowed: true, Reason: "git-receive-pack", Refs: []string{"refs/heads/" + branch}, Pushed: []string{"refs/heads/" + branch}}}); err != nil {
		t.Fatal(err)
	}
	model.Push(prCall("toolu_1", branch), fakeprovider.Reply{Text: "Opened it."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "open the PR"})
	h.turns(s.ID, 2)
	h.answered(s.ID)
	if b := bar(); b["repository"] != "repo" || b["branch"] != branch || b["pull_request"] != "#1" || b["ci"] != "CI pending" {
		t.Fatalf("context bar once the pull request is open: %v", b)
	}
	cc, _ := h.emu.CodeChannel(c.ChannelID)
	if cc.ContextBarSets != 2 {
		t.Fatalf("%d context bar sets after two turns that each changed it once: the turn's start set an unchanged bar", cc.ContextBarSets)
	}

	looker := followup.New(h.store, forge.NewGitHub(gh.URL, "ghp_test", nil), followup.Config{Log: zerolog.Nop()})
	followed, err := h.store.FollowedBranch(context.Background(), "acme/api", branch)
	if err != nil || len(followed) != 1 {
		t.Fatalf("followed %+v, %v", followed, err)
	}
	head := "b2" + strings.Repeat("0", 38)
	gh.SetHead(branch, head)
	gh.AddCheckRun(head, forgetest.Check{Name: "test", Conclusion: "success"})
	if _, err := looker.Look(context.Background(), followed[0], followup.Source{Kind: "poll"}); err != nil {
		t.Fatal(err)
	}
	h.turns(s.ID, 3)
	h.waitFor("the success said", func() bool {
		r := h.emu.BotReplies(general, top.TS)
		return len(r) == 3 && strings.Contains(r[2].Text, "All checks pass")
	})
	if b := bar(); b["ci"] != "CI passing" || b["pull_request"] != "#1" {
		t.Fatalf("context bar once CI passed: %v", b)
	}
	if cc, _ := h.emu.CodeChannel(c.ChannelID); cc.ContextBarSets != 3 || len(cc.ContextBar) > 5 {
		t.Fatalf("context bar sets %d (want 3), items %+v", cc.ContextBarSets, cc.ContextBar)
	}
}

// A call asked for in the code channel waits for approval there: its card is posted under the
// message that asked, a click on it decides, and meanwhile the code channel's status is
// suspended; the decision sets it processing again, and the answer active.
func TestCodeChannelStatusWaitsForApproval(t *testing.T) {
	t.Parallel()
	o := codeChannelOptions(t)
	o.defaults = map[string]string{"surface": "code_channel"}
	o.approval = bot.ApprovalConfig{Policy: askFor(t, "run_command=ask")}
	h, model := modelHarness(t, o)
	readsTheRepo(model, "toolu_r", "It is the api.")
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	var c session.CodeChannelCreated
	if made := h.events(s.ID, session.TypeCodeChannelCreated); len(made) != 1 || made[0].Decode(&c) != nil {
		t.Fatalf("code_channel_created: %+v", made)
	}
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_t", Name: "run_command", Input: `{"command":"echo tested"}`}}},
		fakeprovider.Reply{Text: "Tested."})
	msg := h.post(slackemu.Post{Channel: c.ChannelID, User: ada, Text: "run the tests"})
	// The approval card is where the person asked: in the code channel, under their message.
	var card slackemu.Message
	h.waitFor("the approval card in the code channel", func() bool {
		for _, m := range h.emu.BotReplies(c.ChannelID, msg.TS) {
			var md struct {
				EventType string `json:"event_type"`
			}
			if json.Unmarshal(m.Metadata, &md) == nil && md.EventType == bot.ApprovalMetadataType {
				card = m
				return true
			}
		}
		return false
	})
	if err := h.emu.Wait(h.waitCtx(), func() bool { cc, _ := h.emu.CodeChannel(c.ChannelID); return cc.Status == "suspended" }); err != nil {
		t.Fatalf("the code channel while the call waits: %v", err)
	}
	if n := len(h.cards(top.TS)); n != 0 {
		t.Fatalf("%d approval cards in the session's thread: want the code channel's alone", n)
	}
	if _, err := h.emu.ClickButton(slackemu.Click{Channel: c.ChannelID, TS: card.TS, ActionID: bot.ActionApprove, User: ada}); err != nil {
		t.Fatal(err)
	}
	if r := h.toolResult(s.ID, "toolu_t"); r.IsError || !strings.Contains(r.Content, "tested") {
		t.Fatalf("the approved call: %+v", r)
	}
	h.waitFor("the card shows the decision", func() bool {
		for _, m := range h.emu.BotReplies(c.ChannelID, msg.TS) {
			if m.TS == card.TS {
				return strings.Contains(cardText(m), "Approved by <@"+ada+">") && !strings.Contains(cardText(m), bot.ActionApprove)
			}
		}
		return false
	})
	h.waitFor("the code channel's message answered", func() bool { return len(h.events(s.ID, session.TypeTurnCompleted)) == 2 })
	st := h.emu.AgentSessionStatuses(c.ChannelID, "")
	if n := len(st); n < 4 || strings.Join(st[n-4:], ",") != "processing,suspended,processing,active" {
		t.Fatalf("code channel statuses %v: want processing, suspended, processing, active for the turn that waited", st)
	}
}

// A code channel Slack refuses (not_allowed) costs the reply nothing: it goes out without the
// link, the request stays on the record, and a later turn asks again and links the channel.
func TestCodeChannelRefusedIsAskedAgainLater(t *testing.T) {
	t.Parallel()
	o := codeChannelOptions(t)
	o.defaults = map[string]string{"surface": "code_channel"}
	h, model := modelHarness(t, o)
	h.emu.SetCodeChannelsAllowed(false)
	readsTheRepo(model, "toolu_r", "It is the api.")
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what is this repository?"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if n := h.emu.Calls("agents.conversations.create"); n != 1 {
		t.Fatalf("agents.conversations.create called %d times", n)
	}
	if req, made := h.events(s.ID, session.TypeCodeChannelRequested), h.events(s.ID, session.TypeCodeChannelCreated); len(req) != 1 || len(made) != 0 {
		t.Fatalf("refused: %d requested, %d created", len(req), len(made))
	}
	if msgs := h.botMessages(top.TS); len(msgs) != 1 || !strings.Contains(msgs[0].Text, "It is the api.") || strings.Contains(string(msgs[0].Blocks), "code channel") {
		t.Fatalf("replies %+v: want the answer, without a link", msgs)
	}

	h.emu.SetCodeChannelsAllowed(true)
	model.Push(fakeprovider.Reply{Text: "Still the api."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "and now?"})
	h.turns(s.ID, 2)
	h.answered(s.ID)
	var c session.CodeChannelCreated
	if made := h.events(s.ID, session.TypeCodeChannelCreated); len(made) != 1 || made[0].Decode(&c) != nil || len(h.emu.CodeChannels()) != 1 {
		t.Fatalf("code_channel_created %+v, code channels %+v", made, h.emu.CodeChannels())
	}
	if msgs := h.botMessages(top.TS); len(msgs) != 2 || !strings.Contains(string(msgs[1].Blocks), c.ChannelID) {
		t.Fatalf("replies %+v: want the second linking the code channel", msgs)
	}
}
