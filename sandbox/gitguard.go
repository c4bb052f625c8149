package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// WriteFile never writes into a git directory: a file there (config, hooks, info/attributes)
// configures what git runs, so a file write would otherwise set up commands that a later,
// approved `git commit` runs unseen. Commands may still change it (they are held to the
// approval policy of commands); the file tools refuse with ErrGitDir.
//
// A path is in a git directory when, as the kernel resolves it (symbolic links and ".."
// followed, found from the opened file's /proc/self/fd link, so no link swapped in between
// hides it):
//   - any of its components is ".git", in any case;
//   - it lies under the directory the work tree's .git names when .git is a file
//     ("gitdir: ..."), or under that directory's commondir;
//   - one of its directories below the workspace's root looks like a git directory to git:
//     it holds HEAD and objects/ or commondir.
//
// The check runs on the path as given, on its deepest existing directory before missing
// parents are made, and on the file once opened, before it is truncated: a file the check
// then refuses was at most created empty.

// refuseGitDir returns ErrGitDir when rel (a clean local path), or f (rel opened, nil before),
// is in a git directory.
func (s *sandbox) refuseGitDir(r *os.Root, rel string, f *os.File) error {
	if f != nil {
		return s.refuseGitDirAt(r, rel, f, 0)
	}
	return s.refuseGitDirHop(r, rel, 0)
}

func (s *sandbox) refuseGitDirHop(r *os.Root, rel string, hops int) error {
	return s.refuseGitDirAt(r, rel, nil, hops)
}

func (s *sandbox) refuseGitDirAt(r *os.Root, rel string, f *os.File, hops int) error {
	real := rel
	if f != nil {
		p, err := s.realRel(f)
		if err != nil {
			return err
		}
		real = p
	} else {
		if hasGitComponent(rel) {
			return ErrGitDir
		}
		if hops > 8 {
			return fmt.Errorf("too many levels of symbolic links")
		}
		// The deepest directory of rel that exists, as resolved.
		dir := path.Dir(rel)
		for dir != "." {
			if fi, err := r.Stat(dir); err == nil && fi.IsDir() {
				break
			}
			dir = path.Dir(dir)
		}
		d, err := r.Open(dir)
		if err != nil {
			return s.pathErr(err)
		}
		p, err := s.realRel(d)
		_ = d.Close()
		if err != nil {
			return err
		}
		real = path.Join(p, strings.TrimPrefix(rel, dir+"/"))
		if dir == "." {
			real = path.Join(p, rel)
		}
		// A last component that is a symbolic link (perhaps dangling: the open would create
		// its target) is checked where it leads.
		if fi, err := r.Lstat(real); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, err := r.Readlink(real)
			if err != nil {
				return s.pathErr(err)
			}
			next := s.localTarget(path.Dir(real), target)
			if next == "" {
				return ErrOutsideWorkspace
			}
			if err := s.refuseGitDirHop(r, next, hops+1); err != nil {
				return err
			}
		}
	}
	if hasGitComponent(real) {
		return ErrGitDir
	}
	for _, g := range s.gitDirTargets(r) {
		if real == g || strings.HasPrefix(real, g+"/") {
			return ErrGitDir
		}
	}
	// Directories below the root that git would take for a repository.
	for dir := path.Dir(real); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if looksLikeGitDir(r, dir) {
			return ErrGitDir
		}
	}
	return nil
}

func hasGitComponent(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if strings.EqualFold(c, ".git") {
			return true
		}
	}
	return false
}

// realRel is where the kernel says f is, relative to the workspace ("." for its root), or
// ErrOutsideWorkspace.
func (s *sandbox) realRel(f *os.File) (string, error) {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return "", fmt.Errorf("resolve the path written: %w", err)
	}
	ws, err := filepath.EvalSymlinks(s.workspace)
	if err != nil {
		return "", s.lostErr()
	}
	rel, err := filepath.Rel(ws, p)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return "", ErrOutsideWorkspace
	}
	return filepath.ToSlash(rel), nil
}

// gitDirTargets are the directories (local paths) the work tree's .git file and its
// commondir name, when .git is a file.
func (s *sandbox) gitDirTargets(r *os.Root) []string {
	fi, err := r.Lstat(".git")
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	data, err := s.readWorkspaceFile(".git", 4096)
	if err != nil {
		return nil
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir:")
	if !ok {
		return nil
	}
	target := s.localTarget(".", strings.TrimSpace(v))
	if target == "" {
		return nil
	}
	out := []string{target}
	if c, err := s.readWorkspaceFile(target+"/commondir", 4096); err == nil {
		if common := s.localTarget(target, strings.TrimSpace(string(c))); common != "" {
			out = append(out, common)
		}
	}
	// Resolved too: a target that is a symbolic link is protected where it leads.
	for _, t := range out {
		if d, err := r.Open(t); err == nil {
			if p, err := s.realRel(d); err == nil {
				out = append(out, p)
			}
			_ = d.Close()
		}
	}
	return out
}

// localTarget turns a path git reads from a file in dir (absolute as commands see the
// workspace, or relative to dir) into a local path of the workspace, "" when outside.
func (s *sandbox) localTarget(dir, p string) string {
	if path.IsAbs(p) {
		rel, err := s.local(p)
		if err != nil {
			return ""
		}
		return rel
	}
	c := path.Join(dir, p)
	if !filepath.IsLocal(c) {
		return ""
	}
	return c
}

// looksLikeGitDir reports whether dir holds what git takes for a repository: HEAD, and
// objects/ or commondir.
func looksLikeGitDir(r *os.Root, dir string) bool {
	if _, err := r.Lstat(dir + "/HEAD"); err != nil {
		return false
	}
	for _, name := range []string{"objects", "commondir"} {
		if _, err := r.Lstat(dir + "/" + name); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}
