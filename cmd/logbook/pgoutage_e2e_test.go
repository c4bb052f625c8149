package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/cmd/logbook/localpg"
)

// The PostgreSQL outage tests of issue 19 run the real binary against a throwaway cluster
// of their own (localpg, under t.TempDir()): the shared server is never restarted or stalled.

// outageCluster starts a throwaway cluster, migrates it and points e at it.
func outageCluster(t *testing.T, e *e2e) *localpg.Server {
	t.Helper()
	pg := startCluster(t, clusterDir(t))
	e.dbURL = pg.URL()
	e.run("migrate", "up")
	return pg
}

// clusterDir is a fresh directory for a cluster; as root the server runs as another user, who
// must pass through the test's temporary directories.
func clusterDir(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/lib/postgresql"); err != nil {
		t.Skip("no PostgreSQL server binaries installed")
	}
	base := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{base, filepath.Dir(base)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return filepath.Join(base, "pg")
}

func startCluster(t *testing.T, dir string) *localpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := localpg.Start(ctx, localpg.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop(context.Background()) })
	return pg
}

// readyWatch polls /readyz every 50ms and keeps each answer.
type readyWatch struct {
	mu      sync.Mutex
	samples []readySample
	stop    chan struct{}
	done    chan struct{}
}

type readySample struct {
	at    time.Time // when the answer came
	ready bool
}

func watchReady(t *testing.T, out string) *readyWatch {
	t.Helper()
	m := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*http: /healthz`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no http address in the output:\n%s", out)
	}
	w := &readyWatch{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 3 * time.Second}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ready := false
			if resp, err := client.Get("http://" + m[1] + "/readyz"); err == nil {
				ready = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
			w.mu.Lock()
			w.samples = append(w.samples, readySample{at: time.Now(), ready: ready})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *readyWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// first returns when /readyz first answered ready (or unready) after t; ok is false when it
// has not yet.
func (w *readyWatch) first(after time.Time, ready bool) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if s.at.After(after) && s.ready == ready {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (w *readyWatch) await(t *testing.T, what string, after time.Time, ready bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if at, ok := w.first(after, ready); ok {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for /readyz to say %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// query runs one query on a fresh connection to the cluster (a pool would hold connections
// the restart ends).
func query(t *testing.T, url, sql string, dst ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql).Scan(dst...); err != nil {
		t.Fatal(err)
	}
}

// Issue 19: PostgreSQL restarted (stopped, down 2 s, started) while messages arrive at a
// steady rate. What is posted during the outage is stored through Slack's redeliveries (the
// schedule outlasts the outage); serve reconnects by itself; /readyz goes unready and back;
// every message is stored once and answered exactly once.
func TestE2EPostgresRestartDuringTraffic(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{AckTimeout: time.Second,
		RetrySchedule: []time.Duration{time.Second, 3 * time.Second, 6 * time.Second}})
	pg := outageCluster(t, e)
	// Enough answers for every turn, title and retried call; each message opens its own
	// thread, so "answered once" is "one reply in its thread".
	for range 300 {
		e.model.Push(fakeprovider.Reply{Text: "Answered."})
	}
	p := e.serve("LOGBOOK_LOG_LEVEL=info")
	w := watchReady(t, p.out.String())
	w.await(t, "ready before the outage", time.Time{}, true)

	const total, rate, outageAt, gap = 30, 150 * time.Millisecond, 8, 2 * time.Second
	type posted struct {
		tag, thread string
		at          time.Time
	}
	var (
		msgs            []posted
		stopped, backAt time.Time
	)
	restarted := make(chan struct{})
	for i := range total {
		tag := fmt.Sprintf("t%d.0-m0", i)
		if i == outageAt {
			go func() {
				defer close(restarted)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := pg.Stop(ctx); err != nil {
					t.Errorf("stop the cluster: %v", err)
					return
				}
				stopped = time.Now()
				time.Sleep(gap)
				// Start adopts the directory again: the same cluster, on its own socket.
				again, err := localpg.Start(ctx, localpg.Options{Dir: pg.Dir()})
				if err != nil {
					t.Errorf("start the cluster again: %v", err)
					return
				}
				backAt = time.Now()
				t.Cleanup(func() { again.Stop(context.Background()) })
			}()
		}
		r := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("Q[" + tag + "]")})
		msgs = append(msgs, posted{tag: tag, thread: r.TS, at: time.Now()})
		time.Sleep(rate)
	}
	<-restarted
	if t.Failed() {
		t.FailNow()
	}
	unready := w.await(t, "unready during the outage", stopped, false)
	readyAgain := w.await(t, "ready after the outage", backAt, true)

	for _, m := range msgs {
		e.waitFor("the reply to "+m.tag, func() bool { return finalReplies(e, m.thread) >= 1 })
	}
	time.Sleep(2 * time.Second) // a doubled reply would show by now
	var during, redelivered int
	for _, m := range msgs {
		if n := finalReplies(e, m.thread); n != 1 {
			t.Errorf("%s answered %d times", m.tag, n)
		}
		if n := len(e.emu.BotReplies(general, m.thread)); n != 1 {
			t.Errorf("thread of %s: %d bot messages", m.tag, n)
		}
		if m.at.After(stopped) && m.at.Before(backAt) {
			during++
		}
	}
	acked := map[string]bool{}
	for _, a := range e.emu.Acks() {
		if !a.Stale {
			acked[a.EventID] = true
		}
	}
	for _, d := range e.emu.Deliveries() {
		if d.Attempt > 0 && acked[d.EventID] && d.EventType == "app_mention" {
			redelivered++
		}
	}
	var stored, distinct int
	query(t, pg.URL(), `SELECT count(*), count(DISTINCT idempotency_key) FROM events WHERE type = 'user_message'`, &stored, &distinct)
	if stored != total || distinct != total {
		t.Fatalf("%d user messages stored (%d distinct) for %d posted", stored, distinct, total)
	}
	out := p.out.String()
	if !strings.Contains(out, "LISTEN connection lost; reconnecting") {
		t.Errorf("the LISTEN connection never noticed the restart")
	}
	select {
	case <-p.done:
		t.Fatalf("logbook serve exited during the outage:\n%s", out)
	default:
	}
	t.Logf("PG-RESTART posted %d (%d during the %v outage), stored %d once each, answered once each; app_mention deliveries acked on a retry: %d",
		total, during, backAt.Sub(stopped).Round(time.Millisecond), stored, redelivered)
	t.Logf("PG-RESTART /readyz unready %v after the stop; ready %v after the database was back (pg_ctl start returned)",
		unready.Sub(stopped).Round(time.Millisecond), readyAgain.Sub(backAt).Round(time.Millisecond))
	if during == 0 || redelivered == 0 {
		t.Fatalf("nothing was posted during the outage (%d) or delivered by a retry (%d)", during, redelivered)
	}
}

// Issue 19: /readyz says unready within a second or two while the database stalls (every
// process of the cluster stopped with SIGSTOP: connections open, nothing answers), and ready
// again once it resumes.
func TestE2EReadyzWhileTheDatabaseStalls(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	pg := outageCluster(t, e)
	p := e.serve("LOGBOOK_LOG_LEVEL=info")
	w := watchReady(t, p.out.String())
	w.await(t, "ready before the stall", time.Time{}, true)

	procs := clusterProcesses(t, pg.PID())
	resume := func() {
		for _, pid := range procs {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	for _, pid := range procs {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	stalled := time.Now()
	unready := w.await(t, "unready during the stall", stalled, false)
	time.Sleep(3 * time.Second) // longer than the old probe's 2 s ping
	if at, ok := w.first(unready, true); ok {
		t.Fatalf("/readyz said ready %v into the stall", at.Sub(stalled))
	}
	resume()
	resumed := time.Now()
	ready := w.await(t, "ready after the stall", resumed, true)
	t.Logf("STALL /readyz unready %v after SIGSTOP; ready %v after SIGCONT (%d processes)",
		unready.Sub(stalled).Round(time.Millisecond), ready.Sub(resumed).Round(time.Millisecond), len(procs))
	if d := unready.Sub(stalled); d > 2*time.Second {
		t.Fatalf("unready only %v into the stall, want within 2s", d)
	}
}

// finalReplies counts the bot's final replies (with the reply's metadata) in thread.
func finalReplies(e *e2e, thread string) int {
	n := 0
	for _, m := range e.emu.BotReplies(general, thread) {
		if strings.Contains(string(m.Metadata), bot.MetadataEventType) {
			n++
		}
	}
	return n
}

// clusterProcesses is the postmaster and its children.
func clusterProcesses(t *testing.T, postmaster int) []int {
	t.Helper()
	pids := []int{postmaster}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(postmaster) {
			pids = append(pids, pid)
		}
	}
	return pids
}
