package brain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
)

// complete makes one model call (one attempt) in its own span, named and described by the
// GenAI semantic conventions: "chat {model}", the provider, the model asked for and the one
// that answered, the output limit, token counts and the finish reason. The prompt and the
// completion are in the span only with Config.TraceContent.
func (b *Brain) complete(ctx context.Context, p Provider, req Request) (Response, error) {
	model := p.Model()
	ctx, span := b.tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		telemetry.GenAIOperation.String("chat"), telemetry.GenAIProvider.String(p.Name()), telemetry.GenAISystem.String(p.Name()),
		telemetry.GenAIRequestModel.String(model), telemetry.GenAIMaxTokens.Int64(req.MaxTokens),
		telemetry.Purpose.String(string(cmp.Or(req.Purpose, PurposeReply)))))
	defer span.End()
	conv := telemetry.Conversation(ctx)
	if conv != "" {
		span.SetAttributes(telemetry.GenAIConversationID.String(conv))
	}
	call := telemetry.ModelCall{Operation: "chat", Provider: p.Name(), RequestModel: model}
	start := b.now()
	defer func() {
		call.Duration = b.now().Sub(start)
		b.metrics.RecordModelCall(ctx, call)
	}()
	if b.cfg.TraceContent && span.IsRecording() {
		span.SetAttributes(telemetry.GenAISystemPrompt.String(traceText(req.System)), telemetry.GenAIInputMessages.String(traceText(contentJSON(req.Messages))))
	}
	resp, err := p.Complete(ctx, req)
	if err != nil {
		span.SetAttributes(telemetry.ErrorType.String(errorType(err)))
		span.SetStatus(codes.Error, errorType(err))
		call.ErrorType = errorType(err)
		return resp, err
	}
	call.ResponseModel, call.InputTokens, call.OutputTokens = cmp.Or(resp.Model, model), resp.InputTokens, resp.OutputTokens
	span.SetAttributes(telemetry.GenAIResponseModel.String(cmp.Or(resp.Model, model)),
		telemetry.GenAIInputTokens.Int64(resp.InputTokens), telemetry.GenAIOutputTokens.Int64(resp.OutputTokens))
	if resp.StopReason != "" {
		span.SetAttributes(telemetry.GenAIFinishReasons.StringSlice([]string{resp.StopReason}))
	}
	if b.cfg.TraceContent && span.IsRecording() {
		out := Message{Role: RoleAssistant}
		if resp.Text != "" {
			out.Blocks = append(out.Blocks, Block{Text: resp.Text})
		}
		for i := range resp.ToolUses {
			out.Blocks = append(out.Blocks, Block{ToolUse: &resp.ToolUses[i]})
		}
		span.SetAttributes(telemetry.GenAIOutputMessages.String(traceText(contentJSON([]Message{out}))))
	}
	return resp, nil
}

// MaxTraceContent bounds each text attribute of a span with the content on
// (LOGBOOK_TRACE_CONTENT), in bytes: a long conversation would otherwise make spans that a
// collector refuses whole (4 MiB a batch over gRPC), losing every span of the batch.
const MaxTraceContent = 64 << 10

// traceText is s within MaxTraceContent: its head and tail, and how much was left out.
func traceText(s string) string {
	out, _ := headTailWith(s, MaxTraceContent, func(omitted int) string {
		return fmt.Sprintf("\n[… %d bytes truncated from the trace …]\n", omitted)
	})
	return out
}

// conversation is ctx naming the session as the conversation of the spans made under it
// (gen_ai.conversation.id); ctx as it is for a session without an id.
func conversation(ctx context.Context, id session.ID) context.Context {
	if id == (session.ID{}) {
		return ctx
	}
	return telemetry.WithConversation(ctx, id.String())
}

// errorType is a failed call's error.type: the API's error code, "http_NNN", or what ended it.
func errorType(err error) string {
	var pe *ProviderError
	switch {
	case errors.As(err, &pe) && pe.Code != "":
		return pe.Code
	case errors.As(err, &pe) && pe.Status != 0:
		return "http_" + strconv.Itoa(pe.Status)
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "network"
}

// traceTool runs one tool call in its own span ("execute_tool {name}", GenAI conventions): the
// tool, the call id, whether it failed. Its input and result are in the span only with
// Config.TraceContent.
func (b *Brain) traceTool(ctx context.Context, st *turn, use ToolUse, budget *outputBudget) Outcome {
	ctx, span := b.tracer.Start(ctx, "execute_tool "+use.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		telemetry.GenAIOperation.String("execute_tool"), telemetry.GenAIToolName.String(use.Name),
		telemetry.GenAIToolCallID.String(use.ID), telemetry.GenAIToolType.String("function")))
	defer span.End()
	if conv := telemetry.Conversation(ctx); conv != "" {
		span.SetAttributes(telemetry.GenAIConversationID.String(conv))
	}
	if b.cfg.TraceContent && span.IsRecording() {
		span.SetAttributes(telemetry.GenAIToolArguments.String(traceText(string(use.Input))))
	}
	out := b.runTool(ctx, st, use, budget)
	if out.ExitCode != nil {
		span.SetAttributes(attribute.Int("process.exit.code", *out.ExitCode))
	}
	if out.IsError {
		span.SetAttributes(telemetry.ErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "tool_error")
	}
	if b.cfg.TraceContent && span.IsRecording() {
		span.SetAttributes(telemetry.GenAIToolResult.String(traceText(out.Content)))
	}
	return out
}

// contentJSON renders messages the way gen_ai.input.messages / gen_ai.output.messages hold
// them: [{"role", "parts": [{"type": "text"|"tool_call"|"tool_call_response"|"image"|...}]}].
// Images and documents are named by their media type, never inlined.
func contentJSON(msgs []Message) string {
	type part struct {
		Type      string          `json:"type"`
		Content   string          `json:"content,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Response  string          `json:"response,omitempty"`
		MediaType string          `json:"mime_type,omitempty"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]message, 0, len(msgs))
	for _, m := range msgs {
		mm := message{Role: string(m.Role), Parts: []part{}}
		for _, bl := range m.Blocks {
			switch {
			case bl.ToolUse != nil:
				mm.Parts = append(mm.Parts, part{Type: "tool_call", ID: bl.ToolUse.ID, Name: bl.ToolUse.Name, Arguments: validJSON(bl.ToolUse.Input)})
			case bl.ToolResult != nil:
				mm.Parts = append(mm.Parts, part{Type: "tool_call_response", ID: bl.ToolResult.CallID, Response: bl.ToolResult.Content})
			case bl.media() != nil:
				mm.Parts = append(mm.Parts, part{Type: "blob", MediaType: bl.media().MediaType})
			default:
				mm.Parts = append(mm.Parts, part{Type: "text", Content: bl.Text})
			}
		}
		out = append(out, mm)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "[]"
	}
	return string(b)
}

func validJSON(raw json.RawMessage) json.RawMessage {
	if json.Valid(raw) {
		return raw
	}
	b, _ := json.Marshal(string(raw))
	return b
}
