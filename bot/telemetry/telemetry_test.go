package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

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
