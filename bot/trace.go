package bot

import (
	"context"
	"errors"

	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
)

// Spans of the bot (Deps.Tracer): one per Socket Mode envelope, from its arrival to its ack,
// and one per turn, the root of the turn's trace (its model calls, tool calls, Slack calls
// and database statements are its descendants; the model and tool calls are children of its
// "invoke_agent logbook" span, all in the session's conversation, gen_ai.conversation.id). A turn is its own trace, linked to the spans
// of the envelopes that stored the messages it answers (their ids are in each user_message):
// it may run on another replica, long after the ack. turn_started and turn_completed carry the
// turn's trace id, and log lines of the envelope and of the turn theirs (telemetry.LogHook).

// AgentName is the agent's name in its spans (gen_ai.agent.name).
const AgentName = "logbook"

// maxTurnLinks bounds the envelopes a turn's span links to.
const maxTurnLinks = 32

// startEnvelope opens the span of one envelope.
func (g *Gateway) startEnvelope(ctx context.Context, evt socketmode.Event) (context.Context, trace.Span) {
	req := evt.Request
	ctx, span := g.tracer.Start(ctx, "envelope "+req.Type, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(telemetry.EnvelopeID.String(req.EnvelopeID), telemetry.Envelope.String(req.Type),
			telemetry.Retry.Int(req.RetryAttempt)))
	if ev, ok := evt.Data.(slackevents.EventsAPIEvent); ok {
		span.SetAttributes(telemetry.Event.String(ev.InnerEvent.Type))
	}
	return ctx, span
}

// envelopeFailed marks an envelope's span failed: it was not stored, and not acked.
func envelopeFailed(ctx context.Context) {
	trace.SpanFromContext(ctx).SetStatus(codes.Error, "not persisted; not acked")
}

// runTurn runs t in the turn's span.
func (c *Cell) runTurn(ctx context.Context, t *turn) error {
	st := t.state
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(
		telemetry.SessionID.String(c.id.String()), telemetry.Resumed.Bool(st.open), telemetry.Channel.String(c.sess.Key.Channel))}
	if !st.open {
		opts = append(opts, trace.WithLinks(envelopeLinks(c.flog.snapshot(), st.through)...))
	} else {
		opts = append(opts, trace.WithAttributes(telemetry.Turn.Int64(st.turnSeq)))
	}
	tracer := telemetry.Tracer(c.deps.Tracer)
	ctx, span := tracer.Start(ctx, "turn", opts...)
	defer span.End()
	// The agent's invocation, as the GenAI semantic conventions name it: the parent of the
	// turn's model calls ("chat {model}") and tool calls ("execute_tool {tool}"), all of
	// them in the session's conversation (gen_ai.conversation.id).
	ctx = telemetry.WithConversation(ctx, c.id.String())
	ctx, agent := tracer.Start(ctx, "invoke_agent "+AgentName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		telemetry.GenAIOperation.String("invoke_agent"), telemetry.GenAIAgentName.String(AgentName),
		telemetry.GenAIConversationID.String(c.id.String())))
	defer agent.End()
	t.started = c.deps.Clock.Now()
	err := t.run(ctx)
	if !st.open && t.state.turnSeq > 0 {
		span.SetAttributes(telemetry.Turn.Int64(t.state.turnSeq))
	}
	if err != nil && !errors.Is(err, errSuspended) {
		span.SetStatus(codes.Error, shortError(err))
		agent.SetStatus(codes.Error, shortError(err))
	}
	c.log.Debug().Ctx(ctx).Int64("turn", t.state.turnSeq).AnErr("error", err).Msg("turn ended") // with its trace id (telemetry.LogHook)
	return err
}

// envelopeLinks links to the envelope spans of the user messages after through.
func envelopeLinks(evs []session.Event, through int64) []trace.Link {
	var links []trace.Link
	for _, e := range session.Select(evs, session.Range{From: through + 1, Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Decode(&m) != nil || m.TraceID == "" {
			continue
		}
		if l, ok := telemetry.Link(m.TraceID, m.SpanID); ok && len(links) < maxTurnLinks {
			links = append(links, l)
		}
	}
	return links
}
