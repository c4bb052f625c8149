package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
)

// TestE2EConnectionFigures measures issue 33's connections per replica (docs/replicas.md,
// "Running many replicas"): LOGBOOK_CONNS_FIGURES replicas on one database, idle, under load
// (LOGBOOK_CONNS_RATE messages/s, default 30, over 300 threads for LOGBOOK_CONNS_LOAD,
// default 30s, a model answering in 0–2 s; cells evicted 20 s after their last message), and
// idle again once the backlog has drained, at once and 30, 90 and 120 s later; each
// time pg_stat_activity's connections to the database grouped by application_name (the peak,
// under load). LOGBOOK_CONNS_BINARY runs another build (e.g. main's, for a before/after).
// Off unless LOGBOOK_CONNS_FIGURES is set.
func TestE2EConnectionFigures(t *testing.T) {
	replicas, err := strconv.Atoi(os.Getenv("LOGBOOK_CONNS_FIGURES"))
	if err != nil || replicas <= 0 {
		t.Skip("set LOGBOOK_CONNS_FIGURES=3 (replicas) to measure connections per replica")
	}
	rate := 30
	if v, err := strconv.Atoi(os.Getenv("LOGBOOK_CONNS_RATE")); err == nil && v > 0 {
		rate = v
	}
	load := 30 * time.Second
	if v, err := time.ParseDuration(os.Getenv("LOGBOOK_CONNS_LOAD")); err == nil && v > 0 {
		load = v
	}
	binaryFrom(t, "LOGBOOK_CONNS_BINARY")
	e := newE2E(t, slackemu.Options{RetrySchedule: []time.Duration{time.Second, 5 * time.Second, 20 * time.Second}})
	model := httptest.NewServer(http.HandlerFunc(slowModel))
	t.Cleanup(model.Close)
	e.extra = []string{"ANTHROPIC_BASE_URL=" + model.URL + "/"}
	env := append(slices.Clone(defaults), "LOGBOOK_LOG_LEVEL=info", "LOGBOOK_REPLICAS="+strconv.Itoa(replicas),
		// Cells go 20 s after their last message (not 10 min): until then each renews its
		// lease, and a replica with a hundred live cells is not idle.
		"LOGBOOK_IDLE_TIMEOUT=20s")
	for range replicas {
		e.serve(env...)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	sample := func() map[string]int {
		e.pool.Reset() // the harness's own pool ("logbook") is not a replica's
		rows, err := admin.Query(ctx, `SELECT application_name, count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'logbook%' GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			name string
			n    int
		}, error) {
			var v struct {
				name string
				n    int
			}
			return v, r.Scan(&v.name, &v.n)
		})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, g := range got {
			m[g.name] = g.n
		}
		return m
	}
	show := func(what string, m map[string]int) {
		total, parts := 0, []string(nil)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			total += m[k]
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
		t.Logf("CONNS %-22s total %3d (%.1f per replica): %s", what, total, float64(total)/float64(replicas), strings.Join(parts, " "))
	}
	// A measurement, not a check: the phases last as long as they are said to.
	idleFor := time.Sleep
	idleFor(5 * time.Second)
	show("idle before the load", sample())

	// The load: rate messages/s, the first 300 open threads, the rest continue them.
	const threads = 300
	var mu sync.Mutex
	peak, peakTotal := map[string]int{}, 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			m := sample()
			total := 0
			for _, n := range m {
				total += n
			}
			mu.Lock()
			if total > peakTotal {
				peak, peakTotal = m, total
			}
			mu.Unlock()
		}
	}()
	var ts [threads]string
	tick := time.NewTicker(time.Second / time.Duration(rate))
	end := time.Now().Add(load)
	posted := 0
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		k := i % threads
		p := slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("Q[t%d-m%d]", k, i/threads), ThreadTS: ts[k]}
		if ts[k] == "" {
			p.Text = mention(p.Text)
		}
		r, err := e.emu.Post(p)
		if err != nil {
			t.Fatalf("post: %v", err)
		}
		if ts[k] == "" {
			ts[k] = r.TS
		}
		posted++
	}
	tick.Stop()
	// The backlog drains: idle is when nothing was appended for 5 s.
	last, still := int64(-1), time.Now()
	for time.Since(still) < 5*time.Second {
		time.Sleep(time.Second)
		var pos int64
		if err := admin.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM events`).Scan(&pos); err != nil {
			t.Fatal(err)
		}
		if pos != last {
			last, still = pos, time.Now()
		}
	}
	drained := time.Since(end)
	close(stop)
	<-sampled
	mu.Lock()
	defer mu.Unlock()
	t.Logf("CONNS load: %d messages in %s (%d/s) over %d threads, %d replicas; backlog drained %s after the last post",
		posted, load, rate, threads, replicas, drained.Round(time.Second))
	show("peak under load", peak)
	show("idle at once", sample())
	idleFor(30 * time.Second)
	show("idle 30s after", sample())
	idleFor(60 * time.Second)
	show("idle 90s after", sample())
	idleFor(30 * time.Second)
	show("idle 120s after", sample())
}
