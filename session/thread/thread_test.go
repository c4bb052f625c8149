package thread_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type log []session.Event

func (l *log) add(typ session.Type, actor session.ActorKind, payload any) {
	var raw json.RawMessage
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			panic(err)
		}
		raw = b
	}
	*l = append(*l, session.Event{Seq: int64(len(*l) + 1), Type: typ, Actor: session.Actor{Kind: actor, ID: "X"}, Payload: raw})
}

func (l *log) user(ts, text string) {
	l.add(session.TypeUserMessage, session.ActorUser, session.UserMessage{TS: ts, User: "U1", UserName: "ada", Text: text, Raw: "raw " + text})
}
func (l *log) edit(ts, text string) {
	l.add(session.TypeUserMessageEdited, session.ActorUser, session.UserMessageEdited{OrigTS: ts, User: "U1", Text: text})
}
func (l *log) del(ts string) {
	l.add(session.TypeUserMessageDeleted, session.ActorUser, session.UserMessageDeleted{DeletedTS: ts, User: "U1"})
}
func (l *log) call(id string) {
	l.add(session.TypeToolCall, session.ActorBot, session.ToolCall{CallID: id, Name: "run_command", Input: json.RawMessage(`{}`)})
}
func (l *log) result(id, out string) {
	l.add(session.TypeToolResult, session.ActorSandbox, session.ToolResult{CallID: id, Content: out})
}

// shape renders a thread compactly: "1:user(a)=x 2:change>1 3:tool(t1)=out".
func shape(th *thread.Thread) string {
	var parts []string
	for _, it := range th.Items {
		var s string
		switch it.Kind {
		case thread.KindUser:
			m := it.Message
			s = fmt.Sprintf("user(%s)=%q", m.TS, m.Text)
			if m.Edited {
				s += ",edited"
			}
			if m.Deleted {
				s += fmt.Sprintf(",deleted(was %q)", m.DeletedText)
			}
			if m.Stray {
				s += ",stray"
			}
		case thread.KindAssistant:
			s = fmt.Sprintf("assistant=%q", it.Assistant.Text)
		case thread.KindTool:
			if it.Tool.Call != nil {
				s = "tool(" + it.Tool.Call.CallID + ")"
			} else {
				s = "result(" + it.Tool.Result.CallID + ")"
			}
			if it.Tool.Result != nil {
				s += fmt.Sprintf("=%q@%d", it.Tool.Result.Content, it.Tool.ResultEvent.Seq)
			}
		case thread.KindChange:
			s = fmt.Sprintf("change>%d", th.Items[it.Target].Seq())
		case thread.KindMarker:
			s = string(it.Event.Type)
		case thread.KindUnreadable:
			s = "unreadable " + string(it.Event.Type)
		}
		parts = append(parts, fmt.Sprintf("%d:%s", it.Seq(), s))
	}
	return strings.Join(parts, " ")
}

func TestFold(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(l *log)
		want  string
	}{
		{"edit replaces the text", func(l *log) { l.user("1", "a"); l.edit("1", "b") },
			`1:user(1)="b",edited 2:change>1`},
		{"duplicate edits: the last wins", func(l *log) { l.user("1", "a"); l.edit("1", "b"); l.edit("1", "c"); l.edit("1", "b") },
			`1:user(1)="b",edited 2:change>1 3:change>1 4:change>1`},
		{"delete empties the text", func(l *log) { l.user("1", "secret"); l.del("1") },
			`1:user(1)="",deleted(was "secret") 2:change>1`},
		{"delete of an edited message", func(l *log) { l.user("1", "a"); l.edit("1", "b"); l.del("1") },
			`1:user(1)="",deleted(was "b") 2:change>1 3:change>1`},
		{"edit after delete stays deleted", func(l *log) { l.user("1", "a"); l.del("1"); l.edit("1", "b") },
			`1:user(1)="",deleted(was "b") 2:change>1 3:change>1`},
		{"edit of an unknown ts is a stray", func(l *log) { l.edit("9", "b"); l.edit("9", "c") },
			`1:user(9)="c",edited,stray 2:change>1`},
		{"delete of an unknown ts is a stray", func(l *log) { l.del("9"); l.edit("9", "c") },
			`1:user(9)="",deleted(was "c"),stray 2:change>1`},
		{"a message logged after its edit takes it over", func(l *log) { l.edit("1", "b"); l.user("1", "a") },
			`1:change>2 2:user(1)="b",edited`},
		{"a message logged after its deletion is deleted", func(l *log) { l.del("1"); l.edit("1", "b"); l.user("1", "a") },
			`1:change>3 2:change>3 3:user(1)="",deleted(was "b")`},
		{"edits by any actor apply (the gateway drops bots' edits)", func(l *log) {
			l.user("1", "a")
			l.add(session.TypeUserMessageEdited, session.ActorBot, session.UserMessageEdited{OrigTS: "1", Text: "b"})
		}, `1:user(1)="b",edited 2:change>1`},
		{"tool call without result", func(l *log) { l.call("t1") }, `1:tool(t1)`},
		{"results pair with their calls", func(l *log) { l.call("t1"); l.call("t2"); l.result("t2", "two"); l.result("t1", "one") },
			`1:tool(t1)="one"@4 2:tool(t2)="two"@3`},
		{"a second result and a result of no call stand alone", func(l *log) { l.call("t1"); l.result("t1", "a"); l.result("t1", "b"); l.result("x", "c") },
			`1:tool(t1)="a"@2 3:result(t1)="b"@3 4:result(x)="c"@4`},
		{"a repeated call id takes the later result", func(l *log) { l.call("t1"); l.result("t1", "a"); l.call("t1"); l.result("t1", "b") },
			`1:tool(t1)="a"@2 3:tool(t1)="b"@4`},
		{"markers are kept in place", func(l *log) {
			l.user("1", "a")
			l.add(session.TypeTurnStarted, session.ActorSystem, session.TurnStarted{Through: 1})
			l.add(session.TypeQueued, session.ActorSystem, session.Queued{MessageSeq: 1})
			l.add(session.TypeAssistantMessage, session.ActorBot, session.AssistantMessage{Text: "hi"})
			l.add(session.TypeTurnCompleted, session.ActorSystem, session.TurnCompleted{Turn: 2})
		}, `1:user(1)="a" 2:turn_started 3:queued 4:assistant="hi" 5:turn_completed`},
		{"unreadable and purged payloads", func(l *log) {
			l.add(session.TypeUserMessage, session.ActorUser, nil)
			*l = append(*l, session.Event{Seq: 2, Type: session.TypeToolCall, Payload: json.RawMessage(`{"call_id":5}`)})
			l.add(session.TypeTurnStarted, session.ActorSystem, nil)
		}, `1:unreadable user_message 2:unreadable tool_call 3:turn_started`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var l log
			c.build(&l)
			if got := shape(thread.Fold(l)); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			// Folding in pieces gives the same thread.
			var th thread.Thread
			for _, e := range l {
				th.Add(e)
			}
			if got := shape(&th); got != c.want {
				t.Errorf("incremental: got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestFoldDetails(t *testing.T) {
	t.Parallel()
	var l log
	l.user("1", "a")
	l.add(session.TypeTitle, session.ActorBot, session.Title{Text: "  first "})
	l.add(session.TypeTitle, session.ActorBot, session.Title{Text: "second"})
	l.add(session.TypeUserMessage, session.ActorUser, nil)
	th := thread.Fold(l)
	if th.Title != "second" {
		t.Errorf("title %q", th.Title)
	}
	m, ok := th.Message("1")
	if !ok || m.Raw != "raw a" || m.UserName != "ada" || m.Original == nil || m.Original.Text != "a" {
		t.Errorf("message %+v", m)
	}
	if err := th.Items[3].Err; !errors.Is(err, session.ErrPurged) {
		t.Errorf("purged payload error = %v", err)
	}
	if _, ok := th.Call("nope"); ok {
		t.Error("unknown call found")
	}
}
