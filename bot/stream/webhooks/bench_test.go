package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/bot/stream/webhooks"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// BenchmarkStream measures one webhook sink fed by the tailer (issue 51), against the raw read
// of the log in the same run:
//
//   - raw_events/s: session.Store.ReadAll alone over a backlog of events;
//   - sink_events/s: the tailer delivering the same backlog to one webhook (a local receiver that
//     answers 204; every event a webhook type, one signed POST each);
//   - lag_p50_ms, lag_p99_ms: from an append's commit to the receiver's answer, with messages
//     appended at 250/s (LOGBOOK_BENCH_STREAM_SECONDS, default 10 s).
//
// Run it alone: heavy --solo go test -run '^$' -bench BenchmarkStream -benchtime 1x ./bot/stream/webhooks
func BenchmarkStream(b *testing.B) {
	ctx := context.Background()
	pool, err := session.Connect(ctx, pgtest.New(b), session.PoolOptions{Role: "logbook_app", MaxConns: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})

	var mu sync.Mutex
	got := map[string]time.Time{}
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")] = time.Now()
		mu.Unlock()
		select {
		case arrived <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	ws, err := webhooks.Parse(`{"bench": {"url": "`+srv.URL+`", "secret": "`+secret+`"}}`, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	sinks := webhooks.NewSinks(ws, store, webhooks.Options{})
	if _, ok, err := store.ClaimStream(ctx, sinks[0].Name(), "bench", time.Millisecond); err != nil || !ok {
		b.Fatal(ok, err)
	}
	// Each event is the first of its session (session.started): every one is a POST.
	appendOne := func(i int) session.Event {
		s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: fmt.Sprintf("1700000000.%06d", i)})
		if err != nil {
			b.Fatal(err)
		}
		evs, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: user1, Payload: session.UserMessage{Text: "hello"}})
		if err != nil {
			b.Fatal(err)
		}
		return evs[0]
	}
	// waitAll waits until total distinct ids arrived, then checks ids are among them. It
	// counts as they come, so it costs nothing per delivery: a scan of every id at each
	// arrival took a sixth of the CPU the benchmark shares with the tailer.
	waitAll := func(ids []string, total int) {
		deadline := time.After(10 * time.Minute)
		for {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if n >= total {
				break
			}
			select {
			case <-arrived:
			case <-deadline:
				b.Fatalf("%d of %d delivered", n, total)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				b.Fatalf("%s was not delivered", id)
			}
		}
	}

	const backlog = 5000
	var ids []string
	for i := range backlog {
		ids = append(ids, stream.ID(appendOne(i)))
	}
	// The raw read of the same backlog (from the start: it holds only these events).
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
	tl := stream.New(store, []stream.Sink{sinks[0]}, stream.Options{Owner: "bench"}) // serve's poll: 500ms
	done := make(chan error, 1)
	b.ResetTimer()
	start = time.Now()
	go func() { done <- tl.Run(tctx) }()
	waitAll(ids, backlog)
	sinkRate := float64(backlog) / time.Since(start).Seconds()

	// Lag at 250 messages a second.
	seconds := 10
	n := 250 * seconds
	appended := make(map[string]time.Time, n)
	tick := time.NewTicker(4 * time.Millisecond)
	var live []string
	for i := range n {
		<-tick.C
		e := appendOne(backlog + i)
		id := stream.ID(e)
		appended[id] = time.Now()
		live = append(live, id)
	}
	tick.Stop()
	waitAll(live, backlog+n)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	lags := make([]float64, 0, n)
	mu.Lock()
	for _, id := range live {
		lags = append(lags, float64(got[id].Sub(appended[id]).Microseconds())/1000)
	}
	mu.Unlock()
	slices.Sort(lags)
	b.ReportMetric(raw, "raw_events/s")
	b.ReportMetric(sinkRate, "sink_events/s")
	b.ReportMetric(lags[len(lags)/2], "lag_p50_ms")
	b.ReportMetric(lags[len(lags)*99/100], "lag_p99_ms")
	b.ReportMetric(lags[len(lags)-1], "lag_max_ms")
}
