package brain_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/sandbox"
)

// With the content on (LOGBOOK_TRACE_CONTENT), a long conversation's spans carry at most
// brain.MaxTraceContent bytes of text in each attribute, cut in the middle and saying so: a
// collector refuses a whole batch over its limit (4 MiB over gRPC), losing every span in it.
func TestTraceContentIsBounded(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t)
	e.titled()
	seq, _ := e.user("look at this log: " + strings.Repeat("line of a very long pasted log\n", 20_000)) // 620 KB
	fake, p := fakeFor(t, "anthropic")
	fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"cat big.log"}`}}},
		fakeprovider.Reply{Text: "It is long."})
	b, _ := newBrain(t, p, func(cfg *brain.Config) { cfg.Tracer, cfg.TraceContent = tp, true; cfg.MaxToolOutput = 1 << 20 })
	hands := &fakeHands{exec: func(context.Context, string) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{Stdout: strings.Repeat("output line\n", 50_000)}, nil
	}}
	if _, err := b.Run(context.Background(), e.turn(hands, e.startTurn(seq))); err != nil {
		t.Fatal(err)
	}
	var seen int
	for _, sp := range rec.Ended() {
		for _, a := range sp.Attributes() {
			if !strings.HasPrefix(string(a.Key), "gen_ai.") || a.Value.Type().String() != "STRING" {
				continue
			}
			if n := len(a.Value.AsString()); n > brain.MaxTraceContent {
				t.Errorf("span %s: %s is %d bytes, over %d", sp.Name(), a.Key, n, brain.MaxTraceContent)
			} else if n > brain.MaxTraceContent/2 {
				seen++
				if !strings.Contains(a.Value.AsString(), "truncated") {
					t.Errorf("span %s: %s was cut without saying so", sp.Name(), a.Key)
				}
			}
		}
	}
	if seen < 2 { // the prompt, and the tool's result
		t.Errorf("%d long attributes, want the prompt's and the tool result's at least", seen)
	}
}
