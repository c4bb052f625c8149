package sandbox

import (
	"strings"
	"testing"
	"time"
)

func TestCgroupV2Dir(t *testing.T) {
	t.Parallel()
	const v2Mount = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
	for _, tc := range []struct {
		name, self, mountinfo, want, err string
	}{
		{
			name:      "systemd service",
			self:      "0::/system.slice/logbook.service\n",
			mountinfo: "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + v2Mount,
			want:      "/sys/fs/cgroup/system.slice/logbook.service",
		},
		{
			name:      "container with its own cgroup namespace",
			self:      "0::/\n",
			mountinfo: v2Mount,
			want:      "/sys/fs/cgroup",
		},
		{
			name:      "mount of a subtree",
			self:      "0::/box/bot\n",
			mountinfo: "30 23 0:26 /box /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want:      "/sys/fs/cgroup/bot",
		},
		{
			name:      "memory on cgroup v1 (hybrid)",
			self:      "4:memory:/x\n0::/\n",
			mountinfo: "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
			err:       "cgroup v1",
		},
		{
			name:      "no cgroup2 mounted",
			self:      "0::/\n",
			mountinfo: "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
			err:       "no cgroup2",
		},
		{
			name: "cgroup v1 only",
			self: "1:cpu:/\n",
			err:  "no cgroup v2",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupV2Dir([]byte(tc.self), []byte(tc.mountinfo))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("cgroupV2Dir = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("cgroupV2Dir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Where the host delegates a cgroup v2 memory controller, the sandbox as a
// whole is bounded: many processes each under RLIMIT_DATA together hit
// memory.max and are reported as killed by the memory limit.
func TestBwrapCgroupMemoryBound(t *testing.T) {
	t.Parallel()
	if _, _, err := detectMemoryCgroup(); err != nil {
		t.Skipf("SKIPPING: the cgroup memory bound is NOT being tested here (sandboxes fall back to RLIMIT_DATA): %v", err)
	}
	p, logs := mustProvider(t, KindBwrap, func(c *Config) { c.Limits.MemoryBytes = 96 << 20 })
	if !strings.Contains(logs.String(), `"memory_bound":"cgroup"`) {
		t.Errorf("startup log does not say cgroup: %s", logs.String())
	}
	sb := mustProvision(t, p, "cgroup-mem", Recipe{})
	// Four processes of 64 MB each, touched: each within RLIMIT_DATA, together over memory.max.
	res := mustExec(t, sb, ExecRequest{Shell: `for i in 1 2 3 4; do awk 'BEGIN { s = sprintf("%64000000s", ""); gsub(/ /, "x", s); system("sleep 5") }' & done; wait`})
	if res.MemoryBound != MemoryBoundCgroup || res.Killed != "memory limit" {
		t.Errorf("four 64 MB processes under a 96 MiB cgroup: %+v", res)
	}
}

// The case: four processes of 400 MB each, every one within the 512 MiB limit (its
// RLIMIT_DATA), together over it. Where the bot may use a memory cgroup (v2 delegated, or v1
// as root — this test's machine), the sandbox as a whole is bounded and the command is
// reported killed by the memory limit, with either provider. Where it may not, the provider
// says so at start: the bound is per process.
func TestSandboxMemoryBoundsTheWholeSandbox(t *testing.T) {
	t.Parallel()
	_, _, cgErr := detectMemoryCgroup()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p, logs := mustProvider(t, kind, func(c *Config) { c.Limits.MemoryBytes = 512 << 20; c.Limits.Timeout = time.Minute })
			if cgErr != nil {
				if !strings.Contains(logs.String(), "PER PROCESS only") {
					t.Fatalf("no cgroup here (%v), and the startup log does not say the bound is per process: %s", cgErr, logs)
				}
				t.Skipf("SKIPPING the whole-sandbox bound: no memory cgroup usable here (%v); the startup log says the bound is per process", cgErr)
			}
			sb := mustProvision(t, p, "mem-total", Recipe{})
			res := mustExec(t, sb, ExecRequest{Shell: `for i in 1 2 3 4; do awk 'BEGIN { s = sprintf("%400000000s", ""); system("sleep 3"); print length(s) }' & done; wait`})
			if res.MemoryBound != MemoryBoundCgroup || res.Killed != "memory limit" || strings.Count(res.Stdout, "400000000") == 4 {
				t.Fatalf("four 400 MB processes under a 512 MiB sandbox: %+v", res)
			}
		})
	}
}

func TestCgroupV1MemoryDir(t *testing.T) {
	t.Parallel()
	const mounts = "30 23 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n31 23 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
	got, err := cgroupV1MemoryDir([]byte("5:cpu:/a\n4:memory:/process_api/x\n0::/\n"), []byte(mounts))
	if err != nil || got != "/sys/fs/cgroup/memory/process_api/x" {
		t.Errorf("cgroupV1MemoryDir = %q, %v", got, err)
	}
	if _, err := cgroupV1MemoryDir([]byte("0::/\n"), []byte(mounts)); err == nil {
		t.Error("no memory controller on v1, and no error")
	}
	if _, err := cgroupV1MemoryDir([]byte("4:memory:/x\n"), []byte("31 23 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")); err == nil {
		t.Error("memory hierarchy not mounted, and no error")
	}
}
