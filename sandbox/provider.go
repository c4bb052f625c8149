package sandbox

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// provider is the machinery shared by the bwrap and process providers; they
// differ only in how a command line is wrapped.
type provider struct {
	name string
	cfg  Config
	log  zerolog.Logger
	// cred switches sandboxed processes to the sandbox user; nil runs them as
	// the bot's own user.
	cred *syscall.Credential
	// chown is the owner given to workspaces and files written by WriteFile;
	// -1 leaves ownership as is.
	chownUID, chownGID int
	prlimit            string
	// limitProcesses sets RLIMIT_NPROC; only meaningful in a user namespace
	// of its own, where it counts the command's processes, not the uid's.
	limitProcesses bool
	// memoryBound says how memory is bounded (MemoryBound* constants), and
	// memoryWhy why not by cgroup; cgroupParent is where sandboxes get
	// their cgroups ("" for none, see cgroup.go).
	memoryBound, memoryWhy string
	cgroupParent           string
	cgroupV1               bool // cgroupParent is a cgroup v1 memory directory (commands start behind a gate)
	// diskFS: each workspace is a filesystem of its own, of about Config.DiskQuota (diskfs.go).
	diskFS bool
	// inputData is what every wrapped command line reads from fds 3, 4, ...
	// (bwrap copies the sandbox's generated /etc files from them).
	inputData [][]byte
	// inside maps a workspace's host path to the path commands see.
	inside func(workspace string) string
	// wrap returns the host command running inner in the sandbox with
	// working directory dir (a clean, local, slash-separated path, "" for the
	// workspace root); binds are more bwrap mount arguments (the process
	// provider has none).
	wrap func(workspace, dir string, binds, inner []string) wrapped
	// escapeErr is the error value os.Root uses for paths escaping the root.
	escapeErr error
	// defaultMirrors is the cache used when Config.Mirrors is nil.
	mirrorsOnce    sync.Once
	defaultMirrors *Mirrors
	// forwarderPath is the copy of Config.Forwarder bwrap sandboxes run.
	forwarderMu   sync.Mutex
	forwarderPath string
	forwarderErr  error
}

const (
	defaultStepTimeout = 10 * time.Minute
	readyTimeout       = 30 * time.Second
	nobody             = 65534
)

func (p *provider) Name() string { return p.name }

// setUser decides which user runs sandboxed commands.
func (p *provider) setUser() {
	p.chownUID, p.chownGID = -1, -1
	uid, gid := p.cfg.UID, p.cfg.GID
	if uid == 0 && os.Geteuid() != 0 {
		return // run as ourselves
	}
	uid, gid = cmp.Or(uid, nobody), cmp.Or(gid, nobody)
	p.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	p.chownUID, p.chownGID = int(uid), int(gid)
}

// sandboxIDs returns the uid and gid sandboxed commands run as.
func (p *provider) sandboxIDs() (uint32, uint32) {
	if p.cred != nil {
		return p.cred.Uid, p.cred.Gid
	}
	return uint32(os.Getuid()), uint32(os.Getgid())
}

// prepareBase creates the base directory and learns os.Root's escape error.
func (p *provider) prepareBase() error {
	if err := os.MkdirAll(p.cfg.BaseDir, 0o711); err != nil {
		return fmt.Errorf("create sandbox base dir: %w", err)
	}
	r, err := os.OpenRoot(p.cfg.BaseDir)
	if err != nil {
		return fmt.Errorf("open sandbox base dir: %w", err)
	}
	defer r.Close()
	_, err = r.Open("..")
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		p.escapeErr = pe.Err
	}
	return nil
}

// limitArgs is the prlimit command line that applies the limits, with
// fileSize as RLIMIT_FSIZE, to be followed by the command.
func (p *provider) limitArgs(fileSize int64) []string {
	l := p.cfg.Limits
	args := []string{
		p.prlimit,
		// SIGXCPU at the soft limit says why; SIGKILL a second later if ignored.
		"--cpu=" + strconv.Itoa(l.CPUSeconds) + ":" + strconv.Itoa(l.CPUSeconds+1),
		// RLIMIT_DATA, not RLIMIT_AS: it counts what a process can dirty
		// (heap, private writable mappings) and not the address space
		// V8's WebAssembly cages or the JVM's class space only reserve.
		"--data=" + strconv.FormatInt(l.MemoryBytes, 10),
		"--nofile=" + strconv.Itoa(l.OpenFiles),
	}
	if p.limitProcesses {
		args = append(args, "--nproc="+strconv.Itoa(l.Processes))
	}
	return append(args,
		"--fsize="+strconv.FormatInt(fileSize, 10),
		"--core=0",
		"--",
	)
}

// wrapped is a command line wrap built: argv, its host working directory, and what it reads
// from the file descriptor after p.inputData's (bwrap's own arguments; nil: nothing).
type wrapped struct {
	argv  []string
	dir   string
	input []byte
}

// inputs returns the read ends of pipes already holding p.inputData and then w's input, to be
// a command's ExtraFiles; the caller closes them once it started. Each item
// must fit in a pipe buffer (64 KiB on Linux) since nobody else writes.
func (p *provider) inputs(w wrapped) ([]*os.File, error) {
	data := p.inputData
	if w.input != nil {
		data = append(data[:len(data):len(data)], w.input)
	}
	files := make([]*os.File, 0, len(data))
	for _, data := range data {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("command input pipe: %w", err)
		}
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = r.Close()
			closeAll(files)
			return nil, fmt.Errorf("command input pipe: %w", err)
		}
		files = append(files, r)
	}
	return files, nil
}

// withInputs gives cmd the command inputs of w (inputs) as its ExtraFiles and runs start, cmd.Start
// or cmd.Run, closing this process's ends once start returned: the child holds its own.
func (p *provider) withInputs(cmd *exec.Cmd, w wrapped, start func() error) error {
	inputs, err := p.inputs(w)
	if err != nil {
		return err
	}
	cmd.ExtraFiles = inputs
	err = start()
	closeAll(inputs)
	return err
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// clampToHard lowers each limit above the bot's own hard limit to that hard
// limit, with a warning: sandboxed processes cannot raise a hard limit, so
// prlimit would fail on every command.
func clampToHard(l Limits, log zerolog.Logger) Limits {
	clamp := func(name string, resource int, v, headroom int64) int64 {
		var r unix.Rlimit
		if err := unix.Getrlimit(resource, &r); err != nil || r.Max == unix.RLIM_INFINITY || uint64(v+headroom) <= r.Max {
			return v
		}
		lowered := max(int64(r.Max)-headroom, 1)
		log.Warn().Str("limit", name).Int64("configured", v).Int64("lowered_to", lowered).
			Msg("sandbox limit is above the bot's own hard limit; lowered")
		return lowered
	}
	l.CPUSeconds = int(clamp("cpu_seconds", unix.RLIMIT_CPU, int64(l.CPUSeconds), 1))
	l.MemoryBytes = clamp("memory_bytes", unix.RLIMIT_DATA, l.MemoryBytes, 0)
	l.OpenFiles = int(clamp("open_files", unix.RLIMIT_NOFILE, int64(l.OpenFiles), 0))
	l.Processes = int(clamp("processes", unix.RLIMIT_NPROC, int64(l.Processes), 0))
	l.FileSizeBytes = clamp("file_size_bytes", unix.RLIMIT_FSIZE, l.FileSizeBytes, 0)
	return l
}

// workspaceName turns a key into a safe directory name prefix: letters,
// digits, '-' and '_' only, at most 64 bytes.
func workspaceName(key string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		default:
			return '_'
		}
	}, key)
	return name[:min(len(name), 64)]
}

// Provision creates the workspace, starts the sentinel and runs the recipe.
func (p *provider) Provision(ctx context.Context, key string, recipe Recipe) (Sandbox, error) {
	if key == "" {
		return nil, errors.New("provision sandbox: empty key")
	}
	for i, st := range recipe.Steps {
		if strings.TrimSpace(st.Run) == "" {
			return nil, fmt.Errorf("provision sandbox %s: recipe step %d (%q) has nothing to run", key, i+1, st.Name)
		}
	}
	start := time.Now()
	ws, lock, err := p.newWorkspace(workspaceName(key) + "-")
	if err != nil {
		return nil, fmt.Errorf("provision sandbox %s: create workspace: %w", key, err)
	}
	s := &sandbox{
		p:            p,
		key:          key,
		workspace:    ws,
		lock:         lock,
		inside:       p.inside(ws),
		gone:         make(chan struct{}),
		sentinelDone: make(chan struct{}),
	}
	s.env = p.cfg.environ(s.inside)
	// abandon undoes what was made so far, before the sentinel exists.
	abandon := func() {
		_ = removeWorkspace(ws)
		s.closeEgress()
		_ = lock.Close()
	}
	gitURL := ""
	if recipe.Egress != nil {
		if gitURL, err = s.startEgress(recipe.Egress); err != nil {
			abandon()
			return nil, fmt.Errorf("provision sandbox %s: %w", key, err)
		}
	}
	if recipe.Repo != nil {
		// Before the sentinel starts: nothing of the sandbox has run in ws yet.
		s.commit, err = p.checkoutRepo(ctx, ws, recipe.Repo, gitURL)
		if err != nil {
			abandon()
			return nil, fmt.Errorf("provision sandbox %s: repository %s: %w", key, recipe.Repo.URL, err)
		}
	}
	if p.chownUID >= 0 {
		if err := os.Chown(ws, p.chownUID, p.chownGID); err != nil {
			abandon()
			return nil, fmt.Errorf("provision sandbox %s: chown workspace: %w", key, err)
		}
	}
	s.joinCgroup()
	if err := s.startSentinel(ctx); err != nil {
		if s.cgroup != nil {
			removeCgroup(s.cgroup)
		}
		abandon()
		return nil, fmt.Errorf("provision sandbox %s: %w", key, err)
	}
	for i, st := range recipe.Steps {
		stepName := cmp.Or(st.Name, "step "+strconv.Itoa(i+1))
		res, err := s.run(ctx, ExecRequest{Shell: st.Run}, cmp.Or(st.Timeout, defaultStepTimeout))
		if err == nil && (res.ExitCode != 0 || res.Killed != "") {
			err = &StepError{Step: stepName, Result: res}
		}
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("provision sandbox %s: %w", key, err)
		}
	}
	p.log.Info().Str("provider", p.name).Str("key", key).Str("workspace", ws).
		Int("steps", len(recipe.Steps)).Str("commit", s.commit).Bool("egress", recipe.Egress != nil).Dur("took", time.Since(start)).Msg("sandbox provisioned")
	return s, nil
}

// startSentinel starts the sandbox's long-lived process and waits until it
// says it is ready. Its exit, whoever causes it, marks the sandbox lost.
func (s *sandbox) startSentinel(ctx context.Context) error {
	w := s.p.wrap(s.workspace, "", nil, []string{"/bin/sh", "-c", "echo ready; read _"})
	cmd := exec.Command(w.argv[0], w.argv[1:]...)
	cmd.Dir = w.dir
	cmd.Env = s.env
	cmd.SysProcAttr = s.sysProcAttr(0)
	stderr := newHeadTail(4<<10, nil)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("start sentinel: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("start sentinel: %w", err)
	}
	if err := s.p.withInputs(cmd, w, cmd.Start); err != nil {
		return fmt.Errorf("start sentinel: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
	}()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	var failure error
	select {
	case err := <-ready:
		failure = err
	case <-ctx.Done():
		failure = ctx.Err()
	case <-timer.C:
		failure = fmt.Errorf("not ready after %s", readyTimeout)
	}
	if failure != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = in.Close()
		<-ready
		waitErr := cmd.Wait()
		msg, _ := stderr.result()
		return fmt.Errorf("start sentinel: %w (%v; stderr: %q)", failure, waitErr, strings.TrimSpace(msg))
	}
	s.sentinel, s.sentinelIn = cmd, in
	go func() {
		defer close(s.sentinelDone)
		err := cmd.Wait()
		if s.markGone("sentinel process exited: " + exitText(cmd.ProcessState, err)) {
			s.p.log.Warn().Str("key", s.key).Str("workspace", s.workspace).Msg("sandbox lost: its sentinel process exited")
		}
	}()
	return nil
}

func exitText(ps *os.ProcessState, err error) string {
	if ps != nil {
		return ps.String()
	}
	if err != nil {
		return err.Error()
	}
	return "unknown"
}

func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

// removeWorkspace removes a workspace, first making directories the sandbox
// user locked (chmod 000) writable again when not running as root.
func removeWorkspace(dir string) error {
	if err := unmountDiskFS(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	return nil
}
