package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// Metric names. The gen_ai.client.* ones are the GenAI semantic conventions'; the logbook.*
// ones are logbook's own.
const (
	MetricTokenUsage        = "gen_ai.client.token.usage"        // histogram, {token}, by gen_ai.token.type
	MetricOperationDuration = "gen_ai.client.operation.duration" // histogram, s, each model call
	MetricTurns             = "logbook.turns"                    // counter, {turn}, by logbook.turn.status
	MetricTurnDuration      = "logbook.turn.duration"            // histogram, s, by logbook.turn.status
	MetricCost              = "logbook.model.cost"               // counter, in the prices' currency
)

// GenAI and logbook attributes of the metrics.
const (
	GenAITokenType = attribute.Key("gen_ai.token.type") // "input" or "output"
	TurnStatus     = attribute.Key("logbook.turn.status")
	Currency       = attribute.Key("logbook.currency") // the prices' currency, as LOGBOOK_PRICES names it
)

// Buckets the GenAI semantic conventions advise for their histograms.
var (
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	turnBuckets     = []float64{0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
)

// Metrics are logbook's OpenTelemetry instruments: model calls' tokens and durations (GenAI
// semantic conventions), turns, their latency and the model calls' cost. A nil *Metrics, or
// one made from a nil provider, records nothing. No attribute holds a conversation's text.
type Metrics struct {
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
	turns    metric.Int64Counter
	turnTime metric.Float64Histogram
	cost     metric.Float64Counter
}

// NewMetrics makes the instruments from mp (nil: a no-op provider).
func NewMetrics(mp metric.MeterProvider) *Metrics {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(TracerName)
	var x Metrics
	// The instruments' errors are for invalid names or units, fixed here: they still return a
	// usable (no-op) instrument.
	x.tokens, _ = m.Int64Histogram(MetricTokenUsage, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used by each model call, by gen_ai.token.type."),
		metric.WithExplicitBucketBoundaries(tokenBuckets...))
	x.duration, _ = m.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each model call."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	x.turns, _ = m.Int64Counter(MetricTurns, metric.WithUnit("{turn}"), metric.WithDescription("Turns completed, by status."))
	x.turnTime, _ = m.Float64Histogram(MetricTurnDuration, metric.WithUnit("s"),
		metric.WithDescription("Turns' latency, from the turn's start to its completion, by status."),
		metric.WithExplicitBucketBoundaries(turnBuckets...))
	x.cost, _ = m.Float64Counter(MetricCost, metric.WithUnit("{currency}"), // the amount is in logbook.currency
		metric.WithDescription("What model calls cost at LOGBOOK_PRICES, in the prices' currency, by provider and model."))
	return &x
}

// ModelCall is one model call's measurements: the GenAI attributes of its span.
type ModelCall struct {
	Operation, Provider, RequestModel, ResponseModel string
	ErrorType                                        string // "" for a call that answered
	InputTokens, OutputTokens                        int64
	Duration                                         time.Duration
}

// RecordModelCall records a model call's duration and, when it answered, its tokens.
func (m *Metrics) RecordModelCall(ctx context.Context, c ModelCall) {
	if m == nil {
		return
	}
	attrs := []attribute.KeyValue{GenAIOperation.String(c.Operation), GenAIProvider.String(c.Provider), GenAIRequestModel.String(c.RequestModel)}
	if c.ResponseModel != "" {
		attrs = append(attrs, GenAIResponseModel.String(c.ResponseModel))
	}
	if c.ErrorType != "" {
		attrs = append(attrs, ErrorType.String(c.ErrorType))
	}
	m.duration.Record(ctx, c.Duration.Seconds(), metric.WithAttributes(attrs...))
	if c.ErrorType != "" {
		return
	}
	m.tokens.Record(ctx, c.InputTokens, metric.WithAttributes(append(attrs, GenAITokenType.String("input"))...))
	m.tokens.Record(ctx, c.OutputTokens, metric.WithAttributes(append(attrs, GenAITokenType.String("output"))...))
}

// RecordTurn counts a completed turn and records its latency, by status.
func (m *Metrics) RecordTurn(ctx context.Context, status string, took time.Duration) {
	if m == nil {
		return
	}
	set := metric.WithAttributes(TurnStatus.String(status))
	m.turns.Add(ctx, 1, set)
	m.turnTime.Record(ctx, took.Seconds(), set)
}

// RecordCost adds what a model call cost, in currency (the prices'), to the cost counter.
func (m *Metrics) RecordCost(ctx context.Context, provider, model, currency string, amount float64) {
	if m == nil || amount <= 0 {
		return
	}
	m.cost.Add(ctx, amount, metric.WithAttributes(GenAIProvider.String(provider), GenAIRequestModel.String(model),
		Currency.String(currency)))
}

type conversationKey struct{}

// WithConversation is ctx naming the conversation (the session id) its spans belong to:
// model and tool calls made under it carry gen_ai.conversation.id.
func WithConversation(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, conversationKey{}, id)
}

// Conversation is the conversation id ctx names; "" when none.
func Conversation(ctx context.Context) string {
	id, _ := ctx.Value(conversationKey{}).(string)
	return id
}
