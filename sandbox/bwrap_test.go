package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBwrapExecReturnsOutput(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "C1/1700000000.000100", Recipe{})

	res := mustExec(t, sb, ExecRequest{Shell: "echo hello; echo oops >&2; exit 3"})
	if res.Stdout != "hello\n" || res.Stderr != "oops\n" || res.ExitCode != 3 {
		t.Errorf("got stdout %q stderr %q exit %d, want hello/oops/3", res.Stdout, res.Stderr, res.ExitCode)
	}
	if res.Truncated || res.TimedOut || res.Killed != "" || res.Duration <= 0 {
		t.Errorf("unexpected flags: %+v", res)
	}

	res = mustExec(t, sb, ExecRequest{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("from stdin")})
	if res.Stdout != "FROM STDIN" || res.ExitCode != 0 {
		t.Errorf("argv with stdin: %+v", res)
	}

	if err := sb.WriteFile(context.Background(), "sub/dir/in.txt", []byte("written by the host\n")); err != nil {
		t.Fatal(err)
	}
	res = mustExec(t, sb, ExecRequest{Shell: "pwd; cat in.txt; echo appended >> in.txt; echo new > made.txt", Dir: "sub/dir"})
	if res.Stdout != "/workspace/sub/dir\nwritten by the host\n" || res.ExitCode != 0 {
		t.Errorf("dir exec: %+v", res)
	}
	got, err := sb.ReadFile(context.Background(), "/workspace/sub/dir/in.txt")
	if err != nil || string(got) != "written by the host\nappended\n" {
		t.Errorf("ReadFile after append = %q, %v", got, err)
	}
	got, err = sb.ReadFile(context.Background(), "sub/dir/made.txt")
	if err != nil || string(got) != "new\n" {
		t.Errorf("ReadFile of a file the command made = %q, %v", got, err)
	}
}

func TestBwrapEnvironmentHoldsNoBotSecrets(t *testing.T) {
	// Not parallel: t.Setenv.
	const secret = "xoxb-fake-secret-4f1c9e"
	t.Setenv("SLACK_BOT_TOKEN", secret)
	t.Setenv("DATABASE_URL", "postgres://postgres:"+secret+"@127.0.0.1:5432/logbook")
	if !strings.Contains(os.Getenv("DATABASE_URL"), secret) {
		t.Fatal("the test process itself should hold the secret")
	}
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "env", Recipe{})

	res := mustExec(t, sb, ExecRequest{Shell: "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done"})
	if strings.Contains(res.Stdout+res.Stderr, secret) {
		t.Fatalf("the secret reached the sandbox:\n%s", res.Stdout)
	}
	for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8", "TZ=UTC"} {
		if !strings.Contains(res.Stdout, want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, res.Stdout)
		}
	}
	if strings.Contains(res.Stdout, "SLACK_BOT_TOKEN") || strings.Contains(res.Stdout, "DATABASE_URL") {
		t.Errorf("bot variable names reached the sandbox:\n%s", res.Stdout)
	}
}

func TestBwrapCannotReadOutsideWorkspace(t *testing.T) {
	t.Parallel()
	// A world-readable file in a world-searchable directory: only the mount
	// namespace can keep the sandbox from it.
	dir := searchableTempDir(t)
	secretPath := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secretPath, []byte("host secret 7d2a"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "cat " + secretPath + "; ls " + dir + "; ls /root /home /work /var 2>&1; cat /etc/shadow"

	// Control: the non-isolating provider does read it, so the probe works.
	pp, _ := mustProvider(t, KindProcess, nil)
	control := mustExec(t, mustProvision(t, pp, "control", Recipe{}), ExecRequest{Shell: script})
	if !strings.Contains(control.Stdout, "host secret 7d2a") {
		t.Fatalf("control: the process provider should read the file: %+v", control)
	}

	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "reader", Recipe{})
	res := mustExec(t, sb, ExecRequest{Shell: script})
	if strings.Contains(res.Stdout, "host secret") || strings.Contains(res.Stdout, "secret.txt") {
		t.Fatalf("sandbox read outside its workspace: %+v", res)
	}
	if !strings.Contains(res.Stderr, "No such file or directory") {
		t.Errorf("expected the host file to be absent in the sandbox: %+v", res)
	}
}

func TestBwrapCannotWriteOutsideWorkspace(t *testing.T) {
	t.Parallel()
	hostDir := searchableTempDir(t)
	if err := os.Chmod(hostDir, 0o777); err != nil { // permissions would allow it
		t.Fatal(err)
	}
	tmpName := fmt.Sprintf("logbook-sandbox-escape-%d", time.Now().UnixNano())
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "writer", Recipe{})

	// The host dir does not exist in the sandbox; creating it there lands in
	// the sandbox's private /tmp or read-only root, never on the host.
	mustExec(t, sb, ExecRequest{Argv: []string{"sh", "-c", "mkdir -p \"$1\"; echo x > \"$1/escaped\"", "sh", hostDir}})
	for _, target := range []string{"/usr/escaped", "/etc/escaped", "/escaped", "/workspace/../escaped"} {
		res := mustExec(t, sb, ExecRequest{Argv: []string{"sh", "-c", "echo x > \"$1\"", "sh", target}})
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Read-only file system") && !strings.Contains(res.Stderr, "ermission denied") {
			t.Errorf("writing %s: want a read-only or permission error: %+v", target, res)
		}
	}
	// /tmp is writable but private.
	res := mustExec(t, sb, ExecRequest{Shell: "echo x > /tmp/" + tmpName + " && cat /tmp/" + tmpName})
	if res.ExitCode != 0 || res.Stdout != "x\n" {
		t.Errorf("private /tmp not writable: %+v", res)
	}
	for _, host := range []string{filepath.Join(hostDir, "escaped"), "/usr/escaped", "/etc/escaped", "/escaped", filepath.Join(os.TempDir(), tmpName)} {
		if _, err := os.Lstat(host); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host path %s exists after the sandbox wrote to it (err %v)", host, err)
		}
	}
}

func TestBwrapNetworkOffByDefault(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("this test connects with bash's /dev/tcp: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	targets := []string{ln.Addr().String()}
	if c, err := net.Dial("tcp", "127.0.0.1:5432"); err == nil { // Postgres, when it runs here
		c.Close()
		targets = append(targets, "127.0.0.1:5432")
	}
	connect := func(addr string) ExecRequest {
		host, port, _ := net.SplitHostPort(addr)
		return ExecRequest{Argv: []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && echo connected", host, port)}}
	}

	off, _ := mustProvider(t, KindBwrap, nil)
	sbOff := mustProvision(t, off, "offline", Recipe{})
	on, _ := mustProvider(t, KindBwrap, func(c *Config) { c.AllowNetwork = true })
	sbOn := mustProvision(t, on, "online", Recipe{})
	for _, addr := range targets {
		if res := mustExec(t, sbOff, connect(addr)); res.ExitCode == 0 || strings.Contains(res.Stdout, "connected") {
			t.Errorf("connected to %s with networking off: %+v", addr, res)
		}
		// Control: with AllowNetwork the same probe connects.
		if res := mustExec(t, sbOn, connect(addr)); res.ExitCode != 0 || res.Stdout != "connected\n" {
			t.Errorf("could not connect to %s with networking on: %+v", addr, res)
		}
	}
}

func TestBwrapLimits(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, func(c *Config) {
		c.Limits.Processes = 16
		c.Limits.CPUSeconds = 1
		c.Limits.FileSizeBytes = 4096
		c.Limits.MemoryBytes = 64 << 20
		c.Limits.OutputBytes = 1024
		c.Limits.OutputKillBytes = 64 << 10
		c.Limits.Timeout = 2 * time.Second
	})

	t.Run("sleep", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "sleep", Recipe{})
		res := mustExec(t, sb, ExecRequest{Argv: []string{"sleep", sleepArg(4242)}, Timeout: 500 * time.Millisecond})
		if !res.TimedOut || res.Killed != "timeout" || res.ExitCode != -1 {
			t.Errorf("sleep 1000 not reported as timed out: %+v", res)
		}
		if left := hostProcessesWith(t, sleepArg(4242)); len(left) > 0 {
			t.Errorf("processes survived the timeout: %v", left)
		}
		if res := mustExec(t, sb, ExecRequest{Shell: "echo still usable"}); res.Stdout != "still usable\n" {
			t.Errorf("sandbox unusable after a timeout: %+v", res)
		}
	})

	t.Run("timeout capped by limit", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "cap", Recipe{})
		res := mustExec(t, sb, ExecRequest{Argv: []string{"sleep", sleepArg(4343)}, Timeout: time.Hour})
		if !res.TimedOut || res.Killed != "timeout" {
			t.Errorf("an hour-long request timeout was not capped by Limits.Timeout: %+v", res)
		}
	})

	t.Run("endless output", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "yes", Recipe{})
		res := mustExec(t, sb, ExecRequest{Argv: []string{"yes", "endless-4444"}})
		if res.Killed != "output limit" || !res.Truncated || res.TimedOut {
			t.Errorf("endless output not stopped by the output limit: killed %q truncated %v timedout %v", res.Killed, res.Truncated, res.TimedOut)
		}
		if len(res.Stdout) > 1024+64 || !strings.Contains(res.Stdout, " bytes cut ...]") ||
			!strings.HasPrefix(res.Stdout, "endless-4444\n") || !strings.HasSuffix(strings.TrimRight(res.Stdout, "endls-4\n"), "]") {
			t.Errorf("stdout not head+marker+tail within 1024 bytes (len %d): %q", len(res.Stdout), res.Stdout)
		}
		if left := hostProcessesWith(t, "endless-4444"); len(left) > 0 {
			t.Errorf("processes survived the output limit: %v", left)
		}
	})

	t.Run("fork bomb", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "bomb", Recipe{})
		token := uniq("forkbomb-5555")
		res := mustExec(t, sb, ExecRequest{
			// exec: the waiting sleep needs no fork the bomb could starve.
			Argv: []string{"sh", "-c", "bomb() { bomb | bomb & }; bomb; exec sleep 1000", token},
		})
		if !strings.Contains(res.Stderr, "fork") {
			t.Errorf("the process limit never refused a fork: %+v", res)
		}
		if !res.TimedOut || res.Killed != "timeout" {
			t.Errorf("fork bomb not stopped by the timeout: %+v", res)
		}
		if left := hostProcessesWith(t, token); len(left) > 0 {
			t.Errorf("fork bomb processes survived: %d, e.g. %s", len(left), left[0])
		}
		if res := mustExec(t, sb, ExecRequest{Shell: "echo still usable"}); res.Stdout != "still usable\n" {
			t.Errorf("sandbox unusable after a fork bomb: %+v", res)
		}
	})

	t.Run("process limit", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "nproc", Recipe{})
		res := mustExec(t, sb, ExecRequest{Shell: "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo started $i"})
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "fork") {
			t.Errorf("40 background processes started under a limit of 16: %+v", res)
		}
	})

	t.Run("cpu", func(t *testing.T) {
		t.Parallel()
		// Its own provider: on a busy machine one CPU second can take longer
		// than the short timeout above.
		cpuP, _ := mustProvider(t, KindBwrap, func(c *Config) {
			c.Limits.CPUSeconds = 1
			c.Limits.Timeout = time.Minute
		})
		sb := mustProvision(t, cpuP, "cpu", Recipe{})
		res := mustExec(t, sb, ExecRequest{Shell: "while :; do :; done"})
		if res.Killed != "cpu limit" || res.TimedOut || res.ExitCode == 0 {
			t.Errorf("busy loop not killed by the CPU limit: %+v", res)
		}
	})

	t.Run("file size", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "fsize", Recipe{})
		res := mustExec(t, sb, ExecRequest{Shell: "head -c 100000 /dev/zero > big"})
		if res.ExitCode == 0 {
			t.Errorf("wrote 100000 bytes under a 4096-byte limit: %+v", res)
		}
		got, err := sb.ReadFile(context.Background(), "big")
		if err != nil || len(got) > 4096 {
			t.Errorf("big file: %d bytes, %v", len(got), err)
		}
	})

	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "mem", Recipe{})
		res := mustExec(t, sb, ExecRequest{Argv: []string{"awk", "BEGIN { s = sprintf(\"%200000000s\", \"\"); print length(s) }"}})
		if res.ExitCode == 0 || strings.Contains(res.Stdout, "200000000") {
			t.Errorf("allocated 200 MB under a 64 MiB limit: %+v", res)
		}
	})
}

func TestBwrapLostSandboxIsReprovisionedFromRecipe(t *testing.T) {
	t.Parallel()
	p, logs := mustProvider(t, KindBwrap, nil)
	recipe := Recipe{Steps: []Step{
		{Name: "marker", Run: "echo provisioned > marker && mkdir -p tools"},
		{Name: "listing", Run: "ls > listing"},
	}}
	sb := mustProvision(t, p, "lost", recipe)
	if got, err := sb.ReadFile(context.Background(), "marker"); err != nil || string(got) != "provisioned\n" {
		t.Fatalf("recipe marker = %q, %v", got, err)
	}
	if err := sb.Alive(context.Background()); err != nil {
		t.Fatalf("fresh sandbox not alive: %v", err)
	}
	if err := sb.WriteFile(context.Background(), "leftover", []byte("from the lost sandbox")); err != nil {
		t.Fatal(err)
	}

	// A command is running when the sandbox's processes are killed from
	// outside.
	running := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), ExecRequest{Argv: []string{"sleep", sleepArg(6666)}})
		running <- err
	}()
	waitFor(t, func() bool { return len(hostProcessesWith(t, sleepArg(6666))) > 0 })
	killSandboxFromOutside(t, sb)

	if err := <-running; !errors.Is(err, ErrLost) {
		t.Errorf("running Exec returned %v, want ErrLost", err)
	}
	if err := sb.Alive(context.Background()); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "sentinel") {
		t.Errorf("Alive = %v, want ErrLost naming the sentinel", err)
	}
	if _, err := sb.Exec(context.Background(), ExecRequest{Shell: "true"}); !errors.Is(err, ErrLost) {
		t.Errorf("Exec after loss = %v, want ErrLost", err)
	}
	if _, err := sb.ReadFile(context.Background(), "marker"); !errors.Is(err, ErrLost) {
		t.Errorf("ReadFile after loss = %v, want ErrLost", err)
	}
	if left := hostProcessesWith(t, sleepArg(6666)); len(left) > 0 {
		t.Errorf("processes survived the loss: %v", left)
	}
	if !strings.Contains(logs.String(), "sandbox lost") {
		t.Errorf("loss not logged: %s", logs.String())
	}

	fresh := mustProvision(t, p, "lost", recipe)
	if got, err := fresh.ReadFile(context.Background(), "marker"); err != nil || string(got) != "provisioned\n" {
		t.Fatalf("the recipe did not run again: %q, %v", got, err)
	}
	if got, err := fresh.ReadFile(context.Background(), "listing"); err != nil || string(got) != "listing\nmarker\ntools\n" {
		t.Errorf("fresh workspace should hold only the recipe's files, listing = %q, %v", got, err)
	}
	if _, err := fresh.ReadFile(context.Background(), "leftover"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fresh workspace holds a file of the lost one: %v", err)
	}
	if fresh.(*sandbox).workspace == sb.(*sandbox).workspace {
		t.Error("re-provisioned sandbox reuses the lost workspace")
	}
}

func TestBwrapWorkspaceRemovedIsLost(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, nil)
	sb := mustProvision(t, p, "rm", Recipe{})
	if err := os.RemoveAll(sb.(*sandbox).workspace); err != nil {
		t.Fatal(err)
	}
	if err := sb.Alive(context.Background()); !errors.Is(err, ErrLost) {
		t.Errorf("Alive after the workspace was removed = %v, want ErrLost", err)
	}
}

func TestBwrapSessionsCannotSeeEachOther(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, nil)
	a := mustProvision(t, p, "session-a", Recipe{})
	b := mustProvision(t, p, "session-b", Recipe{})
	mustExec(t, a, ExecRequest{Shell: "echo private-to-a > secret"})
	aHost := a.(*sandbox).workspace

	res := mustExec(t, b, ExecRequest{Shell: "ls -a /workspace; cat " + filepath.Join(aHost, "secret") + "; ls " + filepath.Dir(aHost)})
	if strings.Contains(res.Stdout, "private-to-a") || strings.Contains(res.Stdout, "secret") || strings.Contains(res.Stdout, filepath.Base(aHost)) {
		t.Errorf("session b sees session a's files: %+v", res)
	}
	rel, err := filepath.Rel(b.(*sandbox).workspace, filepath.Join(aHost, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadFile(context.Background(), rel); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("b.ReadFile(%q) = %v, want ErrOutsideWorkspace", rel, err)
	}
	if got, err := a.ReadFile(context.Background(), "secret"); err != nil || string(got) != "private-to-a\n" {
		t.Errorf("a's own file = %q, %v", got, err)
	}
}

// killSandboxFromOutside SIGKILLs the sandbox's sentinel the way an operator
// or the OOM killer would, and waits until the sandbox noticed.
func killSandboxFromOutside(t *testing.T, sb Sandbox) {
	t.Helper()
	s := sb.(*sandbox)
	if err := syscall.Kill(-s.sentinel.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sentinel: %v", err)
	}
	select {
	case <-s.sentinelDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox did not notice its sentinel died")
	}
}

// waitFor polls cond until it holds; it fails the test after 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The tests find their processes on the host by a marker in the command line; the markers
// carry this test process's pid, so two suites running at once never see each other's.
func uniq(s string) string { return fmt.Sprintf("%s-%d", s, os.Getpid()) }

// sleepArg is a sleep duration of about 1000 s that is unique to this test process and n.
func sleepArg(n int) string { return fmt.Sprintf("1000.%d%d", n, os.Getpid()) }

// The sandbox learns nothing of the host's layout from its processes: bwrap's own argv (pid 1,
// its init, shows it in /proc/1/cmdline) names the base directory in its mounts, so bwrap
// reads those from a pipe. /proc/self/mountinfo still shows a bind mount's path inside its file
// system: on a base directory that is a file system of its own (a volume, LOGBOOK_SANDBOX_DISK)
// that path is just the workspace's name — TestBwrapMountinfoOnAFileSystemOfItsOwn.
func TestBwrapProcessesDoNotNameTheBaseDir(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, nil)
	base := p.(*provider).cfg.BaseDir
	sb := mustProvision(t, p, "C1/1700000000.000200", Recipe{})
	res := mustExec(t, sb, ExecRequest{Shell: "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"})
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "--chdir /workspace") {
		t.Fatalf("the sandbox's command lines are not what this test reads: %+v", res)
	}
	for _, leak := range []string{base, filepath.Dir(base)} {
		if strings.Contains(res.Stdout, leak) {
			t.Errorf("a sandbox process's command line names the host's %s:\n%s", leak, res.Stdout)
		}
	}
	// The same holds for the long-lived processes (a local MCP server's).
	proc, err := sb.(Starter).Start(context.Background(), StartRequest{Argv: []string{"/bin/sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = proc.Stdin.Close()
	out, _ := io.ReadAll(io.LimitReader(proc.Stdout, 1<<16))
	_ = proc.Close()
	if !strings.Contains(string(out), "--chdir /workspace") || strings.Contains(string(out), base) {
		t.Errorf("a started process's view of the command lines names %s (or shows none):\n%s", base, out)
	}
}

func TestShownInMountinfo(t *testing.T) {
	t.Parallel()
	const info = "22 1 254:0 / / rw - ext4 /dev/vda rw\n" +
		"30 22 0:40 / /srv/ws rw - tmpfs tmpfs rw\n" +
		"31 22 0:41 /data /mnt/vol rw - ext4 /dev/vdb rw\n" +
		"32 22 0:42 / /home/a\\040b rw - tmpfs tmpfs rw\n"
	for dir, want := range map[string]string{
		"/home/alice/.cache/logbook": "/home/alice/.cache/logbook", // on the root file system: all of it
		"/srv/ws":                    "/",                          // a file system of its own: nothing
		"/srv/ws/sandboxes":          "/sandboxes",
		"/mnt/vol/x":                 "/data/x", // a bind mount's root comes first
		"/home/a b/c":                "/c",      // escaped mount points
		"/srv/wsx":                   "/srv/wsx",
	} {
		if got := shownInMountinfo([]byte(info), dir); got != want {
			t.Errorf("shownInMountinfo(%q) = %q, want %q", dir, got, want)
		}
	}
}

// A base directory inside another file system is shown to every sandbox by mountinfo, and
// logbook says so at start; one that is a file system's root shows nothing of the host.
func TestBwrapMountinfoOnAFileSystemOfItsOwn(t *testing.T) {
	t.Parallel()
	p, logs := mustProvider(t, KindBwrap, nil)
	base := p.(*provider).cfg.BaseDir
	if !strings.Contains(logs.String(), `"mountinfo_shows"`) || !strings.Contains(logs.String(), "sandboxes/<workspace>") {
		t.Errorf("a base directory inside /tmp's file system went unsaid at start:\n%s", logs.String())
	}
	sb := mustProvision(t, p, "C1/1700000000.000300", Recipe{})
	res := mustExec(t, sb, ExecRequest{Shell: "cat /proc/self/mountinfo"})
	if !strings.Contains(res.Stdout, filepath.Base(filepath.Dir(base))) {
		t.Fatalf("the warning is about nothing: mountinfo shows no host path\n%s", res.Stdout)
	}

	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs as the base directory needs root; the rest of this test did not run")
	}
	own := filepath.Join(searchableTempDir(t), "volume")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", own).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the rest of this test did not run", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", own).Run() })
	p2, logs2 := mustProvider(t, KindBwrap, func(c *Config) { c.BaseDir = own })
	if strings.Contains(logs2.String(), `"mountinfo_shows"`) {
		t.Errorf("a base directory that is a file system's root was warned about:\n%s", logs2.String())
	}
	sb2 := mustProvision(t, p2, "C1/1700000000.000301", Recipe{})
	res = mustExec(t, sb2, ExecRequest{Shell: "cat /proc/self/mountinfo; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"})
	if res.ExitCode != 0 || strings.Contains(res.Stdout, own) || strings.Contains(res.Stdout, filepath.Dir(own)) {
		t.Errorf("the sandbox still sees the host path %s:\n%s", own, res.Stdout)
	}
}
