package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Errors returned by providers and sandboxes. Callers branch with errors.Is. (session and
// slackemu keep lists alike in shape: each package names the errors it returns.)
var (
	// ErrLost means the sandbox is gone: its sentinel process was killed from
	// outside, its workspace vanished, or it was closed. The caller records
	// sandbox_lost with the wrapped reason, closes it and provisions a fresh
	// one from the recipe.
	ErrLost = errors.New("sandbox lost")
	// ErrOutsideWorkspace means a path (or working directory) names a place
	// outside the sandbox's workspace: absolute paths elsewhere, "..", or a
	// symbolic link leading out.
	ErrOutsideWorkspace = errors.New("path outside the sandbox workspace")
	// ErrDisabled is returned by every operation of the "none" provider's
	// sandboxes: command tools are switched off.
	ErrDisabled = errors.New("sandbox disabled")
	// ErrTooLarge is returned by ReadFile for a file over Limits.FileSizeBytes.
	ErrTooLarge = errors.New("file too large")
	// ErrNotRegular is returned by ReadFile and WriteFile for anything but a
	// regular file: a directory, a FIFO, a socket or a device. They are
	// refused without blocking, whatever is at the other end.
	ErrNotRegular = errors.New("not a regular file")
	// ErrDiskQuota is matched by a *DiskQuotaError: the workspace holds, or
	// a WriteFile would make it hold, more than Config.DiskQuota.
	ErrDiskQuota = errors.New("workspace over its disk quota")
	// ErrGitDir is returned by WriteFile for a path in a git directory (see gitguard.go):
	// what is written there (config, hooks) configures the commands git runs, so it is
	// changed by commands only, under the approval policy of commands.
	ErrGitDir = errors.New("writes into a git directory (.git) are refused; change the repository with git commands instead")
)

// DiskQuotaError says how far a workspace is, or would be, over
// Config.DiskQuota; errors.Is(err, ErrDiskQuota) holds. Sizes are bytes of
// disk allocated to the workspace's files and directories.
type DiskQuotaError struct {
	Usage, Quota int64
}

func (e *DiskQuotaError) Error() string {
	return fmt.Sprintf("workspace would use %d bytes, over its disk quota of %d bytes; remove files first", e.Usage, e.Quota)
}

func (e *DiskQuotaError) Is(target error) bool { return target == ErrDiskQuota }

// Provider kinds accepted by New.
const (
	KindBwrap   = "bwrap"
	KindProcess = "process"
	KindNone    = "none"
)

// Recipe is the declarative setup of a sandbox. Its steps run in order, as
// shell scripts inside the fresh workspace, at Provision; since a lost
// sandbox is replaced by provisioning again, they run again after a loss.
//
// Repo, if set, is checked out into the workspace before the steps run:
// the workspace is the work tree, at the commit the branch points to in
// the host's mirror (see Mirrors) at Provision, origin set to Repo.URL.
//
// Egress, if set, is the sandbox's way out (an *egress.Proxy, made for
// this sandbox alone): every command gets HTTP_PROXY and HTTPS_PROXY naming
// it, with its secret, recipe steps included. In a bwrap sandbox whose
// network is its own loopback (no AllowNetwork) it is the only way out: a
// forwarder in each command's network namespace listens on ProxyAddr and
// carries each connection over a Unix socket bound into the sandbox to
// Egress, outside. The process provider, and bwrap with AllowNetwork, serve
// Egress on a loopback port of the host: proxied, not enforced (its secret
// keeps other local processes out of it).
// With Repo too, the checkout's origin reaches Repo.URL through Egress (a
// git insteadOf rule to Egress.GitPath in .git/config). Close closes it.
type Recipe struct {
	Steps  []Step
	Repo   *RepoSpec
	Egress Egress
}

// Egress serves a sandbox's connections: Serve until Close, which ends every
// connection and waits for them (*egress.Proxy). Secret is the password of
// the proxy URL commands get, GitPath the path the repository is served at.
type Egress interface {
	Serve(l net.Listener) error
	Close() error
	Secret() string
	GitPath() string
}

// Step is one recipe step: Run is a shell script run by /bin/sh -c in the
// workspace. Timeout bounds it; zero means 10 minutes. Step timeouts are not
// capped by Limits.Timeout (recipes are written by operators, not models).
type Step struct {
	Name    string
	Run     string
	Timeout time.Duration
}

// Limits bound every command run in a sandbox. A zero field takes the
// default shown; negative values are rejected by New.
type Limits struct {
	// CPUSeconds is the soft RLIMIT_CPU per process, in seconds of CPU time:
	// SIGXCPU then, reported as Killed "cpu limit"; the hard limit (SIGKILL)
	// is one second later (60).
	CPUSeconds int
	// MemoryBytes bounds memory, in bytes (2 GiB): RLIMIT_DATA of each
	// process, which counts the heap and private writable mappings (what a
	// process can actually dirty) but not address space merely reserved, so
	// Node's WebAssembly and fetch and the JVM start. Where a cgroup v2
	// memory controller is delegated to the bot it is also the memory.max
	// of each sandbox as a whole (ExecResult.MemoryBound says which).
	MemoryBytes int64
	// OpenFiles is RLIMIT_NOFILE per process (1024).
	OpenFiles int
	// Processes is RLIMIT_NPROC: tasks (processes and threads) of the sandbox
	// user. With bwrap it is counted per command, because each command gets
	// its own user namespace (256). The process provider does not set it:
	// outside a user namespace it would count every process of the uid on
	// the host, and a uid already busy elsewhere could not fork at all.
	Processes int
	// FileSizeBytes is RLIMIT_FSIZE, the largest file a process may write,
	// in bytes; ReadFile refuses larger files with ErrTooLarge (256 MiB).
	FileSizeBytes int64
	// OutputBytes is how much of each of stdout and stderr is kept, in bytes:
	// half from the head, half from the tail, the middle replaced by a
	// "[... N bytes cut ...]" marker (64 KiB).
	OutputBytes int
	// OutputKillBytes is the total of stdout plus stderr, in bytes, after
	// which the command is killed and reported with Killed "output limit"
	// (64 × OutputBytes).
	OutputKillBytes int64
	// TmpBytes is the size of the private tmpfs mounted on /tmp with bwrap
	// (256 MiB).
	TmpBytes int64
	// Timeout is the default and the maximum wall-clock time of one Exec
	// (2 minutes).
	Timeout time.Duration
}

func (l Limits) withDefaults() Limits {
	l.CPUSeconds = cmp.Or(l.CPUSeconds, 60)
	l.MemoryBytes = cmp.Or(l.MemoryBytes, 2<<30)
	l.OpenFiles = cmp.Or(l.OpenFiles, 1024)
	l.Processes = cmp.Or(l.Processes, 256)
	l.FileSizeBytes = cmp.Or(l.FileSizeBytes, 256<<20)
	l.OutputBytes = cmp.Or(l.OutputBytes, 64<<10)
	l.OutputKillBytes = cmp.Or(l.OutputKillBytes, 64*int64(l.OutputBytes))
	l.TmpBytes = cmp.Or(l.TmpBytes, 256<<20)
	l.Timeout = cmp.Or(l.Timeout, 2*time.Minute)
	return l
}

func (l Limits) validate() error {
	if l.CPUSeconds < 0 || l.MemoryBytes < 0 || l.OpenFiles < 0 || l.Processes < 0 ||
		l.FileSizeBytes < 0 || l.OutputBytes < 0 || l.OutputKillBytes < 0 || l.TmpBytes < 0 || l.Timeout < 0 {
		return errors.New("limits must not be negative")
	}
	return nil
}

// Config configures a provider. The zero value is usable.
type Config struct {
	// BaseDir holds one workspace directory per sandbox (default: "logbook-
	// sandbox" in the system temp dir). With bwrap run as root it and its
	// parents must be searchable by the sandbox user; New checks this.
	BaseDir string
	// Limits bound every command.
	Limits Limits
	// AllowNetwork shares the host's network with bwrap sandboxes. Off by
	// default: a sandbox sees only its own loopback.
	AllowNetwork bool
	// Env is the complete environment of sandboxed commands; nothing of the
	// bot's own environment is ever passed through. Nil means PATH, HOME
	// (the workspace), LANG=C.UTF-8, TERM=dumb, TZ=UTC. Names that look like
	// secrets (DATABASE_URL, *TOKEN*, *KEY*, *SECRET*, *PASSWORD*) are refused.
	Env map[string]string
	// BwrapPath is the bubblewrap binary ("bwrap", looked up in PATH).
	BwrapPath string
	// PrlimitPath is util-linux prlimit, used to set the limits ("prlimit").
	// With bwrap it must lie under one of ReadOnlyPaths.
	PrlimitPath string
	// ReadOnlyPaths are the host directories mounted read-only in bwrap
	// sandboxes; symbolic links among them are recreated as links. Missing
	// ones are skipped. Default: /usr /bin /sbin /lib /lib32 /lib64 /libx32.
	// Unless it names /etc (which then shares the host's whole /etc), the
	// sandbox gets a minimal /etc of its own: passwd and group with only its
	// user ("sandbox") and nobody, hosts with localhost, nsswitch.conf, CA
	// certificates, the loader cache, Debian's alternatives, the JVM's and
	// Python's configuration, and resolv.conf only with AllowNetwork.
	ReadOnlyPaths []string
	// DiskQuota bounds each workspace, in bytes of disk allocated to its
	// files and directories (hard links counted once); zero means no quota.
	// cmd/logbook sets it from LOGBOOK_SANDBOX_DISK. How it is enforced:
	// run as root, each workspace is a filesystem of its own of the quota
	// plus a slack of quota/32 + 1 MiB (diskfs.go), so the kernel stops a
	// command's writes while it runs (ExecResult.DiskQuotaStopped); else it
	// is measured after each command only, and one command may write past it
	// (the startup log says which). In both cases
	// every command runs with RLIMIT_FSIZE at most the quota left, so no one
	// file outgrows it; after each command the workspace is measured, and a
	// command that left it over the quota reports ExecResult.DiskOverQuota
	// and a note on stderr. While over, WriteFile fails with a
	// *DiskQuotaError and commands run with RLIMIT_FSIZE 0: files can be
	// read, truncated and removed but not grown, until usage is back under
	// the quota. WriteFile refuses data that would go over. Not bounded:
	// /tmp (see Limits.TmpBytes), and without a filesystem of its own, inodes
	// of empty files.
	DiskQuota int64
	// UID and GID run the sandboxed commands. Zero means: nobody (65534)
	// when the bot runs as root, else the bot's own user. Root is never used.
	UID, GID uint32
	// Mirrors caches the repositories recipes check out; nil means a cache
	// under BaseDir/mirrors, made at the first Recipe.Repo.
	Mirrors *Mirrors
	// Forwarder is the host path of a binary that runs the in-sandbox
	// forwarder when its first argument is ForwarderCommand (it calls
	// MaybeForward first thing); bwrap sandboxes with Recipe.Egress need it.
	// Default: this process's own executable. It is copied under BaseDir,
	// where the sandbox user can read it.
	Forwarder string
}

const defaultPath = "/usr/local/bin:/usr/bin:/bin"

var secretNameParts = []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "DATABASE_URL"}

func (c Config) validate() error {
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if c.DiskQuota < 0 {
		return errors.New("disk quota must not be negative")
	}
	for name := range c.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("sandbox env name %q is invalid", name)
		}
		upper := strings.ToUpper(name)
		for _, part := range secretNameParts {
			if strings.Contains(upper, part) {
				return fmt.Errorf("sandbox env %s looks like a secret; secrets never enter a sandbox", name)
			}
		}
	}
	return nil
}

// environ returns the exact environment of sandboxed commands, sorted, never
// nil (a nil exec.Cmd.Env would inherit the bot's environment).
func (c Config) environ(home string) []string {
	env := c.Env
	if env == nil {
		env = map[string]string{"PATH": defaultPath, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", "TZ": "UTC"}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// ExecRequest is one command. Exactly one of Argv (run directly, Argv[0]
// looked up in the sandbox's PATH) and Shell (run by /bin/sh -c) is set.
// Dir is relative to the workspace ("" is its root). Timeout zero or above
// Limits.Timeout means Limits.Timeout.
type ExecRequest struct {
	Argv    []string
	Shell   string
	Stdin   []byte
	Dir     string
	Timeout time.Duration
}

// How a sandbox bounds memory, as ExecResult.MemoryBound and the provider's
// startup log ("memory_bound") say.
const (
	// MemoryBoundRlimitData: Limits.MemoryBytes is RLIMIT_DATA of each
	// process (heap and private writable mappings), nothing bounds the
	// sandbox's total.
	MemoryBoundRlimitData = "rlimit-data"
	// MemoryBoundCgroup: additionally, the sandbox's processes share one
	// cgroup v2 whose memory.max is Limits.MemoryBytes (swap off).
	MemoryBoundCgroup = "cgroup"
)

// ExecResult is what a command did. ExitCode is -1 when the command was
// killed by a signal (timeout, output limit, loss). Stdout and Stderr keep
// head and tail of each stream; Truncated says something was cut. Killed
// says why the sandbox killed the command: "timeout", "output limit",
// "cpu limit", "memory limit" (only with MemoryBoundCgroup: the kernel's
// OOM killer acted in the sandbox's cgroup), or "" when it was not killed
// by the sandbox. MemoryBound is
// how memory was bounded: MemoryBoundRlimitData or MemoryBoundCgroup.
// DiskOverQuota is how many bytes the workspace is over Config.DiskQuota
// after the command (0 when within; see Config.DiskQuota). DiskQuotaStopped
// says the workspace's own filesystem (diskfs.go) was full after the
// command: the quota refused some of its writes (a note on stderr says so).
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int
	Duration       time.Duration
	Truncated      bool
	TimedOut       bool
	Killed         string
	MemoryBound    string
	DiskOverQuota  int64
	// DiskQuotaStopped: the quota refused the command's writes as it ran.
	DiskQuotaStopped bool
}

// Provider creates sandboxes.
type Provider interface {
	// Name is the provider kind: "bwrap", "process" or "none".
	Name() string
	// Provision creates a sandbox with a fresh workspace for key (e.g. a
	// session id; used only to name the workspace) and runs the recipe in
	// it. A failing step returns a *StepError and leaves nothing behind.
	Provision(ctx context.Context, key string, recipe Recipe) (Sandbox, error)
}

// Sandbox is one session's hands. Its methods are safe for concurrent use.
type Sandbox interface {
	// Exec runs a command. A non-zero exit, a timeout or a limit is reported
	// in ExecResult, not as an error. Errors: ErrOutsideWorkspace for a bad
	// Dir, ErrLost (wrapped with the reason) when the sandbox is gone, even
	// mid-command, ErrDisabled for "none", ctx's error when ctx ends first.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	// ReadFile reads a file of the workspace. path is relative to the
	// workspace or absolute under the workspace as the sandbox sees it (e.g.
	// /workspace/a.txt with bwrap); anything else, including a symbolic link
	// out, is ErrOutsideWorkspace. Files over Limits.FileSizeBytes give
	// ErrTooLarge; directories, FIFOs, sockets and devices ErrNotRegular
	// (at once, never blocking on them). ctx's error when ctx ends first.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile creates or replaces a regular file of the workspace (mode
	// 0644, parents created 0755, owned by the sandbox user). Same path rules
	// and errors as ReadFile.
	WriteFile(ctx context.Context, path string, data []byte) error
	// Alive returns nil, or ErrLost wrapped with the reason.
	Alive(ctx context.Context) error
	// Close kills every process of the sandbox and removes its workspace.
	// It is idempotent; later calls to other methods return ErrLost.
	Close() error
}

// StepError is returned by Provision when a recipe step fails.
type StepError struct {
	Step   string
	Result ExecResult
}

func (e *StepError) Error() string {
	if e.Result.Killed != "" {
		return fmt.Sprintf("recipe step %q killed: %s", e.Step, e.Result.Killed)
	}
	return fmt.Sprintf("recipe step %q exited with code %d", e.Step, e.Result.ExitCode)
}

// New returns the provider of the given kind: "bwrap", "process", "none",
// or "" for the best available (bwrap when the binary is found, else process
// with a loud warning). A bwrap provider is probed at once: New fails,
// naming the missing feature, if bubblewrap cannot isolate on this machine.
func New(kind string, cfg Config, log zerolog.Logger) (Provider, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Limits = cfg.Limits.withDefaults()
	cfg.BaseDir = cmp.Or(cfg.BaseDir, filepath.Join(os.TempDir(), "logbook-sandbox"))
	cfg.BwrapPath = cmp.Or(cfg.BwrapPath, "bwrap")
	cfg.PrlimitPath = cmp.Or(cfg.PrlimitPath, "prlimit")
	if cfg.ReadOnlyPaths == nil {
		cfg.ReadOnlyPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
	}
	log = log.With().Str("component", "sandbox").Logger()

	switch kind {
	case KindNone:
		log.Info().Msg("sandbox provider \"none\": command tools are disabled")
		return noneProvider{}, nil
	case KindBwrap:
		return newBwrap(cfg, log)
	case KindProcess:
		return newProcess(cfg, log)
	case "":
		if _, err := lookPath(cfg.BwrapPath); err == nil {
			return newBwrap(cfg, log)
		}
		log.Warn().Str("bwrap", cfg.BwrapPath).Msg("bubblewrap not found; falling back to the plain-process sandbox provider, which does NOT isolate")
		return newProcess(cfg, log)
	default:
		return nil, fmt.Errorf("unknown sandbox provider %q (want bwrap, process or none)", kind)
	}
}
