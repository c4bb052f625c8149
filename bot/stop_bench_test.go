package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
)

// stallingAgent writes the start of a reply and works until its context ends, every run; it
// says when it started and when its context was cancelled.
type stallingAgent struct {
	started   chan struct{}
	cancelled chan time.Time
}

func (a *stallingAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	if t.Live != nil {
		t.Live.Text("Working through every file, ")
	}
	a.started <- struct{}{}
	<-ctx.Done()
	a.cancelled <- time.Now()
	return brain.Reply{}, ctx.Err()
}

// BenchmarkStopLatency measures Slack's stop button on a running turn: from the
// agent_session_stopped event to the model request's context cancelled, and to the "Stopped
// by" note visible in the thread; p50 and p99 over b.N stops, on one replica and across two
// (the stop then usually reaches the replica that does not run the turn, and crosses through
// the log and NOTIFY).
//
//	go test -run '^$' -bench StopLatency -benchtime 100x ./bot/
func BenchmarkStopLatency(b *testing.B) {
	for _, replicas := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			agent := &stallingAgent{started: make(chan struct{}, 1), cancelled: make(chan time.Time, 1)}
			h := newHarness(b, agent, harnessOptions{replicas: replicas, live: bot.LiveConfig{Interval: 1}})
			var toCancel, toNote []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> refactor everything " + strconv.Itoa(i)})
				<-agent.started
				if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.botMessages(top.TS)) == 1 }); err != nil {
					b.Fatal(err)
				}
				asked := time.Now()
				if _, err := h.emu.StopAgentSession(general, top.TS, grace); err != nil {
					b.Fatal(err)
				}
				toCancel = append(toCancel, (<-agent.cancelled).Sub(asked))
				if err := h.emu.Wait(h.waitCtx(), func() bool {
					msgs := h.botMessages(top.TS)
					return len(msgs) == 1 && strings.Contains(msgs[0].Text, "Stopped by")
				}); err != nil {
					b.Fatal(err)
				}
				toNote = append(toNote, time.Since(asked))
			}
			b.StopTimer()
			report(b, "cancel", toCancel)
			report(b, "note", toNote)
		})
	}
}

// BenchmarkApprovalRoundTrip measures a click on a card's Approve button to the approved
// command running in the sandbox (the command prints the time it started), through the real
// brain, a fake Anthropic server and the process sandbox.
//
//	go test -run '^$' -bench ApprovalRoundTrip -benchtime 50x ./bot/
func BenchmarkApprovalRoundTrip(b *testing.B) {
	h, model := modelHarness(b, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(b, "run_command=ask")}})
	var trips []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		call := fmt.Sprintf("toolu_%d", i)
		model.Push(
			fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: call, Name: "run_command", Input: `{"command":"date +%s%N"}`}}},
			fakeprovider.Reply{Text: "done"})
		top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what time is it " + strconv.Itoa(i)})
		card := h.card(top.TS)
		clicked := time.Now()
		if _, err := h.emu.ClickButton(slackemu.Click{Channel: general, TS: card.TS, ActionID: bot.ActionApprove, User: ada}); err != nil {
			b.Fatal(err)
		}
		r := h.toolResult(h.session(general, top.TS).ID, call)
		_, out, _ := strings.Cut(r.Content, "--- stdout ---\n")
		ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			b.Fatalf("command output %q: %v", r.Content, err)
		}
		trips = append(trips, time.Unix(0, ns).Sub(clicked))
		h.answered(h.session(general, top.TS).ID)
	}
	b.StopTimer()
	report(b, "click-to-run", trips)
}

// report adds p50 and p99 of ds, in milliseconds, to the benchmark's output.
func report(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
	b.ReportMetric(0, "ns/op")
}
