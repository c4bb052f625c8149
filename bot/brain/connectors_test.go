package brain_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/session"
)

// fakeConnectors offers two MCP tools, lookup (read-only) and delete_item, and records the
// calls made.
type fakeConnectors struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeConnectors) Tools(context.Context) []connectors.Tool {
	obj := map[string]any{"type": "object"}
	return []connectors.Tool{
		{Name: "mcp__inc__lookup", Server: "inc", Tool: "lookup", Description: "Look up.", Schema: obj, ReadOnly: true},
		{Name: "mcp__inc__delete_item", Server: "inc", Tool: "delete_item", Description: "Delete.", Schema: obj},
	}
}

func (f *fakeConnectors) Call(_ context.Context, name string, input json.RawMessage) connectors.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+string(input))
	return connectors.Result{Content: "result of " + name}
}

// A crash mid-call of connector tools: the read-only one, whose server says so, is called
// again and its real result recorded; the other is never repeated, and the model is told its
// outcome is unknown. A call with a recorded result is not repeated either.
func TestConnectorCrashMidCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	first, _ := e.user("look INC-1 up, delete X and look INC-2 up")
	turn1 := e.startTurn(first)
	call := func(id, name, input string, ro bool) session.NewEvent {
		return session.NewEvent{Type: session.TypeToolCall, Actor: bot, IdempotencyKey: "tool_call:" + id, Payload: session.ToolCall{
			CallID: id, Name: name, Input: []byte(input), Server: "inc", Tool: strings.TrimPrefix(name, "mcp__inc__"), ReadOnly: ro}}
	}
	e.append(
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
			Text: "On it.", ToolCallIDs: []string{"toolu_0", "toolu_1", "toolu_2"}, Turn: turn1}},
		call("toolu_0", "mcp__inc__lookup", `{"id":"INC-2"}`, true),
		call("toolu_1", "mcp__inc__lookup", `{"id":"INC-1"}`, true),
		call("toolu_2", "mcp__inc__delete_item", `{"id":"X"}`, false),
	)
	e.append(session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSystem, ID: "brain"},
		Payload: session.ToolResult{CallID: "toolu_0", Content: "INC-2 recorded before the crash"}})
	// The process died here.
	turn2 := e.startTurn(first)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(fakeprovider.Reply{Text: "INC-1 looked up; whether X was deleted is unknown."})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	conns := &fakeConnectors{}
	tr := e.turn(nil, turn2)
	tr.Toolsets = []brain.Toolset{connectors.Toolset(conns)}
	if _, err := b.Run(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	if got := strings.ReplaceAll(strings.Join(conns.calls, "; "), " ", ""); got != `mcp__inc__lookup{"id":"INC-1"}` {
		t.Fatalf("calls made again: %s", got)
	}
	results := map[string]session.ToolResult{}
	for _, ev := range e.after(turn2) {
		if ev.Type == session.TypeToolResult {
			r := decode[session.ToolResult](t, ev)
			results[r.CallID] = r
		}
	}
	if r := results["toolu_1"]; r.Content != "result of mcp__inc__lookup" || r.IsError || r.Synthetic || r.Server != "inc" || r.Tool != "lookup" {
		t.Errorf("read-only call's result %+v", r)
	}
	if r := results["toolu_2"]; !r.Synthetic || !r.IsError || r.Content != "interrupted; outcome unknown" {
		t.Errorf("the other call's result %+v", r)
	}
	if _, ok := results["toolu_0"]; ok {
		t.Error("a call with a recorded result got another")
	}
	calls := mustAllValid(t, fake, 1)
	if !strings.Contains(strings.Join(calls[0].Tools, " "), "mcp__inc__delete_item") {
		t.Errorf("tools offered: %v", calls[0].Tools)
	}
}
