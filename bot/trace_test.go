package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
	"github.com/logbook/logbook/session"
)

// TestTraceTurnSpans runs a turn with a tool call under a tracer that exports over OTLP/HTTP to
// an in-process receiver, and checks the trace: the envelope's span, the turn's span (linked
// to the envelope's, its trace id in turn_started and turn_completed), its model calls with
// the GenAI attributes, its tool call, its Slack calls and its database statements, all in the
// turn's trace; and that the prompt's text is in no span unless content is asked for.
func TestTraceTurnSpans(t *testing.T) {
	t.Parallel()
	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprintf("content=%v", content), func(t *testing.T) {
			t.Parallel()
			recv := otlptest.Start(t)
			tp := recv.Provider(t)
			h, model := modelHarness(t, harnessOptions{tracer: tp, traceContent: content})
			model.Push(
				fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo hi"}`}},
					InputTokens: 11, OutputTokens: 7},
				fakeprovider.Reply{Text: "It said hi.", InputTokens: 20, OutputTokens: 3})
			const prompt = "run the zebra-crossing-4711 check"
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> " + prompt})
			h.replies(general, top.TS, 1)
			s := h.session(general, top.TS)
			h.turns(s.ID, 1)
			// The turn's span ends when the turn's cell is done with it (after its title, say),
			// a moment after turn_completed.
			isTurn := func(sp otlptest.Span) bool {
				return sp.Name == "turn" && sp.Attrs["logbook.session_id"] == s.ID.String()
			}
			h.waitFor("the turn's span", func() bool {
				if err := tp.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				return slices.ContainsFunc(recv.Spans(), isTurn)
			})
			spans := recv.Spans()

			turn := findSpan(t, spans, isTurn)
			if turn.ParentID != "" || turn.Attrs["logbook.turn"] == nil {
				t.Errorf("turn span: parent %q, attributes %v; want a root with logbook.turn", turn.ParentID, turn.Attrs)
			}
			var started session.TurnStarted
			var completed session.TurnCompleted
			var msg session.UserMessage
			decodeFirst(t, h.events(s.ID, session.TypeTurnStarted), &started)
			decodeFirst(t, h.events(s.ID, session.TypeTurnCompleted), &completed)
			decodeFirst(t, h.events(s.ID, session.TypeUserMessage), &msg)
			if started.TraceID != turn.TraceID || completed.TraceID != turn.TraceID {
				t.Errorf("turn_started trace %q, turn_completed trace %q; want the turn span's %q", started.TraceID, completed.TraceID, turn.TraceID)
			}
			envelope := findSpan(t, spans, func(sp otlptest.Span) bool { return sp.SpanID == msg.SpanID })
			if envelope.Name != "envelope events_api" || envelope.TraceID != msg.TraceID || envelope.Kind != "SPAN_KIND_CONSUMER" ||
				envelope.Attrs["slack.event_type"] == nil || !slices.Contains(turn.Links, envelope.SpanID) {
				t.Errorf("envelope span %+v; turn links %v: want the user_message's envelope, linked from the turn", envelope, turn.Links)
			}

			// The turn's model and tool calls are under its agent's invocation (TestTraceTurnGenAI).
			agent := findSpan(t, spans, func(sp otlptest.Span) bool { return sp.ParentID == turn.SpanID && sp.Name == "invoke_agent logbook" })
			calls := childSpans(spans, agent, "chat ")
			if len(calls) != 2 {
				t.Fatalf("model call spans under the turn: %d, want 2 (spans: %v)", len(calls), spanNames(spans))
			}
			for i, want := range []struct {
				in, out int64
				finish  string
			}{{11, 7, "tool_use"}, {20, 3, "end_turn"}} {
				a := calls[i].Attrs
				if calls[i].Name != "chat claude-test" || calls[i].Kind != "SPAN_KIND_CLIENT" || a["gen_ai.operation.name"] != "chat" ||
					a["gen_ai.provider.name"] != "anthropic" || a["gen_ai.system"] != "anthropic" || a["gen_ai.request.model"] != "claude-test" ||
					a["gen_ai.usage.input_tokens"] != want.in || a["gen_ai.usage.output_tokens"] != want.out ||
					fmt.Sprint(a["gen_ai.response.finish_reasons"]) != "["+want.finish+"]" {
					t.Errorf("model call %d: %s %s %v", i, calls[i].Name, calls[i].Kind, a)
				}
			}
			tools := childSpans(spans, agent, "execute_tool ")
			if len(tools) != 1 || tools[0].Name != "execute_tool run_command" || tools[0].Attrs["gen_ai.tool.name"] != "run_command" ||
				tools[0].Attrs["gen_ai.tool.call.id"] != "toolu_1" {
				t.Errorf("tool spans %+v; want one execute_tool run_command", tools)
			}
			var slackCalls, statements int
			for _, sp := range spans {
				if sp.TraceID != turn.TraceID {
					continue
				}
				if strings.HasPrefix(sp.Name, "slack chat.") && sp.Kind == "SPAN_KIND_CLIENT" {
					slackCalls++
				}
				if strings.Contains(sp.Scope, "otelpgx") && sp.Attrs["db.system.name"] == "postgresql" {
					statements++
				}
			}
			if slackCalls == 0 || statements == 0 {
				t.Errorf("in the turn's trace: %d Slack chat.* calls, %d database statements; want some of each (spans: %v)", slackCalls, statements, spanNames(spans))
			}

			// The prompt's text: nowhere by default; in the model call's input with content on.
			var holders []string
			for _, sp := range spans {
				for k, v := range sp.Attrs {
					if strings.Contains(fmt.Sprint(v), "zebra-crossing-4711") {
						holders = append(holders, sp.Name+" "+k)
					}
				}
			}
			switch {
			case !content && len(holders) > 0:
				t.Errorf("the prompt is in spans without LOGBOOK_TRACE_CONTENT: %v", holders)
			case content && !slices.Contains(holders, "chat claude-test gen_ai.input.messages"):
				t.Errorf("with content on, the prompt is in %v; want the model call's gen_ai.input.messages", holders)
			case content && !strings.Contains(fmt.Sprint(calls[1].Attrs["gen_ai.output.messages"]), "It said hi.") ||
				content && !strings.Contains(fmt.Sprint(tools[0].Attrs["gen_ai.tool.call.arguments"]), "echo hi"):
				t.Errorf("with content on: output %v, tool arguments %v", calls[1].Attrs["gen_ai.output.messages"], tools[0].Attrs["gen_ai.tool.call.arguments"])
			}
		})
	}
}

func findSpan(t *testing.T, spans []otlptest.Span, match func(otlptest.Span) bool) otlptest.Span {
	t.Helper()
	for _, sp := range spans {
		if match(sp) {
			return sp
		}
	}
	t.Fatalf("no such span among %v", spanNames(spans))
	return otlptest.Span{}
}

// childSpans is the direct children of parent whose name starts with prefix, in the order
// they arrived.
func childSpans(spans []otlptest.Span, parent otlptest.Span, prefix string) []otlptest.Span {
	var out []otlptest.Span
	for _, sp := range spans {
		if sp.ParentID == parent.SpanID && sp.TraceID == parent.TraceID && strings.HasPrefix(sp.Name, prefix) {
			out = append(out, sp)
		}
	}
	return out
}

func spanNames(spans []otlptest.Span) []string {
	var names []string
	for _, sp := range spans {
		names = append(names, sp.Name)
	}
	return names
}

func decodeFirst(t *testing.T, evs []session.Event, v any) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no such event")
	}
	if err := evs[0].Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestTraceTurnGenAI runs a turn with a tool call and checks it as the GenAI semantic
// conventions describe an agent: an invoke_agent span under the turn's, parenting its model
// calls (chat) and its tool call (execute_tool), each with gen_ai.conversation.id = the session
// id; and the metrics over OTLP: the model calls' tokens by type and durations, the turn
// counted by status with its latency — none of them holding the conversation's text.
func TestTraceTurnGenAI(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t)
	tp, mp := recv.Provider(t), recv.MeterProvider(t)
	h, model := modelHarness(t, harnessOptions{tracer: tp, meter: mp})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo hi"}`}},
			InputTokens: 11, OutputTokens: 7},
		fakeprovider.Reply{Text: "It said hi.", InputTokens: 20, OutputTokens: 3})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run the quokka-5150 check"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	conv := s.ID.String()
	isAgent := func(sp otlptest.Span) bool {
		return sp.Name == "invoke_agent logbook" && sp.Attrs["gen_ai.conversation.id"] == conv
	}
	h.waitFor("the invoke_agent span", func() bool {
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(recv.Spans(), isAgent)
	})
	spans := recv.Spans()
	agent := findSpan(t, spans, isAgent)
	turn := findSpan(t, spans, func(sp otlptest.Span) bool { return sp.SpanID == agent.ParentID })
	if turn.Name != "turn" || agent.Attrs["gen_ai.operation.name"] != "invoke_agent" || agent.Attrs["gen_ai.agent.name"] != "logbook" ||
		agent.Kind != "SPAN_KIND_INTERNAL" {
		t.Errorf("invoke_agent span %+v under %q; want the turn's child, operation invoke_agent, agent logbook", agent, turn.Name)
	}
	calls, tools := childSpans(spans, agent, "chat "), childSpans(spans, agent, "execute_tool ")
	if len(calls) != 2 || len(tools) != 1 {
		t.Fatalf("under invoke_agent: %d chat, %d execute_tool spans; want 2 and 1 (spans: %v)", len(calls), len(tools), spanNames(spans))
	}
	for _, sp := range append(calls, tools...) {
		if sp.Attrs["gen_ai.conversation.id"] != conv {
			t.Errorf("%s: gen_ai.conversation.id %v, want the session id %s", sp.Name, sp.Attrs["gen_ai.conversation.id"], conv)
		}
	}

	// The metrics: flushed once the turn is counted (turn_completed is appended before).
	var tokens, durations, turns, turnTime otlptest.Metric
	h.waitFor("the turn's metrics", func() bool {
		if err := mp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		var ok [4]bool
		tokens, ok[0] = recv.Metric("gen_ai.client.token.usage")
		durations, ok[1] = recv.Metric("gen_ai.client.operation.duration")
		turns, ok[2] = recv.Metric("logbook.turns")
		turnTime, ok[3] = recv.Metric("logbook.turn.duration")
		return ok == [4]bool{true, true, true, true}
	})
	byType := map[string]otlptest.Point{}
	for _, p := range tokens.Points {
		a := p.Attrs
		if a["gen_ai.operation.name"] != "chat" || a["gen_ai.provider.name"] != "anthropic" || a["gen_ai.request.model"] != "claude-test" ||
			a["gen_ai.response.model"] == nil {
			t.Errorf("token usage point %v: want the chat's GenAI attributes", a)
		}
		byType[fmt.Sprint(a["gen_ai.token.type"])] = p
	}
	if tokens.Kind != "histogram" || tokens.Unit != "{token}" || byType["input"].Count != 2 || byType["input"].Sum != 31 ||
		byType["output"].Count != 2 || byType["output"].Sum != 10 {
		t.Errorf("gen_ai.client.token.usage %s %s: %+v; want input 2 calls 31 tokens, output 2 calls 10", tokens.Kind, tokens.Unit, byType)
	}
	if durations.Kind != "histogram" || durations.Unit != "s" || len(durations.Points) != 1 || durations.Points[0].Count != 2 {
		t.Errorf("gen_ai.client.operation.duration %s %s %+v; want one series of 2 calls, in s", durations.Kind, durations.Unit, durations.Points)
	}
	if turns.Kind != "sum" || len(turns.Points) != 1 || turns.Points[0].Attrs["logbook.turn.status"] != session.StatusOK || turns.Points[0].Value != 1 {
		t.Errorf("logbook.turns %s %+v; want one ok turn", turns.Kind, turns.Points)
	}
	if turnTime.Kind != "histogram" || turnTime.Unit != "s" || len(turnTime.Points) != 1 || turnTime.Points[0].Count != 1 {
		t.Errorf("logbook.turn.duration %s %s %+v; want one ok turn, in s", turnTime.Kind, turnTime.Unit, turnTime.Points)
	}
	for _, m := range recv.Metrics() {
		for _, p := range m.Points {
			for k, v := range p.Attrs {
				if strings.Contains(fmt.Sprint(v), "quokka-5150") || k == "gen_ai.conversation.id" {
					t.Errorf("metric %s carries %s=%v: no conversation's text or id in metrics", m.Name, k, v)
				}
			}
		}
	}
}
