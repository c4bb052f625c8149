package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
)

// Issue 53's backlog: one replica comes back to N threads (default 20,000), each a mention
// stored and not yet answered, on a throwaway cluster with default settings (max_connections
// 100, max_locks_per_transaction 64), the idle timeout at its default (10 minutes) and a model
// that answers at once. Before the fix every answered session kept its cell and lease for the
// idle timeout; from about 12,300 leases each renewal (one transaction, an advisory lock a
// lease) failed with out of shared memory (53200) and the replica churned through lost leases.

// backlogSample is one second of the run.
type backlogSample struct {
	at      time.Duration // since serve started
	leases  int           // unexpired leases held by the measured replica
	locks   int           // pg_locks rows, the whole server
	conns   int           // logbook's client connections
	pending int           // sessions with a message no completed turn answered
	rssKiB  int           // the replica's VmRSS
	err     bool          // a query failed (the sample holds what was read)
}

// TestE2EBacklog makes the backlog the way a replica meets one: threads whose mentions were
// stored by a replica that died before answering them. Ingest replicas (the same binary)
// take the mentions through the emulator and the real gateway, in rounds of backlogRound,
// while the model holds every request (their cells wake and wait on it), and each is killed
// (kill -9) once its round is stored: nothing is answered. (The few sessions several ingest
// replicas took up in turn, which the product abandons as cut short too often, are left
// out.) Then one `logbook serve` starts with the defaults and a model that answers at once, and
// works through all of them. Every second it samples the replica's unexpired leases, the
// server's lock count (pg_locks), the replica's RSS and logbook's connections; at the end it
// reports the sessions answered exactly once, the time to drain, answers a second, the peaks,
// the leases lost (the cells that exited without writing because their lease was lost), the
// out-of-shared-memory errors (53200) in the server's and the replica's logs, the lease calls,
// and `logbook audit verify`. It fails on an answer missing or doubled, a lease lost, a broken
// chain, or a backlog not drained within LOGBOOK_BACKLOG_CAP (default 40m).
//
// Off unless LOGBOOK_BACKLOG_SESSIONS is set (bench/backlog.sh). LOGBOOK_BACKLOG_BINARY runs
// another build (main before the fix, for a before); LOGBOOK_BACKLOG_TAIL (default 30s) keeps
// sampling after the drain, to show what the backlog leaves held.
func TestE2EBacklog(t *testing.T) {
	v := os.Getenv("LOGBOOK_BACKLOG_SESSIONS")
	if v == "" {
		t.Skip("set LOGBOOK_BACKLOG_SESSIONS=20000 to measure one replica working through a backlog")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("LOGBOOK_BACKLOG_SESSIONS=%q: want a number of sessions", v)
	}
	limit := backlogDuration(t, "LOGBOOK_BACKLOG_CAP", 40*time.Minute)
	tail := backlogDuration(t, "LOGBOOK_BACKLOG_TAIL", 30*time.Second)
	binaryFrom(t, "LOGBOOK_BACKLOG_BINARY")
	e := newE2E(t, slackemu.Options{})
	pg := startCluster(t, clusterDir(t))
	e.dbURL = pg.URL()
	e.run("migrate", "up")
	var maxConns, maxLocks int
	query(t, e.dbURL, `SELECT current_setting('max_connections')::int, current_setting('max_locks_per_transaction')::int`, &maxConns, &maxLocks)
	channels := loadChannels(e.emu, backlogChannels)
	w := watchReplies(t, e.emu, channels)

	// The backlog, stored by ingest replicas that die before answering.
	e.gate.close()
	ingestEnv := append(slices.Clone(defaults), "LOGBOOK_LOG_LEVEL=warn", "LOGBOOK_WAKE_LIMIT=1")
	msgs := make([]*tracked, 0, n)
	began := time.Now()
	for from := 0; from < n; from += backlogRound {
		p := e.serve(ingestEnv...)
		for i := from; i < min(from+backlogRound, n); i++ {
			m := &tracked{tag: fmt.Sprintf("t%d.0-m0", i), channel: channels[i%len(channels)], seen: make(chan struct{})}
			m.posted = time.Now()
			posted := e.post(slackemu.Post{Channel: m.channel, User: ada, Text: mention("Q[" + m.tag + "]")})
			m.thread = posted.TS
			w.add(m)
			msgs = append(msgs, m)
		}
		want := len(msgs)
		deadline := time.Now().Add(5 * time.Minute)
		for stored := 0; stored < want; {
			query(t, e.dbURL, `SELECT count(*) FROM events WHERE type = 'user_message'`, &stored)
			if time.Now().After(deadline) {
				t.Fatalf("ingest: %d of %d mentions stored after 5 minutes", stored, want)
			}
			timer := time.NewTimer(200 * time.Millisecond)
			<-timer.C
		}
		p.cmd.Process.Kill()
		<-p.done
	}
	// The dead ingest replicas' leases are not the replica's under test.
	ingestOwners := queryStrings(t, e.dbURL, `SELECT DISTINCT owner FROM leases`)
	// The backlog is the sessions left pending that one ingest replica took up. The oldest
	// are taken up by each ingest replica in turn (its start wakes a dead peer's session) and
	// cut short every time, until the product abandons them (more cells than it resumes a
	// turn with: it tells the thread to send the message again): they are left out.
	pendingTags := map[string]bool{}
	for _, tag := range queryStrings(t, e.dbURL, `SELECT substring(e.payload->>'text' from 'Q\[(t[0-9.]+-m[0-9]+)\]')
		FROM events e JOIN session_work w USING (session_id)
		WHERE e.type = 'user_message' AND w.last_message_seq > w.answered_through
		AND (SELECT count(*) FROM events c WHERE c.session_id = e.session_id AND c.type = 'cell_woken') <= 1`) {
		pendingTags[tag] = true
	}
	stored := len(msgs)
	msgs = slices.DeleteFunc(msgs, func(m *tracked) bool { return !pendingTags[m.tag] })
	n = len(msgs)
	t.Logf("BACKLOG %s: %d mentions stored in %v by %d ingest replicas killed in turn; %d sessions in the backlog (%d left out: taken up by several ingest replicas); server max_connections %d, max_locks_per_transaction %d",
		binary, stored, time.Since(began).Round(time.Second), (stored+backlogRound-1)/backlogRound, n, stored-n, maxConns, maxLocks)
	if n < stored*99/100 {
		t.Fatalf("the backlog holds %d pending sessions of %d stored", n, stored)
	}

	// The replica under test, with the defaults and a model that answers at once.
	model := httptest.NewServer(http.HandlerFunc(fastModel))
	t.Cleanup(model.Close)
	e.extra = []string{"ANTHROPIC_BASE_URL=" + model.URL + "/"}
	start := time.Now()
	p := e.serve(append(slices.Clone(defaults), "LOGBOOK_LOG_LEVEL=info")...)
	s := sampleBacklog(t, e.dbURL, p.cmd.Process.Pid, ingestOwners, start)

	var drained, dbDrained time.Duration
	// answered is how many of the backlog's threads hold a reply to their question, read
	// from the channels' history; looked at once no session is pending (dbDrained).
	answered := func() int {
		counts := w.counts()
		k := 0
		for _, m := range msgs {
			if counts[m.tag] > 0 {
				k++
			}
		}
		return k
	}
	capTimer := time.NewTimer(limit)
	defer capTimer.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	exited := false
wait:
	for {
		select {
		case <-capTimer.C:
			break wait
		case <-p.done:
			exited = true
			break wait
		case <-tick.C:
		}
		last, ok := s.last()
		if !ok || last.err || last.pending > 0 {
			continue
		}
		if dbDrained == 0 {
			dbDrained = last.at
		}
		if answered() == n {
			drained = time.Since(start)
			break
		}
	}
	if drained > 0 && tail > 0 {
		timer := time.NewTimer(tail)
		select {
		case <-timer.C:
		case <-p.done:
			exited = true
		}
	}
	samples := s.result()

	// What the run did.
	counts := w.counts()
	seen := 0
	w.mu.Lock()
	for _, m := range msgs {
		if m.replied > 0 {
			seen++
		}
	}
	w.mu.Unlock()
	var unanswered, twice []string
	for _, m := range msgs {
		switch c := counts[m.tag]; {
		case c == 0:
			unanswered = append(unanswered, m.tag)
		case c > 1:
			twice = append(twice, m.tag)
		}
	}
	out := p.out.String()
	leaseLost := countLines(out, `"cell: exiting without writing"`, `lease lost`)
	renewFailed := countLines(out, `"renewer: `)
	serverLog, _ := os.ReadFile(pg.LogPath())
	oomServer := strings.Count(string(serverLog), "out of shared memory")
	oomReplica := strings.Count(out, "out of shared memory") + strings.Count(out, "53200")
	acquired, acqErr := scrapeCounter(out, "logbook_lease_acquire_total")
	var peak backlogSample
	errs := 0
	for _, x := range samples {
		peak.leases = max(peak.leases, x.leases)
		peak.locks = max(peak.locks, x.locks)
		peak.conns = max(peak.conns, x.conns)
		peak.rssKiB = max(peak.rssKiB, x.rssKiB)
		if x.err {
			errs++
		}
	}
	var end backlogSample
	if len(samples) > 0 {
		end = samples[len(samples)-1]
	}
	verifyCmd := exec.Command(binary, "audit", "verify")
	verifyCmd.Env = e.env()
	verify, verifyErr := verifyCmd.CombinedOutput() // exit 1: a chain is broken
	verifyOK := verifyErr == nil && strings.Contains(strings.ToLower(string(verify)), "ok")

	t.Logf("BACKLOG timeline (every 30 s: elapsed, pending sessions, unexpired leases of the replica, server locks, logbook connections, replica RSS MiB):%s", timeline(samples))
	done := "not drained"
	rate := 0.0
	if drained > 0 {
		done = drained.Round(time.Second).String()
		rate = float64(n) / drained.Seconds()
	}
	if exited {
		done += " (the replica exited)"
	}
	t.Logf("BACKLOG %d sessions: answered %d (unanswered %d, twice %d), drained in %s, %.1f answers/s (no session pending in the log from %v)",
		n, n-len(unanswered), len(unanswered), len(twice), done, rate, dbDrained.Round(time.Second))
	t.Logf("BACKLOG peaks over %d samples (%d with a failed query): leases %d, server locks %d (lock table %d × %d = %d), connections %d, RSS %d MiB; at the end: leases %d, locks %d, RSS %d MiB, pending %d",
		len(samples), errs, peak.leases, peak.locks, maxLocks, maxConns, maxLocks*maxConns, peak.conns, peak.rssKiB/1024, end.leases, end.locks, end.rssKiB/1024, end.pending)
	t.Logf("BACKLOG leases lost %d, failed renewals logged %d, out of shared memory: server log %d, replica log %d; lease acquisitions %.0f (%v)",
		leaseLost, renewFailed, oomServer, oomReplica, acquired, acqErr)
	t.Logf("BACKLOG audit verify: ok=%v; answers the reply watcher saw as they came: %d", verifyOK, seen)

	if len(unanswered)+len(twice) > 0 {
		t.Errorf("unanswered %d %v, answered twice %d %v", len(unanswered), firstTags(unanswered), len(twice), firstTags(twice))
	}
	if drained == 0 {
		t.Errorf("the backlog was not drained within %v", limit)
	}
	if leaseLost > 0 {
		t.Errorf("%d leases lost", leaseLost)
	}
	if !verifyOK {
		t.Errorf("audit verify: %v\n%s", verifyErr, verify)
	}
}

const (
	// backlogChannels spread the backlog's threads over channels, as a workspace would.
	backlogChannels = 20
	// backlogRound is how many mentions one ingest replica stores before it is killed: its
	// turns each hold a request open at the model, and each is a file descriptor here and
	// in the replica.
	backlogRound = 2000
)

func backlogDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}

// queryStrings runs one query returning one text column on a fresh connection.
func queryStrings(t *testing.T, url, sql string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countLines counts the lines of out holding every one of subs.
func countLines(out string, subs ...string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		all := true
		for _, s := range subs {
			if !strings.Contains(line, s) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}

// backlogSampler samples the run every second on a connection of its own.
type backlogSampler struct {
	mu      sync.Mutex
	samples []backlogSample
	*ticking
}

func sampleBacklog(t *testing.T, dsn string, pid int, others []string, start time.Time) *backlogSampler {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	s := &backlogSampler{}
	s.ticking = tick(t, time.Second, func() {
		x := backlogSample{at: time.Since(start), rssKiB: rssKiB(pid)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The lock count first and alone: the other reads take locks, and may be refused
		// when the lock table is full.
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks`).Scan(&x.locks); err != nil {
			x.err = true
		}
		if err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM leases WHERE expires_at > now() AND owner <> ALL($1)),
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND application_name LIKE 'logbook-%'),
			(SELECT count(*) FROM session_work WHERE last_message_seq > answered_through)`, others).Scan(&x.leases, &x.conns, &x.pending); err != nil {
			x.err = true
			if errors.Is(ctx.Err(), context.DeadlineExceeded) || conn.IsClosed() {
				c, cerr := pgx.Connect(context.Background(), dsn)
				if cerr == nil {
					conn.Close(context.Background())
					conn = c
				}
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.samples = append(s.samples, x)
	}, func() { conn.Close(context.Background()) })
	return s
}

// last is the newest sample.
func (s *backlogSampler) last() (backlogSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return backlogSample{}, false
	}
	return s.samples[len(s.samples)-1], true
}

// result stops the sampler and returns its samples.
func (s *backlogSampler) result() []backlogSample {
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// rssKiB is the process's resident set (VmRSS), 0 once it is gone.
func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// timeline is one row per 30 s of samples, and the last one.
func timeline(samples []backlogSample) string {
	var b strings.Builder
	for i, x := range samples {
		if i%30 != 0 && i != len(samples)-1 {
			continue
		}
		mark := ""
		if x.err {
			mark = " (a query failed)"
		}
		fmt.Fprintf(&b, "\n  %6s pending %6d leases %6d locks %6d conns %3d RSS %5d MiB%s",
			x.at.Round(time.Second), x.pending, x.leases, x.locks, x.conns, x.rssKiB/1024, mark)
	}
	return b.String()
}
