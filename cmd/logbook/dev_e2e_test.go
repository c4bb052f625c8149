package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session/logtest"
)

// devProc is a running `logbook dev` with piped stdin and stdout.
type devProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *logtest.Buffer
	rd    *os.File // the read end of its stdout
	read  chan struct{}
	done  chan struct{}
	mark  int // where the output of the step being checked starts (docs_tryit_test.go)
}

const devWait = 90 * time.Second

// startDev starts dev with env and waits until it is ready.
func startDev(t *testing.T, env []string, args ...string) *devProc {
	t.Helper()
	return startDevWaiting(t, env, "", "ready.", args...)
}

// startDevWaiting starts dev with env in dir ("": this one) and waits until it has printed
// ready ("": not at all).
func startDevWaiting(t *testing.T, env []string, dir, ready string, args ...string) *devProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"dev"}, args...)...)
	cmd.Env, cmd.Dir = env, dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = wr, wr
	d := &devProc{t: t, cmd: cmd, stdin: stdin, out: &logtest.Buffer{}, rd: rd, read: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	go func() { io.Copy(d.out, rd); close(d.read) }()
	go func() { cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-d.done
			}
		}
		rd.Close()
		if t.Failed() {
			t.Logf("logbook dev output:\n%s", d.out.String())
		}
	})
	if ready != "" {
		d.waitFor(ready)
	}
	return d
}

// waitFor waits until dev has printed s, and returns everything printed so far.
func (d *devProc) waitFor(s string) string {
	d.t.Helper()
	deadline := time.Now().Add(devWait)
	for {
		out := d.out.String()
		if strings.Contains(out, s) {
			return out
		}
		select {
		case <-d.done:
			d.t.Fatalf("logbook dev exited before printing %q:\n%s", s, out)
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("logbook dev did not print %q:\n%s", s, out)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (d *devProc) type_(s string) {
	d.t.Helper()
	if _, err := io.WriteString(d.stdin, s); err != nil {
		d.t.Fatal(err)
	}
}

func (d *devProc) wait() {
	d.t.Helper()
	select {
	case <-d.done:
	case <-time.After(devWait):
		d.t.Fatalf("logbook dev did not stop:\n%s", d.out.String())
	}
	// The process has exited; what it printed last may still be in the pipe, on its way to
	// d.out (a loaded machine showed dev's last line missing). The copy ends when the pipe
	// does.
	select {
	case <-d.read:
	case <-time.After(devWait):
		d.t.Errorf("logbook dev's output was still open %v after it exited", devWait)
	}
}

// devEnv is a dev environment whose data lives under home and data.
func devEnv(home string, extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"LOGBOOK_SANDBOX=none", "LOGBOOK_AUDIT_OPERATOR=e2e-test"}, extra...)
}

// devDataDir is a short directory (the socket path must fit) that dev's unprivileged
// PostgreSQL user can reach when the tests run as root.
func devDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lbdev")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "pg")
}

// devSandboxDir is a directory for dev's process sandboxes, reachable when the tests run as
// root.
func devSandboxDir(t *testing.T) string {
	t.Helper()
	sb, err := os.MkdirTemp("", "logbook-dev-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sb, 0o755)
	t.Cleanup(func() { os.RemoveAll(sb) })
	return sb
}

func waitPending(t *testing.T, m *fakeprovider.Server) {
	t.Helper()
	deadline := time.Now().Add(devWait)
	for m.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d scripted model replies never used", m.Pending())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// `logbook dev`, stopped and started again on the same data, continues an old thread with the
// context from before the restart. While it runs its web pages open from the sign-in link
// (and LOGBOOK_WEB_TOKENS), the CLIs find its database, a multi-line message is one message,
// a message over 40,000 characters is refused, and /logbook answers ephemerally. Ctrl-C with
// its stdout a broken pipe (dev | tee, tee gone) still stops its PostgreSQL.
func TestE2EDevRestartContinuesOldThreads(t *testing.T) {
	t.Parallel()
	home, data := t.TempDir(), devDataDir(t)
	model := fakeprovider.NewAnthropic(t, apiKey)
	const webToken = "ci-reader-token-0123456789"
	env := devEnv(home, "ANTHROPIC_API_KEY="+apiKey, "ANTHROPIC_BASE_URL="+model.URL,
		"LOGBOOK_WEB_TOKENS=ci:"+webToken, "LOGBOOK_POLL_INTERVAL=200ms")

	d := startDev(t, env, "--data-dir", data)
	banner := d.out.String()
	if !strings.Contains(banner, "DATABASE_URL='postgres://") {
		t.Errorf("dev does not print its DATABASE_URL:\n%s", banner)
	}
	model.Push(fakeprovider.Reply{Text: "Noted: the code is 7-alpha."}, fakeprovider.Reply{Text: "Code 7-alpha"})
	d.type_("remember the code 7-alpha\n")
	d.waitFor("… logbook is thinking")
	d.waitFor("logbook> Noted: the code is 7-alpha.")
	waitPending(t, model)

	// Lines between """ are one message, answered once.
	calls := len(model.Calls())
	model.Push(fakeprovider.Reply{Text: "Two lines received."})
	d.type_("\"\"\"\nfirst line\nsecond line\n\"\"\"\n")
	d.waitFor("logbook> Two lines received.")
	if got := model.Calls(); len(got) != calls+1 || !strings.Contains(fmt.Sprint(got[len(got)-1].Messages), "first line\nsecond line") {
		t.Errorf("the multi-line message was not one message: %d calls, last %+v", len(got)-calls, got[len(got)-1].Messages)
	}
	d.type_(strings.Repeat("x", 40_001) + "\n")
	d.waitFor("(not sent: 40001 characters; Slack takes at most 40,000")
	d.type_("/logbook help\n")
	d.waitFor("logbook (only you can see this)> logbook — ")

	// The web pages: the sign-in link, once; the cookie; LOGBOOK_WEB_TOKENS; nothing else.
	m := regexp.MustCompile(`web pages +(http://(\S+?)/\?signin=\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no sign-in link in the banner:\n%s", banner)
	}
	link, base := m[1], "http://"+m[2]+"/"
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string, h ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, _ := get(base); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("pages without sign-in: %d, want 401", resp.StatusCode)
	}
	resp, _ := get(link)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("sign-in link: %d, Location %q, cookie %+v", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	for deadline := time.Now().Add(devWait); ; time.Sleep(100 * time.Millisecond) { // the list follows the search index
		resp, body := get(base, "Cookie", cookie.Name+"="+cookie.Value)
		if resp.StatusCode == http.StatusOK && strings.Contains(body, "7-alpha") {
			break
		}
		if resp.StatusCode != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("pages with the sign-in cookie: %d\n%s", resp.StatusCode, body)
		}
	}
	if resp, _ := get(link); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the sign-in link used twice: %d, want 401", resp.StatusCode)
	}
	if resp, _ := get(base, "Authorization", "Bearer "+webToken); resp.StatusCode != http.StatusOK {
		t.Errorf("pages with a LOGBOOK_WEB_TOKENS token: %d, want 200", resp.StatusCode)
	}

	// The CLIs find the running dev's database without DATABASE_URL, and say so once.
	cli := func(args ...string) (string, string, error) {
		cmd := exec.Command(binary, args...)
		cmd.Env = devEnv(home)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	for _, args := range [][]string{{"search", "7-alpha"}, {"audit", "verify"}} {
		out, stderr, err := cli(args...)
		if err != nil || strings.Count(stderr, "using the database of the running logbook dev") != 1 {
			t.Errorf("logbook %s without DATABASE_URL: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr)
		}
		if args[0] == "search" && !strings.Contains(out, "7-alpha") {
			t.Errorf("logbook search found nothing:\n%s", out)
		}
	}
	if out, _, err := cli("transcript", "C0000001", regexp.MustCompile(`\(new thread (\S+)\)`).FindStringSubmatch(d.out.String())[1]); err != nil || !strings.Contains(out, "remember the code 7-alpha") {
		t.Errorf("logbook transcript without DATABASE_URL: %v\n%s", err, out)
	}

	// A second dev on another data dir leaves its own pointer: while both run the CLIs pick
	// neither and name both; once it stops they use the first again, and say which.
	d2 := startDev(t, devEnv(home), "--data-dir", devDataDir(t))
	if _, stderr, err := cli("search", "7-alpha"); err == nil || !strings.Contains(stderr, "2 logbook dev runs are live") ||
		!strings.Contains(stderr, "data dir "+data+":") || !strings.Contains(stderr, "set DATABASE_URL") {
		t.Errorf("logbook search with two devs running: %v\n%s", err, stderr)
	}
	d2.type_("/quit\n")
	d2.wait()
	if out, stderr, err := cli("search", "7-alpha"); err != nil || !strings.Contains(stderr, "with data dir "+data+" ") || !strings.Contains(out, "7-alpha") {
		t.Errorf("logbook search after the second dev stopped: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}

	d.type_("/quit\n")
	d.wait()
	d.waitFor("stopped PostgreSQL")
	if _, stderr, err := cli("search", "7-alpha"); err == nil || !strings.Contains(stderr, "DATABASE_URL is not set") {
		t.Errorf("logbook search after dev stopped: %v\n%s", err, stderr)
	}

	// Started again: the old thread continues, with its context.
	d = startDev(t, env, "--data-dir", data)
	model.Push(fakeprovider.Reply{Text: "You said 7-alpha."})
	d.type_("/threads\n/switch 1\nwhat was the code?\n")
	out := d.waitFor("logbook> You said 7-alpha.")
	if strings.Contains(out, "error:") {
		t.Errorf("dev printed an error:\n%s", out)
	}
	got := model.Calls()
	if last := fmt.Sprint(got[len(got)-1].Messages); !strings.Contains(last, "remember the code 7-alpha") || !strings.Contains(last, "what was the code?") {
		t.Errorf("the reply after the restart lacks the context from before it: %s", last)
	}
	d.waitFor("you> ")

	// Ctrl-C with stdout gone (as `logbook dev | tee` after tee got the same SIGINT): dev
	// still stops its PostgreSQL.
	pidFile, err := os.ReadFile(filepath.Join(data, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	d.rd.Close()
	<-d.read
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	d.wait()
	if ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("dev was killed by %v", ws.Signal())
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("postmaster %d still runs after Ctrl-C with stdout a broken pipe (kill: %v)", pid, err)
	}
	if left, _ := filepath.Glob(filepath.Join(home, ".cache", "logbook", "dev-databases", "*")); len(left) > 0 {
		t.Errorf("dev left its database URL file behind: %q", left)
	}
}

// In dev, /approve decides the approval card of the current thread and /stop presses the stop
// button; piped, both act while the turn runs (other lines wait for the answer).
func TestE2EDevApproveAndStop(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sb := devSandboxDir(t)
	d := startDev(t, devEnv(home, "DATABASE_URL="+pgtest.New(t), "LOGBOOK_SANDBOX=process", "LOGBOOK_SANDBOX_DIR="+sb,
		"LOGBOOK_TOOL_APPROVAL=run_command=ask", "LOGBOOK_FILE_MAX=1K"))
	d.type_("run: echo hi-from-$((6*7))\n/approve\n")
	out := d.waitFor("hi-from-42")
	if !strings.Contains(out, "logbook asks for approval>") || !strings.Contains(out, "echo hi-from-$((6*7))") || !strings.Contains(out, "logbook updated the card> :white_check_mark: Approved by @U0000001") {
		t.Fatalf("no card or decision printed:\n%s", out)
	}
	d.type_("run: sleep 60\n/approve\n/stop\n")
	out = d.waitFor("(the turn was stopped")
	if !strings.Contains(out, "(stop requested)") {
		t.Fatalf("no stop printed:\n%s", out)
	}
	// /share shares a file with a message: fetched, stored, and given to the model.
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
	pic := filepath.Join(home, "pixel.png")
	if err := os.WriteFile(pic, png, 0o644); err != nil {
		t.Fatal(err)
	}
	d.type_("/share " + pic + " what is this?\n")
	d.waitFor("I got 1 shared image(s)")
	// What could not be read is said under the reply, as Slack shows its footer.
	big := filepath.Join(home, "big.log")
	if err := os.WriteFile(big, bytes.Repeat([]byte("log line\n"), 300), 0o644); err != nil {
		t.Fatal(err)
	}
	d.type_("/share " + big + "\n")
	d.waitFor("I could not read `big.log`: 2.6 KB is over the 1.0 KB limit")
	d.type_("/quit\n")
	d.wait()
}

// dev's chat prints what the bot did, from what the thread got and the log: a refused /approve
// prints the bot's note (not "approved"); a card left from before a restart is decided and its
// turn's output shown; a message the bot will not answer says so instead of "thinking"; a file
// handed back is named and saved; the card's code is indented, its lines whole.
func TestE2EDevChatShowsWhatTheBotDid(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sb := devSandboxDir(t)
	// dev's own PostgreSQL: /threads lists what the search index holds, and on the shared test
	// server another database's long transaction can hold the index back (see docs/log.md).
	data := devDataDir(t)
	env := devEnv(home, "LOGBOOK_SANDBOX=process", "LOGBOOK_SANDBOX_DIR="+sb, "LOGBOOK_TOOL_APPROVAL=run_command=ask")

	d := startDev(t, append(env, "LOGBOOK_TOOL_APPROVERS=U0000999"), "--data-dir", data)
	d.type_("run: echo one-$((1+1))\n/approve\n")
	out := d.waitFor("logbook (only you can see this)> Only @U0000999 may approve or deny this request; it stays open.")
	if strings.Contains(out, "(approved)") || strings.Contains(out, "Approved by") {
		t.Errorf("a refused /approve printed a decision:\n%s", out)
	}
	if !strings.Contains(out, "logbook asks for approval> Approval needed: I want to use `run_command`.\n    $ echo one-$((1+1))\n  Who may decide: @U0000999.") || strings.Contains(out, "```") {
		t.Errorf("the card is not printed as indented lines:\n%s", out)
	}
	d.type_("/quit\n")
	d.wait()

	// Started again (anyone who posted may decide now): the card from before the restart.
	d = startDev(t, env, "--data-dir", data)
	d.type_("/threads\n/switch 1\n/approve\n")
	out = d.waitFor("one-2")
	if !strings.Contains(out, "logbook updated the card> :white_check_mark: Approved by @U0000001") {
		t.Errorf("the decision on the old card is not printed:\n%s", out)
	}
	d.waitFor("you> ")
	mark := len(d.out.String())
	d.type_("(aside) not for you\n")
	d.waitFor("(logbook does not answer this message: it is an aside)")
	if got := d.out.String()[mark:]; strings.Contains(got, "thinking") {
		t.Errorf("an aside showed as thinking:\n%s", got)
	}
	d.type_("\"\"\"\nwrite: out.txt\nhello file\n\"\"\"\nattach: out.txt\n")
	out = d.waitFor("📎 out.txt (10 bytes, text/plain) saved to ")
	saved := regexp.MustCompile(`saved to (\S+)`).FindStringSubmatch(out)[1]
	if b, err := os.ReadFile(saved); err != nil || string(b) != "hello file" {
		t.Errorf("the handed-back file: %q %v", b, err)
	}
	if strings.Count(d.out.String()[mark:], "… logbook is thinking") != 2 {
		t.Errorf("want one thinking line for each answered message:\n%s", d.out.String()[mark:])
	}
	d.type_("/switch 99\n")
	d.waitFor("(there is no thread 99: /threads listed 1, numbered 1 to 1)")
	d.type_("/quit\n")
	d.wait()
}

// Without bubblewrap (and LOGBOOK_SANDBOX unset) dev says at start that commands are off and
// how to turn them on, and does not suggest "run:".
func TestE2EDevWithoutBubblewrapSaysCommandsAreOff(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	var env []string
	for _, kv := range devEnv(home, "DATABASE_URL="+pgtest.New(t)) {
		switch {
		case strings.HasPrefix(kv, "LOGBOOK_SANDBOX="):
		case strings.HasPrefix(kv, "PATH="):
			env = append(env, "PATH="+t.TempDir()) // no bwrap there
		default:
			env = append(env, kv)
		}
	}
	d := startDev(t, env)
	banner := d.out.String()
	if !strings.Contains(banner, "commands are OFF: bubblewrap is not installed") || !strings.Contains(banner, "apt-get install -y bubblewrap") ||
		!strings.Contains(banner, "LOGBOOK_SANDBOX=process") || strings.Contains(banner, "run: uname -a") {
		t.Errorf("banner without bubblewrap:\n%s", banner)
	}
	d.type_("run: uname -a\n")
	d.waitFor("I would run `uname -a`, but run_command is not available here.")
	d.type_("/quit\n")
	d.wait()
}

// Ctrl-C with a command running says at once that dev stops the turn, stops it (not after
// the drain's wait), and prints how it ended before dev stops.
func TestE2EDevCtrlCStopsTheRunningTurn(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sb := devSandboxDir(t)
	d := startDev(t, devEnv(home, "DATABASE_URL="+pgtest.New(t), "LOGBOOK_SANDBOX=process", "LOGBOOK_SANDBOX_DIR="+sb))
	d.type_("run: sleep 120\n")
	d.waitFor("run_command: sleep 120")
	mark := len(d.out.String())
	sent := time.Now()
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	d.waitFor("(Ctrl-C: stopping the running turn in thread ")
	if took := time.Since(sent); took > 2*time.Second {
		t.Errorf("Ctrl-C said it is stopping after %v", took)
	}
	d.wait()
	took := time.Since(sent)
	out := d.out.String()[mark:]
	stopping := strings.Index(out, "(Ctrl-C: stopping")
	ended := strings.Index(out, "(the turn was stopped; nothing more is posted for it)")
	if ended < stopping || !strings.Contains(out[ended:], "stopped.") {
		t.Errorf("after Ctrl-C dev printed:\n%s", out)
	}
	if took > 10*time.Second {
		t.Errorf("dev took %v to stop after Ctrl-C", took)
	}
	t.Logf("Ctrl-C to exit: %v", took)
}
