package brain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// summarised builds a session whose early turns a context_summary covers: a decision in turn
// 1 that the summary dropped, markers around it, and a long tool result. It returns the
// summary's to_seq and the seq of the dropped message.
func (e *env) summarised() (toSeq, dropped int64) {
	e.t.Helper()
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	dropped, _ = e.user("we pick port 8443 for the admin API, not 9000")
	t1 := e.startTurn(dropped)
	e.append(
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{ToolCallIDs: []string{"toolu_old"}, Turn: t1}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_old", Name: "run_command", Input: []byte(`{"command":"cat big.log"}`)}},
	)
	e.append(
		session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "sandbox"},
			Payload: session.ToolResult{CallID: "toolu_old", Content: strings.Repeat("log line\n", 2000)}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "Noted: 8443.", Turn: t1}},
		session.NewEvent{Type: session.TypeDelivered, Actor: cell, Payload: session.Delivered{Channel: "C0000001", TS: []string{"1.2"}}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{Turn: t1, Status: "ok", Through: dropped}},
		session.NewEvent{Type: session.TypeCellEvicted, Actor: cell, Payload: session.CellEvicted{Reason: "idle"}},
	)
	for i := range 60 {
		seq, _ := e.user(fmt.Sprintf("chatter %d", i))
		ts := e.startTurn(seq)
		e.append(
			session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: fmt.Sprintf("ok %d", i), Turn: ts}},
			session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{Turn: ts, Status: "ok", Through: seq}},
		)
	}
	last := e.after(0)
	toSeq = last[len(last)-1].Seq
	e.append(session.NewEvent{Type: session.TypeContextSummary, Actor: bot,
		Payload: session.ContextSummary{FromSeq: 1, ToSeq: toSeq, Summary: "Alice and the assistant discussed the admin API."}})
	return toSeq, dropped
}

// After compaction the model can reread what the summary dropped with read_log: a seq range,
// events of some types, the events before a seq; markers are never returned, output is bounded,
// and only the session's own log is read. Its tool_call and tool_result record the access.
func TestReadLogRereadsWhatTheSummaryDropped(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			toSeq, dropped := e.summarised()
			// Another session in the same store, with a secret read_log must never show.
			other, err := e.st.Open(context.Background(), session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.999999"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.Append(context.Background(), other.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: alice,
				Payload: session.UserMessage{TS: "1700000000.999999", User: "U0000001", Text: "other-session-secret"}}); err != nil {
				t.Fatal(err)
			}
			seq, _ := e.user("which port did we choose for the admin API?")
			turnSeq := e.startTurn(seq)
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
					{ID: "call_r1", Name: "read_log", Input: fmt.Sprintf(`{"from_seq":1,"to_seq":%d,"limit":10}`, dropped+8)},
					{ID: "call_r2", Name: "read_log", Input: fmt.Sprintf(`{"types":["user_message"],"from_seq":1,"to_seq":%d,"limit":500}`, toSeq)},
					{ID: "call_r3", Name: "read_log", Input: fmt.Sprintf(`{"before_seq":%d,"limit":2}`, dropped+3)},
					{ID: "call_r4", Name: "read_log", Input: `{"types":["turn_started"]}`},
				}},
				fakeprovider.Reply{Text: "Port 8443."},
			)
			b, _ := newBrain(t, p, nil)
			r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
			if err != nil {
				t.Fatal(err)
			}
			if r.Message.Text != "Port 8443." {
				t.Fatalf("reply = %+v", r)
			}
			evs := e.after(turnSeq)
			wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolCall, session.TypeToolCall, session.TypeToolCall,
				session.TypeToolResult, session.TypeToolResult, session.TypeToolResult, session.TypeToolResult, session.TypeAssistantMessage)
			res := func(i int) session.ToolResult { return decode[session.ToolResult](t, evs[5+i]) }

			r1 := res(0)
			if r1.IsError || !strings.Contains(r1.Content, fmt.Sprintf("#%d ", dropped)) || !strings.Contains(r1.Content, "port 8443") {
				t.Errorf("range read = %q", r1.Content)
			}
			for _, marker := range []string{"turn_started", "turn_completed", "delivered", "cell_evicted", "title", "context_summary"} {
				if strings.Contains(r1.Content, " "+marker+":") {
					t.Errorf("range read shows a %s marker:\n%s", marker, r1.Content)
				}
			}
			if len(r1.Content) > 12<<10 || strings.Count(r1.Content, "log line") > 300 {
				t.Errorf("range read is not bounded: %d bytes", len(r1.Content))
			}
			r2 := res(1)
			if r2.IsError || strings.Count(r2.Content, " user_message:") != 50 || !strings.Contains(r2.Content, "more events follow") ||
				strings.Contains(r2.Content, "assistant_message") {
				t.Errorf("typed read: %d user messages, content %q", strings.Count(r2.Content, " user_message:"), r2.Content)
			}
			r3 := res(2)
			if lines := strings.Count(r3.Content, "\n"); r3.IsError || lines != 2 || !strings.Contains(r3.Content, fmt.Sprintf("#%d ", dropped)) {
				t.Errorf("before read = %q", r3.Content)
			}
			if r4 := res(3); !r4.IsError || !strings.Contains(r4.Content, "does not return \"turn_started\"") {
				t.Errorf("marker read = %+v", r4)
			}
			for i := range 4 {
				if strings.Contains(res(i).Content, "other-session-secret") {
					t.Errorf("read_log %d shows another session's events", i+1)
				}
			}

			calls := mustAllValid(t, fake, 2)
			if !slices.Contains(calls[0].Tools, "read_log") || !strings.Contains(calls[0].System, "read_log") {
				t.Errorf("read_log not offered after a summary: tools %v", calls[0].Tools)
			}
		})
	}
}

// Without a context_summary every message is in the request: read_log is not offered.
func TestReadLogOnlyAfterASummary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake, p := fakeFor(t, "anthropic")
	fake.Push(fakeprovider.Reply{Text: "Hi."})
	b, _ := newBrain(t, p, nil)
	seq, _ := e.user("hello")
	if _, err := b.Run(context.Background(), e.turn(&fakeHands{}, e.startTurn(seq))); err != nil {
		t.Fatal(err)
	}
	if calls := mustAllValid(t, fake, 1); slices.Contains(calls[0].Tools, brain.ToolReadLog) {
		t.Errorf("read_log offered without a summary: %v", calls[0].Tools)
	}
}
