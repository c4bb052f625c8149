package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sandbox is a bwrap or process sandbox: a workspace directory, a sentinel
// process whose life is the sandbox's, and the commands run in between.
type sandbox struct {
	p         *provider
	key       string
	workspace string // host path
	inside    string // the workspace's path as commands see it
	commit    string // the checked-out commit of Recipe.Repo, or ""
	env       []string

	// egress is Recipe.Egress, served on egressSock (bwrap; "" for a
	// loopback port); binds and prefix put the socket and the forwarder
	// into every command (nil without egress, or with the process provider).
	egress     Egress
	egressSock string
	egressDone chan error
	binds      []string
	prefix     []string

	sentinel     *exec.Cmd
	sentinelIn   io.WriteCloser
	sentinelDone chan struct{} // closed once the sentinel is reaped

	// lock holds the workspace's flock (see workspace.go) until Close.
	lock *os.File
	// cgroup is the sandbox's own cgroup, nil when memory is bounded by
	// RLIMIT_DATA alone; memoryBound says which.
	cgroup      *os.File
	memoryBound string

	mu     sync.Mutex
	gone   chan struct{} // closed when lost or closed; reason says why
	reason string
	used   int64          // the workspace's disk usage in bytes, as last measured
	ops    sync.WaitGroup // in-flight operations, added to only while not gone

	closeOnce sync.Once
	closeErr  error
}

var (
	errTimeout     = errors.New("exec timeout")
	errOutputLimit = errors.New("output limit")
	errGone        = errors.New("sandbox gone")
)

// waitDelay bounds how long Exec waits for output pipes after the command
// exits or is killed.
const waitDelay = time.Second

func (s *sandbox) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	timeout := s.p.cfg.Limits.Timeout
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	return s.run(ctx, req, timeout)
}

func (req ExecRequest) command() ([]string, error) {
	switch {
	case len(req.Argv) > 0 && req.Shell != "":
		return nil, errors.New("exec request sets both Argv and Shell")
	case req.Shell != "":
		if strings.ContainsRune(req.Shell, 0) {
			return nil, errors.New("exec request Shell contains a NUL byte")
		}
		return []string{"/bin/sh", "-c", req.Shell}, nil
	case len(req.Argv) > 0:
		if req.Argv[0] == "" {
			return nil, errors.New("exec request Argv[0] is empty")
		}
		for _, a := range req.Argv {
			if strings.ContainsRune(a, 0) {
				return nil, errors.New("exec request Argv contains a NUL byte")
			}
		}
		return req.Argv, nil
	default:
		return nil, errors.New("exec request sets neither Argv nor Shell")
	}
}

// run runs one command with the given timeout (not capped: recipe steps use
// it directly).
func (s *sandbox) run(ctx context.Context, req ExecRequest, timeout time.Duration) (ExecResult, error) {
	inner, err := req.command()
	if err != nil {
		return ExecResult{}, err
	}
	dir, err := s.local(req.Dir)
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec dir %q: %w", req.Dir, err)
	}
	if err := s.enter(); err != nil {
		return ExecResult{}, err
	}
	defer s.ops.Done()
	if err := s.checkDir(dir); err != nil {
		return ExecResult{}, fmt.Errorf("exec dir %q: %w", req.Dir, err)
	}
	line := append(append(append([]string(nil), s.prefix...), s.p.limitArgs(s.fileSizeLimit())...), inner...)
	return s.execute(ctx, command{line: line, dir: dir, binds: s.binds, env: s.env, stdin: req.Stdin, timeout: timeout})
}

// command is one process tree to run in the sandbox: its command line (limits included), its
// working directory (local to the workspace), extra bwrap mounts and its complete environment.
type command struct {
	line       []string
	dir        string
	binds, env []string
	stdin      []byte
	timeout    time.Duration
}

// execute runs c until it exits, its timeout, an output or disk limit, ctx's end, or the
// sandbox's loss (each kills the whole process tree), and reports what happened; the caller
// holds an operation (enter).
func (s *sandbox) execute(ctx context.Context, c command) (ExecResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-s.gone:
			cancel(errGone)
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel(nil)
		<-watched
	}()
	runCtx, cancelRun := context.WithTimeoutCause(ctx, c.timeout, errTimeout)
	defer cancelRun()
	w := s.p.wrap(s.workspace, c.dir, c.binds, c.line)
	inputs, err := s.p.inputs(w)
	if err != nil {
		return ExecResult{}, err
	}
	var g *gate
	if s.cgroup != nil && s.p.cgroupV1 {
		if g, err = newGate(len(inputs)); err != nil {
			closeAll(inputs)
			return ExecResult{}, err
		}
		inputs = append(inputs, g.r)
	}
	cmd, stdout, stderr := s.prepare(runCtx, c, w, g, func() { cancel(errOutputLimit) })
	cmd.ExtraFiles = inputs
	var oomBefore int64
	if s.cgroup != nil {
		oomBefore = oomKills(s.cgroup)
	}
	start := time.Now()
	err = cmd.Start()
	closeAll(inputs)
	if err == nil && g != nil {
		if err = g.admit(s.cgroup, cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			select {
			case <-s.gone:
				// Closed while the command waited at the gate: its cgroup (and so the gate's
				// reader) went with the sandbox, and the command never ran.
				return ExecResult{}, s.lostErr()
			default:
			}
			if ctx.Err() != nil {
				// The caller's end (or a limit) killed the command at the gate, and the
				// admission's write met a closed pipe: the end is the answer, as it is for a
				// command killed later (outcome).
				return ExecResult{}, fmt.Errorf("exec: %w", context.Cause(ctx))
			}
			return ExecResult{}, err
		}
	} else if g != nil {
		g.close()
	}
	if err == nil {
		err = cmd.Wait()
	}
	res := ExecResult{Duration: time.Since(start), ExitCode: -1, MemoryBound: s.memoryBound}
	var outCut, errCut bool
	res.Stdout, outCut = stdout.result()
	res.Stderr, errCut = stderr.result()
	res.Truncated = outCut || errCut
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	return s.outcome(ctx, runCtx, cmd, res, err, oomBefore)
}

// prepare builds the host command of c, as wrapped in w: behind g (cgroup v1; nil: none), a process group of
// its own the context's end kills whole, and stdout and stderr kept head and tail, over the
// output budget calling exceeded.
func (s *sandbox) prepare(ctx context.Context, c command, w wrapped, g *gate, exceeded func()) (*exec.Cmd, *headTail, *headTail) {
	argv, hostDir := w.argv, w.dir
	if g != nil {
		argv = g.wrap(argv) // outside bwrap: nothing runs before the move into the cgroup
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = hostDir
	cmd.Env = c.env
	cmd.SysProcAttr = s.sysProcAttr(syscall.SIGKILL)
	// Setsid made the command's first process a group leader: the group
	// holds bwrap, its init and every process not moved out by setsid, and
	// bwrap's death tears down its pid namespace with those too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	lim := s.p.cfg.Limits
	budget := &outputBudget{limit: lim.OutputKillBytes, exceeded: exceeded}
	stdout, stderr := newHeadTail(lim.OutputBytes, budget), newHeadTail(lim.OutputBytes, budget)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if c.stdin != nil {
		cmd.Stdin = bytes.NewReader(c.stdin)
	}
	return cmd, stdout, stderr
}

// outcome says why the command ended (its own exit, or which limit killed it) and measures
// the workspace against its disk quota.
func (s *sandbox) outcome(ctx, runCtx context.Context, cmd *exec.Cmd, res ExecResult, err error, oomBefore int64) (ExecResult, error) {
	switch cause := context.Cause(runCtx); {
	case runCtx.Err() == nil:
	case errors.Is(cause, errTimeout):
		res.TimedOut, res.Killed = true, "timeout"
	case errors.Is(cause, errOutputLimit):
		res.Killed, res.Truncated = "output limit", true
	case errors.Is(cause, errGone):
		return res, s.lostErr()
	default:
		return res, fmt.Errorf("exec: %w", cause)
	}
	if cmd.ProcessState == nil {
		return res, fmt.Errorf("start command: %w", err)
	}
	if res.Killed == "" && killedByCPULimit(cmd.ProcessState) {
		res.Killed = "cpu limit"
	}
	if res.Killed == "" && s.cgroup != nil && oomKills(s.cgroup) > oomBefore {
		res.Killed = "memory limit"
	}
	select {
	case <-s.gone:
		return res, s.lostErr()
	default:
	}
	if s.diskFull() {
		res.DiskQuotaStopped = true
		res.Stderr += quotaNote(s.p.cfg.DiskQuota)
	}
	if over := s.measure(ctx); over > 0 {
		res.DiskOverQuota = over
		res.Stderr += fmt.Sprintf("\n[sandbox: the workspace is %d bytes over its disk quota of %d bytes; files cannot grow until some are removed]\n",
			over, s.p.cfg.DiskQuota)
	}
	return res, nil
}

// killedByCPULimit tells whether a command died of SIGXCPU, which only the
// soft RLIMIT_CPU sends. Through bwrap a signal death shows as exit 128+n.
func killedByCPULimit(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return false
	}
	return ws.Signaled() && ws.Signal() == syscall.SIGXCPU ||
		ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGXCPU)
}

// enter registers an operation, or returns ErrLost when the sandbox is gone.
func (s *sandbox) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gone:
		return fmt.Errorf("%w: %s", ErrLost, s.reason)
	default:
	}
	s.ops.Add(1)
	return nil
}

func (s *sandbox) lostErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("%w: %s", ErrLost, s.reason)
}

// markGone records why the sandbox is gone; it reports whether this call was
// the first, and only the first reason is kept.
func (s *sandbox) markGone(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gone:
		return false
	default:
	}
	s.reason = reason
	close(s.gone)
	return true
}

// lose marks the sandbox lost for reason and kills what is left of it.
func (s *sandbox) lose(reason string) {
	if s.markGone(reason) {
		s.p.log.Warn().Str("key", s.key).Str("workspace", s.workspace).Str("reason", reason).Msg("sandbox lost")
	}
	_ = s.sentinel.Process.Kill() // os.Process is safe after the process was reaped
}

func (s *sandbox) Alive(ctx context.Context) error {
	select {
	case <-s.gone:
		return s.lostErr()
	default:
	}
	if fi, err := os.Stat(s.workspace); err != nil || !fi.IsDir() {
		s.lose("workspace directory is gone")
		return s.lostErr()
	}
	return nil
}

func (s *sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.markGone("closed")
		_ = s.sentinel.Process.Kill()
		_ = s.sentinelIn.Close()
		<-s.sentinelDone
		s.ops.Wait()
		s.closeEgress()
		s.closeErr = removeWorkspace(s.workspace)
		removeGitDirs(s.p.cfg.BaseDir, s.workspace)
		if s.cgroup != nil {
			removeCgroup(s.cgroup)
		}
		_ = s.lock.Close() // only now may a sweep take the directory
		s.p.log.Debug().Str("key", s.key).Str("workspace", s.workspace).Msg("sandbox closed")
	})
	return s.closeErr
}

// startEgress serves e on a new listener and sets up what commands need to
// reach it; it returns the URL the checkout's origin is reached at.
func (s *sandbox) startEgress(e Egress) (string, error) {
	var fwd string
	if s.p.name == KindBwrap && !s.p.cfg.AllowNetwork {
		var err error
		if fwd, err = s.p.forwarderBinary(); err != nil {
			return "", err
		}
	}
	l, sock, addr, err := s.p.listenEgress()
	if err != nil {
		return "", err
	}
	s.egress, s.egressSock, s.egressDone = e, sock, make(chan error, 1)
	go func() { s.egressDone <- e.Serve(l) }()
	if sock != "" {
		s.binds = []string{"--ro-bind", fwd, insideForwarder, "--bind", sock, insideSocket}
		s.prefix = egressPrefix()
	}
	s.env = withEnv(s.env, egressEnv("http://logbook:"+e.Secret()+"@"+addr))
	return "http://" + addr + e.GitPath(), nil
}

// closeEgress closes the egress, waits for it and removes its socket.
func (s *sandbox) closeEgress() {
	if s.egress == nil {
		return
	}
	if err := s.egress.Close(); err != nil {
		s.p.log.Warn().Err(err).Str("key", s.key).Msg("close sandbox egress")
	}
	if err := <-s.egressDone; err != nil {
		s.p.log.Warn().Err(err).Str("key", s.key).Msg("sandbox egress stopped")
	}
	if s.egressSock != "" {
		_ = os.Remove(s.egressSock)
	}
	s.egress = nil
}

// local turns a path given by a caller (relative to the workspace, or
// absolute under the workspace as commands see it) into a clean local
// slash-separated path, "." for the workspace itself.
func (s *sandbox) local(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.ContainsRune(p, 0) {
		return "", ErrOutsideWorkspace
	}
	if path.IsAbs(p) {
		c := path.Clean(p)
		if c == s.inside {
			return ".", nil
		}
		rel, ok := strings.CutPrefix(c, s.inside+"/")
		if !ok {
			return "", ErrOutsideWorkspace
		}
		p = rel
	}
	c := path.Clean(p)
	if !filepath.IsLocal(c) {
		return "", ErrOutsideWorkspace
	}
	return c, nil
}

// openRoot opens the workspace as an os.Root, which refuses any path that
// leaves it, symbolic links included.
func (s *sandbox) openRoot() (*os.Root, error) {
	r, err := os.OpenRoot(s.workspace)
	if err != nil {
		s.lose("workspace directory is gone")
		return nil, s.lostErr()
	}
	return r, nil
}

// pathErr translates os.Root's escape error to ErrOutsideWorkspace.
func (s *sandbox) pathErr(err error) error {
	if s.p.escapeErr != nil && errors.Is(err, s.p.escapeErr) {
		return ErrOutsideWorkspace
	}
	return err
}

func (s *sandbox) checkDir(dir string) error {
	if dir == "." {
		return nil
	}
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Stat(dir)
	if err != nil {
		return s.pathErr(err)
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}
