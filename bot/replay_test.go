package bot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/replay"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// replayOf replays session id from the harness's store under cfg, and checks that it
// appended nothing.
func (h *harness) replayOf(id session.ID, cfg replay.Config) replay.Result {
	h.t.Helper()
	ctx := context.Background()
	sess, err := h.store.Session(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	evs := h.events(id)
	res, err := replay.Session(ctx, sess, evs, cfg)
	if err != nil {
		h.t.Fatalf("replay %s: %v", id, err)
	}
	if after := h.events(id); len(after) != len(evs) {
		h.t.Fatalf("replay appended to the session: %d events before, %d after", len(evs), len(after))
	}
	return res
}

// replayIdentical replays each session and fails the test unless today's code makes the
// recorded decisions: the end-to-end tests call it on the sessions they produced.
func (h *harness) replayIdentical(policy bot.ToolApproval, ids ...session.ID) []replay.Result {
	h.t.Helper()
	var out []replay.Result
	for _, id := range ids {
		res := h.replayOf(id, replay.Config{Policy: policy})
		if !res.Identical() {
			h.t.Fatalf("replay of %s: %s", id, res)
		}
		out = append(out, res)
	}
	return out
}

// approvalSession is a session of two turns through the real brain and the fake model: a
// command a person approves, a file written and read back without asking.
func approvalSession(t *testing.T) (*harness, *fakeprovider.Server, session.ID, bot.ToolApproval) {
	t.Helper()
	policy := askFor(t, "run_command=ask")
	h, model := modelHarness(t, harnessOptions{approval: bot.ApprovalConfig{Policy: policy}})
	model.Push(
		fakeprovider.Reply{Text: "Let me look.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo replay-$((40+2))"}`}}},
		fakeprovider.Reply{Text: "It printed replay-42."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> print something"})
	h.click(top.TS, bot.ActionApprove, ada)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
			{ID: "toolu_2", Name: "write_file", Input: `{"path":"notes.txt","content":"one\ntwo\n"}`},
			{ID: "toolu_3", Name: "read_file", Input: `{"path":"notes.txt"}`}}},
		fakeprovider.Reply{Text: "notes.txt holds two lines."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> now write notes.txt"})
	h.turns(s.ID, 2)
	return h, model, s.ID, policy
}

// A recorded session with tool calls and an approval replays identically: the same model
// requests (by hash), tool calls, approval and replies, with no model call and nothing
// appended.
func TestReplayIdenticalWithToolsAndApproval(t *testing.T) {
	t.Parallel()
	h, model, id, policy := approvalSession(t)
	calls := len(model.Calls())
	res := h.replayIdentical(policy, id)[0]
	if res.Turns != 2 || res.Requests != 4 || res.Unhashed != 0 || res.ToolCalls != 3 || res.Approvals != 1 {
		t.Fatalf("replay compared %+v; want 2 turns, 4 hashed requests, 3 tool calls, 1 approval", res)
	}
	evs := h.events(id)
	if res.Through != evs[len(evs)-1].Seq || !strings.HasPrefix(res.String(), "identical through seq ") {
		t.Fatalf("verdict %q; want identical through seq %d", res, evs[len(evs)-1].Seq)
	}
	if n := len(model.Calls()); n != calls {
		t.Fatalf("the replay called the model: %d calls, %d before", n, calls)
	}
}

// A deliberate change to how history is built makes the replay report the first request
// that differs, with both sides; a policy that no longer asks is an approval divergence.
func TestReplayReportsTheFirstDivergence(t *testing.T) {
	t.Parallel()
	h, _, id, policy := approvalSession(t)
	evs := h.events(id)
	firstReply := int64(0)
	for _, e := range evs {
		var m session.AssistantMessage
		if e.Type == session.TypeAssistantMessage && e.Decode(&m) == nil && m.Turn > 0 && len(m.ToolCallIDs) == 0 {
			firstReply = e.Seq // the second request of turn 1 is the first to hold a tool result
			break
		}
	}
	edit := func(msgs []brain.Message) []brain.Message {
		for i, m := range msgs {
			for j, b := range m.Blocks {
				if b.ToolResult != nil { // the change: a tool result as history shows it
					r := *b.ToolResult
					r.Content = strings.TrimSpace(r.Content) + " (edited)"
					msgs[i].Blocks[j].ToolResult = &r
				}
			}
		}
		return msgs
	}
	res := h.replayOf(id, replay.Config{Policy: policy, Brain: brain.Config{EditHistory: edit}})
	d := res.Divergence
	if d == nil || d.What != "model request" || d.Seq != firstReply || res.Through != firstReply-1 {
		t.Fatalf("replay with an edited history: %+v %+v; want a model request divergence at seq %d", res, d, firstReply)
	}
	out := res.String()
	if !strings.HasPrefix(out, "diverged at seq ") || !strings.Contains(out, "recorded: request ") || !strings.Contains(out, "replayed: request ") {
		t.Fatalf("verdict does not show both sides:\n%s", out)
	}

	res = h.replayOf(id, replay.Config{Policy: askFor(t, "run_command=allow")})
	if d := res.Divergence; d == nil || d.What != "approval" || !strings.Contains(d.Replayed, "nobody is asked") {
		t.Fatalf("replay under a policy that does not ask: %+v; want an approval divergence", res)
	}
	res = h.replayOf(id, replay.Config{Policy: askFor(t, "*=ask")})
	if d := res.Divergence; d == nil || d.What != "approval" || !strings.Contains(d.Replayed, "asks a person before write_file") {
		t.Fatalf("replay under a policy that asks for every tool: %+v; want an approval divergence", res)
	}
}
