package hands

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// SetupConfig is the channels' setup step (Config.Setup): a command (npm ci, go mod
// download) that each new sandbox of the channel runs once, before the turn's first model
// call, with the egress of a setup — its allowlist widened by Egress while it runs, and only
// then. Its outcome is a setup_result event (output, exit code), and a failure is said under
// the reply. After a successful setup on a repository's commit, what the setup added to the
// workspace (the files git does not track) is kept in the work store, and the next sandbox on
// the same commit, with the same command, unpacks it instead of running the command again.
type SetupConfig struct {
	// Command is the channel's setup command ("": none).
	Command func(ctx context.Context, team, channel string) (string, error)
	// Egress is what the setup may reach besides the sandbox's allowlist
	// (LOGBOOK_SETUP_EGRESS, e.g. the package registries).
	Egress egress.Allowlist
	// Cache records which stored workspace belongs to a repository, commit and command
	// (a *session.Store); nil, or no work store: setups are not cached.
	Cache SetupCache
	// Timeout bounds the command; default 10 minutes.
	Timeout time.Duration
}

// SetupCache maps a setup's key (repository, commit, command) to its stored workspace.
type SetupCache interface {
	SetupCache(ctx context.Context, key string) (sha string, err error) // session.ErrNotFound: none
	PutSetupCache(ctx context.Context, key, sha string, size int64, id session.ID) error
}

// setupArchive is where the cached workspace passes through the sandbox's workspace, and
// setupDeleted the list (NUL-separated) of tracked files the setup deleted, inside it.
const (
	setupArchive = ".logbook-setup.tar.gz"
	setupDeleted = ".logbook-setup-deleted"
)

// setupCacheVersion is part of every cache key: archives of an earlier shape (v1: untracked
// files only) are not restored.
const setupCacheVersion = "v2"

// Ready provisions the session's sandbox now, when the channel has a setup command, so that
// the setup runs before the first model call. It returns what the thread should be told: a
// failed setup, in a line ("" when there is nothing to say). Errors are the provisioning's.
func (h *Hands) Ready(ctx context.Context) (string, error) {
	if h.setup.Command == nil {
		return "", nil
	}
	h.mu.Lock()
	provisioned := h.sb != nil
	h.mu.Unlock()
	if !provisioned {
		command, err := h.setup.Command(ctx, h.sess.Team, h.sess.Channel)
		if err != nil || strings.TrimSpace(command) == "" {
			return "", err // no setup: the sandbox waits for the first tool call
		}
		if _, err := h.get(ctx); err != nil {
			return "", err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	note := h.setupNote
	h.setupNote = "" // said once
	return note, nil
}

// runSetup runs (or restores from the cache) the channel's setup in a sandbox just
// provisioned at commit; proxy is its egress proxy (nil: none). It returns the setup_result
// to record, nil when the channel has no setup command.
func (h *Hands) runSetup(ctx context.Context, sb sandbox.Sandbox, proxy *egress.Proxy, commit string) (*session.SetupResult, error) {
	if h.setup.Command == nil {
		return nil, nil
	}
	command, err := h.setup.Command(ctx, h.sess.Team, h.sess.Channel)
	if err != nil {
		return nil, fmt.Errorf("the channel's setup command: %w", err)
	}
	if command = strings.TrimSpace(command); command == "" {
		return nil, nil
	}
	t0 := time.Now()
	res := &session.SetupResult{Command: command, Commit: commit}
	key := h.setupKey(command, commit)
	if key != "" {
		if ok := h.restoreSetup(ctx, sb, key, res); ok {
			res.DurationMS = time.Since(t0).Milliseconds()
			return res, nil
		}
	}
	out, err := h.execSetup(ctx, sb, proxy, command, res)
	if err != nil {
		return nil, err
	}
	res.ExitCode, res.Output = out.ExitCode, clip.Text(strings.TrimSpace(out.Stdout+"\n"+out.Stderr), 4000)
	res.IsError = out.ExitCode != 0 || out.TimedOut || out.Killed != ""
	if res.IsError {
		h.setupNote = fmt.Sprintf("Setup `%s` failed (exit %d%s) in this thread's new sandbox; I went on without it. Its output is in the log. Last lines:\n```%s```",
			command, out.ExitCode, timedOut(out), lastLines(res.Output, 5))
	} else if key != "" {
		h.cacheSetup(ctx, sb, key, res)
	}
	res.DurationMS = time.Since(t0).Milliseconds()
	return res, nil
}

// execSetup runs command with the setup's egress window open, and closes it as it ends.
func (h *Hands) execSetup(ctx context.Context, sb sandbox.Sandbox, proxy *egress.Proxy, command string, res *session.SetupResult) (sandbox.ExecResult, error) {
	if proxy != nil && !h.setup.Egress.Empty() {
		closeWindow, err := proxy.Widen(h.setup.Egress)
		if err != nil {
			return sandbox.ExecResult{}, err
		}
		defer closeWindow()
		res.Egress = h.setup.Egress.String()
	}
	return sb.Exec(ctx, sandbox.ExecRequest{Shell: command, Timeout: cmp.Or(h.setup.Timeout, 10*time.Minute)})
}

// setupKey is the cache key of command on commit of the channel's repository; "" when the
// setup cannot be cached (no repository, no commit, no store).
func (h *Hands) setupKey(command, commit string) string {
	if h.setup.Cache == nil || h.work == nil || h.recipe.Repo == nil || commit == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(setupCacheVersion + "\x00" + h.recipe.Repo.URL + "\x00" + commit + "\x00" + command))
	return hex.EncodeToString(sum[:])
}

// restoreSetup unpacks the cached workspace of key into sb; false when there is none or it
// cannot be used (the command then runs).
func (h *Hands) restoreSetup(ctx context.Context, sb sandbox.Sandbox, key string, res *session.SetupResult) bool {
	sha, err := h.setup.Cache.SetupCache(ctx, key)
	if err != nil {
		if !errors.Is(err, session.ErrNotFound) {
			h.zl.Warn().Err(err).Msg("setup cache: look-up failed; running the setup")
		}
		return false
	}
	data, err := h.work.FileContent(ctx, sha)
	if err == nil {
		err = sb.WriteFile(ctx, setupArchive, data)
	}
	if err == nil {
		var out sandbox.ExecResult
		unpack := "tar -xzf " + setupArchive + " && rm -f " + setupArchive + " && if [ -f " + setupDeleted + " ]; then xargs -0 rm -f -- < " +
			setupDeleted + " && rm -f " + setupDeleted + "; fi"
		out, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", unpack}, Timeout: 5 * time.Minute})
		if err == nil && out.ExitCode != 0 {
			err = fmt.Errorf("tar: exit %d: %s", out.ExitCode, clip.Text(out.Stderr, 300))
		}
	}
	if err != nil {
		h.zl.Warn().Err(err).Str("sha256", sha).Msg("setup cache: could not unpack; running the setup")
		return false
	}
	res.Cached, res.CacheSHA = true, sha
	res.Output = "(the workspace as an earlier setup on this commit left it, from the cache)"
	return true
}

// cacheSetup keeps what the setup changed in the workspace for the next sandbox on the same
// commit: the files git does not track (ignored ones included: node_modules, and the caches
// under HOME, which is the workspace), the tracked files it modified (a rewritten lock file,
// generated code), and the list of the tracked files it deleted. A failure is logged: the
// next sandbox runs the setup.
func (h *Hands) cacheSetup(ctx context.Context, sb sandbox.Sandbox, key string, res *session.SetupResult) {
	pack := "set -e; f=$(mktemp); d=$(mktemp)\n" +
		"git ls-files --others -z -- . ':!" + setupArchive + "' > \"$f\"\n" +
		"git diff --no-renames --name-only -z --diff-filter=MT >> \"$f\"\n" +
		"git diff --no-renames --name-only -z --diff-filter=D > \"$d\"\n" +
		"if [ -s \"$d\" ]; then cp \"$d\" " + setupDeleted + "; printf '%s\\0' " + setupDeleted + " >> \"$f\"; fi\n" +
		"tar --null -T \"$f\" -czf " + setupArchive + "\n" +
		"rm -f \"$f\" \"$d\" " + setupDeleted
	out, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", pack}, Timeout: 5 * time.Minute})
	if err == nil && out.ExitCode != 0 {
		err = fmt.Errorf("pack: exit %d: %s", out.ExitCode, clip.Text(out.Stderr, 300))
	}
	var data []byte
	if err == nil {
		data, err = sb.ReadFile(ctx, setupArchive)
		_, _ = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"rm", "-f", setupArchive}, Timeout: time.Minute})
	}
	var sha string
	if err == nil {
		sha, err = h.work.Put(ctx, h.id, data)
	}
	if err == nil {
		err = h.setup.Cache.PutSetupCache(ctx, key, sha, int64(len(data)), h.id)
	}
	if err != nil {
		h.zl.Warn().Err(err).Msg("setup cache: could not keep the workspace after setup")
		return
	}
	res.CacheSHA = sha
}

func timedOut(r sandbox.ExecResult) string {
	switch {
	case r.TimedOut:
		return ", timed out"
	case r.Killed != "":
		return ", " + r.Killed
	}
	return ""
}

// lastLines is the last n lines of s, with no code fence in them.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.ReplaceAll(strings.Join(lines, "\n"), "```", "'''")
}
