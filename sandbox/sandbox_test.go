package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session/logtest"
)

// providerKinds are the isolating-or-not providers that share the sandbox
// machinery; tests over both skip only the bwrap half when it is missing.
var providerKinds = []string{KindBwrap, KindProcess}

func TestPathTraversalRefused(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, _ := mustProvider(t, kind, nil)
			sb := mustProvision(t, p, "paths", Recipe{})
			s := sb.(*sandbox)
			ctx := context.Background()
			outside := filepath.Join(searchableTempDir(t), "outside")
			if err := os.Mkdir(outside, 0o777); err != nil {
				t.Fatal(err)
			}
			// Links made by the sandbox user that lead out of the workspace.
			mustExec(t, sb, ExecRequest{Argv: []string{"sh", "-c", "ln -s /etc/passwd passwd-link && ln -s \"$1\" out-dir && ln -s .. up && mkdir in && ln -s in in-link", "sh", outside}})

			escapes := []string{
				"../x", "a/../../x", "/etc/passwd", "/workspace/../etc/passwd", filepath.Join(filepath.Dir(s.workspace), "x"),
				"passwd-link", "out-dir/x", "up/x", "..", "bad\x00name",
			}
			for _, name := range escapes {
				if _, err := sb.ReadFile(ctx, name); !errors.Is(err, ErrOutsideWorkspace) {
					t.Errorf("ReadFile(%q) = %v, want ErrOutsideWorkspace", name, err)
				}
				if err := sb.WriteFile(ctx, name, []byte("x")); !errors.Is(err, ErrOutsideWorkspace) {
					t.Errorf("WriteFile(%q) = %v, want ErrOutsideWorkspace", name, err)
				}
			}
			for _, dir := range []string{"..", "../..", "/etc", "out-dir", "up"} {
				if _, err := sb.Exec(ctx, ExecRequest{Shell: "pwd", Dir: dir}); !errors.Is(err, ErrOutsideWorkspace) {
					t.Errorf("Exec in dir %q = %v, want ErrOutsideWorkspace", dir, err)
				}
			}
			if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
				t.Errorf("something was written outside: %v, %v", entries, err)
			}

			// Allowed: plain paths, links that stay inside, the absolute form
			// commands see.
			if err := sb.WriteFile(ctx, "in-link/f.txt", []byte("inside")); err != nil {
				t.Fatalf("WriteFile through an inside link: %v", err)
			}
			for _, name := range []string{"in/f.txt", "./in/../in/f.txt", filepath.Join(s.inside, "in/f.txt")} {
				if got, err := sb.ReadFile(ctx, name); err != nil || string(got) != "inside" {
					t.Errorf("ReadFile(%q) = %q, %v", name, got, err)
				}
			}
			if _, err := sb.ReadFile(ctx, "missing.txt"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("ReadFile of a missing file = %v, want fs.ErrNotExist", err)
			}
			if _, err := sb.ReadFile(ctx, "in"); err == nil {
				t.Error("ReadFile of a directory succeeded")
			}
			if res := mustExec(t, sb, ExecRequest{Shell: "cat f.txt", Dir: "in-link"}); res.Stdout != "inside" {
				t.Errorf("Exec in an inside link: %+v", res)
			}
		})
	}
}

func TestFileSizeLimitOnReadAndWrite(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindProcess, func(c *Config) { c.Limits.FileSizeBytes = 100 })
	sb := mustProvision(t, p, "size", Recipe{})
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "big", make([]byte, 101)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("WriteFile over the limit = %v, want ErrTooLarge", err)
	}
	if err := os.WriteFile(filepath.Join(sb.(*sandbox).workspace, "big"), make([]byte, 101), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ReadFile(ctx, "big"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile over the limit = %v, want ErrTooLarge", err)
	}
	if err := sb.WriteFile(ctx, "ok", make([]byte, 100)); err != nil {
		t.Errorf("WriteFile at the limit: %v", err)
	}
}

func TestExecRequestValidation(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindProcess, nil)
	sb := mustProvision(t, p, "validate", Recipe{})
	for name, req := range map[string]ExecRequest{
		"neither":     {},
		"both":        {Argv: []string{"true"}, Shell: "true"},
		"empty argv0": {Argv: []string{""}},
		"nul":         {Argv: []string{"echo", "a\x00b"}},
		"missing dir": {Shell: "true", Dir: "nope"},
		"file as dir": {Shell: "true", Dir: "f"},
	} {
		if name == "file as dir" {
			if err := sb.WriteFile(context.Background(), "f", nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sb.Exec(context.Background(), req); err == nil {
			t.Errorf("%s: Exec(%+v) succeeded", name, req)
		}
	}
}

func TestProcessProviderWarnsAndStillBounds(t *testing.T) {
	t.Parallel()
	p, logs := mustProvider(t, KindProcess, nil)
	if p.Name() != KindProcess {
		t.Errorf("Name = %q", p.Name())
	}
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "DOES NOT ISOLATE") {
		t.Errorf("no loud warning at start: %s", logs.String())
	}
	sb := mustProvision(t, p, "plain", Recipe{Steps: []Step{{Run: "echo from-recipe > r"}}})
	res := mustExec(t, sb, ExecRequest{Shell: "cat r; env"})
	if !strings.HasPrefix(res.Stdout, "from-recipe\n") || !strings.Contains(res.Stdout, "HOME="+sb.(*sandbox).workspace+"\n") {
		t.Errorf("process exec: %+v", res)
	}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n")[1:] {
		name, _, _ := strings.Cut(line, "=")
		switch name {
		case "PATH", "HOME", "LANG", "TERM", "TZ", "PWD", "SHLVL", "OLDPWD", "_":
		default:
			t.Errorf("variable %s reached the process sandbox", name)
		}
	}
	const token = "1000.7777"
	res = mustExec(t, sb, ExecRequest{Shell: "sleep " + token + " & sleep " + token, Timeout: 300 * time.Millisecond})
	if !res.TimedOut || res.Killed != "timeout" {
		t.Errorf("sleep not timed out: %+v", res)
	}
	if left := hostProcessesWith(t, token); len(left) > 0 {
		t.Errorf("the process group survived the timeout: %v", left)
	}

	killSandboxFromOutside(t, sb)
	if err := sb.Alive(context.Background()); !errors.Is(err, ErrLost) {
		t.Errorf("Alive after the sentinel was killed = %v, want ErrLost", err)
	}
}

func TestNoneProviderDisablesCommands(t *testing.T) {
	t.Parallel()
	p, err := New(KindNone, Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != KindNone {
		t.Errorf("Name = %q", p.Name())
	}
	sb, err := p.Provision(context.Background(), "s", Recipe{Steps: []Step{{Run: "true"}}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	ctx := context.Background()
	if _, err := sb.Exec(ctx, ExecRequest{Shell: "true"}); !errors.Is(err, ErrDisabled) {
		t.Errorf("Exec = %v, want ErrDisabled", err)
	}
	if _, err := sb.ReadFile(ctx, "x"); !errors.Is(err, ErrDisabled) {
		t.Errorf("ReadFile = %v, want ErrDisabled", err)
	}
	if err := sb.WriteFile(ctx, "x", nil); !errors.Is(err, ErrDisabled) {
		t.Errorf("WriteFile = %v, want ErrDisabled", err)
	}
	if err := sb.Alive(ctx); err != nil {
		t.Errorf("Alive = %v", err)
	}
	if err := sb.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

func TestNewChoosesAndValidates(t *testing.T) {
	t.Parallel()
	base := searchableTempDir(t)
	if _, err := New("docker", Config{BaseDir: base}, zerolog.Nop()); err == nil {
		t.Error("unknown kind accepted")
	}
	for _, name := range []string{"SLACK_BOT_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "my_secret", "PGPASSWORD"} {
		if _, err := New(KindProcess, Config{BaseDir: base, Env: map[string]string{name: "x"}}, zerolog.Nop()); err == nil {
			t.Errorf("env %s accepted", name)
		}
	}
	if _, err := New(KindProcess, Config{BaseDir: base, Limits: Limits{Timeout: -1}}, zerolog.Nop()); err == nil {
		t.Error("negative limit accepted")
	}
	if _, err := New(KindBwrap, Config{BaseDir: base, BwrapPath: "/nonexistent/bwrap"}, zerolog.Nop()); err == nil ||
		!strings.Contains(err.Error(), "bubblewrap") {
		t.Errorf("missing bwrap: %v", err)
	}

	logs := &logtest.Buffer{}
	p, err := New("", Config{BaseDir: base, BwrapPath: "/nonexistent/bwrap"}, zerolog.New(logs))
	if err != nil || p.Name() != KindProcess || !strings.Contains(logs.String(), "does NOT isolate") {
		t.Errorf("best available without bwrap = %v, %v; logs %s", p, err, logs.String())
	}
	requireBwrap(t)
	if p, err := New("", Config{BaseDir: base}, zerolog.Nop()); err != nil || p.Name() != KindBwrap {
		t.Errorf("best available with bwrap = %v, %v; want bwrap", p, err)
	}
}

func TestProvisionFailingStepLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, _ := mustProvider(t, kind, nil)
			base := p.(*provider).cfg.BaseDir
			_, err := p.Provision(context.Background(), "failing", Recipe{Steps: []Step{
				{Name: "ok", Run: "echo fine > f"},
				{Name: "clone", Run: "echo cannot clone >&2; exit 7"},
				{Name: "never", Run: "touch never"},
			}})
			var se *StepError
			if !errors.As(err, &se) || se.Step != "clone" || se.Result.ExitCode != 7 || se.Result.Stderr != "cannot clone\n" {
				t.Fatalf("Provision = %v, want a StepError for step clone", err)
			}
			_, err = p.Provision(context.Background(), "slow", Recipe{Steps: []Step{{Run: "sleep 1000.8888", Timeout: 200 * time.Millisecond}}})
			if !errors.As(err, &se) || se.Step != "step 1" || !se.Result.TimedOut {
				t.Errorf("slow step: %v", err)
			}
			if _, err := p.Provision(context.Background(), "empty", Recipe{Steps: []Step{{Name: "blank", Run: " "}}}); err == nil {
				t.Error("blank step accepted")
			}
			if _, err := p.Provision(context.Background(), "", Recipe{}); err == nil {
				t.Error("empty key accepted")
			}
			entries, err := os.ReadDir(base)
			if err != nil || len(entries) != 0 {
				t.Errorf("failed provisions left workspaces: %v, %v", entries, err)
			}
		})
	}
}

func TestCloseKillsRunningCommandsAndRemovesWorkspace(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, _ := mustProvider(t, kind, nil)
			sb, err := p.Provision(context.Background(), "close", Recipe{})
			if err != nil {
				t.Fatal(err)
			}
			ws := sb.(*sandbox).workspace
			token := map[string]string{KindBwrap: "1000.91", KindProcess: "1000.92"}[kind]
			running := make(chan error, 1)
			go func() {
				_, err := sb.Exec(context.Background(), ExecRequest{Argv: []string{"sleep", token}})
				running <- err
			}()
			waitFor(t, func() bool { return len(hostProcessesWith(t, token)) > 0 })
			if err := sb.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := <-running; !errors.Is(err, ErrLost) {
				t.Errorf("running Exec after Close = %v, want ErrLost", err)
			}
			if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("workspace still there after Close: %v", err)
			}
			if left := hostProcessesWith(t, token); len(left) > 0 {
				t.Errorf("processes survived Close: %v", left)
			}
			if err := sb.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := sb.Alive(context.Background()); !errors.Is(err, ErrLost) {
				t.Errorf("Alive after Close = %v, want ErrLost", err)
			}
		})
	}
}

func TestExecHonoursCallerContext(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindProcess, nil)
	sb := mustProvision(t, p, "ctx", Recipe{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, ExecRequest{Argv: []string{"sleep", "1000.1212"}})
		done <- err
	}()
	waitFor(t, func() bool { return len(hostProcessesWith(t, "1000.1212")) > 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Exec after cancel = %v, want context.Canceled", err)
	}
	if left := hostProcessesWith(t, "1000.1212"); len(left) > 0 {
		t.Errorf("processes survived cancel: %v", left)
	}
	if err := sb.Alive(context.Background()); err != nil {
		t.Errorf("a cancelled command must not lose the sandbox: %v", err)
	}
}
