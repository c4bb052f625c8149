package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
	"github.com/logbook/logbook/session"
)

// The real binary, configured by the standard OTEL_* variables alone, exports a turn's trace
// over OTLP/HTTP: the turn's span under the service name OTEL_SERVICE_NAME gives, its model
// call under it (through the agent's invoke_agent span, in the session's conversation), and the
// GenAI token metric over OTLP too, the turn's trace id in turn_started and in serve's log line for the turn.
func TestE2ETraceExportedOverOTLP(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t)
	e := newE2E(t, slackemu.Options{})
	e.model.Push(fakeprovider.Reply{Text: "Traced.", InputTokens: 5, OutputTokens: 2}, fakeprovider.Reply{Text: "Traces"})
	p := e.serve("OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL, "OTEL_SERVICE_NAME=logbook-e2e", "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_METRIC_EXPORT_INTERVAL=100")
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("trace this")})
	e.replies(top.TS, 1)
	s := e.session(top.TS)
	e.waitFor("the turn to complete", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	var started session.TurnStarted
	if err := e.events(s.ID, session.TypeTurnStarted)[0].Decode(&started); err != nil || len(started.TraceID) != 32 {
		t.Fatalf("turn_started %+v (%v): want a trace id", started, err)
	}
	var turn, agent, chat *otlptest.Span
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for turn == nil || agent == nil || chat == nil {
		for _, sp := range recv.Spans() {
			switch {
			case sp.Name == "turn" && sp.TraceID == started.TraceID:
				turn = &sp
			case sp.Name == "invoke_agent logbook" && sp.TraceID == started.TraceID:
				agent = &sp
			case sp.Name == "chat claude-e2e" && sp.TraceID == started.TraceID && sp.Attrs["logbook.purpose"] == "reply":
				chat = &sp
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no turn and model call spans of trace %s arrived: %d spans in %d requests", started.TraceID, len(recv.Spans()), recv.Requests())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if turn.Resource["service.name"] != "logbook-e2e" || agent.ParentID != turn.SpanID || chat.ParentID != agent.SpanID ||
		chat.Attrs["gen_ai.usage.input_tokens"] != int64(5) || chat.Attrs["gen_ai.conversation.id"] != s.ID.String() {
		t.Errorf("turn %+v\nagent %+v\nchat %+v", turn, agent, chat)
	}
	e.waitFor("the token usage metric over OTLP", func() bool {
		m, ok := recv.Metric("gen_ai.client.token.usage")
		return ok && m.Resource["service.name"] == "logbook-e2e" && len(m.Points) > 0
	})
	e.waitFor("serve's log line of the turn with its trace id", func() bool {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(line, `"turn ended"`) && strings.Contains(line, `"trace_id":"`+started.TraceID+`"`) {
				return true
			}
		}
		return false
	})
}
