package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session/clip"
)

// RepoSpec is the repository a recipe checks out into the workspace: URL
// and Branch are recorded, Header (an HTTP header for the host's git, e.g.
// "Authorization: Bearer <token>") is a secret: never serialised, never
// printed by %v or %#v, never written to disk, never given to the sandbox.
type RepoSpec struct {
	URL    string `json:"url"`
	Branch string `json:"branch,omitempty"`
	Header string `json:"-"`
}

// String hides Header.
func (r RepoSpec) String() string {
	h := ""
	if r.Header != "" {
		h = " header=[hidden]"
	}
	return fmt.Sprintf("{url=%s branch=%s%s}", r.URL, r.Branch, h)
}

// GoString hides Header.
func (r RepoSpec) GoString() string { return "sandbox.RepoSpec" + r.String() }

// validateRepoURL refuses URLs git could take for an option, and URLs
// carrying credentials (they go in Header, never in a URL, which git writes
// into the mirror's config).
func validateRepoURL(raw string) error {
	if raw == "" || strings.HasPrefix(raw, "-") || strings.ContainsAny(raw, "\x00\n\r") {
		return fmt.Errorf("repository URL %q is invalid", raw)
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		// A token passes as a user name as well as a password.
		return errors.New("repository URL carries credentials; pass them as RepoSpec.Header")
	}
	return nil
}

func validateBranch(b string) error {
	if b == "" || strings.HasPrefix(b, "-") || strings.ContainsAny(b, " :~^?*[\\") || strings.Contains(b, "..") ||
		strings.IndexFunc(b, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("branch %q is invalid", b)
	}
	return nil
}

// Mirrors is a host-side cache of bare mirrors (git clone --mirror), one
// per repository URL, under a directory only the bot reads. Checkout clones
// a mirror the first time; later it fetches it first when it is older than
// FetchEvery — unless Run keeps the mirrors fresh in the background, when a
// Checkout fetches only a mirror Run has not managed to fetch for
// 10 × FetchEvery.
// Every git it runs has a clean environment: no system or global
// configuration, HOME an empty directory, no terminal prompts; a header is
// passed through git's environment configuration (GIT_CONFIG_COUNT), never
// on a command line other users can read, never in a file.
type Mirrors struct {
	dir string
	log zerolog.Logger
	// FetchEvery is how long a fetched mirror is considered fresh; zero or
	// negative fetches on every Checkout. NewMirrors sets 30 seconds. Set
	// it before the first Checkout.
	FetchEvery time.Duration

	mu         sync.Mutex
	repos      map[string]*mirror
	background bool // Run is refreshing the mirrors
}

type mirror struct {
	// lock is held (a token in it) by the one git command on the mirror at a time; a waiter
	// gives up when its context ends.
	lock    chan struct{}
	path    string
	fetched time.Time
	// url and header, for Run's fetches: the header (a secret) in memory only.
	url, header string
}

// NewMirrors returns a cache under dir (created 0700 at first use).
func NewMirrors(dir string, log zerolog.Logger) *Mirrors {
	return &Mirrors{dir: dir, log: log.With().Str("component", "sandbox-mirrors").Logger(),
		FetchEvery: 30 * time.Second, repos: map[string]*mirror{}}
}

// home is the empty HOME of every git the cache runs.
func (m *Mirrors) home() string { return filepath.Join(m.dir, ".home") }

func (m *Mirrors) get(rawURL string) *mirror {
	m.mu.Lock()
	defer m.mu.Unlock()
	sum := sha256.Sum256([]byte(rawURL))
	key := hex.EncodeToString(sum[:16])
	mr := m.repos[key]
	if mr == nil {
		mr = &mirror{path: filepath.Join(m.dir, key+".git"), lock: make(chan struct{}, 1)}
		m.repos[key] = mr
	}
	return mr
}

// Checkout brings the mirror of rawURL up to date (cloning it the first
// time) and resolves branch ("" for the remote's HEAD) to a commit. src is
// the mirror's path, to be cloned locally. header, if set, is an HTTP
// header given to the host's git for this call only.
func (m *Mirrors) Checkout(ctx context.Context, rawURL, branch, header string) (commit, src string, err error) {
	if err := validateRepoURL(rawURL); err != nil {
		return "", "", err
	}
	if branch != "" {
		if err := validateBranch(branch); err != nil {
			return "", "", err
		}
	}
	if strings.ContainsAny(header, "\x00\n\r") {
		return "", "", errors.New("repository header is invalid")
	}
	mr := m.get(rawURL)
	select {
	case mr.lock <- struct{}{}:
	case <-ctx.Done():
		return "", "", fmt.Errorf("mirror %s: %w (another fetch of it is still running)", rawURL, ctx.Err())
	}
	defer func() { <-mr.lock }()
	if err := os.MkdirAll(m.home(), 0o700); err != nil {
		return "", "", fmt.Errorf("mirror dir: %w", err)
	}
	mr.url, mr.header = rawURL, header
	m.mu.Lock()
	fresh := m.FetchEvery
	if m.background {
		fresh = 10 * m.FetchEvery
	}
	m.mu.Unlock()
	start := time.Now()
	if _, err := os.Stat(filepath.Join(mr.path, "HEAD")); err != nil {
		_ = os.RemoveAll(mr.path) // a half-made clone
		tmp, err := os.MkdirTemp(m.dir, ".clone-")
		if err != nil {
			return "", "", fmt.Errorf("mirror dir: %w", err)
		}
		defer os.RemoveAll(tmp)
		if _, err := runGit(ctx, m.home(), m.dir, header, "clone", "--mirror", "--quiet", "--", rawURL, filepath.Join(tmp, "m.git")); err != nil {
			return "", "", fmt.Errorf("mirror %s: %w", rawURL, err)
		}
		if err := os.Rename(filepath.Join(tmp, "m.git"), mr.path); err != nil {
			return "", "", fmt.Errorf("mirror %s: %w", rawURL, err)
		}
		mr.fetched = time.Now()
		m.log.Info().Str("url", rawURL).Dur("took", time.Since(start)).Msg("repository mirror cloned")
	} else if fresh <= 0 || time.Since(mr.fetched) >= fresh {
		if err := m.fetch(ctx, mr); err != nil {
			return "", "", err
		}
		m.log.Debug().Str("url", rawURL).Dur("took", time.Since(start)).Msg("repository mirror fetched")
	}
	ref := "HEAD"
	if branch != "" {
		ref = "refs/heads/" + branch
	}
	out, err := runGit(ctx, m.home(), mr.path, "", "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("mirror %s: branch %q not found: %w", rawURL, branch, err)
	}
	return strings.TrimSpace(out), mr.path, nil
}

// fetch brings mr up to date; mr.lock is held.
func (m *Mirrors) fetch(ctx context.Context, mr *mirror) error {
	// gc.auto=0: objects of a commit already handed out stay until the operator collects
	// garbage.
	if _, err := runGit(ctx, m.home(), mr.path, mr.header, "-c", "gc.auto=0", "fetch", "--prune", "--quiet", "origin"); err != nil {
		return fmt.Errorf("fetch mirror %s: %w", mr.url, err)
	}
	mr.fetched = time.Now()
	return nil
}

// Run fetches every mirror a Checkout has used each FetchEvery (at least a second), so
// Checkouts need not, until ctx ends. A failed fetch is logged and tried again next time.
func (m *Mirrors) Run(ctx context.Context) error {
	every := max(m.FetchEvery, time.Second)
	m.mu.Lock()
	m.background = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.background = false
		m.mu.Unlock()
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		m.Refresh(ctx)
	}
}

// Refresh fetches, one after the other, every mirror a Checkout has used whose last fetch is
// older than FetchEvery.
func (m *Mirrors) Refresh(ctx context.Context) {
	m.mu.Lock()
	all := make([]*mirror, 0, len(m.repos))
	for _, mr := range m.repos {
		all = append(all, mr)
	}
	m.mu.Unlock()
	for _, mr := range all {
		if ctx.Err() != nil {
			return
		}
		select {
		case mr.lock <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if mr.url != "" && !mr.fetched.IsZero() && time.Since(mr.fetched) >= m.FetchEvery {
			start := time.Now()
			// Bounded: a stalled server must not hold the mirror (Checkouts wait for it).
			fctx, cancel := context.WithTimeout(ctx, backgroundFetchTimeout)
			err := m.fetch(fctx, mr)
			cancel()
			if err != nil && ctx.Err() == nil {
				m.log.Warn().Err(err).Str("url", mr.url).Msg("repository mirror: background fetch failed; trying again later")
			} else if err == nil {
				m.log.Debug().Str("url", mr.url).Dur("took", time.Since(start)).Msg("repository mirror fetched in the background")
			}
		}
		<-mr.lock
	}
}

// backgroundFetchTimeout bounds one background fetch of a mirror.
const backgroundFetchTimeout = 5 * time.Minute

// gitEnv is the complete environment of the host's git: nothing of the
// bot's environment or of the host's git configuration.
func gitEnv(home, header string) []string {
	env := []string{
		"PATH=" + defaultPath,
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"LANG=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"GIT_SSH_COMMAND=ssh -o BatchMode=yes",
	}
	// No redirects: git would send the header to wherever one leads. A transfer slower than
	// 1 KB/s for a minute is given up (a stalled server holds the mirror otherwise).
	env = append(env, "GIT_CONFIG_KEY_0=http.followRedirects", "GIT_CONFIG_VALUE_0=false",
		"GIT_CONFIG_KEY_1=http.lowSpeedLimit", "GIT_CONFIG_VALUE_1=1000",
		"GIT_CONFIG_KEY_2=http.lowSpeedTime", "GIT_CONFIG_VALUE_2=60")
	if header != "" {
		env = append(env, "GIT_CONFIG_COUNT=4", "GIT_CONFIG_KEY_3=http.extraHeader", "GIT_CONFIG_VALUE_3="+header)
	} else {
		env = append(env, "GIT_CONFIG_COUNT=3")
	}
	return env
}

// runGit runs the host's git in dir and returns its stdout. Its stderr, with
// any trace of header scrubbed, goes into the error.
func runGit(ctx context.Context, home, dir, header string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(home, header)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if header != "" {
			msg = strings.ReplaceAll(msg, header, "[header]")
			if _, v, ok := strings.Cut(header, ":"); ok && strings.TrimSpace(v) != "" {
				msg = strings.ReplaceAll(msg, strings.TrimSpace(v), "[header]")
			}
		}
		if len(msg) > 2000 {
			msg = msg[:2000] + "..."
		}
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return stdout.String(), nil
}

// checkoutRepo fills the fresh, still empty workspace ws (which no sandbox
// process has seen yet) with a work tree of spec at the mirror's current
// commit, origin set to spec.URL, and returns the commit. Only here does the
// host's git touch a workspace: once the sandbox has run, its .git is
// untrusted.
//
// With gitURL (the sandbox has an egress: the repository's URL at the
// proxy), the checkout's git reaches spec.URL through it: url.<gitURL>.insteadOf
// = spec.URL.
func (p *provider) checkoutRepo(ctx context.Context, ws string, spec *RepoSpec, gitURL string) (string, error) {
	m := p.mirrors()
	commit, src, err := m.Checkout(ctx, spec.URL, spec.Branch, spec.Header)
	if err != nil {
		return "", err
	}
	// --no-hardlinks: the workspace is handed to the sandbox user, who must
	// not share inodes with the mirror.
	if _, err := runGit(ctx, m.home(), ws, "", "clone", "--quiet", "--no-hardlinks", "--no-checkout", "--", src, ws); err != nil {
		return "", fmt.Errorf("clone from mirror: %w", err)
	}
	if _, err := runGit(ctx, m.home(), ws, "", "remote", "set-url", "origin", spec.URL); err != nil {
		return "", err
	}
	// The sandbox commits as logbook (the log says who asked for what).
	for _, kv := range [][2]string{{"user.name", "logbook"}, {"user.email", "logbook@localhost"}} {
		if _, err := runGit(ctx, m.home(), ws, "", "config", kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	if gitURL != "" {
		// Written into .git/config, not given to git config: the URL holds the proxy's secret,
		// and a command line is visible to every process of the host.
		quote := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
		rule := fmt.Sprintf("[url \"%s\"]\n\tinsteadOf = \"%s\"\n", quote.Replace(gitURL), quote.Replace(spec.URL))
		f, err := os.OpenFile(filepath.Join(ws, ".git", "config"), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.WriteString(rule)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return "", fmt.Errorf("point the checkout at the egress proxy: %w", err)
		}
	}
	co := []string{"checkout", "--quiet", "--detach", commit}
	if spec.Branch != "" {
		co = []string{"checkout", "--quiet", "-B", spec.Branch, commit}
	}
	if _, err := runGit(ctx, m.home(), ws, "", co...); err != nil {
		return "", fmt.Errorf("check out %s: %w", commit, err)
	}
	if p.chownUID >= 0 {
		err := filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, p.chownUID, p.chownGID)
		})
		if err != nil {
			return "", fmt.Errorf("chown work tree: %w", err)
		}
	}
	return commit, nil
}

func (p *provider) mirrors() *Mirrors {
	if p.cfg.Mirrors != nil {
		return p.cfg.Mirrors
	}
	p.mirrorsOnce.Do(func() {
		p.defaultMirrors = NewMirrors(filepath.Join(p.cfg.BaseDir, "mirrors"), p.log)
	})
	return p.defaultMirrors
}

// Commit returns the commit the sandbox's workspace was checked out at ("" if
// its recipe has no repository, or sb is not one of this package's).
func Commit(sb Sandbox) string {
	if c, ok := sb.(interface{ Commit() string }); ok {
		return c.Commit()
	}
	return ""
}

// Commit is the commit the workspace was checked out at, "" without a repository.
func (s *sandbox) Commit() string { return s.commit }

// Files SaveWork and RestoreWork use inside the work tree's .git.
const (
	savePatch     = ".git/logbook-save.patch"
	saveBundle    = ".git/logbook-save.bundle"
	restorePatch  = ".git/logbook-restore.patch"
	restoreBundle = ".git/logbook-restore.bundle"
)

// sandboxGit makes the sandbox's git ignore the workspace-as-HOME's
// .gitconfig (the work tree may carry one) and never prompt.
const sandboxGit = `export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0; `

// Work is what a work tree holds beyond the commit it was checked out at:
// the commits made on it since (a git bundle of base..HEAD, nil when HEAD is
// still base or an ancestor of it), where HEAD is (its commit, and its branch
// or "" when detached), and the uncommitted changes against HEAD as a binary
// patch, untracked (not ignored) files included (nil when clean). Everything
// in it comes from the sandbox: RestoreWork checks it before use.
type Work struct {
	Head, Branch string
	Bundle       []byte
	Patch        []byte
}

// WorkID names a Work without its contents: HEAD, its branch, and the
// sha256 (hex) of the patch and of the bundle ("" for none).
type WorkID struct {
	Head, Branch              string
	PatchSHA256, BundleSHA256 string
}

// Clean reports whether the work holds nothing beyond base: HEAD at base (or
// unknown) and no changes.
func (id WorkID) Clean(base string) bool {
	return id.PatchSHA256 == "" && id.BundleSHA256 == "" && (id.Head == "" || id.Head == base)
}

// SaveWork returns the ID of sb's work beyond base (the commit its work tree
// was checked out at; "" when unknown: no bundle then), and the contents of
// it that prev (the work as saved last; the zero value for none) does not
// name: the patch when it changed, the bundle when HEAD moved. A tree as
// prev says costs one command and reads nothing.
//
// It runs the sandbox's own git through Exec (a temporary index, so the
// sandbox's index is left as it was) and reads patch and bundle with
// ReadFile: either over Limits.FileSizeBytes fails with ErrTooLarge
// (RLIMIT_FSIZE stops git, or ReadFile refuses) rather than being cut;
// Limits.Timeout bounds the command.
func SaveWork(ctx context.Context, sb Sandbox, base string, prev WorkID) (Work, WorkID, error) {
	for _, id := range []string{base, prev.Head} {
		if id != "" && !ValidCommitID(id) {
			return Work{}, WorkID{}, fmt.Errorf("save work: %q is not a commit id", id)
		}
	}
	if prev.PatchSHA256 != "" && !isSHA256(prev.PatchSHA256) || prev.Branch != "" && validateBranch(prev.Branch) != nil {
		return Work{}, WorkID{}, errors.New("save work: the previous work's id is invalid")
	}
	// prev comes on stdin, never into the script's text.
	script := sandboxGit + `set -e
IFS= read -r prev_head || true
IFS= read -r prev_branch || true
IFS= read -r prev_patch || true
top=$(git rev-parse --show-toplevel)
cd "$top"
head=$(git rev-parse -q --verify HEAD || true)
branch=$(git symbolic-ref -q --short HEAD || true)
empty=4b825dc642cb6eb9a060e54bf8d69288fbee4904
export GIT_INDEX_FILE=.git/logbook-save.index
rm -f "$GIT_INDEX_FILE" ` + savePatch + ` ` + saveBundle + `
if [ -f .git/index ]; then cp .git/index "$GIT_INDEX_FILE"; fi
trap 'rm -f "$GIT_INDEX_FILE"' EXIT
git add -A
git diff --cached --binary --no-color --no-ext-diff "${head:-$empty}" > ` + savePatch + `
psha=
if [ -s ` + savePatch + ` ]; then psha=$(sha256sum < ` + savePatch + ` | cut -c1-64); fi
if [ "$head" = "$prev_head" ] && [ "$branch" = "$prev_branch" ] && [ "$psha" = "$prev_patch" ]; then
  rm -f ` + savePatch + `
  echo unchanged
  exit 0
fi
base='` + base + `'
if [ -n "$base" ] && [ -n "$head" ] && [ "$head" != "$base" ] && [ "$head" != "$prev_head" ] &&
   [ "$(git rev-list --count "$base..$head")" -gt 0 ]; then
  if ! git bundle create ` + saveBundle + ` "$base..HEAD" 2>.git/logbook-save.err; then
    echo "git bundle: $(tail -c 400 .git/logbook-save.err)" >&2
    rm -f .git/logbook-save.err
    exit 3
  fi
  rm -f .git/logbook-save.err
fi
printf 'changed\n%s\n%s\n%s\n' "$head" "$branch" "$psha"
`
	res, err := sb.Exec(ctx, ExecRequest{Shell: script, Stdin: []byte(prev.Head + "\n" + prev.Branch + "\n" + prev.PatchSHA256 + "\n")})
	cleanup := func() { _, _ = sb.Exec(ctx, ExecRequest{Argv: []string{"rm", "-f", savePatch, saveBundle}}) }
	if err != nil {
		return Work{}, WorkID{}, fmt.Errorf("save work: %w", err)
	}
	if res.ExitCode != 0 || res.Killed != "" {
		cleanup()
		if res.ExitCode == 128+int(syscall.SIGXFSZ) || strings.Contains(res.Stderr, "File size limit") || strings.Contains(res.Stderr, "signal 25") {
			return Work{}, WorkID{}, fmt.Errorf("save work: %w: the patch or bundle is over the file size limit", ErrTooLarge)
		}
		return Work{}, WorkID{}, fmt.Errorf("save work: git exited %d %s: %s", res.ExitCode, res.Killed, strings.TrimSpace(res.Stderr))
	}
	if strings.TrimSpace(res.Stdout) == "unchanged" {
		return Work{}, prev, nil
	}
	lines := strings.Split(res.Stdout, "\n")
	if len(lines) < 4 || lines[0] != "changed" {
		cleanup()
		return Work{}, WorkID{}, fmt.Errorf("save work: the sandbox's git said %q", clip.Text(res.Stdout, 200))
	}
	id := WorkID{Head: lines[1], Branch: lines[2], PatchSHA256: lines[3]}
	if id.Head != "" && !ValidCommitID(id.Head) || id.Branch != "" && validateBranch(id.Branch) != nil || id.PatchSHA256 != "" && !isSHA256(id.PatchSHA256) {
		cleanup()
		return Work{}, WorkID{}, fmt.Errorf("save work: the sandbox's git said HEAD is %q on %q", clip.Text(id.Head, 80), clip.Text(id.Branch, 80))
	}
	var w Work
	w.Head, w.Branch = id.Head, id.Branch
	if id.PatchSHA256 != "" && id.PatchSHA256 != prev.PatchSHA256 {
		w.Patch, err = sb.ReadFile(ctx, savePatch)
		if err == nil {
			// What the sandbox hashed is not trusted: the hash is ours.
			id.PatchSHA256 = sha256Hex(w.Patch)
		}
	}
	switch {
	case err != nil:
	case id.Head == prev.Head:
		id.BundleSHA256 = prev.BundleSHA256 // the same commits
	case base != "" && id.Head != "" && id.Head != base:
		w.Bundle, err = sb.ReadFile(ctx, saveBundle)
		if errors.Is(err, fs.ErrNotExist) {
			err = nil // HEAD is base's ancestor: no commits to bundle
		} else if err == nil {
			id.BundleSHA256 = sha256Hex(w.Bundle)
		}
	}
	if _, rmErr := sb.Exec(ctx, ExecRequest{Argv: []string{"rm", "-f", savePatch, saveBundle}}); err == nil && rmErr != nil {
		err = rmErr
	}
	if err != nil {
		return Work{}, WorkID{}, fmt.Errorf("save work: read patch and bundle: %w", err)
	}
	if len(w.Patch) == 0 {
		w.Patch = nil
	}
	return w, id, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func isSHA256(s string) bool { return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" }

// ValidCommitID reports whether s is a full git object id (sha1 or sha256, lowercase hex).
func ValidCommitID(s string) bool {
	return (len(s) == 40 || len(s) == 64) && strings.Trim(s, "0123456789abcdef") == ""
}

// RestoreWork puts w back into sb's fresh work tree with the sandbox's own
// git: the bundle's commits are fetched, HEAD is moved to w.Head (on
// w.Branch, or detached) when it is not there already, and the patch is
// applied (git apply: changes come back unstaged, new files untracked).
// Patch and bundle are written with WriteFile (so Limits.FileSizeBytes and
// Config.DiskQuota bound them) into .git and removed afterwards.
func RestoreWork(ctx context.Context, sb Sandbox, w Work) error {
	if w.Head != "" && !ValidCommitID(w.Head) || w.Branch != "" && validateBranch(w.Branch) != nil {
		return fmt.Errorf("restore work: HEAD %q on %q is not a commit and branch", clip.Text(w.Head, 80), clip.Text(w.Branch, 80))
	}
	run := func(what string, req ExecRequest) error {
		res, err := sb.Exec(ctx, req)
		if err != nil {
			return fmt.Errorf("restore work: %s: %w", what, err)
		}
		if res.ExitCode != 0 || res.Killed != "" {
			return fmt.Errorf("restore work: %s exited %d %s: %s", what, res.ExitCode, res.Killed, strings.TrimSpace(res.Stderr))
		}
		return nil
	}
	gitArgv := func(args ...string) []string {
		return append([]string{"env", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "git"}, args...)
	}
	if len(w.Patch) == 0 && w.Head != "" {
		// Commits the checkout holds already (merged since): nothing to bring back.
		res, err := sb.Exec(ctx, ExecRequest{Argv: gitArgv("merge-base", "--is-ancestor", w.Head, "HEAD")})
		if err != nil {
			return fmt.Errorf("restore work: %w", err)
		}
		if res.ExitCode == 0 {
			return nil
		}
	}
	if len(w.Bundle) > 0 {
		if err := sb.WriteFile(ctx, restoreBundle, w.Bundle); err != nil {
			return fmt.Errorf("restore work: write bundle: %w", err)
		}
		err := run("git fetch from the bundle", ExecRequest{Argv: gitArgv("fetch", "-q", "--no-write-fetch-head", restoreBundle, "+HEAD:refs/logbook/restored")})
		_ = run("remove the bundle", ExecRequest{Argv: []string{"rm", "-f", restoreBundle}})
		if err != nil {
			return err
		}
	}
	if w.Head != "" {
		res, err := sb.Exec(ctx, ExecRequest{Argv: gitArgv("rev-parse", "-q", "--verify", "HEAD")})
		if err != nil {
			return fmt.Errorf("restore work: %w", err)
		}
		if strings.TrimSpace(res.Stdout) != w.Head || w.Branch != "" {
			co := gitArgv("checkout", "-q", "--detach", w.Head)
			if w.Branch != "" {
				co = gitArgv("checkout", "-q", "-B", w.Branch, w.Head)
			}
			if err := run("git checkout of the saved HEAD", ExecRequest{Argv: co}); err != nil {
				return err
			}
		}
		if len(w.Bundle) > 0 {
			_ = run("drop the restore ref", ExecRequest{Argv: gitArgv("update-ref", "-d", "refs/logbook/restored")})
		}
	}
	if len(w.Patch) == 0 {
		return nil
	}
	if err := sb.WriteFile(ctx, restorePatch, w.Patch); err != nil {
		return fmt.Errorf("restore work: write patch: %w", err)
	}
	return run("git apply", ExecRequest{Shell: sandboxGit + `git apply --whitespace=nowarn ` + restorePatch + `; rc=$?; rm -f ` + restorePatch + `; exit $rc`})
}
