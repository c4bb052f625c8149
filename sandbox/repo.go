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
		msg = clip.Text(msg, 2000)
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

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func isSHA256(s string) bool { return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" }

// ValidCommitID reports whether s is a full git object id (sha1 or sha256, lowercase hex).
func ValidCommitID(s string) bool {
	return (len(s) == 40 || len(s) == 64) && strings.Trim(s, "0123456789abcdef") == ""
}
