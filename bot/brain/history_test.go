package brain

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events builds an in-memory log; seqs are 1..n in order.
type events []session.Event

func (es *events) add(typ session.Type, payload any) int64 {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	seq := int64(len(*es) + 1)
	*es = append(*es, session.Event{Seq: seq, Type: typ, Payload: b})
	return seq
}

func (es *events) user(ts, text string) int64 {
	return es.add(session.TypeUserMessage, session.UserMessage{TS: ts, User: "U1", UserName: "Alice", Text: text})
}

func (es *events) assistant(text string, ids ...string) int64 {
	return es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: text, ToolCallIDs: ids})
}

func (es *events) call(id string) int64 {
	return es.add(session.TypeToolCall, session.ToolCall{CallID: id, Name: "run_command", Input: json.RawMessage(`{"command":"ls"}`)})
}

func (es *events) result(id, content string) int64 {
	return es.add(session.TypeToolResult, session.ToolResult{CallID: id, Content: content})
}

// shape renders messages compactly: "U[text:Alice: a|result:t1] A[text:x|use:t1]".
func shape(msgs []Message) string {
	var parts []string
	for _, m := range msgs {
		var bs []string
		for _, b := range m.Blocks {
			switch {
			case b.ToolUse != nil:
				bs = append(bs, "use:"+b.ToolUse.ID)
			case b.ToolResult != nil:
				r := "result:" + b.ToolResult.CallID
				if b.ToolResult.IsError {
					r += "!"
				}
				bs = append(bs, r)
			case b.Image != nil:
				bs = append(bs, "image:"+b.Image.Name)
			case b.Document != nil:
				bs = append(bs, "document:"+b.Document.Name)
			default:
				bs = append(bs, "text:"+b.Text)
			}
		}
		parts = append(parts, strings.ToUpper(string(m.Role[:1]))+"["+strings.Join(bs, "|")+"]")
	}
	return strings.Join(parts, " ")
}

func mustBuild(t *testing.T, es events, opt historyOptions) history {
	t.Helper()
	h, err := buildHistory(es, opt)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestBuildHistory(t *testing.T) {
	t.Parallel()
	opt := historyOptions{BotName: "logbook", BotUserID: "UB1"}
	cases := []struct {
		name  string
		build func(es *events)
		opt   historyOptions
		want  string
	}{
		{
			name: "parallel results in call order, markers skipped, a message queued mid-turn after the reply",
			build: func(es *events) {
				es.user("1", "a")
				es.add(session.TypeTurnStarted, session.TurnStarted{Through: 1})
				es.assistant("", "t1", "t2")
				es.call("t1")
				es.call("t2")
				es.user("2", "queued")
				es.result("t2", "two")
				es.add(session.TypeError, session.ErrorEvent{Stage: "tool", Message: "x"})
				es.result("t1", "one")
				es.assistant("done")
				es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: 2, Status: "ok"})
			},
			want: "U[text:Alice: a] A[use:t1|use:t2] U[result:t1|result:t2] A[text:done] U[text:Alice: queued]",
		},
		{
			name: "missing result gets an in-memory interrupted result",
			build: func(es *events) {
				es.user("1", "a")
				es.assistant("trying", "t1", "t2")
				es.call("t1")
				es.call("t2")
				es.result("t1", "one")
				es.user("2", "hello?")
			},
			want: "U[text:Alice: a] A[text:trying|use:t1|use:t2] U[result:t1|result:t2!|text:Alice: hello?]",
		},
		{
			name: "consecutive user messages merge; edits replace text; deletions vanish",
			build: func(es *events) {
				es.user("1", "deploy prod")
				es.user("2", "secret")
				es.user("3", "@logbook please")
				es.add(session.TypeUserMessageEdited, session.UserMessageEdited{OrigTS: "1", Text: "deploy staging"})
				es.add(session.TypeUserMessageDeleted, session.UserMessageDeleted{DeletedTS: "2"})
			},
			want: "U[text:Alice: deploy staging|text:Alice: please]",
		},
		{
			name: "a bare mention is never an empty block",
			build: func(es *events) {
				es.user("1", "<@UB1>")
			},
			want: "U[text:Alice: (mentioned the bot without any text)]",
		},
		{
			name: "messages after Through wait for the next turn",
			build: func(es *events) {
				es.user("1", "first")
				es.add(session.TypeTurnStarted, session.TurnStarted{Through: 1})
				es.user("2", "later")
			},
			opt:  historyOptions{Through: 1},
			want: "U[text:Alice: first]",
		},
		{
			name: "a call never recorded is dropped with its result",
			build: func(es *events) {
				es.user("1", "a")
				es.assistant("hm", "ghost")
				es.result("ghost", "boo")
				es.user("2", "b")
			},
			want: "U[text:Alice: a] A[text:hm] U[text:Alice: b]",
		},
		{
			name: "summary stands in for older events; orphaned results dropped; edits of summarised messages shown as notes",
			build: func(es *events) {
				es.user("1", "old")         // 1
				es.assistant("", "t1")      // 2
				es.call("t1")               // 3
				es.result("t1", "r")        // 4
				es.assistant("old reply")   // 5
				es.user("2", "new")         // 6
				es.result("t1", "late dup") // 7: answers a summarised call
				es.add(session.TypeUserMessageEdited, session.UserMessageEdited{OrigTS: "1", User: "Alice", Text: "old, edited"})
				es.add(session.TypeContextSummary, session.ContextSummary{FromSeq: 1, ToSeq: 5, Summary: "S"})
			},
			want: "U[text:[Summary of the earlier conversation (events 1–5), written by the harness]\nS|text:Alice: new|text:Alice: (edited an earlier message to) old, edited]",
		},
		{
			name: "edits of a message outside the events: one note with the newest text; an edited then deleted one says nothing",
			build: func(es *events) {
				es.user("5", "now")
				es.add(session.TypeUserMessageEdited, session.UserMessageEdited{OrigTS: "1", User: "Alice", Text: "first try"})
				es.add(session.TypeUserMessageEdited, session.UserMessageEdited{OrigTS: "1", User: "Alice", Text: "second try"})
				es.add(session.TypeUserMessageEdited, session.UserMessageEdited{OrigTS: "2", User: "Alice", Text: "gone"})
				es.add(session.TypeUserMessageDeleted, session.UserMessageDeleted{DeletedTS: "2"})
			},
			want: "U[text:Alice: now|text:Alice: (edited an earlier message to) second try]",
		},
		{
			name: "an edit or deletion logged before its message applies to it",
			build: func(es *events) {
				es.add(session.TypeUserMessageEdited, session.UserMessageEdited{OrigTS: "1", User: "U1", Text: "edited first"})
				es.add(session.TypeUserMessageDeleted, session.UserMessageDeleted{DeletedTS: "2"})
				es.user("1", "original")
				es.user("2", "secret")
			},
			want: "U[text:Alice: edited first]",
		},
		{
			name: "an assistant message first gets a note before it",
			build: func(es *events) {
				es.assistant("I start")
				es.user("1", "ok")
			},
			want: "U[text:[earlier messages of this thread are not shown]] A[text:I start] U[text:Alice: ok]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var es events
			c.build(&es)
			o := opt
			o.Through = c.opt.Through
			h := mustBuild(t, es, o)
			if got := shape(h.Messages); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if err := validate(h.Messages, false); err != nil {
				t.Errorf("built history is invalid: %v", err)
			}
		})
	}
}

// D1: a message that arrives while turn 1 runs is answered by turn 2, whose history puts it
// after turn 1's reply (never between a tool_use and its tool_result), so the request ends
// with it; turn 1's reply is not taken for turn 2's answer.
func TestQueuedMessageFollowsTheRunningTurnsReply(t *testing.T) {
	t.Parallel()
	opt := historyOptions{BotName: "logbook", BotUserID: "UB1"}
	queued := func(es *events, seq int64) { es.add(session.TypeQueued, session.Queued{MessageSeq: seq}) }
	cases := []struct {
		name  string
		build func(es *events) (through, turn2 int64)
		want  string
	}{
		{
			name: "queued before turn 1's tool call",
			build: func(es *events) (int64, int64) {
				q1 := es.user("1", "q1")
				ts1 := es.add(session.TypeTurnStarted, session.TurnStarted{Through: q1})
				q2 := es.user("2", "q2")
				queued(es, q2)
				es.add(session.TypeAssistantMessage, session.AssistantMessage{ToolCallIDs: []string{"t1"}, Turn: ts1})
				es.call("t1")
				es.result("t1", "r1")
				es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: "a1", Turn: ts1})
				es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: ts1, Status: "ok", Through: q1})
				return q2, es.add(session.TypeTurnStarted, session.TurnStarted{Through: q2})
			},
			want: "U[text:Alice: q1] A[use:t1] U[result:t1] A[text:a1] U[text:Alice: q2]",
		},
		{
			name: "queued between turn 1's tool call and its result",
			build: func(es *events) (int64, int64) {
				q1 := es.user("1", "q1")
				ts1 := es.add(session.TypeTurnStarted, session.TurnStarted{Through: q1})
				es.add(session.TypeAssistantMessage, session.AssistantMessage{ToolCallIDs: []string{"t1"}, Turn: ts1})
				es.call("t1")
				q2 := es.user("2", "q2")
				queued(es, q2)
				es.result("t1", "r1")
				es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: "a1", Turn: ts1})
				q3 := es.user("3", "q3") // after the reply, before turn_completed
				queued(es, q3)
				es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: ts1, Status: "ok", Through: q1})
				return q3, es.add(session.TypeTurnStarted, session.TurnStarted{Through: q3})
			},
			want: "U[text:Alice: q1] A[use:t1] U[result:t1] A[text:a1] U[text:Alice: q2|text:Alice: q3]",
		},
		{
			name: "appended between the state read and turn_started, then one after the turn",
			build: func(es *events) (int64, int64) {
				q1 := es.user("1", "q1")
				es.user("2", "q2") // not in turn 1's Through
				ts1 := es.add(session.TypeTurnStarted, session.TurnStarted{Through: q1})
				es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: "a1", Turn: ts1})
				es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: ts1, Status: "ok", Through: q1})
				q3 := es.user("3", "q3")
				return q3, es.add(session.TypeTurnStarted, session.TurnStarted{Through: q3})
			},
			want: "U[text:Alice: q1] A[text:a1] U[text:Alice: q2|text:Alice: q3]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var es events
			through, turn2 := c.build(&es)
			o := opt
			o.Through = through
			h := mustBuild(t, es, o)
			if got := shape(h.Messages); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if err := validate(h.Messages, true); err != nil {
				t.Errorf("built history is invalid: %v", err)
			}
			if h.Boundary[len(h.Messages)-1] {
				t.Errorf("the held-back q2 is marked a turn boundary; a summary could cut between a1 and it")
			}
			if r, ok := answered(es, h, through, turn2); ok {
				t.Errorf("turn 2 took %d (%q) for its answer", r.Event.Seq, r.Message.Text)
			}
			// Once turn 2 replies, the rerun finds that reply and no other.
			a2 := es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: "a2", Turn: turn2})
			h = mustBuild(t, es, o)
			if r, ok := answered(es, h, through, turn2); !ok || r.Event.Seq != a2 {
				t.Errorf("after turn 2's reply: answered = %d, %v; want %d", r.Event.Seq, ok, a2)
			}
		})
	}
}

// A held-back message is no turn boundary: a summary range cannot end between turn 1's reply
// and a message whose seq is below it.
func TestHeldMessageIsNoCutPoint(t *testing.T) {
	t.Parallel()
	var es events
	q1 := es.user("1", "q1")
	ts1 := es.add(session.TypeTurnStarted, session.TurnStarted{Through: q1})
	q2 := es.user("2", "q2")
	es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: "a1", Turn: ts1})
	es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: ts1, Status: "ok", Through: q1})
	ts2 := es.add(session.TypeTurnStarted, session.TurnStarted{Through: q2})
	es.add(session.TypeAssistantMessage, session.AssistantMessage{Text: "a2", Turn: ts2})
	es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: ts2, Status: "ok", Through: q2})
	q3 := es.user("3", "q3")
	es.add(session.TypeTurnStarted, session.TurnStarted{Through: q3})
	h := mustBuild(t, es, historyOptions{Through: q3})
	if got, want := shape(h.Messages), "U[text:Alice: q1] A[text:a1] U[text:Alice: q2] A[text:a2] U[text:Alice: q3]"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if want := []bool{true, false, false, false, true}; !slices.Equal(h.Boundary, want) {
		t.Errorf("boundaries = %v, want %v", h.Boundary, want)
	}
	for target := 0; target < 200; target++ {
		if i, ok := cutPoint(h, "", nil, target); ok && i != 4 {
			t.Fatalf("target %d: cut at message %d (start seq %d)", target, i, h.Start[i])
		}
	}
}

func TestBareMentionsHaveNoContent(t *testing.T) {
	t.Parallel()
	opt := historyOptions{BotName: "logbook", BotUserID: "UB1"}
	for text, want := range map[string]bool{
		"@logbook":             false,
		"  <@UB1>  ":           false,
		"@logbook @logbook":    false,
		"":                     false,
		"@logbook hi":          true,
		"@logbookery":          true, // another name
		"hey @logbook":         true,
		"@LOGBOOK, what's up?": true,
	} {
		got, content := renderUser("Alice", text, opt)
		if content != want || strings.TrimSpace(strings.TrimPrefix(got, "Alice:")) == "" {
			t.Errorf("renderUser(%q) = %q, %v; want content %v and never empty", text, got, content, want)
		}
	}
	var es events
	es.user("1", "@logbook")
	if h := mustBuild(t, es, opt); h.Content {
		t.Errorf("a thread of bare mentions has content")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	use := func(id string) Block {
		return Block{ToolUse: &ToolUse{ID: id, Name: "x", Input: json.RawMessage(`{}`)}}
	}
	res := func(id string) Block { return Block{ToolResult: &ToolResult{CallID: id, Content: "c"}} }
	txt := func(s string) Block { return Block{Text: s} }
	u := func(bs ...Block) Message { return Message{Role: RoleUser, Blocks: bs} }
	a := func(bs ...Block) Message { return Message{Role: RoleAssistant, Blocks: bs} }
	cases := []struct {
		name string
		msgs []Message
		ok   bool
	}{
		{"simple", []Message{u(txt("hi"))}, true},
		{"tool round", []Message{u(txt("hi")), a(use("1"), use("2")), u(res("2"), res("1"), txt("and"))}, true},
		{"empty", nil, false},
		{"assistant first", []Message{a(txt("x")), u(txt("hi"))}, false},
		{"assistant last", []Message{u(txt("hi")), a(txt("x"))}, false},
		{"roles repeat", []Message{u(txt("a")), u(txt("b"))}, false},
		{"blank text", []Message{u(txt("  "))}, false},
		{"empty message", []Message{u(txt("hi")), a(), u(txt("x"))}, false},
		{"missing result", []Message{u(txt("hi")), a(use("1"), use("2")), u(res("1"))}, false},
		{"orphan result", []Message{u(txt("hi")), a(txt("x")), u(res("9"))}, false},
		{"result after text", []Message{u(txt("hi")), a(use("1")), u(txt("x"), res("1"))}, false},
		{"duplicate result", []Message{u(txt("hi")), a(use("1")), u(res("1"), res("1"))}, false},
		{"repeated id", []Message{u(txt("hi")), a(use("1")), u(res("1")), a(use("1")), u(res("1"))}, false},
		{"tool_use in user", []Message{u(use("1"))}, false},
	}
	for _, c := range cases {
		err := validate(c.msgs, true)
		if (err == nil) != c.ok {
			t.Errorf("%s: validate = %v, want ok %v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, errInvalidHistory) {
			t.Errorf("%s: %v is not errInvalidHistory", c.name, err)
		}
	}
}

// A 150-event session whose naive token window would start between a tool_use and its
// tool_result is cut only at a turn boundary, and what is kept is valid.
func TestCutPointKeepsToolPairsTogether(t *testing.T) {
	t.Parallel()
	var es events
	for i := range 25 {
		id := fmt.Sprintf("toolu_%d", i)
		es.user(fmt.Sprint(i), fmt.Sprintf("question %d", i))
		es.add(session.TypeTurnStarted, session.TurnStarted{})
		es.assistant("", id)
		es.call(id)
		es.result(id, strings.Repeat("r", 400*(i%3+1)))
		es.assistant(fmt.Sprintf("answer %d", i))
	}
	if len(es) != 150 {
		t.Fatalf("%d events", len(es))
	}
	h := mustBuild(t, es, historyOptions{})
	sawNaiveSplit := false
	for target := 50; target < 4000; target += 37 {
		// The naive window: as many trailing messages as fit.
		n := len(h.Messages)
		for n > 0 && estimateTokens("", h.Messages[n-1:], nil) <= target {
			n--
		}
		if n < len(h.Messages) && startsWithResults(h.Messages[n]) {
			sawNaiveSplit = true
		}
		i, ok := cutPoint(h, "", nil, target)
		if !ok {
			t.Fatalf("target %d: no cut point", target)
		}
		if !h.Boundary[i] || h.Messages[i].Role != RoleUser || startsWithResults(h.Messages[i]) {
			t.Fatalf("target %d: cut at message %d, not a turn boundary: %s", target, i, shape(h.Messages[i:i+1]))
		}
		if err := validate(h.Messages[i:], false); err != nil {
			t.Fatalf("target %d: kept history invalid: %v", target, err)
		}
		// The summary's seq range ends just before a user message.
		toSeq := h.Start[i] - 1
		if es[toSeq].Type != session.TypeUserMessage {
			t.Fatalf("target %d: event after the cut is %s", target, es[toSeq].Type)
		}
	}
	if !sawNaiveSplit {
		t.Fatalf("the test never put a naive window between a tool_use and its tool_result")
	}
}

func TestHeadTail(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", 1000) + "END" // 2003 bytes
	for _, n := range []int{2003, 3000, 1000, 100, 60, 10} {
		got, cutOff := headTail(s, n)
		if cutOff != (len(s) > n) || !utf8.ValidString(got) {
			t.Errorf("n=%d: cut %v, valid %v", n, cutOff, utf8.ValidString(got))
		}
		if cutOff && (len(got) > max(n, 80) || !strings.Contains(got, "omitted")) {
			t.Errorf("n=%d: %d bytes: %q", n, len(got), got)
		}
		if cutOff && n >= 100 && !strings.HasSuffix(got, "END") {
			t.Errorf("n=%d: tail lost: %q", n, got)
		}
	}
	b := outputBudget{perResult: 500, left: 700}
	if _, c := b.fit(strings.Repeat("a", 400)); c {
		t.Error("first result cut")
	}
	if out, c := b.fit(strings.Repeat("b", 400)); !c || len(out) > 300 {
		t.Errorf("second result: cut %v, %d bytes", c, len(out))
	}
}

func TestOfflineIsDeterministic(t *testing.T) {
	t.Parallel()
	req := Request{Purpose: PurposeReply, Tools: specsOf(handsTools(nil, 0)), Messages: []Message{{Role: RoleUser, Blocks: []Block{{Text: "Alice: run: `uname -a`"}}}}}
	r1, err := Offline{}.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := Offline{}.Complete(t.Context(), req)
	if len(r1.ToolUses) != 1 || r1.ToolUses[0].ID != r2.ToolUses[0].ID || string(r1.ToolUses[0].Input) != `{"command":"uname -a"}` {
		t.Errorf("offline tool use = %+v / %+v", r1.ToolUses, r2.ToolUses)
	}
	req.Tools = nil
	r3, _ := Offline{}.Complete(t.Context(), req)
	if len(r3.ToolUses) != 0 || !strings.Contains(r3.Text, "not available") {
		t.Errorf("offline without tools = %+v", r3)
	}
	if !slices.Contains(strings.Fields(r1.Text), "language") {
		t.Errorf("offline reply does not say what it is: %q", r1.Text)
	}
}

// BenchmarkBuildHistory measures rebuilding a session's history, done once per model round.
// Compare the sizes as a ratio: the work should grow linearly with the events.
func BenchmarkBuildHistory(b *testing.B) {
	for _, turns := range []int{25, 250} {
		var es events
		for i := range turns {
			id := fmt.Sprintf("toolu_%d", i)
			es.user(fmt.Sprint(i), fmt.Sprintf("question %d", i))
			es.add(session.TypeTurnStarted, session.TurnStarted{})
			es.assistant("", id)
			es.call(id)
			es.result(id, strings.Repeat("r", 400))
			es.assistant(fmt.Sprintf("answer %d", i))
		}
		b.Run(fmt.Sprintf("events=%d", len(es)), func(b *testing.B) {
			for b.Loop() {
				h, err := buildHistory(es, historyOptions{})
				if err != nil || validate(h.Messages, false) != nil {
					b.Fatal("invalid history")
				}
			}
		})
	}
}

func TestHeadTailKeepsBinaryOutput(t *testing.T) {
	t.Parallel()
	s := "\xff\xfe" + strings.Repeat("x", 2000) + "\xffEND"
	got, cutOff := headTail(s, 200)
	if !cutOff || len(got) > 200 || !strings.HasPrefix(got, "\xff\xfexxx") || !strings.HasSuffix(got, "\xffEND") {
		t.Errorf("headTail = %q (%d bytes)", got, len(got))
	}
}

// A thread whose earlier events retention purged (payloads nil) still builds: the purged
// events are left out, a note says why, and the new message is answered (issue 17: the
// history failed with "payload purged by retention" and the turn ended in an error).
func TestHistoryOfAPurgedThread(t *testing.T) {
	var es events
	es.user("1.1", "the old question")
	es.add(session.TypeTurnStarted, session.TurnStarted{Through: 1})
	es.assistant("checking", "t1")
	es.call("t1")
	es.result("t1", "old output")
	es.assistant("the old answer")
	es.add(session.TypeTurnCompleted, session.TurnCompleted{Turn: 2, Through: 1, Status: "ok"})
	es.add(session.TypeTitle, session.Title{Text: "old title"})
	es.add(session.TypeContextSummary, session.ContextSummary{FromSeq: 1, ToSeq: 6, Summary: "old summary"})
	for i := range es {
		es[i].Payload = nil // the purge
	}
	es.user("2.1", "is it still broken?")
	es.add(session.TypeTurnStarted, session.TurnStarted{Through: 10})
	h := mustBuild(t, es, historyOptions{Through: 10})
	if got, want := shape(h.Messages), "U[text:"+purgedNote+"|text:Alice: is it still broken?]"; got != want {
		t.Fatalf("history:\n%s\nwant\n%s", got, want)
	}
	if err := validate(h.Messages, true); err != nil {
		t.Fatal(err)
	}
	// A thread with nothing purged has no note.
	var fresh events
	fresh.user("3.1", "hello")
	if got := shape(mustBuild(t, fresh, historyOptions{}).Messages); strings.Contains(got, "retention") {
		t.Errorf("an unpurged history mentions retention: %s", got)
	}
}
