// Package telemetry is logbook's side of OpenTelemetry tracing: the tracer every part names
// its spans with, the trace ids that log lines and the log's events carry, the attribute
// names logbook adds to the standard ones, and the metrics (metrics.go). The tracer and meter
// providers are always passed in (nil: no-op ones); nothing here reads the environment or sets
// otel's globals.
//
// Spans (see docs/traces.md): one per Socket Mode envelope (gateway), per turn (cell) with
// the agent's invoke_agent under it (gen_ai.conversation.id the session id), per model call (GenAI semantic conventions; prompt and completion text only when the caller
// asks for content), per tool call, per Slack Web API call (an otelhttp transport) and per
// database statement (a pgx tracer).
package telemetry

import (
	"context"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of logbook's own spans.
const TracerName = "github.com/logbook/logbook"

// Attributes logbook adds to its spans (the GenAI ones are semconv's).
const (
	SessionID  = attribute.Key("logbook.session_id")
	Turn       = attribute.Key("logbook.turn")         // the seq of the turn's turn_started
	Resumed    = attribute.Key("logbook.turn.resumed") // the turn was open in the log (a dead cell's)
	Purpose    = attribute.Key("logbook.purpose")      // what a model call is for: reply, summary, title
	EnvelopeID = attribute.Key("slack.envelope_id")
	Envelope   = attribute.Key("slack.envelope_type")
	Event      = attribute.Key("slack.event_type")
	Channel    = attribute.Key("slack.channel")
	Retry      = attribute.Key("slack.retry_attempt")
)

// GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/), as the
// spans of model and tool calls carry them. gen_ai.system is the older name of
// gen_ai.provider.name; both are set, for backends that know one of them. The content ones are
// set only when content is asked for (LOGBOOK_TRACE_CONTENT=on).
const (
	GenAIOperation      = attribute.Key("gen_ai.operation.name")  // "chat", "execute_tool", "invoke_agent"
	GenAIConversationID = attribute.Key("gen_ai.conversation.id") // the session id
	GenAIAgentName      = attribute.Key("gen_ai.agent.name")      // "logbook"
	GenAIProvider       = attribute.Key("gen_ai.provider.name")
	GenAISystem         = attribute.Key("gen_ai.system")
	GenAIRequestModel   = attribute.Key("gen_ai.request.model")
	GenAIMaxTokens      = attribute.Key("gen_ai.request.max_tokens")
	GenAIResponseModel  = attribute.Key("gen_ai.response.model")
	GenAIInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	GenAIFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	GenAIToolName       = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID     = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType       = attribute.Key("gen_ai.tool.type")
	ErrorType           = attribute.Key("error.type")
	GenAISystemPrompt   = attribute.Key("gen_ai.system_instructions") // content
	GenAIInputMessages  = attribute.Key("gen_ai.input.messages")      // content
	GenAIOutputMessages = attribute.Key("gen_ai.output.messages")     // content
	GenAIToolArguments  = attribute.Key("gen_ai.tool.call.arguments") // content
	GenAIToolResult     = attribute.Key("gen_ai.tool.call.result")    // content
)

// Tracer is logbook's tracer from tp; a nil tp gives a no-op tracer.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return Or(tp).Tracer(TracerName)
}

// Or is tp, or a no-op provider when tp is nil.
func Or(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// IDs returns the trace and span id (hex) of ctx's span when it is sampled, so they name a
// trace that is exported; "" otherwise (tracing off, or not sampled).
func IDs(ctx context.Context) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// TraceID is IDs' trace id.
func TraceID(ctx context.Context) string {
	id, _ := IDs(ctx)
	return id
}

// Link is a link to the span whose ids (hex, as IDs gives them) were recorded; ok is false
// for ids that do not parse (or are empty).
func Link(traceID, spanID string) (trace.Link, bool) {
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return trace.Link{}, false
	}
	sid, err := trace.SpanIDFromHex(spanID)
	if err != nil {
		return trace.Link{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.Link{SpanContext: sc}, true
}

// LogHook adds trace_id and span_id to each log line whose event (Event.Ctx) or logger
// (Context.Ctx) carries a context with a sampled span. Install it on the root logger.
type LogHook struct{}

// Run implements zerolog.Hook.
func (LogHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	if traceID, spanID := IDs(e.GetCtx()); traceID != "" {
		e.Str("trace_id", traceID).Str("span_id", spanID)
	}
}
