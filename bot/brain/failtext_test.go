package brain_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
	"github.com/rs/zerolog"
)

// Issue 17: no reply carries an error's text — ids, SQL, Go error chains stay in the log line
// and the error event; the thread gets a plain sentence.
func TestRepliesNeverCarryErrorText(t *testing.T) {
	t.Parallel()
	t.Run("unreadable history", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		seq, _ := e.user("hello")
		// A marker whose payload does not decode: the history cannot be built.
		e.append(session.NewEvent{Type: session.TypeTurnStarted, Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"},
			Payload: json.RawMessage(`{"through":"not-a-seq"}`)})
		turnSeq := e.startTurn(seq)
		b, _ := newBrain(t, brain.Offline{}, nil)
		r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
		if err != nil {
			t.Fatal(err)
		}
		evs := e.after(turnSeq)
		wantTypes(t, evs, session.TypeError, session.TypeAssistantMessage)
		ev := decode[session.ErrorEvent](t, evs[0])
		if ev.Code != "bad_event" || !strings.Contains(ev.Message, "cannot unmarshal") {
			t.Errorf("the error event lost the detail: %+v", ev)
		}
		mustBePlain(t, r.Message.Text, ev.Message, e.sess.ID.String(), "json", "unmarshal", "session.TurnStarted", "seq")
		if r.Status != session.StatusError || r.Reason != "bad_event" {
			t.Errorf("reply = %+v", r)
		}
	})
	t.Run("provider 400 with internal detail", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		fake := fakeprovider.NewAnthropic(t, anthropicKey)
		detail := `pq: relation "events" does not exist (SQLSTATE 42P01) at seq 42 for request req_0123456789abcdef`
		fake.Push(fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: detail})
		b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
		seq, _ := e.user("hello")
		turnSeq := e.startTurn(seq)
		r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
		if err != nil {
			t.Fatal(err)
		}
		evs := e.after(turnSeq)
		wantTypes(t, evs, session.TypeError, session.TypeAssistantMessage)
		if ev := decode[session.ErrorEvent](t, evs[0]); !strings.Contains(ev.Message, "SQLSTATE 42P01") {
			t.Errorf("the error event lost the detail: %+v", ev)
		}
		mustBePlain(t, r.Message.Text, detail, "SQLSTATE", "req_0123", "relation")
	})
	t.Run("search failure reaches neither reply nor model", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		fake := fakeprovider.NewOpenAI(t, openAIKey)
		fake.Push(
			fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_s", Name: "search_sessions", Input: `{"query":"deploy"}`}}},
			fakeprovider.Reply{Text: "Search is down right now."},
		)
		b, _ := newBrain(t, openAIProvider(t, fake, openAIKey), nil)
		seq, _ := e.user("what did we say about deploys?")
		turnSeq := e.startTurn(seq)
		tr := e.turn(nil, turnSeq)
		tr.Tools = append(tr.Tools, brain.SearchTool(failingSearcher{}, zerolog.Nop()))
		r, err := b.Run(context.Background(), tr)
		if err != nil {
			t.Fatal(err)
		}
		evs := e.after(turnSeq)
		wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
		res := decode[session.ToolResult](t, evs[2])
		if !res.IsError {
			t.Errorf("search result = %+v, want an error result", res)
		}
		mustBePlain(t, res.Content, errSearchSQL.Error(), "SQLSTATE", "search_index")
		mustBePlain(t, r.Message.Text, errSearchSQL.Error())
		mustAllValid(t, fake, 2)
	})
}

var errSearchSQL = errors.New(`search sessions: query "SELECT session_id FROM search_index WHERE ...": ERROR: canceling statement due to statement timeout (SQLSTATE 57014)`)

type failingSearcher struct{}

func (failingSearcher) Search(ctx context.Context, query string, limit int) (string, error) {
	return "", errSearchSQL
}

// mustBePlain fails when text holds any of the fragments of internal error text.
func mustBePlain(t *testing.T, text string, fragments ...string) {
	t.Helper()
	if strings.TrimSpace(text) == "" {
		t.Fatalf("empty text")
	}
	for _, f := range fragments {
		if f != "" && strings.Contains(text, f) {
			t.Errorf("text %q carries internal error text %q", text, f)
		}
	}
}
