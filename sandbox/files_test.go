package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// promptly is how long a file operation on a special file may take: its
// context deadline plus slack for a busy machine.
const (
	fileDeadline = 2 * time.Second
	promptly     = fileDeadline + 3*time.Second
)

// returnsPromptly runs f and fails the test if it does not return in time.
// On a timeout it calls unwedge until f returns, so a failing test does not
// hang the whole suite.
func returnsPromptly(t *testing.T, what string, f func(), unwedge func()) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		f()
	}()
	timer := time.NewTimer(promptly)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	t.Errorf("%s still blocked after %s", what, time.Since(start).Round(time.Millisecond))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		unwedge()
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// unwedgeFIFO opens and closes both ends of a FIFO so an open blocked on it
// returns.
func unwedgeFIFO(path string) func() {
	return func() {
		if f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	}
}

func TestFileToolsRefuseFIFOWithoutBlocking(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, _ := mustProvider(t, kind, nil)
			sb := mustProvision(t, p, "fifo", Recipe{})
			// The sandboxed command plants the FIFO, as a model could.
			if res := mustExec(t, sb, ExecRequest{Shell: "mkfifo pipe && mkdir d && mkfifo d/pipe && ln -s pipe pipe-link"}); res.ExitCode != 0 {
				t.Fatalf("mkfifo: %+v", res)
			}
			ws := sb.(*sandbox).workspace
			fifo := filepath.Join(ws, "pipe")
			for _, name := range []string{"pipe", "d/pipe", "pipe-link"} {
				ctx, cancel := context.WithTimeout(context.Background(), fileDeadline)
				returnsPromptly(t, "ReadFile("+name+")", func() {
					if _, err := sb.ReadFile(ctx, name); !errors.Is(err, ErrNotRegular) {
						t.Errorf("ReadFile(%q) = %v, want ErrNotRegular", name, err)
					}
				}, unwedgeFIFO(filepath.Join(ws, name)))
				returnsPromptly(t, "WriteFile("+name+")", func() {
					if err := sb.WriteFile(ctx, name, []byte("x")); !errors.Is(err, ErrNotRegular) {
						t.Errorf("WriteFile(%q) = %v, want ErrNotRegular", name, err)
					}
				}, unwedgeFIFO(filepath.Join(ws, name)))
				cancel()
			}
			// A reader waiting on the FIFO must not make WriteFile succeed
			// (or block) either.
			reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatalf("open a reader of the FIFO: %v", err)
			}
			defer reader.Close()
			ctx, cancel := context.WithTimeout(context.Background(), fileDeadline)
			defer cancel()
			returnsPromptly(t, "WriteFile with a reader", func() {
				if err := sb.WriteFile(ctx, "pipe", []byte("x")); !errors.Is(err, ErrNotRegular) {
					t.Errorf("WriteFile(pipe) with a reader = %v, want ErrNotRegular", err)
				}
			}, unwedgeFIFO(fifo))

			// Regular files next to the FIFO still work.
			if err := sb.WriteFile(ctx, "d/ok.txt", []byte("fine")); err != nil {
				t.Errorf("WriteFile next to a FIFO: %v", err)
			}
			if got, err := sb.ReadFile(ctx, "d/ok.txt"); err != nil || string(got) != "fine" {
				t.Errorf("ReadFile next to a FIFO = %q, %v", got, err)
			}
		})
	}
}

func TestCloseIsPromptWithFIFOInWorkspace(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, _ := mustProvider(t, kind, nil)
			sb, err := p.Provision(context.Background(), "fifo-close", Recipe{})
			if err != nil {
				t.Fatal(err)
			}
			ws := sb.(*sandbox).workspace
			// Two FIFOs: a read and a write of one would unblock each other.
			mustExec(t, sb, ExecRequest{Shell: "mkfifo r w"})
			ctx, cancel := context.WithTimeout(context.Background(), fileDeadline)
			defer cancel()
			// A read and a write of the FIFO race with Close.
			ops := make(chan error, 2)
			go func() { _, err := sb.ReadFile(ctx, "r"); ops <- err }()
			go func() { ops <- sb.WriteFile(ctx, "w", []byte("x")) }()
			// Give them a moment to reach the FIFO (they may also finish, or
			// lose the race to Close: both are fine).
			var errs []error
			settle := time.NewTimer(time.Second)
			defer settle.Stop()
		wait:
			for len(errs) < 2 {
				select {
				case err := <-ops:
					errs = append(errs, err)
				case <-settle.C:
					break wait
				}
			}
			returnsPromptly(t, "Close", func() {
				if err := sb.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}, func() { unwedgeFIFO(filepath.Join(ws, "r"))(); unwedgeFIFO(filepath.Join(ws, "w"))() })
			for len(errs) < 2 {
				errs = append(errs, <-ops)
			}
			for _, err := range errs {
				if err == nil {
					t.Error("a file operation on a FIFO succeeded")
				}
			}
			if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("workspace still there after Close: %v", err)
			}
		})
	}
}

func TestFileToolsRefuseDevices(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root; the FIFO tests cover the non-blocking open")
	}
	p, _ := mustProvider(t, KindProcess, nil)
	sb := mustProvision(t, p, "dev", Recipe{})
	zero := filepath.Join(sb.(*sandbox).workspace, "zero")
	// /dev/zero's numbers: reading it would never end.
	if err := syscall.Mknod(zero, syscall.S_IFCHR|0o666, 1<<8|5); err != nil {
		t.Skipf("mknod refused here (%v); the FIFO tests cover the non-blocking open", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fileDeadline)
	defer cancel()
	if _, err := sb.ReadFile(ctx, "zero"); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "device") {
		t.Errorf("ReadFile of a device = %v, want ErrNotRegular naming a device", err)
	}
	if err := sb.WriteFile(ctx, "zero", []byte("x")); !errors.Is(err, ErrNotRegular) {
		t.Errorf("WriteFile of a device = %v, want ErrNotRegular", err)
	}
}

func TestFileToolsHonourContext(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindProcess, nil)
	sb := mustProvision(t, p, "ctx-files", Recipe{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sb.WriteFile(ctx, "f", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteFile with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := sb.ReadFile(ctx, "f"); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadFile with a cancelled context = %v, want context.Canceled", err)
	}
}
