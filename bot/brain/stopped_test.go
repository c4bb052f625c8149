package brain_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// Issue 28: a stopped turn is in the model's next history as itself — its tool call and the
// result the stop left, then the text the thread showed (not a reply that was never posted)
// and a note that Alice stopped it — so
// the next message is its own user turn, not merged with the request that was stopped.
func TestStoppedTurnIsInTheNextHistoryAsItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	first, _ := e.user("@logbook write the long report on every service")
	turn := e.startTurn(first)
	e.append(session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
		Text: "Looking at the services.", ToolCallIDs: []string{"toolu_1"}, Turn: turn}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_1", Name: "run_command",
			Input: json.RawMessage(`{"command":"ls services"}`)}})
	e.append(session.NewEvent{Type: session.TypeToolResult, Actor: cell, Payload: session.ToolResult{CallID: "toolu_1", Content: "api\nbilling"}})
	// The model finished just as the stop came: its reply was never posted, so never said.
	e.append(session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
		Text: "THE WHOLE REPORT, never posted", Turn: turn}})
	stop, _ := e.user("stop")
	e.append(session.NewEvent{Type: session.TypeTurnStopped, Actor: cell, Payload: session.TurnStopped{
		Turn: turn, By: "U0000001", Source: "message", Request: stop, Shown: "# Report\n\n## api\nThe api service"}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{
			Turn: turn, Status: session.StatusStopped, Reason: "message", Through: stop}})
	next, _ := e.user("never mind, just tell me how many services there are")
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(fakeprovider.Reply{Text: "Two: api and billing."})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	r, err := b.Run(context.Background(), e.turn(nil, e.startTurn(next)))
	if err != nil || r.Status != session.StatusOK {
		t.Fatalf("%+v %v", r, err)
	}
	msgs := mustAllValid(t, fake, 1)[0].Messages
	var lines []string
	for _, m := range msgs {
		var parts []string
		for _, bl := range m.Blocks {
			parts = append(parts, bl.Type+":"+strings.ReplaceAll(bl.Text, "\n", `\n`))
		}
		lines = append(lines, m.Role+" "+strings.Join(parts, " | "))
	}
	got := strings.Join(lines, "\n")
	want := []string{
		"user text:Alice: write the long report on every service",
		"assistant text:Looking at the services. | tool_use:",
		"user tool_result:api\\nbilling",
		`assistant text:# Report\n\n## api\nThe api service | text:[Alice stopped this turn here by writing "stop".`,
		"user text:Alice: stop | text:Alice: never mind, just tell me how many services there are",
	}
	if strings.Contains(got, "never posted") {
		t.Errorf("the stopped turn's unposted reply is in the history:\n%s", got)
	}
	if len(msgs) != len(want) {
		t.Fatalf("history:\n%s\nwant %d messages", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("message %d:\n  %s\nwant it to begin\n  %s", i, lines[i], w)
		}
	}
}
