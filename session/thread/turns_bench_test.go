package thread_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// BenchmarkFoldTurns folds a session of 100 turns, each a message, two tool rounds with 4 KiB
// results and a delivered reply (1,000 events).
func BenchmarkFoldTurns(b *testing.B) {
	var l log
	out := strings.Repeat("x", 4<<10)
	for i := range 100 {
		l.user(fmt.Sprintf("1.%d", i), "please look")
		through := int64(len(l))
		turn := l.marker(session.TypeTurnStarted, session.TurnStarted{Through: through})
		for r := range 2 {
			id := fmt.Sprintf("c%d_%d", i, r)
			l.marker(session.TypeAssistantMessage, session.AssistantMessage{Text: "running", ToolCallIDs: []string{id}, Turn: turn.Seq})
			l.marker(session.TypeToolCall, session.ToolCall{CallID: id, Name: "run_command", Input: []byte(`{"command":"ls"}`)})
			l.marker(session.TypeToolResult, session.ToolResult{CallID: id, Content: out})
		}
		reply := l.marker(session.TypeAssistantMessage, session.AssistantMessage{Text: strings.Repeat("answer ", 100), Turn: turn.Seq})
		l.marker(session.TypeDelivered, session.Delivered{EventID: reply.ID.String(), Seq: reply.Seq, TS: []string{"9.1"}})
		l.marker(session.TypeTurnCompleted, session.TurnCompleted{Turn: turn.Seq, Status: session.StatusOK, Through: through})
	}
	b.ReportAllocs()
	for b.Loop() {
		if ts := thread.FoldTurns(l); len(ts.List) != 100 {
			b.Fatal(len(ts.List))
		}
	}
}
