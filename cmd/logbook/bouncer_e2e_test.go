package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session/logtest"
)

// pgbouncer is a PgBouncer started for one test, in transaction pooling mode, in front of
// the test's PostgreSQL.
type pgbouncer struct {
	addr string // host:port
	out  *logtest.Buffer
}

// url returns the URL of dbURL's database through the PgBouncer, as user (dbURL may name a
// host and port, or a unix socket's directory as a throwaway cluster's URL does).
func (b pgbouncer) url(t *testing.T, dbURL, user string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", User: url.User(user), Host: b.addr, Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	return u.String()
}

// bouncerSize is a PgBouncer's client and server limits: max_client_conn, and
// default_pool_size (the server connections it opens for one database and user).
type bouncerSize struct {
	maxClients, pool int
}

// mustStartPgBouncer starts pgbouncer (pool_mode transaction, auth trust) on a free port,
// in front of PostgreSQL at dbURL's host and port, letting users in. It skips the test when
// pgbouncer is not installed, except in CI (.ci/run installs it).
func mustStartPgBouncer(t *testing.T, dbURL string, users ...string) pgbouncer {
	t.Helper()
	return mustStartPgBouncerSized(t, dbURL, bouncerSize{maxClients: 200, pool: 10}, users...)
}

// mustStartPgBouncerSized is mustStartPgBouncer with size's limits. In front of a unix
// socket (a throwaway cluster, whose socket only its owner may open) PgBouncer runs as the
// socket directory's owner.
func mustStartPgBouncerSized(t *testing.T, dbURL string, size bouncerSize, users ...string) pgbouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer" // Debian's package puts it outside a user's PATH
		if _, serr := os.Stat(bin); serr != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("pgbouncer is not installed, and CI must run this test (.ci/run installs it)")
			}
			t.Skip("pgbouncer is not installed (apt-get install -y pgbouncer): skipping the PgBouncer end-to-end test")
		}
	}
	pg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	runAs := "nobody"
	if strings.HasPrefix(pg.Host, "/") {
		runAs = ownerOf(t, pg.Host)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// pgbouncer refuses to run as root; as another user it must read its files.
	dir, err := os.MkdirTemp("", "logbook-pgbouncer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	var ul strings.Builder
	for _, u := range users {
		fmt.Fprintf(&ul, "%q \"\"\n", u)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = %d
default_pool_size = %d
server_reset_query =
`, pg.Host, pg.Port, port, filepath.Join(dir, "userlist.txt"), size.maxClients, size.pool)
	for name, body := range map[string]string{"userlist.txt": ul.String(), "pgbouncer.ini": ini} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", runAs}, args...)
	}
	cmd := exec.Command(bin, args...)
	b := pgbouncer{addr: fmt.Sprintf("127.0.0.1:%d", port), out: &logtest.Buffer{}}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("pgbouncer output:\n%s", b.out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
			return b
		}
		select {
		case <-done:
			t.Fatalf("pgbouncer exited:\n%s", b.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not listen on %s:\n%s", b.addr, b.out.String())
		}
	}
}

// ownerOf is the name of the user who owns path.
func ownerOf(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("the owner of %s is not known on this system", path)
	}
	u, err := user.LookupId(strconv.Itoa(int(st.Uid)))
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// mustLoginMemberOf creates a login role that inherits role's privileges, for connections
// that cannot SET ROLE (through a transaction pooler), and drops it at the end.
func mustLoginMemberOf(t *testing.T, dbURL, role string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "lb_test_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN INHERIT IN ROLE %s", name, pgx.Identifier{role}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s SET idle_in_transaction_session_timeout = '5s'", name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		// Backends of the role (pgbouncer's server connections) go first.
		c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name)
		if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	return name
}

// Through a transaction-pooling PgBouncer (LOGBOOK_DB_POOLER=pgbouncer) logbook serve
// answers a message end to end; its LISTEN connection, which holds the liveness claim,
// goes to PostgreSQL directly (LOGBOOK_DIRECT_DATABASE_URL).
func TestE2EThroughPgBouncer(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	login := mustLoginMemberOf(t, e.dbURL, "logbook_app")
	b := mustStartPgBouncer(t, e.dbURL, login)
	pooled := b.url(t, e.dbURL, login)
	e.model.Push(fakeprovider.Reply{Text: "Through the pooler."}, fakeprovider.Reply{Text: "Pooler"})
	e.serve("DATABASE_URL="+pooled, "LOGBOOK_DB_POOLER=pgbouncer", "LOGBOOK_DIRECT_DATABASE_URL="+e.dbURL)
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("are you pooled?")})
	if r := e.replies(top.TS, 1); r[0].Text != "Through the pooler." {
		t.Fatalf("reply %+v", r[0])
	}

	ctx := context.Background()
	su, err := pgx.Connect(ctx, e.dbURL) // the test's superuser sees every backend's query
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	var listenUser *string
	var pooledBackends int
	err = su.QueryRow(ctx, `SELECT
	  (SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE datname = current_database()
	     AND application_name = 'logbook-listen' AND query LIKE 'LISTEN%'),
	  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = $1)`, login).
		Scan(&listenUser, &pooledBackends)
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := url.Parse(e.dbURL)
	if listenUser == nil || *listenUser != direct.User.Username() {
		t.Errorf("the LISTEN connection is %v's, want the direct URL's %q", listenUser, direct.User.Username())
	}
	if pooledBackends == 0 {
		t.Errorf("no backend of %s: the pool did not go through PgBouncer", login)
	}
}

// #53: with LOGBOOK_LIVENESS=heartbeat a replica behind PgBouncer needs no URL of PostgreSQL
// itself: given none, it starts, holds its claim as a row renewed through PgBouncer, answers,
// PostgreSQL sees no LISTEN, watch or check connection, and its start line counts no
// connection of its own.
func TestE2EHeartbeatThroughPgBouncerNeedsNoDirectURL(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	login := mustLoginMemberOf(t, e.dbURL, "logbook_app")
	b := mustStartPgBouncer(t, e.dbURL, login)
	e.model.Push(fakeprovider.Reply{Text: "Pooled, with a heartbeat."}, fakeprovider.Reply{Text: "Heartbeat"})
	// Scheduled audit exports on their own URL: their connections are the replica's only own
	// ones, and with no direct URL the start reads the server's caps through PgBouncer.
	p := e.serve("DATABASE_URL="+b.url(t, e.dbURL, login), "LOGBOOK_DB_POOLER=pgbouncer", "LOGBOOK_LIVENESS=heartbeat",
		"LOGBOOK_PEER_ADDR=127.0.0.1", "LOGBOOK_AUDIT_SCHEDULE=@daily", "LOGBOOK_AUDIT_DEST="+t.TempDir(),
		"LOGBOOK_AUDIT_DATABASE_URL="+e.dbURL,
		// An empty URL means libpq's defaults (this machine's own PostgreSQL): none here, so a
		// connection made from a URL that is not set fails instead of reading another server.
		"PGHOST=/nonexistent-logbook-test")
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("are you pooled?")})
	if r := e.replies(top.TS, 1); r[0].Text != "Pooled, with a heartbeat." {
		t.Fatalf("reply %+v", r[0])
	}
	var alive bool
	var own int
	query(t, e.dbURL, `SELECT
	  (SELECT bool_and(alive_until > clock_timestamp()) FROM replica_peers),
	  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
	     AND application_name IN ('logbook-listen', 'logbook-watch', 'logbook-check'))`, &alive, &own)
	if !alive {
		t.Errorf("no live heartbeat claim in replica_peers")
	}
	if own != 0 {
		t.Errorf("%d LISTEN, watch or check connections with a heartbeat claim", own)
	}
	if out := p.out.String(); !strings.Contains(out, `"per_replica":{"main":8,"gateway":4,"audit":4}`) ||
		!strings.Contains(out, `"per_replica_postgres":4`) {
		t.Errorf("the budget line does not count the audit exports alone as the replica's own connections:\n%s", out)
	}
}

// Without LOGBOOK_DB_POOLER, a DATABASE_URL that is a PgBouncer is refused at startup, and
// the message says what to set.
func TestServeRefusesAnUndeclaredPgBouncer(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	login := mustLoginMemberOf(t, e.dbURL, "logbook_app")
	b := mustStartPgBouncer(t, e.dbURL, login)
	cmd := exec.Command(binary, "serve")
	cmd.Env = e.env("DATABASE_URL=" + b.url(t, e.dbURL, login))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve started through an undeclared PgBouncer:\n%s", out)
	}
	for _, want := range []string{"LOGBOOK_DB_POOLER=pgbouncer", "LOGBOOK_DIRECT_DATABASE_URL"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %s:\n%s", want, out)
		}
	}
}
