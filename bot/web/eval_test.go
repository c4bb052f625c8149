package web_test

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

// The page of an eval record sets the recorded turn beside the replayed one: the replies, the
// tool calls and results, and the table of replies, tool calls, tokens and cost, linking the
// original's transcript. A session that is no eval record is not found there.
func TestEvalPageShowsRecordedAndReplayedSideBySide(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	orig, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000900"})
	if err != nil {
		t.Fatal(err)
	}
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	if _, err := f.store.Append(f.ctx, orig.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: orig.Key.ThreadTS, TS: orig.Key.ThreadTS, User: "U0000001", Text: "why did the deploy fail?"}},
		session.NewEvent{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: 1}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "The migration timed out.", Turn: 2,
			Usage: &session.Usage{Provider: "anthropic", Model: "claude-old", InputTokens: 500, OutputTokens: 20}}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{Turn: 2, Status: "ok", Through: 1}},
	); err != nil {
		t.Fatal(err)
	}
	rec, err := f.store.OpenReplay(f.ctx, orig)
	if err != nil {
		t.Fatal(err)
	}
	link, err := f.store.ReplayReference(f.ctx, orig, 1)
	if err != nil {
		t.Fatal(err)
	}
	link.Turn, link.Model, link.Tools, link.Instructions = 2, "anthropic:claude-new", "recorded", "Name the runbook."
	brainActor := session.Actor{Kind: session.ActorSystem, ID: "brain"}
	if _, err := f.store.Append(f.ctx, rec.ID,
		session.NewEvent{Type: session.TypeReplayStarted, Actor: cell, Payload: link},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Turn: 2, ToolCallIDs: []string{"toolu_1"}}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_1", Name: "run_command", Input: []byte(`{"command":"kubectl logs"}`)}},
		session.NewEvent{Type: session.TypeToolResult, Actor: brainActor, Payload: session.ToolResult{CallID: "toolu_1", Content: "refused: this is a what-if replay", IsError: true}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "See the runbook: the lock timed out.", Turn: 2,
			Usage: &session.Usage{Provider: "anthropic", Model: "claude-new", InputTokens: 2100, OutputTokens: 160}}},
		session.NewEvent{Type: session.TypeReplayCompleted, Actor: cell, Payload: session.ReplayCompleted{Status: "ok", RecordedThrough: 4, Currency: "USD",
			Recorded: session.EvalSide{Replies: 1, ModelCalls: 1, InputTokens: 500, OutputTokens: 20, CostMicros: 1800},
			Replayed: session.EvalSide{Replies: 1, ToolCalls: 1, ModelCalls: 2, InputTokens: 2100, OutputTokens: 160, CostMicros: 8700},
			New:      1, ReplyChanged: true}},
	); err != nil {
		t.Fatal(err)
	}
	status, body, _ := f.get("/evals/"+rec.ID.String(), asAlice)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	rec1, rep1 := strings.Index(body, "<h2>Recorded</h2>"), strings.Index(body, "<h2>Replayed</h2>")
	if rec1 < 0 || rep1 < rec1 {
		t.Fatalf("no recorded and replayed columns:\n%s", body)
	}
	recorded, replayed := body[rec1:rep1], body[rep1:]
	if !strings.Contains(recorded, "The migration timed out.") || strings.Contains(recorded, "See the runbook") ||
		!strings.Contains(replayed, "See the runbook: the lock timed out.") || !strings.Contains(replayed, "run_command {&#34;command&#34;: &#34;kubectl logs&#34;}") ||
		!strings.Contains(replayed, "refused: this is a what-if replay") {
		t.Fatalf("columns:\nrecorded %s\nreplayed %s", recorded, replayed)
	}
	for _, want := range []string{`href="/sessions/` + orig.ID.String() + `"`, "anthropic:claude-new", "Name the runbook.", "<strong>changed</strong>",
		"1: 0 the same, 0 different, 1 new (0 recorded not made)", "0.0018", "0.0087", "2100", "any other refused (recorded)"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if status, _, _ := f.get("/evals/"+orig.ID.String(), asAlice); status != 404 {
		t.Errorf("a thread's session as an eval record: %d", status)
	}
}
