package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session/logtest"
)

var processUIDs atomic.Uint32

// testLimits are small so limit tests finish in a second or two.
func testLimits() Limits {
	return Limits{
		CPUSeconds:      5,
		MemoryBytes:     512 << 20,
		OpenFiles:       64,
		Processes:       32,
		FileSizeBytes:   1 << 20,
		OutputBytes:     4 << 10,
		OutputKillBytes: 256 << 10,
		TmpBytes:        8 << 20,
		Timeout:         20 * time.Second,
	}
}

// searchableTempDir returns a fresh directory whose parents the sandbox user
// (nobody, when tests run as root) can traverse.
func searchableTempDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func requireBwrap(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		tb.Skip("SKIPPING BWRAP TEST: bubblewrap is not installed (apt-get install bubblewrap); sandbox isolation is NOT being tested")
	}
}

// mustProvider builds a provider of kind over a fresh base dir.
func mustProvider(tb testing.TB, kind string, edit func(*Config)) (Provider, *logtest.Buffer) {
	tb.Helper()
	if kind == KindBwrap {
		requireBwrap(tb)
	}
	cfg := Config{BaseDir: filepath.Join(searchableTempDir(tb), "sandboxes"), Limits: testLimits()}
	if kind == KindProcess && os.Geteuid() == 0 {
		// Each test's process provider gets its own uid, so the processes
		// tests look for (and the files they write) are never another's.
		id := 61000 + uint32(processUIDs.Add(1))
		cfg.UID, cfg.GID = id, id
	}
	if edit != nil {
		edit(&cfg)
	}
	logs := &logtest.Buffer{}
	p, err := New(kind, cfg, zerolog.New(logs))
	if err != nil {
		tb.Fatalf("New(%q): %v", kind, err)
	}
	return p, logs
}

func mustProvision(tb testing.TB, p Provider, key string, recipe Recipe) Sandbox {
	tb.Helper()
	sb, err := p.Provision(context.Background(), key, recipe)
	if err != nil {
		tb.Fatalf("Provision(%q): %v", key, err)
	}
	tb.Cleanup(func() {
		if err := sb.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return sb
}

func mustExec(tb testing.TB, sb Sandbox, req ExecRequest) ExecResult {
	tb.Helper()
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		tb.Fatalf("Exec(%+v): %v", req, err)
	}
	return res
}

// hostProcessesWith returns the host processes whose command line contains
// token.
func hostProcessesWith(tb testing.TB, token string) []string {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), token) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

func zerologTo(w *logtest.Buffer) zerolog.Logger { return zerolog.New(w) }

// sandboxGit makes a test's git in the sandbox ignore the workspace-as-HOME's .gitconfig and
// never prompt.
const sandboxGit = `export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0; `
