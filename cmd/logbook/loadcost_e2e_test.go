package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/cmd/logbook/localpg"
)

// Where a load's time goes (issue 33: ten replicas carried 15.7 of the offered 50 msg/s on two
// cores): the CPU each kind of process spent (the replicas; this test process, which is the
// Slack emulator, the model and the load driver; the PostgreSQL server), and the database's
// transactions and busy time, each per message, so that runs of different sizes compare.

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux
// everywhere).
const clockTicks = 100

// cpuSeconds is the user+system time of pid from /proc; with children, also the time of its
// children already reaped (a postmaster's exited backends). 0 where /proc is not there.
func cpuSeconds(pid int, children bool) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
	sum := 0.0
	idx := []int{11, 12}
	if children {
		idx = append(idx, 13, 14)
	}
	for _, i := range idx {
		if i < len(f) {
			v, _ := strconv.ParseFloat(f[i], 64)
			sum += v
		}
	}
	return sum / clockTicks
}

// serverCPU is the CPU of the PostgreSQL server whose postmaster is pid: the postmaster with
// its reaped children, and every live child.
func serverCPU(pid int) float64 {
	sum := cpuSeconds(pid, true)
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, k := range strings.Fields(string(kids)) {
		if c, err := strconv.Atoi(k); err == nil {
			sum += cpuSeconds(c, false)
		}
	}
	return sum
}

// dbStats are pg_stat_database's counters for the current database.
type dbStats struct {
	xacts  int64   // committed and rolled back
	active float64 // ms the backends spent running statements
}

func readDBStats(t *testing.T, dsn string) dbStats {
	t.Helper()
	var s dbStats
	// The statistics are flushed by each backend when idle, at most once a second.
	query(t, dsn, `SELECT 1 FROM (SELECT pg_stat_force_next_flush()) f`, new(int))
	query(t, dsn, `SELECT xact_commit + xact_rollback, coalesce(active_time, 0) FROM pg_stat_database WHERE datname = current_database()`, &s.xacts, &s.active)
	return s
}

// costMeter takes the figures at the start of a load and reports them per message at its end.
type costMeter struct {
	replicas []int
	pgPID    int
	start    time.Time
	cpu      [3]float64 // replicas, this test process, the server
	db       dbStats
}

func startCostMeter(t *testing.T, dsn string, pgPID int, replicas []*proc) *costMeter {
	m := &costMeter{pgPID: pgPID, start: time.Now()}
	for _, p := range replicas {
		m.replicas = append(m.replicas, p.cmd.Process.Pid)
	}
	m.cpu = m.sample()
	m.db = readDBStats(t, dsn)
	return m
}

func (m *costMeter) sample() [3]float64 {
	var r [3]float64
	for _, pid := range m.replicas {
		r[0] += cpuSeconds(pid, false)
	}
	r[1] = cpuSeconds(os.Getpid(), false)
	r[2] = serverCPU(m.pgPID)
	return r
}

// report logs, per message of n, the CPU milliseconds of each kind of process and its share,
// the transactions and the database's busy milliseconds.
func (m *costMeter) report(t *testing.T, dsn string, n int) {
	t.Helper()
	end := m.sample()
	db := readDBStats(t, dsn)
	wall := time.Since(m.start).Seconds()
	per := float64(max(n, 1))
	var total float64
	var d [3]float64
	for i := range d {
		d[i] = end[i] - m.cpu[i]
		total += d[i]
	}
	share := func(i int) float64 { return 100 * d[i] / max(total, 1e-9) }
	t.Logf("REPLICAS cost per message (%d messages, %.0f s, %.0f CPU-s = %.2f of the machine's cores): CPU ms replicas %.1f (%.0f%%), test process [emulator, model, driver] %.1f (%.0f%%), postgres %.1f (%.0f%%); transactions %.1f, database busy ms %.1f",
		n, wall, total, total/wall, 1000*d[0]/per, share(0), 1000*d[1]/per, share(1), 1000*d[2]/per, share(2),
		float64(db.xacts-m.db.xacts)/per, (db.active-m.db.active)/per)
}

// statementsWanted: LOGBOOK_LOAD_STATEMENTS=1 makes the ten-replica test load
// pg_stat_statements into its cluster and report its costliest statements (off by default: the
// extension costs a little on every statement).
func statementsWanted() bool { return os.Getenv("LOGBOOK_LOAD_STATEMENTS") == "1" }

// withStatements restarts the cluster pg with pg_stat_statements loaded and returns the new
// server (same directory, same database).
func withStatements(t *testing.T, pg *localpg.Server) *localpg.Server {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(context.Background(), `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	pg = startCluster(t, pg.Dir())
	conn, err = pgx.Connect(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	return pg
}

// resetStatements forgets what pg_stat_statements counted so far (the migrations, the start).
func resetStatements(t *testing.T, dsn string) {
	t.Helper()
	query(t, dsn, `SELECT 1 FROM (SELECT pg_stat_statements_reset()) r`, new(int))
}

// reportStatements logs the statements that took the most time, per message of n.
func reportStatements(t *testing.T, dsn string, n int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT calls, total_exec_time, regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT 25`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	per := float64(max(n, 1))
	var b strings.Builder
	for rows.Next() {
		var calls int64
		var ms float64
		var q string
		if err := rows.Scan(&calls, &ms, &q); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\n  %6.2f calls %7.3f ms/msg  %.160s", float64(calls)/per, ms/per, q)
	}
	t.Logf("REPLICAS statements per message (pg_stat_statements, top 25 by time):%s", b.String())
}
