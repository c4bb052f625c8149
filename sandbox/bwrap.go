package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// insideWorkspace is where a bwrap sandbox's commands see their workspace.
const insideWorkspace = "/workspace"

const probeTimeout = 20 * time.Second

// newBwrap builds the bubblewrap provider and probes that bubblewrap really
// isolates on this machine.
func newBwrap(cfg Config, log zerolog.Logger) (Provider, error) {
	bwrap, err := lookPath(cfg.BwrapPath)
	if err != nil {
		return nil, fmt.Errorf("bwrap sandbox: bubblewrap not found (Debian package bubblewrap): %w", err)
	}
	p, err := newProvider(KindBwrap, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("bwrap sandbox: %w", err)
	}
	cfg = p.cfg
	p.limitProcesses = true
	mounts, err := readOnlyMounts(cfg.ReadOnlyPaths)
	if err != nil {
		return nil, fmt.Errorf("bwrap sandbox: %w", err)
	}
	uid, gid := p.sandboxIDs()
	if !slices.Contains(cfg.ReadOnlyPaths, "/etc") {
		etc, data, err := etcMounts(uid, gid, cfg.AllowNetwork)
		if err != nil {
			return nil, fmt.Errorf("bwrap sandbox: %w", err)
		}
		mounts = append(mounts, etc...)
		p.inputData = data
	}
	isolation := []string{
		"--unshare-user", "--uid", strconv.FormatUint(uint64(uid), 10), "--gid", strconv.FormatUint(uint64(gid), 10),
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--unshare-cgroup-try",
	}
	if !cfg.AllowNetwork {
		isolation = append(isolation, "--unshare-net")
	}
	// bwrap reads its mount arguments, host paths among them, from a pipe (--args): its argv is
	// what the sandbox's pid 1 shows in /proc/1/cmdline, and the host's layout (the base
	// directory, the user it lives under) is none of the sandbox's business.
	argsFD := strconv.Itoa(3 + len(p.inputData))
	build := func(hardening []string) func(ws, dir string, binds, inner []string) wrapped {
		var fixed []string
		fixed = append(fixed, isolation...)
		fixed = append(fixed, hardening...)
		// No --new-session: bwrap's init would then leave our process
		// group, and killing bwrap early in its setup (before init armed
		// --die-with-parent) could orphan the command. Instead Exec starts
		// bwrap with Setsid, a session without a controlling terminal, so
		// there is no TIOCSTI target and one group kill reaches everything.
		fixed = append(fixed, "--die-with-parent")
		fixed = append(fixed, mounts...)
		fixed = append(fixed, "--proc", "/proc", "--dev", "/dev",
			"--size", strconv.FormatInt(cfg.Limits.TmpBytes, 10), "--tmpfs", "/tmp")
		return func(ws, dir string, binds, inner []string) wrapped {
			var args bytes.Buffer
			for _, a := range slices.Concat(fixed, binds, []string{"--bind", ws, insideWorkspace}) {
				args.WriteString(a)
				args.WriteByte(0)
			}
			argv := make([]string, 0, 9+len(inner))
			argv = append(argv, bwrap, "--args", argsFD, "--remount-ro", "/",
				"--chdir", path.Join(insideWorkspace, dir), "--")
			return wrapped{argv: append(argv, inner...), dir: "/", input: args.Bytes()}
		}
	}
	p.inside = func(string) string { return insideWorkspace }

	// --disable-userns keeps sandboxed code from creating user namespaces of
	// its own (kernel attack surface). It is hardening, not the isolation
	// itself: without it the provider works, with a loud warning.
	p.wrap = build([]string{"--disable-userns"})
	probeErr := p.probe()
	if probeErr != nil {
		p.wrap = build(nil)
		if err := p.probe(); err != nil {
			return nil, fmt.Errorf("bwrap sandbox cannot isolate on this machine: %w%s", probeErr, diagnose(bwrap, p.cred))
		}
		log.Warn().Err(probeErr).Msg("bwrap sandbox DEGRADED: --disable-userns is not available, sandboxed code may create nested user namespaces")
	}
	if shown := p.shownToSandboxes(); shown != "" {
		log.Warn().Str("base_dir", cfg.BaseDir).Str("mountinfo_shows", shown).
			Msg("every sandbox can read this host path in /proc/self/mountinfo; to keep the host's layout from them, " +
				"put LOGBOOK_SANDBOX_DIR on a file system of its own (a volume or a tmpfs mounted there) or set LOGBOOK_SANDBOX_DISK (as root)")
	}
	log.Info().Str("bwrap", bwrap).Str("base_dir", cfg.BaseDir).Uint32("uid", uid).
		Bool("network", cfg.AllowNetwork).Str("memory_bound", p.memoryBound).Str("memory_bound_why", p.memoryWhy).
		Str("cgroup_parent", p.cgroupParent).Int64("memory_bytes", cfg.Limits.MemoryBytes).
		Msg("sandbox provider bwrap ready")
	return p, nil
}

// shownToSandboxes returns the host path a workspace's mount shows in the sandbox's
// /proc/self/mountinfo ("" when that is only the workspace's name): bwrap cannot hide a bind
// mount's path inside its file system.
func (p *provider) shownToSandboxes() string {
	if p.diskFS {
		return "" // each workspace is a file system of its own
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	base, err := filepath.EvalSymlinks(p.cfg.BaseDir)
	if err != nil {
		return ""
	}
	if shown := shownInMountinfo(info, base); shown != "/" {
		return path.Join(shown, "<workspace>")
	}
	return ""
}

// readOnlyMounts returns bwrap arguments mounting the host paths read-only,
// recreating symbolic links (e.g. /bin -> usr/bin) as links.
func readOnlyMounts(paths []string) ([]string, error) {
	var args []string
	for _, p := range paths {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("read-only path %q is not absolute", p)
		}
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("read-only path: %w", err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("read-only path: %w", err)
			}
			args = append(args, "--symlink", target, p)
		default:
			args = append(args, "--ro-bind", p, p)
		}
	}
	return args, nil
}

// probe runs one command the way Exec would, in a throwaway workspace.
func (p *provider) probe() error {
	ws, lock, err := p.newWorkspace(".probe-")
	if err != nil {
		return fmt.Errorf("create probe workspace: %w", err)
	}
	defer func() {
		_ = os.RemoveAll(ws)
		_ = lock.Close()
	}()
	if p.chownUID >= 0 {
		if err := os.Chown(ws, p.chownUID, p.chownGID); err != nil {
			return fmt.Errorf("chown probe workspace: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	w := p.wrap(ws, ".", nil, append(p.limitArgs(p.cfg.Limits.FileSizeBytes), "/bin/sh", "-c", "echo ok > probe && cat probe"))
	cmd := exec.CommandContext(ctx, w.argv[0], w.argv[1:]...)
	cmd.Dir = w.dir
	cmd.Env = p.cfg.environ(p.inside(ws))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: p.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := p.withInputs(cmd, w, cmd.Run); err != nil {
		return fmt.Errorf("probe: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if stdout.String() != "ok\n" {
		return fmt.Errorf("probe: unexpected output %q, stderr %q", stdout.String(), stderr.String())
	}
	return nil
}

// diagnose tries each namespace alone to name what this machine refuses.
func diagnose(bwrap string, cred *syscall.Credential) string {
	var failed []string
	for _, flag := range []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"} {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		cmd := exec.CommandContext(ctx, bwrap, "--ro-bind", "/", "/", flag, "--", "/bin/true")
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		err := cmd.Run()
		cancel()
		if err != nil {
			failed = append(failed, flag)
		}
	}
	if len(failed) == 0 {
		return " (every namespace works alone; check that the base dir and its parents are searchable by the sandbox user and that prlimit lies under a read-only path)"
	}
	return fmt.Sprintf(" (refused here: %s; check user.max_user_namespaces, kernel.unprivileged_userns_clone and the container's seccomp/AppArmor profile, or choose the process provider knowingly)",
		strings.Join(failed, " "))
}

// hostEtc are the parts of the host's /etc a bwrap sandbox sees, read-only,
// when present: what the dynamic loader, TLS clients (CA certificates),
// Debian's alternatives and the JVM's and Python's configuration need.
// Patterns are filepath.Glob patterns. Accounts, shadow files, host name,
// machine id, SSH and sudo configuration and the like stay out.
var hostEtc = []string{
	"/etc/alternatives",
	"/etc/ca-certificates",
	"/etc/ssl/certs",
	"/etc/ssl/openssl.cnf",
	"/etc/pki/tls/certs",
	"/etc/pki/ca-trust",
	"/etc/ld.so.cache",
	"/etc/ld.so.conf",
	"/etc/ld.so.conf.d",
	"/etc/localtime",
	"/etc/protocols",
	"/etc/services",
	"/etc/mime.types",
	"/etc/os-release",
	"/etc/gai.conf",
	"/etc/java-*",
	"/etc/python3*",
	"/etc/perl",
}

// etcMounts returns bwrap arguments building the sandbox's own /etc and
// the generated files they copy in from fds 3, 4, ... (in order): passwd and
// group naming only the sandbox user and nobody, hosts with localhost,
// nsswitch.conf reading files; then the hostEtc allowlist and, only with
// network, the host's resolv.conf. Nothing is written on the host.
func etcMounts(uid, gid uint32, network bool) ([]string, [][]byte, error) {
	generated := []struct{ name, data string }{
		{"passwd", fmt.Sprintf("sandbox:x:%d:%d:sandbox:%s:/bin/sh\nnobody:x:%d:%d:nobody:/nonexistent:/usr/sbin/nologin\n",
			uid, gid, insideWorkspace, nobody, nobody)},
		{"group", fmt.Sprintf("sandbox:x:%d:\nnogroup:x:%d:\n", gid, nobody)},
		{"hosts", "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
	args := []string{"--dir", "/etc"}
	var data [][]byte
	for i, g := range generated {
		args = append(args, "--perms", "0644", "--file", strconv.Itoa(3+i), "/etc/"+g.name)
		data = append(data, []byte(g.data))
	}
	var host []string
	for _, pattern := range hostEtc {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox /etc pattern %q: %w", pattern, err)
		}
		host = append(host, matches...)
	}
	if network {
		host = append(host, "/etc/resolv.conf")
	}
	for _, p := range host {
		if _, err := os.Stat(p); err != nil {
			continue // missing, or a dangling link
		}
		args = append(args, "--ro-bind", p, p)
	}
	return args, data, nil
}
