package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/session/logtest"
)

func TestDiskQuota(t *testing.T) {
	t.Parallel()
	const quota = 256 << 10
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, _ := mustProvider(t, kind, func(c *Config) { c.DiskQuota = quota })
			ctx := context.Background()

			t.Run("one big file", func(t *testing.T) {
				t.Parallel()
				sb := mustProvision(t, p, "quota-one", Recipe{})
				res := mustExec(t, sb, ExecRequest{Shell: "head -c 400000 /dev/zero > big"})
				if res.ExitCode == 0 {
					t.Errorf("wrote a 400000-byte file under a %d-byte quota: %+v", quota, res)
				}
				if fi, err := os.Stat(filepath.Join(sb.(*sandbox).workspace, "big")); err != nil || fi.Size() > quota {
					t.Errorf("big file: %v, %v", fi, err)
				}
			})

			t.Run("many files", func(t *testing.T) {
				t.Parallel()
				sb := mustProvision(t, p, "quota-many", Recipe{})
				res := mustExec(t, sb, ExecRequest{Shell: "for i in 1 2 3 4 5; do head -c 100000 /dev/zero > f$i; done"})
				if res.DiskOverQuota <= 0 || !strings.Contains(res.Stderr, "over its disk quota") {
					t.Errorf("500000 bytes in files under a %d-byte quota not reported: %+v", quota, res)
				}
				// Over quota: writes fail, reads and removals work.
				var qe *DiskQuotaError
				if err := sb.WriteFile(ctx, "more", []byte("x")); !errors.Is(err, ErrDiskQuota) || !errors.As(err, &qe) || qe.Usage <= quota || qe.Quota != quota {
					t.Errorf("WriteFile over quota = %v, want a DiskQuotaError", err)
				}
				if _, err := sb.ReadFile(ctx, "f1"); err != nil {
					t.Errorf("ReadFile over quota: %v", err)
				}
				res = mustExec(t, sb, ExecRequest{Shell: "echo grow >> f1"})
				if res.ExitCode == 0 || res.DiskOverQuota <= 0 {
					t.Errorf("a file grew while over quota: %+v", res)
				}
				res = mustExec(t, sb, ExecRequest{Shell: "rm f2 f3 f4 f5"})
				if res.ExitCode != 0 || res.DiskOverQuota != 0 || res.Stderr != "" {
					t.Errorf("removing files over quota: %+v", res)
				}
				if err := sb.WriteFile(ctx, "more", []byte("x")); err != nil {
					t.Errorf("WriteFile back under quota: %v", err)
				}
			})

			t.Run("write file", func(t *testing.T) {
				t.Parallel()
				sb := mustProvision(t, p, "quota-write", Recipe{})
				if err := sb.WriteFile(ctx, "a", make([]byte, 150<<10)); err != nil {
					t.Fatalf("WriteFile within quota: %v", err)
				}
				if err := sb.WriteFile(ctx, "b", make([]byte, 150<<10)); !errors.Is(err, ErrDiskQuota) {
					t.Errorf("WriteFile past the quota = %v, want ErrDiskQuota", err)
				}
				if _, err := os.Stat(filepath.Join(sb.(*sandbox).workspace, "b")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused file exists: %v", err)
				}
				// Replacing a file counts its old size as freed.
				if err := sb.WriteFile(ctx, "a", make([]byte, 200<<10)); err != nil {
					t.Errorf("replacing a file within quota: %v", err)
				}
			})
		})
	}
}

func TestNewSweepsStaleWorkspaces(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			first, _ := mustProvider(t, kind, nil)
			base := first.(*provider).cfg.BaseDir
			live := mustProvision(t, first, "live", Recipe{})
			mustExec(t, live, ExecRequest{Shell: "echo mine > keep"})

			// Left behind by a crash: nobody holds their locks.
			stale := []string{filepath.Join(base, "C1_1700000000_000100-123456"), filepath.Join(base, ".probe-42")}
			for _, dir := range stale {
				if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// Not a workspace: never touched.
			foreign := filepath.Join(base, "not a workspace")
			if err := os.Mkdir(foreign, 0o755); err != nil {
				t.Fatal(err)
			}

			logs := &logtest.Buffer{}
			cfg := first.(*provider).cfg
			second, err := New(kind, Config{BaseDir: base, Limits: testLimits(), UID: cfg.UID, GID: cfg.GID}, zerologTo(logs))
			if err != nil {
				t.Fatal(err)
			}
			for _, dir := range stale {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("stale workspace %s survived the sweep: %v", dir, err)
				}
			}
			if _, err := os.Stat(foreign); err != nil {
				t.Errorf("the sweep removed a directory that is no workspace: %v", err)
			}
			if !strings.Contains(logs.String(), `"removed":2`) {
				t.Errorf("the sweep is not logged: %s", logs.String())
			}
			// The first provider's live sandbox is untouched and works.
			if got, err := live.ReadFile(context.Background(), "keep"); err != nil || string(got) != "mine\n" {
				t.Errorf("live sandbox after another provider's sweep: %q, %v", got, err)
			}
			if err := live.Alive(context.Background()); err != nil {
				t.Errorf("live sandbox lost: %v", err)
			}
			// And the second provider's own sandboxes are safe from a third.
			own := mustProvision(t, second, "second", Recipe{})
			if _, err := New(kind, Config{BaseDir: base, Limits: testLimits(), UID: cfg.UID, GID: cfg.GID}, zerologTo(&logtest.Buffer{})); err != nil {
				t.Fatal(err)
			}
			if err := own.Alive(context.Background()); err != nil {
				t.Errorf("a sweep removed a live sandbox: %v", err)
			}
		})
	}
}

// One command that writes five times the quota, in many files (each under RLIMIT_FSIZE), is
// stopped near the quota while it runs — at most diskSlack past it — and its result says the
// quota stopped it.
func TestDiskQuotaHoldsWhileACommandRuns(t *testing.T) {
	t.Parallel()
	const quota = 4 << 20
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, logs := mustProvider(t, kind, func(c *Config) { c.DiskQuota = quota; c.Limits.FileSizeBytes = 8 << 20 })
			if strings.Contains(logs.String(), "MEASURED AFTER EACH COMMAND") {
				t.Skipf("SKIPPING: workspaces cannot get a filesystem of their own here (%s); the quota is measured after each command only", logs)
			}
			sb := mustProvision(t, p, "quota-run", Recipe{})
			res := mustExec(t, sb, ExecRequest{Shell: "for i in $(seq 1 40); do head -c 524288 /dev/urandom > f$i || exit 7; done; echo all written"})
			used, err := diskUsage(context.Background(), sb.(*sandbox).workspace)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("a command writing %d bytes under a %d-byte quota left %d bytes (%+v)", 40*524288, quota, used, res)
			if used > quota+diskSlack(quota) || strings.Contains(res.Stdout, "all written") || res.ExitCode != 7 {
				t.Fatalf("the quota did not stop the command: %d bytes used under a %d-byte quota: %+v", used, quota, res)
			}
			if !res.DiskQuotaStopped || !strings.Contains(res.Stderr, "disk quota of 4194304 bytes stopped this command's writes") {
				t.Fatalf("the result does not say the quota stopped the command: %+v", res)
			}
			// Room again once files are removed.
			mustExec(t, sb, ExecRequest{Shell: "rm -f f*"})
			res = mustExec(t, sb, ExecRequest{Shell: "head -c 1000000 /dev/urandom > again && echo ok"})
			if res.Stdout != "ok\n" || res.DiskQuotaStopped {
				t.Fatalf("after removing the files: %+v", res)
			}
		})
	}
}
