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
	"sync/atomic"
	"syscall"
	"time"
)

// Memory by cgroup. Where the host delegates the cgroup v2 memory controller to
// the bot (memory listed in cgroup.subtree_control of the bot's own cgroup
// or of its parent, and that directory writable by the bot: systemd's
// Delegate=yes with the bot in a leaf, or a container given its own cgroup
// namespace), each sandbox gets a child cgroup there with memory.max =
// Limits.MemoryBytes and memory.swap.max = 0, and every process of the
// sandbox is started in it (clone3 CLONE_INTO_CGROUP, so not even bwrap
// runs outside it). Where the memory controller is on cgroup v1 instead
// (a hybrid host, older Docker) and the bot may create cgroups under its
// own memory cgroup (as root, usually), each sandbox gets a child there
// with memory.limit_in_bytes (and memory.memsw.limit_in_bytes, when swap
// is accounted) = Limits.MemoryBytes; v1 cannot start a process in a
// cgroup, so each command starts behind a gate (a shell waiting on a pipe
// before it execs the command) until the bot has moved it into the cgroup:
// nothing it starts runs outside. New proves the setup by starting a
// process in a probe cgroup; anything missing and the provider falls back
// to RLIMIT_DATA alone, per process, naming why in its startup log.
// RLIMIT_DATA applies in every case.

// probeSeq numbers the probe cgroups of this process.
var probeSeq atomic.Int64

// cgroupPrefix names the sandboxes' cgroups: cgroupPrefix + workspace name.
const cgroupPrefix = "logbook-"

// detectMemoryCgroup returns the cgroup directory under which sandboxes get
// their own memory-limited cgroups and whether it is cgroup v1, or why there
// is none.
func detectMemoryCgroup() (string, bool, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false, err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	dir, err := cgroupV2Dir(self, mountinfo)
	if err != nil {
		v1, v1err := cgroupV1MemoryDir(self, mountinfo)
		if v1err != nil {
			return "", false, fmt.Errorf("%w; cgroup v1: %w", err, v1err)
		}
		if perr := probeCgroupParent(v1, true); perr != nil {
			return "", false, fmt.Errorf("%w; cgroup v1: %w", err, perr)
		}
		return v1, true, nil
	}
	var reasons []string
	for _, cand := range []string{dir, filepath.Dir(dir)} {
		err := probeCgroupParent(cand, false)
		if err == nil {
			return cand, false, nil
		}
		reasons = append(reasons, err.Error())
	}
	return "", false, errors.New(strings.Join(reasons, "; "))
}

// cgroupV1MemoryDir finds the bot's own cgroup v1 memory directory from the
// contents of /proc/self/cgroup and /proc/self/mountinfo.
func cgroupV1MemoryDir(self, mountinfo []byte) (string, error) {
	path, found := "", false
	for line := range strings.Lines(string(self)) {
		_, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		controllers, p, ok := strings.Cut(rest, ":")
		if ok && slices.Contains(strings.Split(controllers, ","), "memory") {
			path, found = p, true
		}
	}
	if !found {
		return "", errors.New("no memory controller on cgroup v1")
	}
	dir, ok := mountedAt(mountinfo, path, func(fstype, superOpts string) bool {
		return fstype == "cgroup" && slices.Contains(strings.Split(superOpts, ","), "memory")
	})
	if !ok {
		return "", errors.New("the cgroup v1 memory hierarchy is not mounted")
	}
	return dir, nil
}

// mountedAt returns where path (of a cgroup hierarchy) is seen, on the first mount in
// mountinfo whose file system type and super options match and whose root holds path.
func mountedAt(mountinfo []byte, path string, match func(fstype, superOpts string) bool) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, f := strings.Fields(post), strings.Fields(pre)
		if !ok || len(pf) < 3 || len(f) < 5 || !match(pf[0], pf[2]) {
			continue
		}
		root, mount := f[3], f[4]
		rel, ok := strings.CutPrefix(path, root)
		if !ok || rel != "" && root != "/" && !strings.HasPrefix(rel, "/") {
			continue
		}
		return filepath.Join(mount, rel), true
	}
	return "", false
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
	dir, ok := mountedAt(mountinfo, path, func(fstype, _ string) bool { return fstype == "cgroup2" })
	if !ok {
		return "", errors.New("no cgroup2 file system is mounted")
	}
	return dir, nil
}

// probeCgroupParent checks that sandboxes can get memory-limited cgroups
// under dir: (v2) memory is delegated to its children, and a process really
// starts in a child with its limit set.
func probeCgroupParent(dir string, v1 bool) error {
	if !v1 {
		ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if !slices.Contains(strings.Fields(string(ctl)), "memory") {
			return fmt.Errorf("%s does not delegate the memory controller (cgroup.subtree_control: %q)", dir, strings.TrimSpace(string(ctl)))
		}
	}
	// Unique: providers made at once probe at once, and removing a probe kills what is in it.
	cg, err := createCgroup(dir, fmt.Sprintf("%sprobe-%d-%d", cgroupPrefix, os.Getpid(), probeSeq.Add(1)), 64<<20, v1)
	if err != nil {
		return err
	}
	defer removeCgroup(cg)
	if !v1 {
		cmd := exec.Command("/bin/true")
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("start a process in cgroup %s: %w", cg.Name(), err)
		}
		return nil
	}
	gate, err := newGate(0)
	if err != nil {
		return err
	}
	argv := gate.wrap([]string{"/bin/sh", "-c", `grep -q ":memory:.*/$1\$" /proc/self/cgroup`, "sh", filepath.Base(cg.Name())})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.ExtraFiles = []*os.File{gate.r}
	if err := cmd.Start(); err != nil {
		gate.close()
		return fmt.Errorf("start a process for cgroup %s: %w", cg.Name(), err)
	}
	err = gate.admit(cg, cmd.Process.Pid)
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("a process moved into cgroup %s: %w", cg.Name(), werr)
	}
	return err
}

// createCgroup creates the cgroup parent/name with its memory limit and no
// swap, and returns it opened (for SysProcAttr.CgroupFD with v2).
func createCgroup(parent, name string, limit int64, v1 bool) (*os.File, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	max, swap, noSwap := "memory.max", "memory.swap.max", "0"
	if v1 {
		// memsw is memory plus swap, and must not be below the memory limit.
		max, swap, noSwap = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10)
	}
	if err := os.WriteFile(filepath.Join(dir, max), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("set %s of cgroup %s: %w", max, dir, err)
	}
	_ = os.WriteFile(filepath.Join(dir, swap), []byte(noSwap), 0) // absent without swap accounting
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return f, nil
}

// gate holds a command back until the bot has moved it into a cgroup v1: the
// command line runs a shell that reads one byte from fd before it execs the
// command.
type gate struct {
	r, w *os.File
	fd   int
}

// newGate returns a gate read from fd 3+extra (after extra other
// ExtraFiles; the caller appends gate.r last).
func newGate(extra int) (*gate, error) {
	fd := 3 + extra
	if fd > 9 {
		return nil, errors.New("cgroup v1 gate: too many inherited files")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 gate: %w", err)
	}
	return &gate{r: r, w: w, fd: fd}, nil
}

// wrap returns argv behind the gate.
func (g *gate) wrap(argv []string) []string {
	n := strconv.Itoa(g.fd)
	script := `IFS= read -r go <&` + n + ` || exit 125; exec ` + n + `<&-; [ "$go" = go ] || exit 125; exec "$@"`
	return append([]string{"/bin/sh", "-c", script, "sh"}, argv...)
}

// admit moves pid into cg and then opens the gate; on failure the gate stays
// shut and the process exits without running the command.
func (g *gate) admit(cg *os.File, pid int) error {
	_ = g.r.Close()
	defer g.w.Close()
	if err := os.WriteFile(filepath.Join(cg.Name(), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move the command into cgroup %s: %w", cg.Name(), err)
	}
	_, err := g.w.WriteString("go\n")
	return err
}

func (g *gate) close() {
	_ = g.r.Close()
	_ = g.w.Close()
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
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) // v2, Linux 5.14+
	deadline := time.Now().Add(2 * time.Second)
	for {
		if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil { // v1 has no cgroup.kill
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// oomKills returns the cgroup's count of processes killed by its memory
// limit (oom_kill of memory.events with v2, memory.oom_control with v1), 0
// when unknown.
func oomKills(cg *os.File) int64 {
	data, err := os.ReadFile(filepath.Join(cg.Name(), "memory.events"))
	if err != nil {
		if data, err = os.ReadFile(filepath.Join(cg.Name(), "memory.oom_control")); err != nil {
			return 0
		}
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// chooseMemoryBound detects a delegated cgroup v2 memory controller, or a
// cgroup v1 one the bot may use; without either memory is bounded by
// RLIMIT_DATA alone, per process, and memoryWhy says why.
func (p *provider) chooseMemoryBound() {
	p.memoryBound = MemoryBoundRlimitData
	parent, v1, err := detectMemoryCgroup()
	if err != nil {
		p.memoryWhy = "no delegated cgroup v2 memory controller: " + err.Error()
		p.log.Warn().Str("why", p.memoryWhy).Int64("memory_bytes", p.cfg.Limits.MemoryBytes).
			Msg("sandbox memory is bounded PER PROCESS only (RLIMIT_DATA): a sandbox's processes together may use more than LOGBOOK_SANDBOX_MEMORY")
		return
	}
	p.cgroupParent, p.cgroupV1, p.memoryBound = parent, v1, MemoryBoundCgroup
}

// joinCgroup gives the sandbox its own memory-limited cgroup when the
// provider found where to make one; failing that, this sandbox falls back to
// RLIMIT_DATA alone, with a warning.
func (s *sandbox) joinCgroup() {
	s.memoryBound = MemoryBoundRlimitData
	if s.p.cgroupParent == "" {
		return
	}
	cg, err := createCgroup(s.p.cgroupParent, cgroupPrefix+filepath.Base(s.workspace), s.p.cfg.Limits.MemoryBytes, s.p.cgroupV1)
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
	if s.cgroup != nil && !s.p.cgroupV1 {
		attr.UseCgroupFD, attr.CgroupFD = true, int(s.cgroup.Fd())
	}
	return attr
}
