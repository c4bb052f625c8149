package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
)

// Issue 53: cost flat in replicas. An idle replica made 10.8–11.4 transactions a second, and
// a message cost 14.2, 19.8 and 25.6 transactions at 1, 5 and 10 replicas. The goals: an idle
// replica under idleTxPerSecondMax, and a message at N replicas within flatCostMargin of one
// replica's.
const (
	idleTxPerSecondMax = 5.0
	flatCostMargin     = 0.25
)

// costFigures are one fleet's figures: its idle transactions a second per replica, and what
// a message cost under a load.
type costFigures struct {
	replicas      int
	idlePerSecond float64 // per replica
	perMessage    float64 // transactions
	messages      int
	idleTop       string // the idle window's statements by calls
}

// TestE2EReplicaCost measures, for each fleet size of LOGBOOK_COST_REPLICAS (e.g. "1,10"),
// on a throwaway cluster of its own with pg_stat_statements: the transactions a second the
// idle fleet makes per replica over LOGBOOK_COST_IDLE (default 20s; pg_stat_database, with
// the statements by calls, to say what makes them), then the transactions per message of a
// steady load (LOGBOOK_LOAD_*; default 40 threads at 8 msg/s for 20 s). Every message must be
// answered. It fails when an idle replica makes idleTxPerSecondMax or more, or when a message
// at the largest fleet costs more than flatCostMargin above one replica's (when 1 is among the
// sizes). LOGBOOK_COST_BINARY runs another build (main's, for a before). Off unless
// LOGBOOK_COST_REPLICAS is set (bench/replicas.sh cost).
func TestE2EReplicaCost(t *testing.T) {
	v := os.Getenv("LOGBOOK_COST_REPLICAS")
	if v == "" {
		t.Skip("set LOGBOOK_COST_REPLICAS=1,10 to measure idle transactions and transactions per message")
	}
	var sizes []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("LOGBOOK_COST_REPLICAS=%q: want fleet sizes such as 1,10", v)
		}
		sizes = append(sizes, n)
	}
	if b := os.Getenv("LOGBOOK_COST_BINARY"); b != "" {
		old := binary
		binary = b
		t.Cleanup(func() { binary = old })
	}
	idle := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("LOGBOOK_COST_IDLE")); err == nil && d > 0 {
		idle = d
	}
	l := loadFromEnv(t, steadyLoad{threads: 40, rate: 8, dur: 20 * time.Second, channels: 4})
	var all []costFigures
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) { all = append(all, replicaCost(t, n, idle, l)) })
	}
	var one *costFigures
	var b strings.Builder
	fmt.Fprintf(&b, "| replicas | idle tx/s per replica | tx per message | messages |\n|---|---|---|---|")
	for i, f := range all {
		fmt.Fprintf(&b, "\n| %d | %.2f | %.1f | %d |", f.replicas, f.idlePerSecond, f.perMessage, f.messages)
		if f.replicas == 1 {
			one = &all[i]
		}
	}
	t.Logf("COST %s (load %v, idle window %v)\n%s", binary, l, idle, b.String())
	for _, f := range all {
		if f.idlePerSecond >= idleTxPerSecondMax {
			t.Errorf("%d replicas: an idle replica makes %.2f transactions a second, want under %.0f", f.replicas, f.idlePerSecond, idleTxPerSecondMax)
		}
		if one != nil && f.perMessage > one.perMessage*(1+flatCostMargin) {
			t.Errorf("%d replicas: %.1f transactions per message, more than %.0f%% above one replica's %.1f",
				f.replicas, f.perMessage, 100*flatCostMargin, one.perMessage)
		}
	}
}

// replicaCost measures one fleet of n replicas (TestE2EReplicaCost).
func replicaCost(t *testing.T, n int, idle time.Duration, l steadyLoad) costFigures {
	e := newE2E(t, slackemu.Options{RetrySchedule: []time.Duration{time.Second, 5 * time.Second, 20 * time.Second}})
	pg := withStatements(t, startCluster(t, clusterDir(t)))
	e.dbURL = pg.URL()
	e.run("migrate", "up")
	model := httptest.NewServer(http.HandlerFunc(slowModel))
	t.Cleanup(model.Close)
	e.extra = []string{"ANTHROPIC_BASE_URL=" + model.URL + "/"}
	channels := loadChannels(e.emu, l.channels)
	w := watchReplies(t, e.emu, channels)
	env := append(slices.Clone(defaults), "LOGBOOK_LOG_LEVEL=info", "LOGBOOK_REPLICAS="+strconv.Itoa(n),
		"LOGBOOK_DB_POOL=4", "LOGBOOK_DB_GATEWAY_POOL=2")
	for range n {
		e.serve(env...)
	}
	// The start's own work (pools filled, the catch-up poll, the first claims) is not idling.
	settleTimer := time.NewTimer(5 * time.Second)
	<-settleTimer.C

	resetStatements(t, e.dbURL)
	before := readDBStats(t, e.dbURL)
	began := time.Now()
	window := time.NewTimer(idle)
	<-window.C
	after := readDBStats(t, e.dbURL)
	f := costFigures{replicas: n}
	// Each readDBStats is two transactions of this test's own.
	f.idlePerSecond = float64(after.xacts-before.xacts-2) / time.Since(began).Seconds() / float64(n)
	f.idleTop = statementsByCalls(t, e.dbURL, time.Since(began).Seconds()*float64(n), "/s")
	t.Logf("COST %d replicas idle: %.2f transactions a second per replica; statements a second per replica by calls:%s", n, f.idlePerSecond, f.idleTop)

	resetStatements(t, e.dbURL)
	start := readDBStats(t, e.dbURL)
	msgs := drive(t, e, w, l)
	pending := settle(t, e.dbURL, 2*time.Minute)
	end := readDBStats(t, e.dbURL)
	f.messages = len(msgs)
	f.perMessage = float64(end.xacts-start.xacts) / float64(max(len(msgs), 1))
	answers := w.counts()
	unanswered := 0
	for _, m := range msgs {
		if answers[m.tag] == 0 {
			unanswered++
		}
	}
	t.Logf("COST %d replicas: %d messages, %.1f transactions per message; unanswered %d, sessions pending %d; statements per message by calls:%s",
		n, len(msgs), f.perMessage, unanswered, pending, statementsByCalls(t, e.dbURL, float64(max(len(msgs), 1)), "/msg"))
	if unanswered > 0 || pending > 0 {
		t.Errorf("%d replicas: %d messages unanswered, %d sessions pending", n, unanswered, pending)
	}
	return f
}

// statementsByCalls is pg_stat_statements' top 15 statements by calls since its reset, each
// divided by per (replica-seconds, or messages), unit naming it.
func statementsByCalls(t *testing.T, dsn string, per float64, unit string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT calls, regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY calls DESC LIMIT 15`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var calls int64
		var q string
		if err := rows.Scan(&calls, &q); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\n  %6.2f%s  %.150s", float64(calls)/per, unit, q)
	}
	return b.String()
}
