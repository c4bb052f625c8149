package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
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
	binaryFrom(t, "LOGBOOK_COST_BINARY")
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
	// A fleet is run as docs/replicas.md says: each replica takes its wakes over HTTP (its
	// HTTP server is on a loopback port of its own). LOGBOOK_COST_PEERS=off routes them by
	// NOTIFY, as before (and as an older LOGBOOK_COST_BINARY does).
	peers := fleetPeers()
	if peers {
		env = append(env, "LOGBOOK_PEER_ADDR=127.0.0.1")
	}
	var procs []*proc
	for range n {
		procs = append(procs, e.serve(env...))
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
	txl := startTxLog(t, pg)
	start := readDBStats(t, e.dbURL)
	msgs := drive(t, e, w, l)
	pending := settle(t, e.dbURL, 2*time.Minute)
	end := readDBStats(t, e.dbURL)
	t.Logf("COST %d replicas: transactions of the server's statement log per message:%s", n, txl.stop(t, len(msgs), end.xacts-start.xacts))
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
	if peers {
		posted, notified := peerWakes(t, procs)
		t.Logf("COST %d replicas: wakes posted to the owner %.0f (%.2f a message), NOTIFYed after a failed post %.0f",
			n, posted, posted/float64(max(len(msgs), 1)), notified)
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

// txLog is the server's statement log over a window: every statement logged with its
// backend's application_name, pid and virtual transaction id, so the window's transactions
// can be told apart by who made them and what they began with (pg_stat_database counts
// them all together; pg_stat_statements counts statements, not transactions).
type txLog struct {
	dsn, path string
	off       int64
}

// txLogPrefix starts every line the server logs while a txLog is on.
const txLogPrefix = "LBX|"

func startTxLog(t *testing.T, pg interface {
	URL() string
	LogPath() string
}) *txLog {
	t.Helper()
	l := &txLog{dsn: pg.URL(), path: pg.LogPath()}
	execAll(t, l.dsn, `ALTER SYSTEM SET log_line_prefix = '`+txLogPrefix+`%a|%p|%v|'`,
		`ALTER SYSTEM SET log_statement = 'all'`, `ALTER SYSTEM SET log_connections = on`,
		`ALTER SYSTEM SET log_min_duration_statement = 0`, `ALTER SYSTEM SET log_autovacuum_min_duration = 0`, `SELECT pg_reload_conf()`)
	fi, err := os.Stat(l.path)
	if err != nil {
		t.Fatal(err)
	}
	l.off = fi.Size()
	return l
}

// stop turns the log off and returns the window's transactions, per message of n, by
// application and first statement (the first that is not BEGIN), the largest first, and the
// connections opened per application. xacts is what pg_stat_database counted over the window:
// what the log does not show is set beside the NOTIFYs' wake-ups, for every NOTIFY costs a
// transaction in each backend LISTENing in the database (PostgreSQL signals them all, whatever
// the channel, and each reads the queue in a transaction of its own, with no statement logged).
func (l *txLog) stop(t *testing.T, n int, xacts int64) string {
	t.Helper()
	var listeners int
	query(t, l.dsn, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'logbook-listen'`, &listeners)
	execAll(t, l.dsn, `ALTER SYSTEM RESET log_statement`, `ALTER SYSTEM RESET log_connections`,
		`ALTER SYSTEM RESET log_min_duration_statement`, `ALTER SYSTEM RESET log_autovacuum_min_duration`,
		`ALTER SYSTEM RESET log_line_prefix`, `SELECT pg_reload_conf()`)
	f, err := os.Open(l.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(l.off, 0); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	s := summarizeTxLog(string(data))
	per := float64(max(n, 1))
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %.2f/msg transactions in the log (%d), by application:", float64(s.total)/per, s.total)
	for _, k := range sortedByCount(s.byApp) {
		fmt.Fprintf(&b, " %s %.2f;", k, float64(s.byApp[k])/per)
	}
	notifies := 0
	for k, c := range s.byFirst {
		_, q, _ := strings.Cut(k, "  ")
		if strings.HasPrefix(q, "(parse) ") {
			continue // a statement prepared on its first use: its NOTIFY is sent by its execution
		}
		if strings.Contains(q, "pg_notify(") || strings.HasPrefix(strings.ToUpper(q), "NOTIFY ") {
			notifies += c
		}
	}
	fmt.Fprintf(&b, "\n  %.2f/msg counted by pg_stat_database but not in the log; at most %.2f/msg NOTIFYs × %d listening connections = %.2f/msg wake-ups",
		float64(xacts-int64(s.total))/per, float64(notifies)/per, listeners, float64(notifies*listeners)/per)
	fmt.Fprintf(&b, "\n  %.2f/msg autovacuum and autoanalyze runs (%d); connections opened per message:", float64(s.autovacuums)/per, s.autovacuums)
	for _, k := range sortedByCount(s.conns) {
		fmt.Fprintf(&b, " %s %.3f/msg ;", k, float64(s.conns[k])/per)
	}
	for i, k := range sortedByCount(s.byFirst) {
		if i == 40 {
			break
		}
		fmt.Fprintf(&b, "\n  %6.3f/msg  %s", float64(s.byFirst[k])/per, k)
	}
	return b.String()
}

type txLogSummary struct {
	total   int
	byApp   map[string]int // transactions by application_name
	byFirst map[string]int // transactions by application_name and first statement
	conns   map[string]int // connections authorized by application_name
	// autovacuums counts the autovacuum workers' runs on a table (a transaction each).
	autovacuums int
}

var (
	txLogLine = regexp.MustCompile(`^` + regexp.QuoteMeta(txLogPrefix) + `([^|]*)\|(\d+)\|([^|]*)\|LOG:  (statement|execute [^:]*|duration: [0-9.]+ ms  (?:parse|bind|execute) [^:]*|connection authorized|automatic (?:vacuum|analyze) of table)[: ]?(.*)$`)
	txLogApp  = regexp.MustCompile(`application_name=(\S+)`)
	spaces    = regexp.MustCompile(`\s+`)
)

// summarizeTxLog reads log lines of startTxLog's format. A statement's text runs on over the
// lines that follow it without the prefix.
func summarizeTxLog(log string) txLogSummary {
	s := txLogSummary{byApp: map[string]int{}, byFirst: map[string]int{}, conns: map[string]int{}}
	type tx struct{ app, first string }
	txs := map[string]*tx{}
	var order []string
	var cur *tx
	var text strings.Builder
	flush := func() {
		if cur == nil {
			return
		}
		q := strings.TrimSpace(spaces.ReplaceAllString(text.String(), " "))
		lq := strings.ToLower(q)
		parse := strings.HasPrefix(q, "(parse) ")
		if cur.first == "" || cur.first == "begin" && !parse || strings.HasPrefix(cur.first, "(parse) ") && !parse {
			switch {
			case strings.HasPrefix(lq, "begin"), strings.HasPrefix(lq, "start transaction"):
				cur.first = "begin"
			case lq == "commit" || lq == "rollback" || lq == "end":
			default:
				if len(q) > 120 {
					q = q[:120]
				}
				cur.first = q
			}
		}
		cur = nil
		text.Reset()
	}
	for line := range strings.SplitSeq(log, "\n") {
		if !strings.HasPrefix(line, txLogPrefix) {
			if cur != nil {
				text.WriteString(" " + line)
			}
			continue
		}
		flush()
		m := txLogLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if strings.HasPrefix(m[4], "automatic ") {
			s.autovacuums++
			continue
		}
		if strings.HasPrefix(m[4], "duration: ") && !strings.Contains(m[4], " parse ") {
			continue // the statement line of its execution names it
		}
		if strings.HasPrefix(m[4], "duration: ") {
			m[5] = "(parse) " + m[5]
		}
		if m[4] == "connection authorized" {
			app := "?"
			if a := txLogApp.FindStringSubmatch(m[5]); a != nil {
				app = a[1]
			}
			s.conns[app]++
			continue
		}
		key := m[2] + "|" + m[3]
		x := txs[key]
		if x == nil {
			x = &tx{app: m[1]}
			txs[key] = x
			order = append(order, key)
		}
		cur = x
		text.WriteString(m[5])
	}
	flush()
	for _, k := range order {
		x := txs[k]
		s.total++
		s.byApp[x.app]++
		s.byFirst[x.app+"  "+x.first]++
	}
	return s
}

func sortedByCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	return keys
}

// execAll runs each statement on a connection of its own session.
func execAll(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// The statement log's transactions are told apart by pid and virtual transaction id, named
// by their first statement that is not BEGIN (a statement's text runs on over the lines
// without the prefix), and the connections are counted by the application they name.
func TestSummarizeTxLog(t *testing.T) {
	log := strings.Join([]string{
		"LBX||7||LOG:  connection authorized: user=postgres database=logbook application_name=logbook-main",
		"LBX|logbook-main|7|3/1|LOG:  statement: SET ROLE logbook_app",
		"LBX|logbook-main|7|3/2|LOG:  statement: begin",
		"LBX|logbook-main|7|3/2|LOG:  execute stmtcache_1: ",
		"\tSELECT   x",
		"\tFROM t",
		"LBX|logbook-main|7|3/2|DETAIL:  parameters: $1 = '1'",
		"LBX|logbook-main|7|3/2|LOG:  statement: commit",
		"LBX|logbook-gateway|8|4/1|LOG:  execute <unnamed>: SELECT x FROM t",
		"LBX|logbook-main|7|3/3|LOG:  statement: -- ping",
		"LBX|logbook-main|9|3/3|LOG:  statement: -- ping",
		"LBX|logbook-main|7|3/3|LOG:  duration: 1 ms",
		"LBX|logbook-main|7|3/4|LOG:  duration: 0.051 ms  parse stmtcache_2: SELECT y",
		"LBX|logbook-main|7|3/5|LOG:  statement: begin",
		"LBX|logbook-main|7|3/5|LOG:  duration: 0.051 ms  parse stmtcache_3: SELECT z",
		"LBX|logbook-main|7|3/5|LOG:  execute stmtcache_3: SELECT z",
		"LBX|logbook-main|7|3/5|LOG:  duration: 0.051 ms  execute stmtcache_3: SELECT z",
		"LBX|logbook-main|7|3/5|LOG:  statement: commit",
		"LBX||10||LOG:  automatic analyze of table \"logbook.public.t\"",
	}, "\n")
	s := summarizeTxLog(log)
	want := txLogSummary{
		total: 7,
		byApp: map[string]int{"logbook-main": 6, "logbook-gateway": 1},
		byFirst: map[string]int{"logbook-main  SET ROLE logbook_app": 1, "logbook-main  SELECT x FROM t": 1,
			"logbook-gateway  SELECT x FROM t": 1, "logbook-main  -- ping": 2,
			"logbook-main  (parse) SELECT y": 1, "logbook-main  SELECT z": 1},
		conns:       map[string]int{"logbook-main": 1},
		autovacuums: 1,
	}
	if s.total != want.total || s.autovacuums != want.autovacuums || !maps.Equal(s.byApp, want.byApp) || !maps.Equal(s.byFirst, want.byFirst) || !maps.Equal(s.conns, want.conns) {
		t.Errorf("summarizeTxLog = %+v, want %+v", s, want)
	}
}

// fleetPeers reports whether the figures' fleets take their wakes over HTTP
// (LOGBOOK_PEER_ADDR, as docs/replicas.md advises): unless LOGBOOK_COST_PEERS=off, which routes
// them by NOTIFY.
func fleetPeers() bool { return os.Getenv("LOGBOOK_COST_PEERS") != "off" }

// peerWakes sums the fleet's logbook_peer_wakes_total: posted to the owner, and NOTIFYed
// after a failed post.
func peerWakes(t *testing.T, procs []*proc) (posted, notified float64) {
	t.Helper()
	for i, p := range procs {
		a, err1 := scrapeCounter(p.out.String(), `logbook_peer_wakes_total{how="posted"}`)
		b, err2 := scrapeCounter(p.out.String(), `logbook_peer_wakes_total{how="notified"}`)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("replica %d: peer wakes: %v", i+1, err)
		}
		posted, notified = posted+a, notified+b
	}
	return posted, notified
}

// binaryFrom runs the test's `logbook` from the path in the environment variable name, when
// set (another build: a before), until the test ends.
func binaryFrom(t *testing.T, name string) {
	if b := os.Getenv(name); b != "" {
		old := binary
		binary = b
		t.Cleanup(func() { binary = old })
	}
}
