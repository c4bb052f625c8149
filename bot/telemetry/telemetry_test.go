package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A log line whose logger or event carries a span's context names the trace and the span; one
// without, or under a no-op tracer, names none.
func TestLogHookAddsTraceIDs(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t)
	tp := recv.Provider(t)
	ctx, span := telemetry.Tracer(tp).Start(context.Background(), "turn")
	defer span.End()
	var buf bytes.Buffer
	log := zerolog.New(&buf).Hook(telemetry.LogHook{})
	line := func(write func()) map[string]any {
		t.Helper()
		buf.Reset()
		write()
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	sc := span.SpanContext()
	for name, got := range map[string]map[string]any{
		"logger": line(func() { l := log.With().Ctx(ctx).Logger(); l.Info().Msg("x") }),
		"event":  line(func() { log.Info().Ctx(ctx).Msg("x") }),
	} {
		if got["trace_id"] != sc.TraceID().String() || got["span_id"] != sc.SpanID().String() {
			t.Errorf("%s: %v, want trace %s span %s", name, got, sc.TraceID(), sc.SpanID())
		}
	}
	noopCtx, noopSpan := telemetry.Tracer(nil).Start(context.Background(), "turn")
	defer noopSpan.End()
	for name, got := range map[string]map[string]any{
		"no context": line(func() { log.Info().Msg("x") }),
		"no-op span": line(func() { log.Info().Ctx(noopCtx).Msg("x") }),
	} {
		if _, ok := got["trace_id"]; ok {
			t.Errorf("%s: %v has a trace id", name, got)
		}
	}
	if id := telemetry.TraceID(ctx); id != sc.TraceID().String() {
		t.Errorf("TraceID = %q, want %s", id, sc.TraceID())
	}
	if id := telemetry.TraceID(noopCtx); id != "" {
		t.Errorf("TraceID under a no-op tracer = %q, want none", id)
	}
}

// What a span records reaches the receiver through the real OTLP/HTTP exporter, decoded.
func TestReceiverDecodesExportedSpans(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t)
	tp := recv.Provider(t)
	ctx, parent := telemetry.Tracer(tp).Start(context.Background(), "turn")
	_, child := telemetry.Tracer(tp).Start(ctx, "chat m")
	child.SetAttributes(telemetry.GenAIInputTokens.Int64(12), telemetry.GenAIFinishReasons.StringSlice([]string{"stop"}))
	child.End()
	parent.End()
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 2 || spans[0].Name != "chat m" || spans[0].ParentID != spans[1].SpanID || spans[1].ParentID != "" ||
		spans[0].Attrs["gen_ai.usage.input_tokens"] != int64(12) || spans[0].Resource["service.name"] != "logbook-test" ||
		spans[0].Scope != telemetry.TracerName {
		t.Fatalf("spans: %+v", spans)
	}
}

// A model call that failed records its duration with error.type and no tokens; one that
// answered, its tokens by type; a nil *Metrics records nothing and does not panic.
func TestModelCallMetrics(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t)
	mp := recv.MeterProvider(t)
	m := telemetry.NewMetrics(mp)
	ctx := context.Background()
	m.RecordModelCall(ctx, telemetry.ModelCall{Operation: "chat", Provider: "openai", RequestModel: "gpt-x", ErrorType: "http_429", Duration: 1500 * time.Millisecond})
	m.RecordModelCall(ctx, telemetry.ModelCall{Operation: "chat", Provider: "openai", RequestModel: "gpt-x", ResponseModel: "gpt-x-1",
		InputTokens: 40, OutputTokens: 2, Duration: time.Second})
	var none *telemetry.Metrics
	none.RecordModelCall(ctx, telemetry.ModelCall{InputTokens: 1})
	none.RecordTurn(ctx, "ok", time.Second)
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	dur, ok := recv.Metric(telemetry.MetricOperationDuration)
	if !ok || len(dur.Points) != 2 {
		t.Fatalf("%s: %+v", telemetry.MetricOperationDuration, dur)
	}
	failed := 0
	for _, p := range dur.Points {
		if p.Attrs["error.type"] == "http_429" && p.Count == 1 && p.Sum == 1.5 {
			failed++
		}
	}
	tokens, _ := recv.Metric(telemetry.MetricTokenUsage)
	if failed != 1 || len(tokens.Points) != 2 {
		t.Errorf("durations %+v, tokens %+v: want one failed call of 1.5 s, and tokens only of the call that answered", dur.Points, tokens.Points)
	}
	for _, p := range tokens.Points {
		if p.Attrs["error.type"] != nil || p.Attrs["gen_ai.response.model"] != "gpt-x-1" {
			t.Errorf("token point %+v", p)
		}
	}
}
