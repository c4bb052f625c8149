package bot_test

import (
	"context"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// slash runs a slash command in general as user and returns its answer.
func (h *harness) slash(user, text string) string {
	h.t.Helper()
	before := len(h.emu.Ephemerals())
	if _, err := h.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: text, User: user, Channel: general}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) > before }); err != nil {
		h.t.Fatalf("no answer to %q: %v", text, err)
	}
	return h.emu.Ephemerals()[before].Text
}

// turnSettings is the session's turn_settings records, oldest first.
func (h *harness) turnSettings(id session.ID) []session.TurnSettings {
	h.t.Helper()
	var out []session.TurnSettings
	for _, e := range h.events(id, session.TypeTurnSettings) {
		var ts session.TurnSettings
		if err := e.Decode(&ts); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, ts)
	}
	return out
}

// A channel's instructions, model and approvals policy change with /logbook config (an
// admin's, each change a record with its old value); the thread's next turn's model request
// shows them, and the turn records the settings it ran under.
func TestConfigChangesTheNextTurnsModelInstructionsAndApprovals(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{channelAdmins: []string{ada},
		defaults: map[string]string{settings.Model: "anthropic:claude-test"}})
	if got := h.slash(grace, "config"); !strings.Contains(got, "`model`: `anthropic:claude-test` — default") ||
		!strings.Contains(got, "`instructions`: (none)") {
		t.Fatalf("config before: %s", got)
	}
	model.Push(fakeprovider.Reply{Text: "Hello."})
	top := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> hi"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	first := model.Calls()[0]
	if !strings.Contains(string(first.Body), `"model":"claude-test"`) || strings.Contains(first.System, "channel_instructions") {
		t.Fatalf("the first request: model or instructions wrong:\n%s", first.System)
	}

	if got := h.slash(grace, "config instructions Answer in French."); !strings.Contains(got, "Only logbook's admins") {
		t.Fatalf("a non-admin set a setting: %s", got)
	}
	for _, bad := range []string{"config model nonsense", "config approvals run_command=maybe", "config thread_replies loud", "config daily_budget lots", "config colour blue"} {
		if got := h.slash(ada, bad); !strings.Contains(got, "not") && !strings.Contains(got, "no setting") {
			t.Errorf("%q accepted: %s", bad, got)
		}
	}
	if got := h.slash(ada, "config instructions Answer in French."); !strings.Contains(got, "is now `Answer in French.`; it was the default") {
		t.Fatalf("set instructions: %s", got)
	}
	if got := h.slash(ada, "config model anthropic:claude-other"); !strings.Contains(got, "it was the default") {
		t.Fatalf("set model: %s", got)
	}
	h.slash(ada, "config approvals write_file=ask")
	if got := h.slash(ada, "config approvals run_command=deny"); !strings.Contains(got, "it was `write_file=ask`") {
		t.Fatalf("the old value: %s", got)
	}
	if got := h.slash(grace, "config approvals"); !strings.Contains(got, "<@"+ada+">: `write_file=ask` → `run_command=deny`") ||
		!strings.Contains(got, "default → `write_file=ask`") {
		t.Fatalf("history: %s", got)
	}

	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_ls", Name: "run_command", Input: `{"command":"ls"}`}}},
		fakeprovider.Reply{Text: "Voilà."})
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "<@" + botUser + "> list the files"})
	h.turns(s.ID, 2)
	next := model.Calls()[1]
	if !strings.Contains(string(next.Body), `"model":"claude-other"`) {
		t.Fatalf("the next request's model: %s", next.Body[:min(len(next.Body), 200)])
	}
	if !strings.Contains(next.System, "<channel_instructions>\nAnswer in French.\n</channel_instructions>") ||
		strings.Index(next.System, "Tools:") > strings.Index(next.System, "channel_instructions") {
		t.Fatalf("the instructions, after logbook's rules:\n%s", next.System)
	}
	if r := h.toolResult(s.ID, "toolu_ls"); !r.IsError || !strings.Contains(r.Content, "this channel's approvals setting") {
		t.Fatalf("run_command under run_command=deny: %+v", r)
	}
	recs := h.turnSettings(s.ID)
	if len(recs) != 2 {
		t.Fatalf("%d turn_settings; want 2: %+v", len(recs), recs)
	}
	got := recs[1]
	if got.Model != "anthropic:claude-other" || got.Instructions != "Answer in French." || got.Approvals != "run_command=deny" ||
		!slices.Equal(got.Set, []string{settings.Model, settings.Instructions, settings.Approvals}) || len(got.Hash) != 64 || got.Hash == recs[0].Hash {
		t.Fatalf("turn_settings: %+v (first %+v)", got, recs[0])
	}
	if recs[0].Model != "anthropic:claude-test" || len(recs[0].Set) != 0 {
		t.Fatalf("first turn_settings: %+v", recs[0])
	}
	// Each turn names the ledger position it ran under (issue 49): none before any change; the
	// four changes' head (its seq and hash) after them.
	ledger, err := h.store.Ledger(context.Background(), general)
	if err != nil {
		t.Fatal(err)
	}
	changes := h.events(ledger)
	if len(changes) != 4 || changes[3].Type != session.TypeSettingChanged {
		t.Fatalf("the channel's ledger: %d events; want the 4 changes", len(changes))
	}
	if recs[0].LedgerSeq != 0 || recs[0].LedgerHash != "" || got.LedgerSeq != 4 || got.LedgerHash != hex.EncodeToString(changes[3].Hash) {
		t.Fatalf("ledger positions of the turns: %d %q, then %d %q; want none, then 4 %x", recs[0].LedgerSeq, recs[0].LedgerHash,
			got.LedgerSeq, got.LedgerHash, changes[3].Hash)
	}

	// Back to the default: the next turn runs the default model.
	if got := h.slash(ada, "config model default"); !strings.Contains(got, "default again") {
		t.Fatalf("reset: %s", got)
	}
	model.Push(fakeprovider.Reply{Text: "Ok."})
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "<@" + botUser + "> thanks"})
	h.turns(s.ID, 3)
	if last := model.Calls()[len(model.Calls())-1]; !strings.Contains(string(last.Body), `"model":"claude-test"`) {
		t.Fatalf("after the reset: %s", last.Body[:min(len(last.Body), 200)])
	}

	// The thread-replies mode: with mentions, a reply without one is recorded, not answered.
	calls := len(model.Calls())
	h.slash(ada, "config thread_replies mentions")
	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "and the tests?"})
	h.turns(s.ID, 4)
	if got := h.notAddressed(s.ID); len(got) != 1 || got[0] != "not_mentioned" || len(model.Calls()) != calls {
		t.Fatalf("under thread_replies=mentions: not addressed %v, %d model calls (had %d)", got, len(model.Calls()), calls)
	}
}

// A note added in one thread (by the agent's remember tool, and by a person with /logbook
// remember) is offered in the channel's new thread; a forgotten one is not offered again.
func TestMemoryNoteOfferedInANewThreadUntilForgotten(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{channelAdmins: []string{ada}})
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_m", Name: "remember", Input: `{"text":"The deploy freeze starts on Friday."}`}}},
		fakeprovider.Reply{Text: "Noted."})
	a := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> remember that the deploy freeze starts on Friday"})
	sa := h.session(general, a.TS)
	h.turns(sa.ID, 1)
	if r := h.toolResult(sa.ID, "toolu_m"); r.IsError || !strings.Contains(r.Content, "remembered as note") {
		t.Fatalf("remember: %+v", r)
	}
	got := h.slash(grace, "remember Staging is at staging.example.com")
	if !strings.Contains(got, "Remembered as note") {
		t.Fatalf("/logbook remember: %s", got)
	}
	list := h.slash(ada, "memory")
	agentNote := regexp.MustCompile(`• (\d+) — The deploy freeze starts on Friday\. \(the agent in session ` + sa.ID.String()).FindStringSubmatch(list)
	if agentNote == nil || !strings.Contains(list, "Staging is at staging.example.com (<@"+grace+">") {
		t.Fatalf("/logbook memory: %s", list)
	}

	model.Push(fakeprovider.Reply{Text: "Friday."})
	b := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> when is the freeze?"})
	sb := h.session(general, b.TS)
	h.turns(sb.ID, 1)
	sys := model.Calls()[len(model.Calls())-1].System
	staging, freeze := strings.Index(sys, "Staging is at staging.example.com"), strings.Index(sys, "The deploy freeze starts on Friday.")
	if staging < 0 || freeze < 0 || staging > freeze || !strings.Contains(sys, "by the agent in session "+sa.ID.String()) {
		t.Fatalf("the new thread's system prompt (newest first):\n%s", sys)
	}
	if recs := h.turnSettings(sb.ID); len(recs) != 1 || len(recs[0].Memory) != 2 {
		t.Fatalf("turn_settings of the new thread: %+v", recs)
	}

	if got := h.slash(grace, "forget "+agentNote[1]); !strings.Contains(got, "is forgotten") {
		t.Fatalf("forget: %s", got)
	}
	if got := h.slash(grace, "forget "+agentNote[1]); !strings.Contains(got, "removed already") {
		t.Fatalf("forget twice: %s", got)
	}
	if got := h.slash(grace, "memory"); strings.Contains(got, "deploy freeze") {
		t.Fatalf("listed after forget: %s", got)
	}
	model.Push(fakeprovider.Reply{Text: "No idea."})
	c := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> and now?"})
	sc := h.session(general, c.TS)
	h.turns(sc.ID, 1)
	sys = model.Calls()[len(model.Calls())-1].System
	if strings.Contains(sys, "deploy freeze") || !strings.Contains(sys, "Staging is at staging.example.com") {
		t.Fatalf("offered after forget:\n%s", sys)
	}
}
