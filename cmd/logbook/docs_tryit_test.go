package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/migrations/pgtest"
)

// A page's "Try it in `logbook dev`" steps, in a ```logbook-dev block:
//
//	$ LOGBOOK_X=y ./logbook dev     starts dev with those settings (again: stops the one running first)
//	you> run: echo hi               typed at dev's prompt
//	$ logbook audit verify          run in another terminal while dev runs (sh -c)
//	exit code: 0                    any other line: a part of what the step before printed
//	! SLACK_                        a text the step before must not have printed (checked after its other lines)
//	# skip: needs a model key       a step the test cannot run, and why (the test logs it)
//
// In a line, <ts> is the current thread's ts (the last "(new thread …)" dev printed), <port>
// dev's web port, and 127.0.0.1:8088 a free address of the test's.
const tryItFence = "```logbook-dev"

// tryItStep is one line typed or run, with what it must print.
type tryItStep struct {
	line    string // "$ …" or "you> …"
	want    []string
	notWant []string
}

// tryItBlock is a page's steps, and the reasons given for those it leaves out.
type tryItBlock struct {
	steps []tryItStep
	skips []string
}

// tryItBlocks is the logbook-dev blocks of a page's Try it section; an error for a section with
// none, or a block that does not start with a step.
func tryItBlocks(page string) (tryItBlock, error) {
	_, section, ok := strings.Cut(page, "## Try it in `logbook dev`")
	if !ok {
		return tryItBlock{}, fmt.Errorf("no Try it section")
	}
	var b tryItBlock
	parts := strings.Split(section, tryItFence+"\n")
	if len(parts) < 2 {
		return b, fmt.Errorf("its Try it section has no %s block", tryItFence)
	}
	for _, part := range parts[1:] {
		end := strings.Index(part, "```")
		if end < 0 {
			return b, fmt.Errorf("a %s block is not closed", tryItFence)
		}
		for _, raw := range strings.Split(part[:end], "\n") {
			line := strings.TrimSpace(raw)
			switch {
			case line == "":
			case strings.HasPrefix(line, "# skip:"):
				b.skips = append(b.skips, strings.TrimSpace(strings.TrimPrefix(line, "# skip:")))
			case strings.HasPrefix(line, "#"):
			case strings.HasPrefix(line, "$ ") || strings.HasPrefix(line, "you> "):
				b.steps = append(b.steps, tryItStep{line: line})
			case len(b.steps) == 0:
				return b, fmt.Errorf("%q comes before any step", line)
			case strings.HasPrefix(line, "! "):
				s := &b.steps[len(b.steps)-1]
				s.notWant = append(s.notWant, strings.TrimPrefix(line, "! "))
			default:
				s := &b.steps[len(b.steps)-1]
				s.want = append(s.want, line)
			}
		}
	}
	for _, s := range b.steps {
		if len(s.notWant) > 0 && len(s.want) == 0 {
			return b, fmt.Errorf("%q: a text it must not print needs one it must (what it printed instead), or the check is empty", s.line)
		}
	}
	return b, nil
}

// devCommand is the settings of a "$ [NAME=value ...] ./logbook dev" line; false for another.
func devCommand(line string) ([]string, bool) {
	words, ok := shellWords(strings.TrimPrefix(line, "$ "))
	if !ok || len(words) == 0 || words[len(words)-1] != "dev" || words[len(words)-2] != "./logbook" {
		return nil, false
	}
	return words[:len(words)-2], true
}

// Every page of docs/ with a "Try it in `logbook dev`" section has its steps in a logbook-dev
// block, and they do what the page says against a real `logbook dev` (offline model, a
// process sandbox): a page whose steps drift from the binary fails here. Steps a page leaves
// out (a model key, an outside server) are logged with the page's reason.
func TestDocsTryItStepsRun(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, path := range pages {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "## Try it in `logbook dev`") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".md")
		ran++
		block, err := tryItBlocks(string(b))
		if err != nil {
			t.Errorf("docs/%s.md: %v", name, err)
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, why := range block.skips {
				t.Logf("docs/%s.md: not run: %s", name, why)
			}
			if len(block.steps) == 0 {
				t.Skipf("docs/%s.md: no step runs without what it needs: %s", name, strings.Join(block.skips, "; "))
			}
			runTryIt(t, block.steps)
		})
	}
	if ran < 10 {
		t.Errorf("found %d pages with a Try it section: the scan itself is broken", ran)
	}
}

// runTryIt runs steps: dev started with a fresh database, a process sandbox and a home of its
// own; shell steps in a directory of their own, with `logbook` on PATH.
func runTryIt(t *testing.T, steps []tryItStep) {
	home, dir, bin := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.Symlink(binary, filepath.Join(bin, "logbook")); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.New(t)
	base := devEnv(home, "DATABASE_URL="+dbURL, "LOGBOOK_SANDBOX=process", "LOGBOOK_SANDBOX_DIR="+devSandboxDir(t))
	base[0] = "PATH=" + bin + ":" + os.Getenv("PATH")
	addr := freeAddr(t)
	var d *devProc
	stop := func() {
		if d != nil {
			select {
			case <-d.done:
			default:
				d.type_("/quit\n")
				d.wait()
			}
		}
	}
	for _, s := range steps {
		line := strings.ReplaceAll(s.line, "127.0.0.1:8088", addr)
		if d != nil {
			out := d.out.String()
			if m := regexp.MustCompile(`\((?:new|continuing) thread (\d+\.\d+)\)`).FindAllStringSubmatch(out, -1); m != nil {
				line = strings.ReplaceAll(line, "<ts>", m[len(m)-1][1])
			}
			if m := regexp.MustCompile(`web pages +http://127\.0\.0\.1:(\d+)/`).FindStringSubmatch(out); m != nil {
				line = strings.ReplaceAll(line, "<port>", m[1])
			}
		}
		var got string
		switch settings, isDev := devCommand(line); {
		case isDev:
			stop()
			d = startDevProc(t, append(cloneEnv(base), settings...), dir)
			if !d.readyOrExited() && len(s.want) == 0 {
				t.Fatalf("%s: dev exited:\n%s", s.line, d.out.String())
			}
			d.mark = 0
		case strings.HasPrefix(line, "you> "):
			if d == nil {
				t.Fatalf("%s: no dev runs yet", s.line)
			}
			d.mark = len(d.out.String())
			d.type_(strings.TrimPrefix(line, "you> ") + "\n")
		default:
			var ok bool
			if got, ok = runTryItShell(t, s, line, dir, base); !ok {
				continue
			}
		}
		for _, want := range s.want {
			if strings.HasPrefix(line, "$ ") && !isDevLine(line) {
				if !strings.Contains(got, want) {
					t.Errorf("%s: its output lacks %q:\n%s", s.line, want, got)
				}
				continue
			}
			got = d.waitForAfter(s.line, want)
		}
		for _, not := range s.notWant {
			if strings.Contains(got, not) {
				t.Errorf("%s: printed %q:\n%s", s.line, not, got)
			}
		}
	}
	stop()
}

// runTryItShell runs a shell step in dir until its output has every line it wants (a CLI run
// again in another terminal: the log may not have the event yet), for at most devWait. A
// failure fails the step unless it wants an "exit status".
func runTryItShell(t *testing.T, s tryItStep, line, dir string, env []string) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(devWait)
	for {
		cmd := exec.Command("sh", "-c", strings.TrimPrefix(line, "$ "))
		cmd.Dir, cmd.Env = dir, append(cloneEnv(env), "LOGBOOK_AUDIT_OPERATOR=ada")
		out, err := cmd.CombinedOutput()
		got := string(out)
		if err != nil {
			got += fmt.Sprintf("\n%v\n", err)
			if !strings.Contains(strings.Join(s.want, "\n"), "exit status") {
				t.Errorf("%s failed:\n%s", s.line, got)
				return got, false
			}
		}
		complete := true
		for _, want := range s.want {
			complete = complete && strings.Contains(got, want)
		}
		if complete || time.Now().After(deadline) {
			return got, true
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func isDevLine(line string) bool { _, ok := devCommand(line); return ok }

func cloneEnv(s []string) []string { return append([]string(nil), s...) }

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDevProc starts dev with env in dir without waiting for it.
func startDevProc(t *testing.T, env []string, dir string) *devProc {
	t.Helper()
	return startDevWaiting(t, env, dir, "")
}

// readyOrExited waits until dev is ready (true) or has exited (false).
func (d *devProc) readyOrExited() bool {
	d.t.Helper()
	deadline := time.Now().Add(devWait)
	for time.Now().Before(deadline) {
		if strings.Contains(d.out.String(), "ready.") {
			return true
		}
		select {
		case <-d.done:
			<-d.read
			return false
		case <-time.After(25 * time.Millisecond):
		}
	}
	d.t.Fatalf("logbook dev neither became ready nor exited:\n%s", d.out.String())
	return false
}

// waitForAfter waits until dev has printed s after its mark (what the step printed), and
// returns that part.
func (d *devProc) waitForAfter(step, s string) string {
	d.t.Helper()
	deadline := time.Now().Add(devWait)
	for {
		out := d.out.String()[d.mark:]
		if strings.Contains(out, s) {
			return out
		}
		select {
		case <-d.done:
			<-d.read
			if out := d.out.String()[d.mark:]; strings.Contains(out, s) {
				return out
			}
			d.t.Fatalf("%s: dev exited before printing %q:\n%s", step, s, d.out.String()[d.mark:])
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: dev did not print %q:\n%s", step, s, out)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
