package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// StartRequest is a long-running process for Starter.Start: Argv run in Dir (relative to the
// workspace; "" for the workspace itself), with Env (NAME=value entries) added to the
// sandbox's environment for this process only.
type StartRequest struct {
	Argv []string
	Env  []string
	Dir  string
}

// Starter is a sandbox that can run a long-lived process talked to over its stdin and stdout
// (a local MCP server): the bwrap and process sandboxes are Starters.
type Starter interface {
	Start(ctx context.Context, req StartRequest) (*Process, error)
}

// Process is a process started in a sandbox with Start. It runs until it exits, Close, or the
// sandbox is lost or closed (which kill it); it has the limits of a command but no wall-clock
// timeout and no output cap on Stdout, which is the caller's to read.
type Process struct {
	// Stdin is the process's standard input, Stdout its standard output. Closing Stdin ends
	// its input; Close closes both.
	Stdin  io.WriteCloser
	Stdout io.ReadCloser

	cmd     *exec.Cmd
	stderr  *tailBuffer
	done    chan struct{} // closed once the process is reaped
	err     error         // why it ended, after done
	watched chan struct{}
	stop    chan struct{}
	once    sync.Once
}

// Start runs req in the sandbox as a process of its own (see Process). Errors: ErrLost when
// the sandbox is gone, ErrOutsideWorkspace for a bad Dir, ctx's error when ctx ends first.
// ctx bounds the start only, not the process's life.
func (s *sandbox) Start(ctx context.Context, req StartRequest) (*Process, error) {
	inner, err := ExecRequest{Argv: req.Argv}.command()
	if err != nil {
		return nil, err
	}
	for _, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return nil, fmt.Errorf("start: environment entry %q is not NAME=value", k)
		}
	}
	dir, err := s.local(req.Dir)
	if err != nil {
		return nil, fmt.Errorf("start dir %q: %w", req.Dir, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	p, err := s.startProcess(dir, req.Env, inner)
	if err != nil {
		s.ops.Done()
		return nil, err
	}
	return p, nil
}

// startProcess starts the process; the caller holds an operation, which the process's
// waiter gives back once it is reaped.
func (s *sandbox) startProcess(dir string, env, inner []string) (*Process, error) {
	line := append(append(append([]string(nil), s.prefix...), s.p.limitArgs(s.fileSizeLimit())...), inner...)
	w := s.p.wrap(s.workspace, dir, s.binds, line)
	argv, hostDir := w.argv, w.dir
	inputs, err := s.p.inputs(w)
	if err != nil {
		return nil, err
	}
	var g *gate
	if s.cgroup != nil && s.p.cgroupV1 {
		if g, err = newGate(len(inputs)); err != nil {
			closeAll(inputs)
			return nil, err
		}
		inputs = append(inputs, g.r)
		argv = g.wrap(argv)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		closeAll(inputs)
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(append(inputs, inR, inW))
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = hostDir
	cmd.Env = withEnv(s.env, env)
	cmd.SysProcAttr = s.sysProcAttr(syscall.SIGKILL)
	cmd.ExtraFiles = inputs
	cmd.Stdin, cmd.Stdout = inR, outW
	p := &Process{Stdin: inW, Stdout: outR, cmd: cmd, stderr: &tailBuffer{max: 8 << 10},
		done: make(chan struct{}), watched: make(chan struct{}), stop: make(chan struct{})}
	cmd.Stderr = p.stderr
	err = cmd.Start()
	closeAll(append(inputs, inR, outW))
	if err == nil && g != nil {
		if err = g.admit(s.cgroup, cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	} else if g != nil {
		g.close()
	}
	if err != nil {
		_ = inW.Close()
		_ = outR.Close()
		return nil, fmt.Errorf("start process: %w", err)
	}
	go p.watch(s.gone)
	go func() {
		defer s.ops.Done()
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// watch kills the process group when the sandbox goes or Close asks.
func (p *Process) watch(gone <-chan struct{}) {
	defer close(p.watched)
	select {
	case <-gone:
	case <-p.stop:
	case <-p.done:
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is why the process ended (nil for exit 0), once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stderr is the last 8 KiB the process wrote to its standard error.
func (p *Process) Stderr() string { return p.stderr.String() }

// Close kills the process (its whole group) and waits for it; it is idempotent.
func (p *Process) Close() error {
	p.once.Do(func() {
		close(p.stop)
		_ = p.Stdin.Close()
		<-p.done
		<-p.watched
		_ = p.Stdout.Close()
	})
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return p.err
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
