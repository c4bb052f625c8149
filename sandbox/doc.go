// Package sandbox gives each session disposable hands: a place where the
// commands and file edits the model asks for run, never in the bot's own
// process or environment. It knows nothing of Slack or of what sessions say;
// a sandbox is named by an opaque key (the caller uses the session id).
//
// # Lifecycle
//
// New picks a Provider: "bwrap" (bubblewrap, the default wherever the binary
// is found), "process" (plain child processes, for machines without
// bubblewrap; it logs a loud warning at start that it does not isolate) or
// "none" (Provision works, every operation returns ErrDisabled, so command
// tools are off). cmd/logbook maps LOGBOOK_SANDBOX to the kind.
//
// New first removes workspaces a crashed bot left under Config.BaseDir
// (those no live sandbox holds locked). Provider.Provision creates a fresh,
// locked workspace directory under Config.BaseDir, starts the sandbox's
// sentinel process and runs the Recipe's steps in it; a failing step
// returns a *StepError and leaves nothing behind. The caller appends
// sandbox_provisioned.
//
// Sandbox.Exec runs one command; Sandbox.ReadFile and Sandbox.WriteFile move
// bytes in and out of the workspace. When the sentinel dies (killed by an
// operator, the OOM killer, a reboot) or the workspace vanishes, the sandbox
// is lost: Alive, Exec (even one already running, which is killed) and the
// file methods return ErrLost wrapped with the reason. The caller appends
// sandbox_lost with that reason, calls Close, and provisions again from the
// same recipe; the new sandbox has a new, empty workspace. The log, not the
// sandbox, is what survives. Close kills everything still running and
// removes the workspace.
//
// # How a bwrap sandbox isolates
//
// Every Exec starts a new bwrap, run as an unprivileged user (nobody, 65534,
// when the bot runs as root; the bot's own user otherwise; never root), with:
//
//   - new user, pid, ipc, uts (hostname "sandbox") and, where the kernel
//     allows, cgroup namespaces, and a new network namespace holding only
//     loopback unless Config.AllowNetwork is set; --disable-userns forbids
//     nested user namespaces (if this bwrap or kernel lacks it, New logs a
//     DEGRADED warning and goes on);
//   - a root made of: Config.ReadOnlyPaths (/usr and the /bin, /lib...
//     links by default) read-only; an /etc of its own (passwd and group
//     naming only the sandbox user and nobody, hosts with localhost, CA
//     certificates, the loader cache, alternatives, JVM and Python
//     configuration; resolv.conf only with AllowNetwork; no shadow, no host
//     accounts, host name or machine id); a fresh /proc of its own pid namespace;
//     a minimal /dev; a private size-limited tmpfs on /tmp; the workspace
//     bound read-write on /workspace, the only place that persists and the
//     only host directory it can write; the root itself remounted
//     read-only;
//   - no capabilities, no_new_privs (no seccomp filter), a session of its
//     own without a controlling terminal (no TIOCSTI injection into the
//     bot's terminal), and --die-with-parent;
//   - an environment that is exactly Config.Env (by default PATH, HOME=
//     /workspace, LANG, TERM, TZ): exec.Cmd.Env is always set, so nothing of
//     the bot's environment (Slack tokens, model API keys, DATABASE_URL) is
//     inherited, not even by bwrap itself, whose /proc/1/environ the
//     sandbox can read;
//   - limits set by util-linux prlimit inside the namespaces: CPU seconds,
//     data size (RLIMIT_DATA, not the address space, which runtimes such as
//     V8 and the JVM reserve by the gigabyte), open files, processes
//     (counted per command, since each command has its own user namespace),
//     file size, no core dumps; and where the host delegates a cgroup v2
//     memory controller to the bot, one cgroup per sandbox, holding all its
//     processes, with memory.max (see cgroup.go; New detects it and logs
//     memory_bound "cgroup" or "rlimit-data" with the reason);
//   - a wall-clock timeout and an output cap: exec.Cmd.Cancel SIGKILLs the
//     process group and WaitDelay bounds the wait for pipes; killing bwrap
//     kills its pid namespace, so nothing a command started (background
//     jobs, daemons that setsid) outlives the Exec. Output keeps head and
//     tail of each stream with the middle marked as cut; past
//     Limits.OutputKillBytes the command is killed.
//
// New probes all of this once with a real command and fails, naming the
// namespaces this machine refuses, if bubblewrap cannot isolate here. In
// the container the package was developed in (Debian 12, bubblewrap 0.8.0,
// kernel 6.18, running as root) every flag above works.
//
// The sentinel is a bwrap of the same shape running a shell that waits on
// a pipe from the bot: it also exits when the bot dies.
//
// ReadFile and WriteFile work from the host side through os.Root on the
// workspace, which refuses "..", absolute paths elsewhere and symbolic links
// leading out (a sandboxed command can plant such links): ErrOutsideWorkspace.
// They touch regular files only: a FIFO, socket or device (which a command
// can also plant) is refused with ErrNotRegular without being waited on,
// since the open is non-blocking and checked with fstat, so neither they nor
// Close can wedge on one. Written files are owned by the sandbox user.
//
// # Threat model
//
// The adversary is the code the model runs: prompt-injected, buggy, or
// malicious. Defended: reading the bot's secrets (environment, files outside
// the read-only system paths, other sessions' workspaces); writing anywhere
// but its own workspace and /tmp; reaching the network (Postgres on
// 127.0.0.1:5432 included) when AllowNetwork is off; exhausting the machine
// with fork bombs, endless output, endless sleeps, runaway CPU, huge files
// or allocations; surviving its own timeout; living on after Close.
//
// Not defended, or only partly:
//
//   - Kernel exploits. bwrap relies on the kernel's namespaces; there is no
//     seccomp filter, no VM. A kernel bug reachable from an unprivileged user
//     namespace breaks isolation. Run the bot on a host you would also
//     trust with unprivileged user namespaces.
//   - What the read-only paths reveal: by default all of /usr and the
//     allowlisted parts of /etc are readable, so any world-readable secret
//     there is readable. Keep secrets out of world-readable files, or
//     narrow Config.ReadOnlyPaths.
//     The sandbox can also read its own bwrap command line (/proc/1/cmdline),
//     which shows the host path of its workspace and its limits.
//   - Memory is RLIMIT_DATA per process unless a cgroup v2 memory
//     controller is available (ExecResult.MemoryBound and the startup log
//     say which): many processes can each use up to the limit, and file
//     mappings and the stack are not counted. No CPU share or I/O bandwidth
//     limit either.
//   - Disk: without Config.DiskQuota a workspace has no quota and
//     FileSizeBytes caps each file, not their number. With it, a command
//     can overshoot the quota by at most what it writes to several files
//     at once before the measurement after it; from then on files cannot
//     grow until usage is back under. Empty files (inodes) are not bounded.
//     /tmp is capped by Limits.TmpBytes (memory-backed).
//   - With AllowNetwork the sandbox shares the host's network namespace and
//     reaches everything the host reaches, 127.0.0.1 included.
//   - All sandboxes run as the same host uid; they are kept apart by mount
//     namespaces, not by file ownership.
//   - If the bot dies, its sandboxes' processes die with it (the sentinel
//     sees its pipe close; each command's bwrap has a parent-death signal),
//     and their workspaces stay on disk under BaseDir until the next New
//     sweeps them (each live workspace is flock'ed by its sandbox; New
//     removes those whose lock it can take, never a live one of another
//     provider or process).
//     Go ties the parent-death signal to the OS thread that started the
//     child, so a thread ending early (runtime.LockOSThread without unlock)
//     would kill a running command: it then reports ExitCode -1.
//
// The process provider defends none of the above except the environment
// allowlist, the limits (but no process limit: RLIMIT_NPROC would count
// every process of the sandbox uid on the host, so a fork bomb is stopped
// only by the timeout), timeouts and process-group kill; it runs
// commands as nobody when the bot is root, so the bot's own root-only files
// stay out of reach, but everything world-readable is readable and the
// network is open.
package sandbox
