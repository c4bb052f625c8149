package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// findRuntime returns where a runtime is installed among the sandbox's
// default PATH, or skips the test naming it.
func findRuntime(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range filepath.SplitList(defaultPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Skipf("SKIPPING: %s is not installed in %s; this runtime is NOT being tested under the default limits", name, defaultPath)
	return ""
}

// Runtimes that reserve large address spaces at start (V8's WebAssembly
// cages, the JVM's compressed class space) must start inside the bwrap
// sandbox with the default limits.
func TestBwrapRuntimesStartWithDefaultLimits(t *testing.T) {
	t.Parallel()
	p, _ := mustProvider(t, KindBwrap, func(c *Config) {
		c.Limits = Limits{Timeout: c.Limits.Timeout} // the defaults, but the test's timeout
	})
	for _, tc := range []struct {
		runtime string
		argv    []string
		want    string
	}{
		{"node", []string{"node", "-e", "console.log(1)"}, "1\n"},
		{"node", []string{"node", "-e", `WebAssembly.instantiate(new Uint8Array([0,97,115,109,1,0,0,0])).then(() => console.log(typeof fetch, new WebAssembly.Memory({initial: 1}).buffer.byteLength))`}, "function 65536\n"},
		{"python3", []string{"python3", "-c", "print(1)"}, "1\n"},
		{"java", []string{"java", "-version"}, ""},
	} {
		t.Run(strings.Join(tc.argv[:2], " "), func(t *testing.T) {
			t.Parallel()
			findRuntime(t, tc.runtime)
			sb := mustProvision(t, p, tc.runtime, Recipe{})
			res := mustExec(t, sb, ExecRequest{Argv: tc.argv})
			if res.ExitCode != 0 || res.Stdout != tc.want {
				t.Errorf("%s did not start under the default limits: %+v", tc.runtime, res)
			}
			if tc.runtime == "java" && !strings.Contains(res.Stderr, "version") {
				t.Errorf("java -version printed no version: %+v", res)
			}
		})
	}
	t.Run("memory hog", func(t *testing.T) {
		t.Parallel()
		sb := mustProvision(t, p, "hog", Recipe{})
		// 3 GB, over the 2 GiB default.
		res := mustExec(t, sb, ExecRequest{Argv: []string{"awk", `BEGIN { s = sprintf("%3000000000s", ""); print length(s) }`}})
		if res.ExitCode == 0 || strings.Contains(res.Stdout, "3000000000") {
			t.Errorf("allocated 3 GB under the default 2 GiB limit: %+v", res)
		}
		if res.MemoryBound == "" {
			t.Errorf("ExecResult does not say how memory was bound: %+v", res)
		}
	})
}

func TestMemoryBoundIsReported(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, logs := mustProvider(t, kind, nil)
			sb := mustProvision(t, p, "bound", Recipe{})
			res := mustExec(t, sb, ExecRequest{Shell: "grep -E 'Max (data size|address space)' /proc/self/limits"})
			if res.MemoryBound != MemoryBoundRlimitData && res.MemoryBound != MemoryBoundCgroup {
				t.Fatalf("MemoryBound = %q", res.MemoryBound)
			}
			if !strings.Contains(logs.String(), `"memory_bound":"`+res.MemoryBound+`"`) {
				t.Errorf("the startup log does not say the memory bound %q: %s", res.MemoryBound, logs.String())
			}
			if res.MemoryBound == MemoryBoundRlimitData && !strings.Contains(logs.String(), `"memory_bound_why":"no delegated cgroup v2 memory controller: `) {
				t.Errorf("the startup log does not say why memory is not bounded by cgroup: %s", logs.String())
			}
			limit := "536870912" // testLimits' 512 MiB
			var data, as string
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				if f := strings.Fields(line); len(f) >= 6 {
					if strings.HasPrefix(line, "Max data size") {
						data = f[3]
					} else {
						as = f[3]
					}
				}
			}
			if data != limit {
				t.Errorf("RLIMIT_DATA = %q, want %s:\n%s", data, limit, res.Stdout)
			}
			if as == limit {
				t.Errorf("RLIMIT_AS is still set to the memory limit; runtimes reserving address space break:\n%s", res.Stdout)
			}
		})
	}
}

// Outside a user namespace RLIMIT_NPROC counts every process of the uid on
// the host, so the process provider must not set it: a command that forks a
// few children works even when the uid already runs more than the limit.
func TestProcessProviderDoesNotLimitProcessesPerUID(t *testing.T) {
	t.Parallel()
	// One process allowed: the sentinel alone already has it.
	p, _ := mustProvider(t, KindProcess, func(c *Config) { c.Limits.Processes = 1 })
	sb := mustProvision(t, p, "nproc-host", Recipe{})
	res := mustExec(t, sb, ExecRequest{Shell: "for i in 1 2 3 4; do (echo child $i) & done; wait; grep 'Max processes' /proc/self/limits"})
	if res.ExitCode != 0 || strings.Count(res.Stdout, "child ") != 4 {
		t.Errorf("forking 4 children failed with the process provider: %+v", res)
	}
	_, line, _ := strings.Cut(res.Stdout, "Max processes")
	if f := strings.Fields(line); len(f) < 1 || f[0] == "1" {
		t.Errorf("RLIMIT_NPROC was set by the process provider: %q", res.Stdout)
	}
}
