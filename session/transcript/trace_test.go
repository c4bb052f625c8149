package transcript_test

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// A turn's markers name the trace the turn ran in (trace_id, when tracing was on), so a
// transcript leads to the turn's trace.
func TestTurnMarkersNameTheirTrace(t *testing.T) {
	t.Parallel()
	b := &builder{}
	b.user("1700000000.001200", "hi", "", nil)
	b.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: 1, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "hello", Turn: 2})
	b.add(session.TypeTurnCompleted, sys, session.TurnCompleted{Turn: 2, Status: "ok", Through: 1, TraceID: "00f067aa0ba902b74bf92f3577b34da6"})
	var text strings.Builder
	if err := transcript.Build(sess, b.evs, transcript.Options{All: true}).Write(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"turn started: through #1, trace 4bf92f3577b34da6a3ce929d0e0e4736", "turn completed: ok, trace 00f067aa0ba902b74bf92f3577b34da6"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, text.String())
		}
	}
}
