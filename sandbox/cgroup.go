package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Memory by cgroup v2. Where the host delegates the memory controller to
// the bot (memory listed in cgroup.subtree_control of the bot's own cgroup
// or of its parent, and that directory writable by the bot: systemd's
// Delegate=yes with the bot in a leaf, or a container given its own cgroup
// namespace), each sandbox gets a child cgroup there with memory.max =
// Limits.MemoryBytes and memory.swap.max = 0, and every process of the
// sandbox is started in it (clone3 CLONE_INTO_CGROUP, so not even bwrap
// runs outside it). New proves the setup by starting a process in a probe
// cgroup; anything missing and the provider falls back to RLIMIT_DATA
// alone, naming why in its startup log. RLIMIT_DATA applies in both cases.

// cgroupPrefix names the sandboxes' cgroups: cgroupPrefix + workspace name.
const cgroupPrefix = "logbook-"

// detectMemoryCgroup returns the delegated cgroup v2 directory under which
// sandboxes get their own memory-limited cgroups, or why there is none.
func detectMemoryCgroup() (string, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	dir, err := cgroupV2Dir(self, mountinfo)
	if err != nil {
		return "", err
	}
	var reasons []string
	for _, cand := range []string{dir, filepath.Dir(dir)} {
		err := probeCgroupParent(cand)
		if err == nil {
			return cand, nil
		}
		reasons = append(reasons, err.Error())
	}
	return "", errors.New(strings.Join(reasons, "; "))
}

// cgroupV2Dir finds the bot's own cgroup v2 directory from the contents of
// /proc/self/cgroup and /proc/self/mountinfo. It fails when the memory
// controller is bound to cgroup v1 or no cgroup2 file system is mounted.
func cgroupV2Dir(self, mountinfo []byte) (string, error) {
	var path string
	found := false
	for line := range strings.Lines(string(self)) {
		id, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if slices.Contains(strings.Split(controllers, ","), "memory") {
			return "", errors.New("the memory controller is on cgroup v1 here")
		}
		if id == "0" && controllers == "" {
			path, found = p, true
		}
	}
	if !found {
		return "", errors.New("the bot is in no cgroup v2")
	}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		root, mount := f[3], f[4]
		rel, ok := strings.CutPrefix(path, root)
		if !ok || rel != "" && root != "/" && !strings.HasPrefix(rel, "/") {
			continue
		}
		return filepath.Join(mount, rel), nil
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// probeCgroupParent checks that sandboxes can get memory-limited cgroups
// under dir: memory is delegated to its children, and a process really
// starts in a child with memory.max set.
func probeCgroupParent(dir string) error {
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if !slices.Contains(strings.Fields(string(ctl)), "memory") {
		return fmt.Errorf("%s does not delegate the memory controller (cgroup.subtree_control: %q)", dir, strings.TrimSpace(string(ctl)))
	}
	cg, err := createCgroup(dir, fmt.Sprintf("%sprobe-%d", cgroupPrefix, os.Getpid()), 64<<20)
	if err != nil {
		return err
	}
	defer removeCgroup(cg)
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start a process in cgroup %s: %w", cg.Name(), err)
	}
	return nil
}

// createCgroup creates the cgroup parent/name with memory.max = limit and
// no swap, and returns it opened, for SysProcAttr.CgroupFD.
func createCgroup(parent, name string, limit int64) (*os.File, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("set memory.max of cgroup %s: %w", dir, err)
	}
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0) // absent without swap accounting
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return f, nil
}

// removeCgroup closes cg, kills what is left in it and removes it.
func removeCgroup(cg *os.File) {
	_ = cg.Close()
	removeCgroupDir(cg.Name())
}

// removeCgroupDir kills what is left in the cgroup dir and removes it. The
// kernel takes a moment to empty a cgroup after its last process died, so
// it tries for up to two seconds.
func removeCgroupDir(dir string) {
	if _, err := os.Stat(dir); err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) // Linux 5.14+
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// oomKills returns the cgroup's count of processes killed by its memory
// limit (memory.events oom_kill), 0 when unknown.
func oomKills(cg *os.File) int64 {
	data, err := os.ReadFile(filepath.Join(cg.Name(), "memory.events"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// chooseMemoryBound detects a delegated cgroup v2 memory controller; without
// one memory is bounded by RLIMIT_DATA alone and memoryWhy says why.
func (p *provider) chooseMemoryBound() {
	p.memoryBound = MemoryBoundRlimitData
	parent, err := detectMemoryCgroup()
	if err != nil {
		p.memoryWhy = "no delegated cgroup v2 memory controller: " + err.Error()
		return
	}
	p.cgroupParent, p.memoryBound = parent, MemoryBoundCgroup
}

// joinCgroup gives the sandbox its own memory-limited cgroup when the
// provider found where to make one; failing that, this sandbox falls back to
// RLIMIT_DATA alone, with a warning.
func (s *sandbox) joinCgroup() {
	s.memoryBound = MemoryBoundRlimitData
	if s.p.cgroupParent == "" {
		return
	}
	cg, err := createCgroup(s.p.cgroupParent, cgroupPrefix+filepath.Base(s.workspace), s.p.cfg.Limits.MemoryBytes)
	if err != nil {
		s.p.log.Warn().Err(err).Str("key", s.key).Msg("sandbox memory bounded by RLIMIT_DATA alone: cannot create its cgroup")
		return
	}
	s.cgroup, s.memoryBound = cg, MemoryBoundCgroup
}

// sysProcAttr is how every process of the sandbox starts: a session of its
// own, the sandbox user, and the sandbox's cgroup when it has one.
func (s *sandbox) sysProcAttr(pdeathsig syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true, Credential: s.p.cred, Pdeathsig: pdeathsig}
	if s.cgroup != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, int(s.cgroup.Fd())
	}
	return attr
}
