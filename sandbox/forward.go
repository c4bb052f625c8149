package sandbox

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ForwarderCommand, as the first argument, makes a binary that calls
// MaybeForward the in-sandbox forwarder.
const ForwarderCommand = "sandbox-forward"

// ProxyAddr is where the commands of a bwrap sandbox with Recipe.Egress
// reach it: HTTP_PROXY and HTTPS_PROXY are http://logbook:SECRET@ProxyAddr.
const ProxyAddr = "127.0.0.1:3128"

// Where a bwrap sandbox sees the egress socket and the forwarder.
const (
	insideSocket    = "/run/logbook/egress.sock"
	insideForwarder = "/run/logbook/forward"
)

// MaybeForward runs the forwarder and exits when args (os.Args) name
// ForwarderCommand; otherwise it returns at once. Call it first thing in
// main, and in the TestMain of tests whose bwrap sandboxes have an egress.
func MaybeForward(args []string) {
	if len(args) < 2 || args[1] != ForwarderCommand {
		return
	}
	os.Exit(forward(args[2:]))
}

// forward listens on args[0] (TCP, inside the command's own network
// namespace) and carries each connection to the Unix socket args[1]. Once
// listening it writes "ready" and closes its stdout: the shell that started
// it in the background goes on when it reads that (see egressPrefix).
func forward(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: logbook "+ForwarderCommand+" LISTEN-ADDR SOCKET")
		return 2
	}
	l, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: the network proxy cannot listen: %v\n", err)
		return 1
	}
	if _, err := os.Stdout.WriteString("ready\n"); err != nil {
		return 1
	}
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		_ = unix.Dup2(int(null.Fd()), 1)
		_ = null.Close()
	}
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 0
			}
			time.Sleep(50 * time.Millisecond) // out of descriptors, say: try again
			continue
		}
		go relay(c, args[1])
	}
}

func relay(c net.Conn, socket string) {
	defer c.Close()
	up, err := net.Dial("unix", socket)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nlogbook egress proxy unreachable\n")
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.(*net.UnixConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	_ = c.(*net.TCPConn).CloseWrite()
	<-done
}

// egressPrefix is the command line that starts the forwarder in the
// background, waits until it listens, then execs the rest of the line.
func egressPrefix() []string {
	script := `r=$("$0" ` + ForwarderCommand + ` ` + ProxyAddr + ` ` + insideSocket + ` &) && [ "$r" = ready ] || ` +
		`{ echo "sandbox: the network proxy did not start" >&2; exit 125; }; exec "$@"`
	return []string{"/bin/sh", "-c", script, insideForwarder}
}

// egressEnv are the variables that send a command's connections to the
// proxy at url; loopback stays direct (servers the command starts itself).
func egressEnv(url string) []string {
	env := []string{"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"}
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		env = append(env, name+"="+url)
	}
	return env
}

// withEnv returns env with the variables of extra set (replacing same-named ones).
func withEnv(env, extra []string) []string {
	out := make([]string, 0, len(env)+len(extra))
	names := map[string]bool{}
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		names[name] = true
	}
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); !names[name] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// forwarderBinary copies Config.Forwarder (or this executable) to BaseDir,
// readable by the sandbox user, once per provider (tried again after a
// failure).
func (p *provider) forwarderBinary() (string, error) {
	p.forwarderMu.Lock()
	defer p.forwarderMu.Unlock()
	if p.forwarderPath != "" {
		return p.forwarderPath, nil
	}
	p.forwarderErr = nil
	func() {
		src := p.cfg.Forwarder
		if src == "" {
			if src, p.forwarderErr = os.Executable(); p.forwarderErr != nil {
				return
			}
		}
		in, err := os.Open(src)
		if err != nil {
			p.forwarderErr = fmt.Errorf("sandbox forwarder: %w", err)
			return
		}
		defer in.Close()
		tmp, err := os.CreateTemp(p.cfg.BaseDir, ".forwarder-")
		if err != nil {
			p.forwarderErr = fmt.Errorf("sandbox forwarder: %w", err)
			return
		}
		_, err = io.Copy(tmp, in)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o755)
		}
		dst := filepath.Join(p.cfg.BaseDir, ".forwarder")
		if err == nil {
			err = os.Rename(tmp.Name(), dst)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			p.forwarderErr = fmt.Errorf("sandbox forwarder: %w", err)
			return
		}
		p.forwarderPath = dst
	}()
	return p.forwarderPath, p.forwarderErr
}

// runDir holds the egress sockets of this BaseDir's sandboxes.
func (p *provider) runDir() string { return filepath.Join(p.cfg.BaseDir, ".run") }

// listenEgress makes the sandbox's listener: a Unix socket under runDir for
// bwrap (owned by the sandbox user), a loopback port for the process
// provider. It returns the listener, the socket's path ("" for a port) and
// the address commands reach it at.
func (p *provider) listenEgress() (net.Listener, string, string, error) {
	if p.name != KindBwrap || p.cfg.AllowNetwork {
		// No network namespace of the sandbox's own: the host's loopback.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", "", fmt.Errorf("egress listener: %w", err)
		}
		return l, "", l.Addr().String(), nil
	}
	if err := os.MkdirAll(p.runDir(), 0o711); err != nil {
		return nil, "", "", fmt.Errorf("egress socket dir: %w", err)
	}
	var name [8]byte
	if _, err := rand.Read(name[:]); err != nil {
		return nil, "", "", err
	}
	sock := filepath.Join(p.runDir(), fmt.Sprintf("%x.sock", name))
	if len(sock) > 104 {
		return nil, "", "", fmt.Errorf("egress socket path %s is too long for a Unix socket; choose a shorter sandbox base dir", sock)
	}
	base, err := os.Open(p.cfg.BaseDir)
	if err != nil {
		return nil, "", "", fmt.Errorf("egress socket dir: %w", err)
	}
	defer base.Close() // releases the shared lock
	if err := flock(base, unix.LOCK_SH); err != nil {
		return nil, "", "", fmt.Errorf("lock base dir: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, "", "", fmt.Errorf("egress listener: %w", err)
	}
	if p.chownUID >= 0 {
		err = os.Chown(sock, p.chownUID, p.chownGID)
	}
	if err == nil {
		err = os.Chmod(sock, 0o600)
	}
	if err != nil {
		l.Close()
		return nil, "", "", fmt.Errorf("egress socket: %w", err)
	}
	return l, sock, ProxyAddr, nil
}

// sweepSockets removes sockets under runDir no process listens on, and
// copies of the forwarder a crash left half made. It holds BaseDir's
// exclusive lock: a socket is made (bound, then listening) under the shared
// one, so none is seen in between.
func (p *provider) sweepSockets() {
	if tmps, err := filepath.Glob(filepath.Join(p.cfg.BaseDir, ".forwarder-*")); err == nil {
		for _, t := range tmps {
			if fi, err := os.Stat(t); err == nil && time.Since(fi.ModTime()) > time.Minute {
				_ = os.Remove(t)
			}
		}
	}
	base, err := os.Open(p.cfg.BaseDir)
	if err != nil {
		return
	}
	defer base.Close()
	if err := flock(base, unix.LOCK_EX); err != nil {
		return
	}
	entries, err := os.ReadDir(p.runDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(p.runDir(), e.Name())
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(path)
		}
	}
}
