// Package localpg runs a throwaway local PostgreSQL server for `logbook dev` when no
// DATABASE_URL is given.
//
// Start finds the server binaries (initdb and pg_ctl on PATH, in /usr/lib/postgresql/<n>/bin
// or in Homebrew's keg), creates a cluster in a directory the first time (initdb only when
// the cluster does not exist yet, so sessions survive restarts), starts it and creates the
// database "logbook". The server listens on a unix socket inside that directory only (no TCP
// port, so it cannot collide with a server on 5432 or be reached by other users), with trust
// authentication for the superuser "postgres"; the socket is mode 0700.
//
// PostgreSQL refuses to run as root. When the caller is root, initdb, pg_ctl and the server
// run as an unprivileged system user ("logbook", created with useradd when missing) that owns
// the directory.
//
// Start says on Options.Log which user the server runs as, and when it creates that user.
//
// Layout of the directory:
//
//	<dir>/data/           the cluster (PGDATA); initdb works in data.initdb/, renamed when done
//	<dir>/server.log      the server's log
//	<dir>/.s.PGSQL.5433   the unix socket
//	<dir>/logbook.lock    held (flock) by the process that started the server
//
// Stop shuts the server down (pg_ctl stop -m fast, then -m immediate, then SIGKILL) and
// returns only when the postmaster process is gone. If the owning process dies without
// Stop, the server keeps running; the next Start on the same directory adopts it.
package localpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Dir holds the cluster, its log and its socket. Default: os.UserCacheDir()/logbook/pg,
	// or /var/lib/logbook/pg for root (root's home is not reachable by the unprivileged
	// user the server runs as). Every directory above it must be searchable by that user.
	Dir string
	// Log receives a line per step (creating, starting, adopting, stopping), one Write per
	// line, without a prefix. Default:
	// discarded. The server's own log goes to <Dir>/server.log.
	Log io.Writer
	// Database is created on first start and named in URL. Default "logbook".
	Database string
	// User is the system user the server runs as when the caller is root; created with
	// useradd when missing. Default "logbook". Ignored for other callers.
	User string
}

// Server is a running local PostgreSQL server. Stop it when done.
type Server struct {
	dir    string
	port   int // names the socket file; 0: socketPort
	bin    binaries
	as     *account
	url    string
	pid    int
	log    io.Writer
	lock   *os.File
	mu     sync.Mutex
	closed bool
}

const (
	// socketPort only names the socket file (.s.PGSQL.5433) in the private directory: no
	// TCP port is opened.
	socketPort = 5433
	superuser  = "postgres"
	// maxSocketPath is the longest unix socket path every supported OS takes (macOS: 104
	// bytes with the NUL; Linux: 108).
	maxSocketPath = 103
	startTimeout  = 60 * time.Second
	stopTimeout   = 30 * time.Second
)

// Start starts (or adopts) the local server for opts.Dir and returns when it accepts
// connections and the database exists. Errors: ErrNotInstalled (its message says how to
// install PostgreSQL); ErrInUse when another live process owns the directory; otherwise
// an error naming the failed step, with the tail of the tool's output or server log.
func Start(ctx context.Context, opts Options) (*Server, error) {
	return start(ctx, opts, defaultFinder())
}

// ErrInUse means another process already runs a server for the directory.
var ErrInUse = errors.New("local PostgreSQL directory is in use by another process")

func start(ctx context.Context, opts Options, f finder) (*Server, error) {
	root := os.Geteuid() == 0
	dir, err := resolveDir(opts.Dir, root)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, log: opts.Log}
	if s.log == nil {
		s.log = io.Discard
	}
	db := cmp.Or(opts.Database, "logbook")

	wantMajor, err := clusterMajor(s.dataDir())
	if err != nil {
		return nil, err
	}
	if s.bin, err = f.find(ctx, wantMajor); err != nil {
		return nil, err
	}
	if err := s.takeDir(ctx, root, opts.User); err != nil {
		return nil, err
	}
	if err := s.startLocked(ctx, wantMajor, db); err != nil {
		s.lock.Close()
		return nil, err
	}
	return s, nil
}

// startLocked runs with the directory lock held; on error it leaves no server running.
func (s *Server) startLocked(ctx context.Context, wantMajor int, db string) error {
	if wantMajor == 0 {
		// initdb into a scratch directory renamed into place when complete: an interrupted
		// initdb never leaves something that looks like a cluster.
		fmt.Fprintf(s.log, "creating a PostgreSQL %d cluster in %s\n", s.bin.major, s.dataDir())
		scratch := s.dataDir() + ".initdb"
		if err := os.RemoveAll(scratch); err != nil {
			return fmt.Errorf("remove the remains of an interrupted initdb: %w", err)
		}
		if out, err := s.run(ctx, s.bin.initdb(), "-D", scratch, "-U", superuser,
			"--auth-local=trust", "--auth-host=reject", "--encoding=UTF8", "--locale=C"); err != nil {
			os.RemoveAll(scratch)
			return fmt.Errorf("initdb %s: %w\n%s", scratch, err, tail(out, 20))
		}
		if err := os.Rename(scratch, s.dataDir()); err != nil {
			return fmt.Errorf("move the new cluster into place: %w", err)
		}
	}
	if err := s.launch(ctx); err != nil {
		return err
	}
	s.url = socketURL(s.dir, s.socketPort(), db)
	if err := createDatabase(ctx, socketURL(s.dir, s.socketPort(), "postgres"), db); err != nil {
		s.abandon(ctx)
		return err
	}
	return nil
}

// launch starts the cluster in the directory, or adopts the server already running there,
// and reads its pid; on error it leaves no server running.
func (s *Server) launch(ctx context.Context) error {
	// A server still running here was started by an owner that died without Stop (it
	// released the lock): adopt it.
	running, err := s.running(ctx)
	if err != nil {
		return err
	}
	if running {
		fmt.Fprintf(s.log, "adopting the PostgreSQL %d server already running in %s\n", s.bin.major, s.dir)
	} else {
		fmt.Fprintf(s.log, "starting PostgreSQL %d (data %s, log %s)\n", s.bin.major, s.dataDir(), s.LogPath())
		out, err := s.run(ctx, s.bin.pgCtl(), "start", "-D", s.dataDir(), "-l", s.LogPath(), "-w",
			"-t", strconv.Itoa(int(startTimeout/time.Second)), "-s", "-o", s.serverOptions())
		if err != nil {
			logTail, _ := os.ReadFile(s.LogPath())
			s.abandon(ctx) // pg_ctl may have launched it before failing
			return fmt.Errorf("pg_ctl start %s: %w\n%s%s", s.dataDir(), err, tail(out, 10), tail(logTail, 20))
		}
	}
	if s.pid, err = readPID(s.dataDir()); err != nil {
		s.abandon(ctx)
		return err
	}
	return nil
}

// abandon stops the server after a failed start, even when ctx is what failed it (Ctrl-C
// during start). The start's error is what matters; a failure to stop is logged.
func (s *Server) abandon(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := s.stopServer(ctx); err != nil {
		fmt.Fprintf(s.log, "%v\n", err)
	}
}

// URL is the connection string of the database, over the unix socket, e.g.
// postgres://postgres@/logbook?host=%2Fhome%2Fada%2F.cache%2Flogbook%2Fpg&port=5433&sslmode=disable.
// pgx and libpq (psql) take it as is.
func (s *Server) URL() string { return s.url }

// Dir is the directory holding the cluster, the log and the socket.
func (s *Server) Dir() string { return s.dir }

// LogPath is the server's log file.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "server.log") }

// PID is the postmaster's process id.
func (s *Server) PID() int { return s.pid }

// Stop shuts the server down and returns when its postmaster process is gone; it then
// releases the directory. It runs even when ctx is already cancelled (it is cleanup): it
// keeps ctx's deadline if there is one, else gives up after 30 seconds. Calling it again
// returns nil.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(stopTimeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	err := s.stopServer(ctx)
	if cerr := s.lock.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("release %s: %w", s.lock.Name(), cerr)
	}
	if err == nil {
		fmt.Fprintf(s.log, "stopped PostgreSQL (data %s)\n", s.dataDir())
	}
	return err
}

// stopServer escalates from a fast shutdown (active sessions are ended, then a clean
// checkpoint) to an immediate one to SIGKILL, and returns nil once the postmaster is gone.
//
// It waits itself instead of pg_ctl's -w: pg_ctl takes a zombie for a live server, and the
// orphaned postmaster stays a zombie until PID 1 reaps it, which some inits do late.
func (s *Server) stopServer(ctx context.Context) error {
	pid := s.pid
	if pid == 0 {
		var err error
		if pid, err = readPID(s.dataDir()); err != nil {
			return nil // no pid file: nothing is running
		}
	}
	budget := time.Until(deadlineOf(ctx))
	out, err := s.run(ctx, s.bin.pgCtl(), "stop", "-D", s.dataDir(), "-m", "fast", "-W", "-s")
	if waitGone(ctx, pid, budget/2) {
		return nil
	}
	fmt.Fprintf(s.log, "fast shutdown did not finish (%v %s); shutting down immediately\n", err, strings.TrimSpace(string(out)))
	s.run(ctx, s.bin.pgCtl(), "stop", "-D", s.dataDir(), "-m", "immediate", "-W", "-s")
	if waitGone(ctx, pid, budget/4) {
		return nil
	}
	syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(ctx, pid, budget/4) {
		return fmt.Errorf("stop PostgreSQL in %s: had to kill postmaster %d", s.dataDir(), pid)
	}
	return fmt.Errorf("stop PostgreSQL in %s: postmaster %d is still running", s.dataDir(), pid)
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(stopTimeout)
}

// waitGone polls until the process is gone, for at most d or until ctx is done.
func waitGone(ctx context.Context, pid int, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if !alive(pid) {
			return true
		}
		select {
		case <-ctx.Done():
			return !alive(pid)
		case <-t.C:
		}
	}
}

// alive reports whether the process exists and is not a zombie. If it is our own exited
// child (we run as PID 1 in a container and inherited the orphaned postmaster) it is reaped.
func alive(pid int) bool {
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // ECHILD unless it is our child
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc (macOS): kill(0) said it exists
	}
	// "pid (comm) S ...": the state follows the last ')'.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *Server) socketPort() int { return cmp.Or(s.port, socketPort) }

// serverOptions are the postgres arguments pg_ctl passes through /bin/sh: unix socket in
// the private directory only.
func (s *Server) serverOptions() string {
	return strings.Join([]string{
		"-c", "listen_addresses=''",
		"-c", "port=" + strconv.Itoa(s.socketPort()),
		"-c", shellQuote(`unix_socket_directories="` + s.dir + `"`),
		"-c", "unix_socket_permissions=0700",
	}, " ")
}

// running asks pg_ctl status: exit 0 running, 3 not running.
func (s *Server) running(ctx context.Context) (bool, error) {
	out, err := s.run(ctx, s.bin.pgCtl(), "status", "-D", s.dataDir())
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		return false, nil
	default:
		return false, fmt.Errorf("pg_ctl status %s: %w\n%s", s.dataDir(), err, tail(out, 10))
	}
}

// run runs a PostgreSQL tool as the server's user, with messages in English, and returns
// its combined output.
func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	// On cancellation ask first (initdb removes what it made on SIGTERM), kill 5s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if s.as != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: s.as.uid, Gid: s.as.gid, Groups: []uint32{}}}
		cmd.Env = append(cmd.Env, "HOME="+s.dir, "USER="+s.as.name, "LOGNAME="+s.as.name)
	}
	return cmd.CombinedOutput()
}

// resolveDir applies the default and checks the socket path fits and that pg_ctl's shell
// command line can carry the path.
func resolveDir(dir string, root bool) (string, error) {
	if dir == "" {
		if root {
			dir = "/var/lib/logbook/pg"
		} else {
			c, err := os.UserCacheDir()
			if err != nil {
				return "", fmt.Errorf("find a directory for the local PostgreSQL: %w", err)
			}
			dir = filepath.Join(c, "logbook", "pg")
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("local PostgreSQL directory %q: %w", dir, err)
	}
	if i := strings.IndexFunc(dir, func(r rune) bool { return r < ' ' || strings.ContainsRune("\"$`\\", r) }); i >= 0 {
		return "", fmt.Errorf("local PostgreSQL directory %q: the character %q cannot be passed to pg_ctl; choose another directory", dir, dir[i])
	}
	if sock := filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(socketPort)); len(sock) > maxSocketPath {
		return "", fmt.Errorf("local PostgreSQL directory %s is too long for a unix socket path (%d bytes, at most %d): choose a shorter one", dir, len(sock), maxSocketPath)
	}
	return dir, nil
}

// takeDir makes s's directory its own: as root, the account the cluster runs as (user, default
// "logbook"); the directory prepared for it; the directory's lock, so no other process starts a
// cluster in it.
func (s *Server) takeDir(ctx context.Context, root bool, user string) error {
	var err error
	if root {
		if s.as, err = runAs(ctx, s.dataDir(), cmp.Or(user, "logbook"), s.log); err != nil {
			return err
		}
	}
	if err := s.prepareDir(root); err != nil {
		return err
	}
	s.lock, err = lockDir(s.dir)
	return err
}

// prepareDir creates the directory (mode 0700) and, for root, hands it to the server's
// user and checks that user can reach it.
func (s *Server) prepareDir(root bool) error {
	parentMode := os.FileMode(0o700)
	if root {
		parentMode = 0o755 // the server's user must pass through
	}
	if err := os.MkdirAll(filepath.Dir(s.dir), parentMode); err != nil {
		return fmt.Errorf("create local PostgreSQL directory: %w", err)
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create local PostgreSQL directory: %w", err)
	}
	if s.as == nil {
		return nil
	}
	if err := s.as.canReach(filepath.Dir(s.dir)); err != nil {
		return err
	}
	if err := chownTree(s.dir, s.as); err != nil {
		return err
	}
	return nil
}

// clusterMajor returns the major version in data/PG_VERSION, or 0 when there is no
// cluster yet. A non-empty directory without PG_VERSION is an error: initdb would refuse it.
func clusterMajor(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "PG_VERSION"))
	if err == nil {
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return 0, fmt.Errorf("read %s: not a version: %q", filepath.Join(data, "PG_VERSION"), b)
		}
		return v, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read cluster version: %w", err)
	}
	entries, err := os.ReadDir(data)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read cluster directory: %w", err)
	}
	if len(entries) > 0 {
		return 0, fmt.Errorf("%s is not empty but holds no PostgreSQL cluster (no PG_VERSION): move it away", data)
	}
	return 0, nil
}

// lockDir takes an exclusive flock on <dir>/logbook.lock, released by closing the file or
// by the process ending.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "logbook.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (is another `logbook dev` running?)", ErrInUse, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// readPID reads the postmaster's pid, the first line of data/postmaster.pid.
func readPID(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read postmaster pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("read postmaster pid: bad first line %q in %s", first, filepath.Join(data, "postmaster.pid"))
	}
	return pid, nil
}

func socketURL(dir string, port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     "",
		Path:     "/" + db,
		RawQuery: url.Values{"host": {dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}.Encode(),
	}
	return u.String()
}

// createDatabase creates db unless it exists.
func createDatabase(ctx context.Context, adminURL, db string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to local PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", db, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail returns the last n lines of out, for error messages.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := strings.Join(lines, "\n")
	if s != "" {
		s += "\n"
	}
	return s
}
