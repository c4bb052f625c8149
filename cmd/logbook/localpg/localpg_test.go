package localpg

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session/logtest"
)

// requirePostgres skips when this machine has no PostgreSQL server binaries.
func requirePostgres(t *testing.T) {
	t.Helper()
	if _, err := defaultFinder().find(context.Background(), 0); errors.Is(err, ErrNotInstalled) {
		t.Skip("no PostgreSQL server binaries installed")
	}
}

// mustTempDir returns a fresh directory for a cluster. As root, the server runs as another
// user, who must be able to pass through the test's temporary directories (0700 by default).
func mustTempDir(t *testing.T) string {
	t.Helper()
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

func mustStart(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop in cleanup: %v", err)
		}
	})
	return s
}

// processesFor lists processes that belong to the cluster in dir: those whose command line
// names it (the postmaster: postgres -D <dir>/data) and the children of postmaster pid.
func processesFor(t *testing.T, dir string, postmaster int) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to inspect processes: %v", err)
	}
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		ppid := 0
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			f := strings.Fields(string(stat[i+1:])) // state, ppid, ...
			if len(f) > 1 && (f[0] == "Z" || f[0] == "X") {
				continue // exited, waiting for its parent to reap it: not running
			}
			if len(f) > 1 {
				ppid, _ = strconv.Atoi(f[1])
			}
		}
		cmd := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(cmd, dir) || pid == postmaster || ppid == postmaster {
			found = append(found, e.Name()+": "+cmd)
		}
	}
	return found
}

func TestStartPersistsAcrossRestartsAndStopLeavesNothing(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	dir := mustTempDir(t)
	var log logtest.Buffer
	// The remains of an initdb interrupted by a crash are cleared away.
	if err := os.MkdirAll(filepath.Join(dir, "data.initdb", "base"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.initdb", "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s1, err := Start(ctx, Options{Dir: dir, Log: &log})
	if err != nil {
		t.Fatalf("first Start: %v", err)
	}
	if !strings.Contains(log.String(), "creating a PostgreSQL") {
		t.Errorf("first Start did not say it creates a cluster; log:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "data.initdb")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data.initdb still there after Start: %v", err)
	}
	if !strings.Contains(s1.URL(), "/logbook?") || !strings.Contains(s1.URL(), "host=") {
		t.Errorf("URL %q: want the logbook database over the socket", s1.URL())
	}
	conn, err := pgx.Connect(ctx, s1.URL())
	if err != nil {
		s1.Stop(ctx)
		t.Fatalf("connect: %v", err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE notes (body text NOT NULL); INSERT INTO notes VALUES ('kept across restarts')`)
	conn.Close(ctx)
	if err != nil {
		s1.Stop(ctx)
		t.Fatalf("create table: %v", err)
	}
	pid1 := s1.PID()
	if running := processesFor(t, dir, pid1); len(running) < 2 {
		t.Errorf("found %d processes of the running server, want the postmaster and its children: the check after Stop would prove nothing", len(running))
	}
	if err := s1.Stop(ctx); err != nil {
		t.Fatalf("first Stop: %v", err)
	}
	if left := processesFor(t, dir, pid1); len(left) > 0 {
		t.Fatalf("processes left after Stop:\n%s", strings.Join(left, "\n"))
	}
	if err := s1.Stop(ctx); err != nil {
		t.Errorf("second Stop of the same server: %v, want nil", err)
	}

	log = logtest.Buffer{}
	s2 := mustStart(t, Options{Dir: dir, Log: &log, Database: "other"})
	checkServerSettings(t, s2, "other")
	if _, err := Start(ctx, Options{Dir: dir}); !errors.Is(err, ErrInUse) {
		t.Errorf("Start on a directory in use: %v, want ErrInUse", err)
	}
	if strings.Contains(log.String(), "creating a PostgreSQL") {
		t.Errorf("second Start ran initdb again; log:\n%s", log.String())
	}
	if s2.PID() == pid1 {
		t.Errorf("second Start reports the old postmaster pid %d", pid1)
	}
	conn, err = pgx.Connect(ctx, strings.Replace(s2.URL(), "/other?", "/logbook?", 1))
	if err != nil {
		t.Fatalf("connect after restart: %v", err)
	}
	var body string
	err = conn.QueryRow(ctx, `SELECT body FROM notes`).Scan(&body)
	conn.Close(ctx)
	if err != nil || body != "kept across restarts" {
		t.Fatalf("after restart: body %q, err %v; want the row written before", body, err)
	}
	pid2 := s2.PID()
	if err := s2.Stop(ctx); err != nil {
		t.Fatalf("Stop after restart: %v", err)
	}
	if left := processesFor(t, dir, pid2); len(left) > 0 {
		t.Fatalf("processes left after the second Stop:\n%s", strings.Join(left, "\n"))
	}
}

// checkServerSettings checks the server listens on its socket only, as an unprivileged user.
func checkServerSettings(t *testing.T, s *Server, wantDB string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var listen, sockets, perms, db, user string
	err = conn.QueryRow(ctx, `SELECT current_setting('listen_addresses'), current_setting('unix_socket_directories'),
		current_setting('unix_socket_permissions'), current_database(), current_user`).Scan(&listen, &sockets, &perms, &db, &user)
	if err != nil {
		t.Fatal(err)
	}
	if listen != "" {
		t.Errorf("listen_addresses %q, want empty (no TCP)", listen)
	}
	if sockets != `"`+s.Dir()+`"` {
		t.Errorf("unix_socket_directories %q, want %q", sockets, s.Dir())
	}
	if perms != "0700" {
		t.Errorf("unix_socket_permissions %q, want 0700", perms)
	}
	if db != wantDB || user != "postgres" {
		t.Errorf("connected to %s as %s, want %s as postgres", db, user, wantDB)
	}
	rows, err := conn.Query(ctx, `SELECT type, auth_method FROM pg_hba_file_rules ORDER BY line_number`)
	if err != nil {
		t.Fatal(err)
	}
	var typ, method string
	if _, err := pgx.ForEachRow(rows, []any{&typ, &method}, func() error {
		if (typ == "local") != (method == "trust") || (typ != "local" && method != "reject") {
			t.Errorf("pg_hba rule %s %s: want local trust and every TCP rule reject", typ, method)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		out, err := exec.Command("ps", "-o", "user=", "-p", strconv.Itoa(s.PID())).Output()
		if err != nil {
			t.Fatalf("ps: %v", err)
		}
		if u := strings.TrimSpace(string(out)); u == "root" || u == "" {
			t.Errorf("postmaster runs as %q, want an unprivileged user", u)
		}
	}
}

// An owner that dies without Stop leaves the server running; the next Start adopts it and
// its Stop ends it.
func TestStartAdoptsServerOfDeadOwner(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	dir := mustTempDir(t)
	s1, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s1.lock.Close() // what the kernel does when the owner dies

	var log logtest.Buffer
	s2, err := Start(ctx, Options{Dir: dir, Log: &log})
	if err != nil {
		s1.Stop(ctx)
		t.Fatalf("Start after the owner died: %v", err)
	}
	if s2.PID() != s1.PID() {
		t.Errorf("adopted pid %d, want the running postmaster %d", s2.PID(), s1.PID())
	}
	if !strings.Contains(log.String(), "adopting") {
		t.Errorf("log does not say it adopted the server:\n%s", log.String())
	}
	// Stop runs even when the caller's context is already cancelled (Ctrl-C).
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s2.Stop(cancelled); err != nil {
		t.Fatalf("Stop with a cancelled context: %v", err)
	}
	if left := processesFor(t, dir, s1.PID()); len(left) > 0 {
		t.Fatalf("processes left after Stop:\n%s", strings.Join(left, "\n"))
	}
}

func TestStartRejectsBadDirectories(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	notCluster := filepath.Join(base, "notcluster")
	if err := os.MkdirAll(filepath.Join(notCluster, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notCluster, "data", "something"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"socket path too long", "/tmp/" + strings.Repeat("x", 100), "too long for a unix socket"},
		{"shell metacharacter", filepath.Join(base, "a$b"), "cannot be passed to pg_ctl"},
		{"not a cluster", notCluster, "holds no PostgreSQL cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(context.Background(), Options{Dir: tc.dir})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start(%s): %v, want an error containing %q", tc.dir, err, tc.want)
			}
		})
	}
}

func TestStartWithCancelledContextLeavesNothing(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	dir := mustTempDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Start(ctx, Options{Dir: dir})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start with a cancelled context created %s", dir)
	}
}
