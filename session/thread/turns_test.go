package thread_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

func (l *log) marker(typ session.Type, payload any) session.Event {
	l.add(typ, session.ActorSystem, payload)
	(*l)[len(*l)-1].ID = uuid.New()
	return (*l)[len(*l)-1]
}

// A turn opens with turn_started and closes with the turn_completed that names it; one that
// names none (a silent turn) closes the newest open turn.
func TestTurnsOpenAndClose(t *testing.T) {
	var l log
	l.user("1.1", "hi")                                                                              // 1
	l.marker(session.TypeTurnStarted, session.TurnStarted{Through: 1, Reason: session.StartMessage}) // 2
	ts := thread.FoldTurns(l)
	if tn := ts.Last(); tn == nil || !tn.Open || tn.Seq != 2 || tn.Through != 1 || tn.Reason != session.StartMessage || tn.Covered() != 1 {
		t.Fatalf("open turn: %+v", tn)
	}
	l.user("1.2", "stop")                                                                                                             // 3
	l.marker(session.TypeTurnCompleted, session.TurnCompleted{Turn: 2, Status: session.StatusStopped, Reason: "message", Through: 3}) // 4
	ts = thread.FoldTurns(l)
	tn := ts.Last()
	if tn.Open || tn.Completed != 4 || tn.Status != session.StatusStopped || tn.StatusReason != "message" || tn.Covered() != 3 || ts.Answered != 3 {
		t.Fatalf("closed turn: %+v, answered %d", tn, ts.Answered)
	}
	if c, ok := ts.Completed(4); !ok || c != tn {
		t.Fatalf("Completed(4) = %v, %v", c, ok)
	}
	l.user("1.3", "aside")                                                                               // 5
	l.marker(session.TypeTurnStarted, session.TurnStarted{Through: 5})                                   // 6
	l.marker(session.TypeTurnCompleted, session.TurnCompleted{Status: session.StatusSilent, Through: 5}) // 7: Turn 0
	ts = thread.FoldTurns(l)
	if len(ts.List) != 2 || ts.Last().Open || ts.Last().Completed != 7 || ts.List[0].Completed != 4 {
		t.Fatalf("a silent turn's turn_completed closes it: %+v %+v", ts.List[0], ts.List[1])
	}
	if ts.LastUser.Seq != 5 {
		t.Fatalf("LastUser %d, want 5", ts.LastUser.Seq)
	}
	if ts.Err != nil {
		t.Fatal(ts.Err)
	}
}

// A turn_started that cannot be decoded is an error of the fold; a purged one is not, and
// other unreadable markers are left out.
func TestTurnsUnreadable(t *testing.T) {
	l := log{{Seq: 1, Type: session.TypeTurnStarted}} // purged
	l = append(l, session.Event{Seq: 2, Type: session.TypeDelivered, Payload: json.RawMessage(`{"seq": "x"}`)})
	ts := thread.FoldTurns(l)
	if ts.Err != nil || len(ts.List) != 1 || !ts.List[0].Unread || !ts.List[0].Open {
		t.Fatalf("purged turn_started: err %v, %+v", ts.Err, ts.List)
	}
	l = append(l, session.Event{Seq: 3, Type: session.TypeTurnStarted, Payload: json.RawMessage(`{"through": "x"}`)})
	if ts := thread.FoldTurns(l); ts.Err == nil || len(ts.List) != 2 || !ts.List[1].Unread {
		t.Fatalf("undecodable turn_started: err %v, %+v", ts.Err, ts.List)
	}
	l = append(l, session.Event{Seq: 4, Type: session.TypeTurnCompleted})
	ts = thread.FoldTurns(l)
	if tn := ts.Last(); tn.Open || !tn.CompletionUnread || tn.Completed != 4 {
		t.Fatalf("purged turn_completed closes the newest open turn: %+v", tn)
	}
}

// A turn's reply is its newest assistant_message without tool calls (named by Turn, else the
// newest turn's); delivered marks it.
func TestTurnsReplyAndDelivery(t *testing.T) {
	var l log
	l.user("1.1", "hi")                                                                        // 1
	l.marker(session.TypeTurnStarted, session.TurnStarted{Through: 1})                         // 2
	canned := l.marker(session.TypeAssistantMessage, session.AssistantMessage{Text: "canned"}) // 3: Turn 0
	ts := thread.FoldTurns(l)
	if tn := ts.Last(); tn.Reply.Seq != 3 || tn.Delivered {
		t.Fatalf("canned reply: %+v", tn)
	}
	l.marker(session.TypeAssistantMessage, session.AssistantMessage{Text: "calls", ToolCallIDs: []string{"c1"}, Turn: 2}) // 4
	l.marker(session.TypeDelivered, session.Delivered{EventID: canned.ID.String(), Seq: 3, TS: []string{"9.1", "9.2"}})   // 5
	ts = thread.FoldTurns(l)
	if tn := ts.Last(); tn.Reply.Seq != 3 || !tn.Delivered || !ts.Delivered(canned) {
		t.Fatalf("delivered canned reply: %+v", tn)
	}
	reply := l.marker(session.TypeAssistantMessage, session.AssistantMessage{Text: "again", Turn: 2}) // 6
	ts = thread.FoldTurns(l)
	if tn := ts.Last(); tn.Reply.Seq != 6 || tn.Delivered || ts.Delivered(reply) {
		t.Fatalf("a newer reply is not delivered yet: %+v", tn)
	}
	l.marker(session.TypeStreamStarted, session.StreamStarted{Turn: 2, TS: "9.3", Mode: "stream"})        // 7
	l.marker(session.TypeStreamStarted, session.StreamStarted{Turn: 2, TS: "9.4", Mode: "stream"})        // 8
	l.marker(session.TypeStreamStarted, session.StreamStarted{Turn: 99, TS: "9.5", Mode: "stream"})       // 9: no such turn
	l.marker(session.TypeStreamStopped, session.StreamStopped{TS: "9.3", Reason: session.StreamRollover}) // 10
	l.marker(session.TypeStreamStopped, session.StreamStopped{TS: "9.4", Reason: session.StreamDeleted})  // 11
	ts = thread.FoldTurns(l)
	want := []thread.LiveMessage{{TS: "9.3", Mode: "stream"}, {TS: "9.4", Mode: "stream", Deleted: true}}
	if got := ts.Last().Live; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("live messages %+v, want %+v", got, want)
	}
	if got := ts.Posted; len(got) != 5 || got[0] != "9.1" || got[4] != "9.5" {
		t.Fatalf("posted %v", got)
	}
}

// Steering, queueing, stops and approvals belong to their turn.
func TestTurnsMarkers(t *testing.T) {
	var l log
	l.marker(session.TypeStopRequested, session.StopRequested{Source: "button"})                                                     // 1: between turns
	l.user("1.1", "hi")                                                                                                              // 2
	l.marker(session.TypeTurnStarted, session.TurnStarted{Through: 2})                                                               // 3
	l.user("1.2", "more")                                                                                                            // 4
	l.marker(session.TypeSteered, session.Steered{Turn: 3, MessageSeq: 4})                                                           // 5
	l.user("1.3", "later")                                                                                                           // 6
	l.marker(session.TypeQueued, session.Queued{MessageSeq: 6})                                                                      // 7
	req := l.marker(session.TypeApprovalRequested, session.ApprovalRequested{Turn: 3, CallID: "c1", Tool: "run_command"})            // 8
	l.marker(session.TypeApprovalRequested, session.ApprovalRequested{Turn: 3, CallID: "c1", Tool: "again"})                         // 9: not the first
	l.add(session.TypeApprovalDecided, session.ActorUser, session.ApprovalDecided{CallID: "c1", Decision: session.DecisionApproved}) // 10
	l.marker(session.TypeApprovalDecided, session.ApprovalDecided{CallID: "c1", Decision: session.DecisionDenied})                   // 11: late
	l.marker(session.TypeToolStarted, session.ToolStarted{CallID: "c1"})                                                             // 12
	l.marker(session.TypeStopRequested, map[string]any{})                                                                            // 13: a source-less stop
	l.marker(session.TypeStopRequested, session.StopRequested{Source: "reaction"})                                                   // 14
	l.marker(session.TypeTurnStopped, session.TurnStopped{Turn: 3, By: "U1", Source: "button", Request: 13})                         // 15
	ts := thread.FoldTurns(l)
	tn := ts.Last()
	if len(tn.Steered) != 1 || tn.Steered[0] != 4 || len(tn.Queued) != 1 || tn.Queued[0] != 6 {
		t.Errorf("steered %v, queued %v", tn.Steered, tn.Queued)
	}
	if r := tn.StopRequest; r == nil || r.Seq != 13 || r.Source != "button" || r.By != "X" {
		t.Errorf("stop request %+v: the first while the turn was open", r)
	}
	if tn.Stopped == nil || tn.Stopped.By != "U1" {
		t.Errorf("stopped %+v", tn.Stopped)
	}
	a, ok := ts.Approval("c1")
	if !ok || a.Event.Seq != req.Seq || a.Request.Tool != "run_command" || !a.Started || len(tn.Approvals) != 1 {
		t.Errorf("approval %+v, %v; turn's %d", a, ok, len(tn.Approvals))
	}
	if e, p, ok := ts.Decision("c1"); !ok || e.Seq != 10 || p.Decision != session.DecisionApproved {
		t.Errorf("decision %d %+v %v: the first counts", e.Seq, p, ok)
	}
	if _, _, ok := ts.Decision("c2"); ok {
		t.Error("a decision on a call nobody decided")
	}
}

// Resumes counts the cells in a row that did not move the turn on, Cells all of them.
func TestTurnsResumes(t *testing.T) {
	woken := session.Event{Type: session.TypeCellWoken}
	result := func(synthetic bool) session.Event {
		p, _ := json.Marshal(session.ToolResult{CallID: "c", Synthetic: synthetic})
		return session.Event{Type: session.TypeToolResult, Payload: p}
	}
	suspended := session.Event{Type: session.TypeTurnSuspended}
	for _, c := range []struct {
		name   string
		evs    []session.Event
		n, all int
	}{
		{"no resumes", nil, 0, 0},
		{"three in a row", []session.Event{woken, woken, woken}, 3, 3},
		{"a finished call in between", []session.Event{woken, woken, result(false), woken}, 1, 3},
		{"an interrupted call is no progress", []session.Event{woken, result(true), woken, woken}, 3, 3},
		{"woken after a suspension is the wait", []session.Event{suspended, woken, woken}, 1, 1},
		{"each cell finishing one call", []session.Event{woken, result(false), woken, result(false), woken, result(false)}, 0, 3},
	} {
		// The cell that began the turn wrote its cell_woken before the turn_started.
		evs := []session.Event{{Seq: 1, Type: session.TypeCellWoken}, {Seq: 2, Type: session.TypeTurnStarted}}
		for i, e := range c.evs {
			e.Seq = int64(i + 3)
			evs = append(evs, e)
		}
		if n, all := thread.FoldTurns(evs).Last().Resumes(); n != c.n || all != c.all {
			t.Errorf("%s: resumes %d, cells %d; want %d, %d", c.name, n, all, c.n, c.all)
		}
	}
}

// Folding in pieces is folding at once.
func TestTurnsAddInPieces(t *testing.T) {
	var l log
	l.user("1.1", "hi")
	l.marker(session.TypeTurnStarted, session.TurnStarted{Through: 1})
	l.marker(session.TypeCellWoken, session.CellWoken{})
	l.marker(session.TypeAssistantMessage, session.AssistantMessage{Text: "r", Turn: 2})
	l.marker(session.TypeTurnCompleted, session.TurnCompleted{Turn: 2, Status: session.StatusOK, Through: 1})
	var ts thread.Turns
	for _, e := range l {
		ts.Add(e)
	}
	all := thread.FoldTurns(l)
	if a, b := ts.Last(), all.Last(); a.Completed != b.Completed || a.Reply.Seq != b.Reply.Seq || len(a.Live) != len(b.Live) || ts.Answered != all.Answered {
		t.Fatalf("in pieces %+v, at once %+v", a, b)
	}
	if all.Pending(time.Now()) {
		t.Fatal("every message answered, yet pending")
	}
}
