package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/logbook/logbook/session/clip"
)

// Saving and restoring work runs git on a workspace whose .git the sandbox controls: any
// command it ran may have written .git/config (core.fsmonitor, filter and diff drivers,
// core.hooksPath, include.path, core.pager, ...), hooks, .gitattributes naming drivers, or
// ~/.config/git. A git that read any of that would run the sandbox's commands at every save,
// past the approval policy. So logbook never runs git with the workspace's repository as
// GIT_DIR (git always reads GIT_DIR/config, and no -c override can neutralise a filter driver
// it does not know the name of). Instead:
//
//   - Logbook's own git dir, per sandbox, outside the workspace (BaseDir/.savegit/<name>/git,
//     owned by the bot, read-only to the sandbox user): a config of its own (no drivers, no
//     hooks, no includes, hooksPath and attributesFile /dev/null), HEAD (the commit the
//     workspace's HEAD names, which the host reads from .git/HEAD and the refs as data), and
//     info/exclude (a copy of the workspace's, patterns only). git runs with GIT_DIR there,
//     GIT_WORK_TREE the workspace, GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null,
//     GIT_ATTR_NOSYSTEM=1, HOME and XDG_CONFIG_HOME that same read-only directory, and
//     --no-ext-diff --no-textconv. A .gitattributes of the work tree may name drivers: none
//     is defined, so none runs.
//   - Objects: when saving, new objects (git add) go to a directory of logbook's
//     (BaseDir/.savegit/<name>/rw/objects, with the index and the patch and bundle made there),
//     the workspace's objects are read as an alternate; when restoring they go into the
//     workspace's objects, so its own git finds them. HEAD and the branch of a restore are
//     written by the host as files (.git/HEAD, .git/refs/heads/...).
//   - That git runs inside the sandbox's own isolation, as the sandbox user, with the
//     sandbox's limits (bwrap: the git dir mounted read-only, the rw directory read-write, in
//     the command's own mount namespace; no other process of the sandbox sees them). So what it
//     reads of the workspace (alternates, symbolic links in .git) reaches only what the
//     sandbox's own commands could read anyway, and were git itself fooled into running
//     anything, it would run as the sandbox.
//
// The process provider does not isolate: its commands run as the sandbox user on the host and
// could rewrite the rw directory; the git dir stays the bot's (not the sandbox user's) when the
// bot runs as root.

// savegitRoot is where the per-sandbox git dirs live, under BaseDir.
const savegitRoot = ".savegit"

// Where the git dir and the rw directory are mounted in a bwrap command.
const (
	insideGitDir = "/.logbook/git"
	insideGitRW  = "/.logbook/rw"
)

// gitDirs are a sandbox's logbook-owned git dir (read-only to the sandbox) and rw directory,
// as host paths and as its commands see them.
type gitDirs struct {
	git, rw             string
	insideGit, insideRW string
}

// gitDirs creates (at first use) and returns the sandbox's git dir and rw directory.
func (s *sandbox) gitDirs() (gitDirs, error) {
	base := filepath.Join(s.p.cfg.BaseDir, savegitRoot, filepath.Base(s.workspace))
	d := gitDirs{git: filepath.Join(base, "git"), rw: filepath.Join(base, "rw"), insideGit: insideGitDir, insideRW: insideGitRW}
	if s.p.name != KindBwrap {
		d.insideGit, d.insideRW = d.git, d.rw
	}
	if _, err := os.Stat(filepath.Join(d.git, "config")); err == nil {
		return d, nil
	}
	for _, dir := range []string{filepath.Dir(base), base} {
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
			return d, fmt.Errorf("create the save git dir: %w", err)
		}
	}
	for _, dir := range []string{d.git, filepath.Join(d.git, "refs"), filepath.Join(d.git, "info")} {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return d, fmt.Errorf("create the save git dir: %w", err)
		}
	}
	format := "\trepositoryformatversion = 0\n"
	if len(s.commit) == 64 {
		format = "\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n"
	}
	config := "[core]\n" + format + "[core]\n\tbare = false\n\tfilemode = true\n\tlogAllRefUpdates = false\n" +
		"\thooksPath = /dev/null\n\tfsmonitor = false\n\tattributesFile = /dev/null\n\tuntrackedCache = false\n\tsplitIndex = false\n" +
		"[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n[protocol]\n\tallow = never\n"
	if err := os.WriteFile(filepath.Join(d.git, "config"), []byte(config), 0o644); err != nil {
		return d, fmt.Errorf("write the save git dir's config: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(d.rw, "objects"), 0o700); err != nil {
		return d, fmt.Errorf("create the save git dir: %w", err)
	}
	if s.p.chownUID >= 0 {
		for _, dir := range []string{d.rw, filepath.Join(d.rw, "objects")} {
			if err := os.Chown(dir, s.p.chownUID, s.p.chownGID); err != nil {
				return d, fmt.Errorf("chown the save git dir: %w", err)
			}
		}
	}
	return d, nil
}

// removeGitDirs removes the save git dir of the workspace ws (a host path).
func removeGitDirs(baseDir, ws string) {
	_ = removeWorkspace(filepath.Join(baseDir, savegitRoot, filepath.Base(ws)))
}

// gitOp is one run of logbook's git on the workspace: a shell script (its values in env,
// never in its text) and where objects and the index are.
type gitOp struct {
	script string
	env    []string
	// restore: objects and the index are the workspace's own (the work comes back into
	// its repository); else logbook's, the workspace's objects read as an alternate.
	restore bool
}

// git runs op as the sandbox user, in the sandbox's isolation and limits, with logbook's git
// dir (see the top of this file); head is written into that git dir's HEAD first ("" for an
// unborn HEAD).
func (s *sandbox) git(ctx context.Context, d gitDirs, head string, op gitOp) (ExecResult, error) {
	headData := "ref: refs/heads/unborn\n"
	if head != "" {
		headData = head + "\n"
	}
	if err := os.WriteFile(filepath.Join(d.git, "HEAD"), []byte(headData), 0o644); err != nil {
		return ExecResult{}, fmt.Errorf("write the save git dir's HEAD: %w", err)
	}
	exclude, err := s.readWorkspaceFile(".git/info/exclude", 1<<20)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		exclude = nil // unreadable: no excludes beyond .gitignore
	}
	if err := os.WriteFile(filepath.Join(d.git, "info", "exclude"), exclude, 0o644); err != nil {
		return ExecResult{}, fmt.Errorf("write the save git dir's excludes: %w", err)
	}
	if err := s.enter(); err != nil {
		return ExecResult{}, err
	}
	defer s.ops.Done()
	wsGit := path.Join(s.inside, ".git")
	env := []string{
		"PATH=" + defaultPath, "LANG=C", "HOME=" + d.insideGit, "XDG_CONFIG_HOME=" + d.insideGit,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_NO_REPLACE_OBJECTS=1", "GIT_OPTIONAL_LOCKS=0", "GIT_PAGER=cat", "PAGER=cat", "GIT_EDITOR=false",
		"GIT_DIR=" + d.insideGit, "GIT_WORK_TREE=" + s.inside, "RW=" + d.insideRW,
	}
	if op.restore {
		env = append(env, "GIT_OBJECT_DIRECTORY="+wsGit+"/objects", "GIT_INDEX_FILE="+wsGit+"/index")
	} else {
		env = append(env, "GIT_OBJECT_DIRECTORY="+d.insideRW+"/objects", "GIT_ALTERNATE_OBJECT_DIRECTORIES="+wsGit+"/objects",
			"GIT_INDEX_FILE="+d.insideRW+"/index")
	}
	var binds []string
	if s.p.name == KindBwrap {
		binds = []string{"--ro-bind", d.git, insideGitDir, "--bind", d.rw, insideGitRW}
	}
	line := append(s.p.limitArgs(s.p.cfg.Limits.FileSizeBytes), "/bin/sh", "-c", op.script)
	return s.execute(ctx, command{line: line, dir: ".", binds: binds, env: append(env, op.env...), timeout: s.p.cfg.Limits.Timeout})
}

// gitFailed is the error of a logbook git run that did not succeed.
func gitFailed(what string, res ExecResult) error {
	if res.ExitCode == 128+int(syscall.SIGXFSZ) || strings.Contains(res.Stderr, "File size limit") || strings.Contains(res.Stderr, "signal 25") {
		return fmt.Errorf("%s: %w: over the file size limit", what, ErrTooLarge)
	}
	return fmt.Errorf("%s: git exited %d %s: %s", what, res.ExitCode, res.Killed, clip.Text(strings.TrimSpace(res.Stderr), 2000))
}

// readWorkspaceFile reads a regular file of the workspace (through os.Root: nothing outside
// it) of at most limit bytes.
func (s *sandbox) readWorkspaceFile(rel string, limit int64) ([]byte, error) {
	r, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, s.pathErr(err)
	}
	defer f.Close()
	return readRegular(f, limit)
}

// readRegular reads f, a regular file of at most limit bytes.
func readRegular(f *os.File, limit int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes: %w", filepath.Base(f.Name()), limit, ErrTooLarge)
	}
	return data, nil
}

// takeRW reads and removes the file name of the rw directory ("" and no error when it does not
// exist). The sandbox user can write that directory, so the file is opened without following
// a symbolic link and must be regular.
func takeRW(d gitDirs, name string, limit int64) ([]byte, bool, error) {
	p := filepath.Join(d.rw, name)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer os.Remove(p)
	defer f.Close()
	data, err := readRegular(f, limit)
	return data, err == nil, err
}

// putRW writes data as the file name of the rw directory, replacing whatever is there.
func (s *sandbox) putRW(d gitDirs, name string, data []byte) error {
	if limit := s.p.cfg.Limits.FileSizeBytes; int64(len(data)) > limit {
		return fmt.Errorf("%s: %d bytes, over %d: %w", name, len(data), limit, ErrTooLarge)
	}
	p := filepath.Join(d.rw, name)
	_ = os.Remove(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// workspaceHead reads where the workspace's HEAD is, from .git/HEAD and the refs as data (no
// git runs): its commit ("" when unborn) and its branch ("" when detached).
func (s *sandbox) workspaceHead() (head, branch string, err error) {
	data, err := s.readWorkspaceFile(".git/HEAD", 4096)
	if err != nil {
		return "", "", fmt.Errorf("read the work tree's .git/HEAD: %w", err)
	}
	line := strings.TrimSpace(string(data))
	if ValidCommitID(line) {
		return line, "", nil
	}
	ref, ok := strings.CutPrefix(line, "ref: ")
	b, isBranch := strings.CutPrefix(ref, "refs/heads/")
	if !ok || !isBranch || validateBranch(b) != nil {
		return "", "", fmt.Errorf("the work tree's HEAD is %q, neither a commit nor a branch", clip.Text(line, 80))
	}
	id, err := s.resolveBranch(ref)
	return id, b, err
}

// resolveBranch returns the commit the ref (refs/heads/...) names, loose or packed, "" when it
// does not exist.
func (s *sandbox) resolveBranch(ref string) (string, error) {
	data, err := s.readWorkspaceFile(".git/"+ref, 4096)
	if err == nil {
		if id := strings.TrimSpace(string(data)); ValidCommitID(id) {
			return id, nil
		}
		return "", fmt.Errorf("the work tree's %s is not a commit id", ref)
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return "", fmt.Errorf("read the work tree's %s: %w", ref, err)
	}
	packed, err := s.readWorkspaceFile(".git/packed-refs", s.p.cfg.Limits.FileSizeBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the work tree's packed-refs: %w", err)
	}
	for line := range strings.Lines(string(packed)) {
		if id, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && name == ref && ValidCommitID(id) {
			return id, nil
		}
	}
	return "", nil
}

// writeWorkspaceRef sets the workspace's HEAD to head, on branch (refs/heads/<branch> set to
// head) or detached when branch is "", as files written by the host.
func (s *sandbox) writeWorkspaceRef(head, branch string) error {
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	defer r.Close()
	write := func(rel, data string) error {
		if err := s.mkdirs(r, path.Dir(rel)); err != nil {
			return err
		}
		tmp := rel + ".logbook.lock"
		_ = r.Remove(tmp)
		f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return s.pathErr(err)
		}
		_, err = f.WriteString(data)
		if err == nil && s.p.chownUID >= 0 {
			err = f.Chown(s.p.chownUID, s.p.chownGID)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = r.Rename(tmp, rel)
		}
		if err != nil {
			_ = r.Remove(tmp)
		}
		return s.pathErr(err)
	}
	if branch == "" {
		return write(".git/HEAD", head+"\n")
	}
	if err := write(".git/refs/heads/"+branch, head+"\n"); err != nil {
		return err
	}
	return write(".git/HEAD", "ref: refs/heads/"+branch+"\n")
}

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
	// Exact moves the work tree to Head even when the checkout holds it already (a fork's
	// sandbox starts where its parent was, not at the branch's newer commit).
	Exact bool
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

// errNotOurs is returned for a Sandbox this package did not make.
var errNotOurs = errors.New("not a sandbox of this package")

// saveScript stages the whole work tree into logbook's index (built from HEAD the first time)
// and writes the patch against HEAD, and, with BUNDLE set, the bundle of base..HEAD.
const saveScript = `set -e
empty=$(git hash-object -t tree /dev/null)
if [ ! -f "$GIT_INDEX_FILE" ]; then git read-tree "${HEAD_ID:-$empty}"; fi
git add -A
git diff --cached --binary --no-color --no-ext-diff --no-textconv --no-renames "${HEAD_ID:-$empty}" > "$RW/patch"
if [ -n "$BUNDLE" ] && [ "$(git rev-list --count "$BASE..HEAD")" -gt 0 ]; then
  if ! git bundle create "$RW/bundle" "$BASE..HEAD" 2>"$RW/bundle.err"; then
    echo "git bundle: $(tail -c 400 "$RW/bundle.err")" >&2
    exit 3
  fi
fi
`

// SaveWork returns the ID of sb's work beyond base (the commit its work tree
// was checked out at; "" when unknown: no bundle then), and the contents of
// it that prev (the work as saved last; the zero value for none) does not
// name: the patch when it changed, the bundle when HEAD moved.
//
// It runs logbook's git (see the top of this file: nothing the sandbox wrote
// configures it) in the sandbox's isolation; the sandbox's index is left as
// it was. Patch or bundle over Limits.FileSizeBytes fail with ErrTooLarge
// (RLIMIT_FSIZE stops git, or the read refuses) rather than being cut;
// Limits.Timeout bounds the command.
func SaveWork(ctx context.Context, sb Sandbox, base string, prev WorkID) (Work, WorkID, error) {
	s, ok := sb.(*sandbox)
	if !ok {
		return Work{}, WorkID{}, fmt.Errorf("save work: %w", errNotOurs)
	}
	for _, id := range []string{base, prev.Head} {
		if id != "" && !ValidCommitID(id) {
			return Work{}, WorkID{}, fmt.Errorf("save work: %q is not a commit id", id)
		}
	}
	if prev.PatchSHA256 != "" && !isSHA256(prev.PatchSHA256) || prev.Branch != "" && validateBranch(prev.Branch) != nil {
		return Work{}, WorkID{}, errors.New("save work: the previous work's id is invalid")
	}
	head, branch, err := s.workspaceHead()
	if err != nil {
		return Work{}, WorkID{}, fmt.Errorf("save work: %w", err)
	}
	d, err := s.gitDirs()
	if err != nil {
		return Work{}, WorkID{}, fmt.Errorf("save work: %w", err)
	}
	bundle := base != "" && head != "" && head != base && head != prev.Head
	w, id, err := s.saveRun(ctx, d, base, head, bundle)
	if err != nil {
		return Work{}, WorkID{}, fmt.Errorf("save work: %w", err)
	}
	id.Branch = branch
	if id.Head == prev.Head && id.Branch == prev.Branch && id.PatchSHA256 == prev.PatchSHA256 {
		return Work{}, prev, nil
	}
	if id.PatchSHA256 == prev.PatchSHA256 {
		w.Patch = nil // stored already
	}
	switch {
	case id.Head == prev.Head:
		id.BundleSHA256 = prev.BundleSHA256 // the same commits
	case w.Bundle != nil:
		id.BundleSHA256 = sha256Hex(w.Bundle)
	}
	w.Branch = branch
	return w, id, nil
}

// saveRun runs saveScript and takes the patch and bundle it made out of the rw directory.
func (s *sandbox) saveRun(ctx context.Context, d gitDirs, base, head string, bundle bool) (Work, WorkID, error) {
	env := []string{"HEAD_ID=" + head, "BASE=" + base}
	if bundle {
		env = append(env, "BUNDLE=1")
	}
	for _, name := range []string{"patch", "bundle", "bundle.err"} {
		_ = os.Remove(filepath.Join(d.rw, name))
	}
	res, err := s.git(ctx, d, head, gitOp{script: saveScript, env: env})
	if err != nil {
		return Work{}, WorkID{}, err
	}
	limit := s.p.cfg.Limits.FileSizeBytes
	patch, _, perr := takeRW(d, "patch", limit)
	bundleData, _, berr := takeRW(d, "bundle", limit)
	_ = os.Remove(filepath.Join(d.rw, "bundle.err"))
	if res.ExitCode != 0 || res.Killed != "" {
		return Work{}, WorkID{}, gitFailed("git", res)
	}
	if err := errors.Join(perr, berr); err != nil {
		return Work{}, WorkID{}, fmt.Errorf("read patch and bundle: %w", err)
	}
	w, id := Work{Head: head, Bundle: bundleData}, WorkID{Head: head}
	if len(patch) > 0 {
		w.Patch, id.PatchSHA256 = patch, sha256Hex(patch)
	}
	return w, id, nil
}

// RestoreWork puts w back into sb's fresh work tree with logbook's git (see
// the top of this file): the bundle's objects are added to the workspace's,
// the work tree and the workspace's index are moved to w.Head (on w.Branch,
// or detached) when HEAD is not there already, and the patch is applied
// (git apply: changes come back unstaged, new files untracked). Patch and
// bundle are over Limits.FileSizeBytes fail with ErrTooLarge.
func RestoreWork(ctx context.Context, sb Sandbox, w Work) error {
	s, ok := sb.(*sandbox)
	if !ok {
		return fmt.Errorf("restore work: %w", errNotOurs)
	}
	if w.Head != "" && !ValidCommitID(w.Head) || w.Branch != "" && validateBranch(w.Branch) != nil {
		return fmt.Errorf("restore work: HEAD %q on %q is not a commit and branch", clip.Text(w.Head, 80), clip.Text(w.Branch, 80))
	}
	cur, _, err := s.workspaceHead()
	if err != nil {
		return fmt.Errorf("restore work: %w", err)
	}
	d, err := s.gitDirs()
	if err != nil {
		return fmt.Errorf("restore work: %w", err)
	}
	run := func(what, script string, env ...string) (ExecResult, error) {
		res, err := s.git(ctx, d, cur, gitOp{script: script, env: append(env, "W_HEAD="+w.Head), restore: true})
		if err != nil {
			return res, fmt.Errorf("restore work: %s: %w", what, err)
		}
		return res, nil
	}
	must := func(what, script string) error {
		res, err := run(what, script)
		if err == nil && (res.ExitCode != 0 || res.Killed != "") {
			err = fmt.Errorf("restore work: %w", gitFailed(what, res))
		}
		return err
	}
	if len(w.Patch) == 0 && w.Head != "" && cur != "" && !w.Exact {
		// Commits the checkout holds already (merged since): nothing to bring back.
		res, err := run("git merge-base", `git merge-base --is-ancestor "$W_HEAD" HEAD`)
		if err != nil {
			return err
		}
		if res.ExitCode == 0 {
			return nil
		}
	}
	if len(w.Bundle) > 0 {
		if err := s.putRW(d, "restore.bundle", w.Bundle); err != nil {
			return fmt.Errorf("restore work: write bundle: %w", err)
		}
		err := must("git bundle unbundle", `git bundle unbundle "$RW/restore.bundle" >/dev/null`)
		_ = os.Remove(filepath.Join(d.rw, "restore.bundle"))
		if err != nil {
			return err
		}
	}
	if w.Head != "" && (cur != w.Head || w.Branch != "") {
		if err := must("git read-tree of the saved HEAD", `git read-tree --reset -u "$W_HEAD^{commit}"`); err != nil {
			return err
		}
		if err := s.writeWorkspaceRef(w.Head, w.Branch); err != nil {
			return fmt.Errorf("restore work: set HEAD: %w", err)
		}
		cur = w.Head
	}
	if len(w.Patch) == 0 {
		return nil
	}
	if err := s.putRW(d, "restore.patch", w.Patch); err != nil {
		return fmt.Errorf("restore work: write patch: %w", err)
	}
	defer os.Remove(filepath.Join(d.rw, "restore.patch"))
	return must("git apply", `git apply --whitespace=nowarn "$RW/restore.patch"`)
}
