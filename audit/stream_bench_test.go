package audit_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
	"github.com/logbook/logbook/session"
)

// BenchmarkAuditStream is BenchmarkStream (bot/stream/webhooks) with the OTLP audit stream as
// the one sink: the tailer's own rate when its sink takes a batch per request (a webhook is
// one POST per event), against the raw read of the same backlog in the same run, and the lag
// from an append's commit to the collector's receipt at 250 appends a second.
//
// Run it alone: heavy --solo go test -run '^$' -bench BenchmarkAuditStream -benchtime 1x ./audit
func BenchmarkAuditStream(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	store := f.app
	rcv := otlptest.Start(b)
	sink := audit.NewOTLPStream("audit:otlp", rcv.URL+"/v1/logs", nil, store)
	if _, ok, err := store.ClaimStream(ctx, sink.Name(), "bench", time.Millisecond); err != nil || !ok {
		b.Fatal(ok, err)
	}
	alice := session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	appendOne := func(i int) session.Event {
		s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: fmt.Sprintf("1700000000.%06d", i)})
		if err != nil {
			b.Fatal(err)
		}
		evs, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: alice, Payload: session.UserMessage{Text: "hello"}})
		if err != nil {
			b.Fatal(err)
		}
		return evs[0]
	}
	// A watcher stamps each id's first arrival as the collector takes it; arrivals waits until
	// n ids arrived.
	var mu sync.Mutex
	at := map[string]time.Time{}
	more := make(chan struct{}, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		seen := 0
		for {
			select {
			case <-rcv.Received():
			case <-wctx.Done():
				return
			}
			now := time.Now()
			logs := rcv.Logs()
			mu.Lock()
			for _, l := range logs[seen:] {
				id := fmt.Sprintf("%s.%d", l.Attrs["logbook.session_id"], l.Attrs["logbook.seq"])
				if _, ok := at[id]; !ok {
					at[id] = now
				}
			}
			mu.Unlock()
			seen = len(logs)
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}()
	defer func() { stopWatch(); <-watched }()
	arrivals := func(n int) {
		deadline := time.After(10 * time.Minute)
		for {
			mu.Lock()
			got := len(at)
			mu.Unlock()
			if got >= n {
				return
			}
			select {
			case <-more:
			case <-deadline:
				b.Fatalf("%d of %d records", got, n)
			}
		}
	}

	const backlog = 5000
	for i := range backlog {
		appendOne(i)
	}
	start := time.Now()
	var cur session.Cursor
	read := 0
	for {
		evs, next, err := store.ReadAll(ctx, cur, 500)
		if err != nil {
			b.Fatal(err)
		}
		read += len(evs)
		cur = next
		if len(evs) == 0 && read >= backlog {
			break
		}
	}
	raw := float64(read) / time.Since(start).Seconds()

	tctx, cancel := context.WithCancel(ctx)
	tl := stream.New(store, []stream.Sink{sink}, stream.Options{Owner: "bench"}) // serve's poll: 500ms
	done := make(chan error, 1)
	b.ResetTimer()
	start = time.Now()
	go func() { done <- tl.Run(tctx) }()
	arrivals(backlog)
	sinkRate := float64(backlog) / time.Since(start).Seconds()

	const seconds = 10
	n := 250 * seconds
	appended := make(map[string]time.Time, n)
	tick := time.NewTicker(4 * time.Millisecond)
	for i := range n {
		<-tick.C
		e := appendOne(backlog + i)
		appended[stream.ID(e)] = time.Now()
	}
	tick.Stop()
	arrivals(backlog + n)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	lags := make([]float64, 0, n)
	mu.Lock()
	defer mu.Unlock()
	for id, t := range appended {
		lags = append(lags, float64(at[id].Sub(t).Microseconds())/1000)
	}
	slices.Sort(lags)
	b.ReportMetric(raw, "raw_events/s")
	b.ReportMetric(sinkRate, "sink_events/s")
	b.ReportMetric(lags[len(lags)/2], "lag_p50_ms")
	b.ReportMetric(lags[len(lags)*99/100], "lag_p99_ms")
	b.ReportMetric(lags[len(lags)-1], "lag_max_ms")
}
