package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
)

// Issue 53, "Fifty replicas through PgBouncer": behind a transaction-pooling PgBouncer each
// replica holds one direct connection (LISTEN with its liveness claim) and PgBouncer's pool is
// counted once for the fleet, so fifty replicas need 50 + 20 + 6 = 76 connections of a default
// server's 100 (TestFiftyReplicasBehindPgBouncerFitADefaultServer). The run below is that
// fleet under load: every message stored and answered once, the server below bouncerPeakMax of
// max_connections throughout, counting every server connection (PgBouncer's too).

// bouncerPeakMax is the share of max_connections the server's client connections must stay
// below, at every sample of the run.
const bouncerPeakMax = 0.80

// TestE2EReplicasThroughPgBouncer starts LOGBOOK_BOUNCER_REPLICAS `logbook serve` processes
// behind one PgBouncer (pool_mode transaction, default_pool_size 20 as LOGBOOK_PGBOUNCER_POOL's
// default) in front of a throwaway cluster with default settings (max_connections 100), and
// drives a steady load (LOGBOOK_LOAD_*; default 200 threads at 20 msg/s for 30 s). It prints
// posted, stored and answered (missing, twice), post→reply p50/p99, the peak of the server's
// client connections (pg_stat_activity, every database, by application_name; PgBouncer's
// server connections as "pgbouncer") against max_connections, the idle fleet's transactions a
// second per replica over LOGBOOK_COST_IDLE (default 20s) before the load, transactions per
// message of the load (pg_stat_database), and `logbook audit verify`. It fails on a message
// lost or doubled, a peak at or above bouncerPeakMax of max_connections, a replica that does
// not start, or a broken chain. LOGBOOK_BOUNCER_BINARY runs another build (an older one, for
// a before). LOGBOOK_BOUNCER_LIVENESS=heartbeat gives the replicas heartbeat claims and no
// direct URL, and fails the run on any LISTEN, watch or check connection seen at any sample.
// Off unless LOGBOOK_BOUNCER_REPLICAS is set (bench/replicas.sh bouncer).
func TestE2EReplicasThroughPgBouncer(t *testing.T) {
	v := os.Getenv("LOGBOOK_BOUNCER_REPLICAS")
	if v == "" {
		t.Skip("set LOGBOOK_BOUNCER_REPLICAS=50 to run fifty replicas through PgBouncer")
	}
	replicas, err := strconv.Atoi(v)
	if err != nil || replicas < 1 {
		t.Fatalf("LOGBOOK_BOUNCER_REPLICAS=%q: want a number of replicas", v)
	}
	binaryFrom(t, "LOGBOOK_BOUNCER_BINARY")
	idle := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("LOGBOOK_COST_IDLE")); err == nil && d > 0 {
		idle = d
	}
	l := loadFromEnv(t, steadyLoad{threads: 200, rate: 20, dur: 30 * time.Second, channels: 10})

	e := newE2E(t, slackemu.Options{RetrySchedule: []time.Duration{time.Second, 5 * time.Second, 20 * time.Second}})
	pg := startCluster(t, clusterDir(t))
	e.dbURL = pg.URL()
	e.run("migrate", "up")
	var maxConns, reserved int
	query(t, e.dbURL, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int`, &maxConns, &reserved)
	if maxConns != 100 {
		t.Fatalf("the throwaway cluster has max_connections %d; the run holds the fleet to a default server's 100", maxConns)
	}
	login := mustLoginMemberOf(t, e.dbURL, "logbook_app")
	// Every replica's main and gateway pools are PgBouncer's clients (8 + 4 each, the
	// defaults); its server connections are LOGBOOK_PGBOUNCER_POOL's default, 20.
	perReplica := defaultDBPool + defaultDBGatewayPool
	bouncer := mustStartPgBouncerSized(t, e.dbURL, bouncerSize{maxClients: replicas*perReplica + 50, pool: defaultPgBouncerPool}, login)
	pooled := bouncer.url(t, e.dbURL, login)

	model := httptest.NewServer(http.HandlerFunc(slowModel))
	t.Cleanup(model.Close)
	e.extra = []string{"ANTHROPIC_BASE_URL=" + model.URL + "/"}
	channels := loadChannels(e.emu, l.channels)
	w := watchReplies(t, e.emu, channels)
	conns := sampleServer(t, e.dbURL, login)
	reported := false
	t.Cleanup(func() {
		if !reported { // a run that stopped early still says how full the server got
			peak, by, samples := conns.result()
			t.Logf("BOUNCER server connections (stopped early): peak %d of max_connections %d over %d samples, by application %v", peak, maxConns, samples, by)
		}
	})

	env := append(slices.Clone(defaults), "LOGBOOK_LOG_LEVEL=info", "LOGBOOK_REPLICAS="+strconv.Itoa(replicas),
		"DATABASE_URL="+pooled, "LOGBOOK_DB_POOLER=pgbouncer")
	// LOGBOOK_BOUNCER_LIVENESS=heartbeat: the replicas hold their claims as rows and are given
	// no direct URL at all, so none can open a connection to PostgreSQL itself.
	heartbeat := os.Getenv("LOGBOOK_BOUNCER_LIVENESS") == "heartbeat"
	if heartbeat {
		env = append(env, "LOGBOOK_LIVENESS=heartbeat")
	} else {
		env = append(env, "LOGBOOK_DIRECT_DATABASE_URL="+e.dbURL)
	}
	if fleetPeers() || heartbeat { // LOGBOOK_COST_PEERS=off: by NOTIFY
		env = append(env, "LOGBOOK_PEER_ADDR=127.0.0.1")
	}
	started := time.Now()
	procs := startFleet(t, e, replicas, env)
	t.Logf("BOUNCER %d replicas up in %v behind PgBouncer (max_client_conn %d, default_pool_size %d, liveness %s); load: %v",
		replicas, time.Since(started).Round(time.Millisecond), replicas*perReplica+50, defaultPgBouncerPool,
		map[bool]string{true: "heartbeat", false: "lock"}[heartbeat], l)

	// The start's own work (the catch-up poll, the first claims) is not idling.
	settleTimer := time.NewTimer(5 * time.Second)
	<-settleTimer.C
	idleBefore := readDBStats(t, e.dbURL)
	idleBegan := time.Now()
	window := time.NewTimer(idle)
	<-window.C
	idleAfter := readDBStats(t, e.dbURL)
	// Each readDBStats is two transactions of this test's own.
	idlePerSecond := float64(idleAfter.xacts-idleBefore.xacts-2) / time.Since(idleBegan).Seconds() / float64(replicas)

	cost := startCostMeter(t, e.dbURL, pg.PID(), procs)
	start := readDBStats(t, e.dbURL)
	began := time.Now()
	msgs := drive(t, e, w, l)
	took := time.Since(began)
	pending := settle(t, e.dbURL, 2*time.Minute)
	end := readDBStats(t, e.dbURL)
	cost.report(t, e.dbURL, len(msgs))
	// As the cost mode counts (TestE2EReplicaCost): the window's transactions, settle's and
	// readDBStats' few included.
	perMessage := float64(end.xacts-start.xacts) / float64(max(len(msgs), 1))

	notStored, storedTwice, unanswered, answeredTwice := exactlyOnce(msgs, storedTags(t, e.dbURL), w.counts())
	perPID, moved := spread(t, e.dbURL)
	_, lo, hi := spreadLine(perPID, procs)
	took0 := 0
	for _, p := range procs {
		if perPID[p.cmd.Process.Pid] > 0 {
			took0++
		}
	}
	p50, p99, maxLat, n := percentiles(msgs)
	verifyOut, verifyErr := runVerify(e)
	verifyOK := verifyErr == nil && strings.Contains(strings.ToLower(verifyOut), "ok")
	peak, peakBy, samples := conns.result()
	reported = true

	t.Logf("BOUNCER posted %d in %v (%.1f msg/s offered %g), stored %d (missing %d, twice %d), answered %d (unanswered %d, twice %d), sessions unsettled %d",
		len(msgs), took.Round(time.Millisecond), float64(len(msgs))/took.Seconds(), l.rate, len(msgs)-len(notStored), len(notStored), len(storedTwice),
		len(msgs)-len(unanswered), len(unanswered), len(answeredTwice), pending)
	t.Logf("BOUNCER post→reply p50 %v p99 %v max %v (n=%d)", p50, p99, maxLat, n)
	t.Logf("BOUNCER server connections (client backends, every database): peak %d of max_connections %d (%.0f %%; fail at %.0f %%) over %d samples, by application %s",
		peak, maxConns, 100*float64(peak)/float64(maxConns), 100*bouncerPeakMax, samples, byLine(peakBy))
	if fleetPeers() || heartbeat {
		posted, notified := peerWakes(t, procs)
		t.Logf("BOUNCER wakes posted to the owner %.0f (%.2f a message), NOTIFYed after a failed post %.0f",
			posted, posted/float64(max(len(msgs), 1)), notified)
	}
	t.Logf("BOUNCER idle: %.2f transactions a second per replica over %v; load: %.1f transactions per message (%d messages)",
		idlePerSecond, idle, perMessage, len(msgs))
	t.Logf("BOUNCER spread: %d of %d replicas started sessions (min %d, max %d); sessions that moved %d", took0, replicas, lo, hi, moved)
	t.Logf("BOUNCER audit verify: ok=%v", verifyOK)

	if len(notStored)+len(storedTwice) > 0 {
		t.Errorf("not stored %v, stored twice %v", firstTags(notStored), firstTags(storedTwice))
	}
	if len(unanswered)+len(answeredTwice) > 0 || pending > 0 {
		t.Errorf("unanswered %v, answered twice %v, sessions still pending %d", firstTags(unanswered), firstTags(answeredTwice), pending)
	}
	if float64(peak) >= bouncerPeakMax*float64(maxConns) {
		t.Errorf("the server's connections peaked at %d of max_connections %d, at or above %.0f %%: %s", peak, maxConns, 100*bouncerPeakMax, byLine(peakBy))
	}
	if !verifyOK {
		t.Errorf("audit verify: %v\n%s", verifyErr, verifyOut)
	}
	if own := conns.mostOf("logbook-listen") + conns.mostOf("logbook-watch") + conns.mostOf("logbook-check"); heartbeat && own > 0 {
		t.Errorf("a heartbeat fleet held connections of its own (at most %d listen, %d watch, %d check at any sample)",
			conns.mostOf("logbook-listen"), conns.mostOf("logbook-watch"), conns.mostOf("logbook-check"))
	}
}

// startFleet starts n `logbook serve` processes at once with env and waits until each has
// connected to the emulator; a process that exits first, or a fleet not connected within
// five minutes, fails the test with what the processes printed. When the test ends, the
// fleet is sent SIGTERM at once (each process's own cleanup then finds it gone, instead of
// draining fifty one after another).
func startFleet(t *testing.T, e *e2e, n int, env []string) []*proc {
	t.Helper()
	opened := e.emu.ConnectionsOpened()
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = e.startServe(env...)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		for _, p := range procs {
			select {
			case <-p.done:
			case <-deadline.C:
				return // the processes' own cleanups kill what is left
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exited := func() *proc {
		for _, p := range procs {
			select {
			case <-p.done:
				return p
			default:
			}
		}
		return nil
	}
	err := e.emu.Wait(ctx, func() bool { return exited() != nil || e.emu.ConnectionsOpened()-opened >= n })
	if p := exited(); p != nil {
		// On one line, which bench/replicas.sh's filter keeps: what the replica said last.
		t.Fatalf("BOUNCER a replica exited at start (%d of %d had connected): %s; it said: %s", e.emu.ConnectionsOpened()-opened, n,
			p.cmd.ProcessState, strings.ReplaceAll(lastLines(p.out.String(), 6), "\n", " ⏎ "))
	}
	if err != nil {
		t.Fatalf("%d of %d replicas connected to Slack within 5 minutes: %v", e.emu.ConnectionsOpened()-opened, n, err)
	}
	return procs
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// runVerify runs `logbook audit verify` and returns what it printed and how it exited (a
// refused connection is a result here, not the end of the test).
func runVerify(e *e2e) (string, error) {
	cmd := exec.Command(binary, "audit", "verify")
	cmd.Env = e.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// byLine is by's entries, the largest first, as "name n".
func byLine(by map[string]int) string {
	keys := slices.Collect(maps.Keys(by))
	slices.SortFunc(keys, func(a, b string) int {
		if by[a] != by[b] {
			return by[b] - by[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, by[k])
	}
	return strings.Join(parts, ", ")
}

// sampleServer samples every client backend of the server of dsn, in every database
// (PgBouncer's server connections as "pgbouncer"), every 100 ms, keeping the peak. It
// connects to the server's "postgres" database, so that its own transactions are not counted
// in dsn's database's pg_stat_database; bouncerLogin is the role PgBouncer logs in as.
func sampleServer(t *testing.T, dsn, bouncerLogin string) *connSampler {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "postgres"
	cfg.RuntimeParams["application_name"] = "test-sampler"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sampleWith(t, conn, `SELECT CASE WHEN usename = $1 THEN 'pgbouncer'
		ELSE coalesce(nullif(application_name, ''), '(none: ' || coalesce(usename, '?') || ')') END, count(*)
		FROM pg_stat_activity WHERE backend_type = 'client backend' GROUP BY 1`, bouncerLogin)
}
