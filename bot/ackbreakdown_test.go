package bot_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/telemetry"
)

// BenchmarkAckBreakdown runs BenchmarkGateway's load against logbook as `logbook serve` wires it
// (the gateway on a pool of its own), with the envelope spans and the gateway pool's statement
// spans recorded, and splits each steady-phase envelope's time from sent to acked into ackParts.
// It logs each part's p50 and p99, and the mean of each part over the slowest 5% of envelopes:
// what the tail is made of. Tracing costs a little on every part. Run it with
// BENCH=BenchmarkAckBreakdown bench/bot.sh; ACK_GROUP_COMMIT=1 turns group commit on
// (GatewayConfig.AppendLanes 3).
func BenchmarkAckBreakdown(b *testing.B) {
	plan := benchPlan{threads: 100, light: 20, lightN: 60, rate: 250, steady: 4 * time.Second, closed: time.Second, drain: 30 * time.Second}
	lanes := 0
	if os.Getenv("ACK_GROUP_COMMIT") != "" {
		lanes = 3
	}
	for b.Loop() {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		emu := startBenchEmulator(b)
		startLogbook(b, emu, instantAgent{}, logbookWiring{maxConns: 8, gatewayConns: 4, appendLanes: lanes, tracer: tp})
		lb := runLoad(b, "logbook", emu, plan)
		for _, line := range ackBreakdown(b, emu, rec.Ended(), lb.events[phaseSteady]) {
			b.Log(line)
		}
	}
}

// ackParts names the parts of an envelope's time from sent to acked, in order:
//   - in: the emulator's send to the gateway's handler starting (the socket, slack-go's decode,
//     the wait in the backlog for a worker);
//   - prep: the handler's start to asking the gateway pool for the append's connection
//     (classify, directory, text; any other statement; with group commit, the wait for the
//     session's lane);
//   - acquire: the wait for that connection;
//   - append: the append's statement (the one-event statement or logbook_append), its commit
//     included (with group commit, the group's transaction);
//   - after: the statement's end to the ack being queued and the handler's end;
//   - out: the handler's end to the emulator reading the ack (slack-go's writer, the socket).
var ackParts = []string{"in", "prep", "acquire", "append", "after", "out"}

// ackBreakdown splits the first delivery of each of events into ackParts from the recorded
// spans and the emulator's records, and describes the parts.
func ackBreakdown(b *testing.B, emu *slackemu.Server, spans []sdktrace.ReadOnlySpan, events []string) []string {
	envelopes := map[string]slackemu.Delivery{} // envelope id → first delivery of one of events
	want := map[string]bool{}
	for _, id := range events {
		want[id] = true
	}
	for _, d := range emu.Deliveries() {
		if d.Attempt == 0 && want[d.EventID] {
			envelopes[d.EnvelopeID] = d
		}
	}
	acked := map[string]time.Time{}
	for _, a := range emu.Acks() {
		if !a.Stale {
			acked[a.EnvelopeID] = a.At
		}
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	groups := map[trace.SpanID]sdktrace.ReadOnlySpan{} // envelope span → the append group that stored it
	for _, s := range spans {
		children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		if s.Name() == "append group" {
			for _, l := range s.Links() {
				groups[l.SpanContext.SpanID()] = s
			}
		}
	}
	var rows [][]time.Duration // per envelope: ackParts, then the total
	for _, s := range spans {
		var envelope string
		for _, a := range s.Attributes() {
			if a.Key == telemetry.EnvelopeID {
				envelope = a.Value.AsString()
			}
		}
		d, ok := envelopes[envelope]
		ack, acks := acked[envelope]
		if !ok || !acks {
			continue
		}
		var acquire, appendQ sdktrace.ReadOnlySpan
		parent := s
		if g, ok := groups[s.SpanContext().SpanID()]; ok {
			// Group commit: the append is the group's transaction; prep includes the wait
			// for the lane.
			parent, appendQ = g, g
		}
		for _, c := range children[parent.SpanContext().SpanID()] {
			switch {
			case c.Name() == "pool.acquire":
				acquire = c // the last one before the append: the append's
			case parent == s && isAppend(c.Name()+" "+attr(c, "db.query.text")):
				appendQ = c
			}
			if appendQ != nil && parent == s {
				break
			}
		}
		if acquire == nil || appendQ == nil {
			continue // not a stored message (the bot's own reply, say)
		}
		rows = append(rows, []time.Duration{
			s.StartTime().Sub(d.At), acquire.StartTime().Sub(s.StartTime()), acquire.EndTime().Sub(acquire.StartTime()),
			appendQ.EndTime().Sub(acquire.EndTime()), s.EndTime().Sub(appendQ.EndTime()), ack.Sub(s.EndTime()), ack.Sub(d.At),
		})
	}
	if len(rows) == 0 {
		b.Fatalf("no envelope of the %d events matched its spans (%d spans)", len(events), len(spans))
	}
	total := len(ackParts)
	col := func(i int) []time.Duration {
		out := make([]time.Duration, len(rows))
		for r, row := range rows {
			out[r] = row[i]
		}
		return out
	}
	all := summarize(col(total))
	out := []string{fmt.Sprintf("%d steady envelopes, sent to acked p50 %s p99 %s max %s", len(rows), ms(all.p50), ms(all.p99), ms(all.max))}
	var line []string
	for i, name := range ackParts {
		l := summarize(col(i))
		line = append(line, fmt.Sprintf("%s %s/%s", name, ms(l.p50), ms(l.p99)))
	}
	out = append(out, "parts p50/p99: "+strings.Join(line, " | "))
	slices.SortFunc(rows, func(a, b []time.Duration) int { return int(b[total] - a[total]) })
	slow := rows[:max(len(rows)/20, 1)]
	line = line[:0]
	for i, name := range ackParts {
		var sum time.Duration
		for _, row := range slow {
			sum += row[i]
		}
		line = append(line, fmt.Sprintf("%s %s", name, ms(sum/time.Duration(len(slow)))))
	}
	out = append(out, fmt.Sprintf("slowest %d (>= %s), mean: %s", len(slow), ms(slow[len(slow)-1][total]), strings.Join(line, " | ")))
	return out
}

// attr is the span's string attribute key, "" when it has none.
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.AsString()
		}
	}
	return ""
}

// isAppend reports whether a statement's text is an append: a call of logbook_append, or the
// one-event statement (session/appendone.go).
func isAppend(sql string) bool {
	return strings.Contains(sql, "logbook_append") || strings.Contains(sql, "INSERT INTO events AS e")
}
