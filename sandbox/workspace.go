package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Workspaces under Config.BaseDir are owned through flock(2):
//
//   - each workspace directory is locked (LOCK_EX on an fd of the directory
//     itself) by the sandbox using it, from its creation until Close has
//     removed it; the lock dies with the process, so a crash leaves
//     unlocked directories;
//   - creating a workspace holds LOCK_SH on BaseDir itself from mkdir until
//     the workspace is locked, and a sweep holds LOCK_EX on BaseDir, so a
//     sweep never sees a workspace in the moment between the two.
//
// New sweeps BaseDir: every directory named like a workspace whose lock it
// can take is left from a crash and removed. Live sandboxes of other
// providers, in this process or another, hold their locks and are kept.
// Nothing else in BaseDir is touched.

// workspaceDirName matches the names newWorkspace gives (MkdirTemp appends
// digits to the prefix).
var workspaceDirName = regexp.MustCompile(`^(\.probe-|[A-Za-z0-9_-]{1,64}-)[0-9]+$`)

// newWorkspace creates and locks a fresh workspace directory; closing the
// returned file releases the lock, which must happen only after the
// directory was removed.
func (p *provider) newWorkspace(prefix string) (string, *os.File, error) {
	base, err := os.Open(p.cfg.BaseDir)
	if err != nil {
		return "", nil, err
	}
	defer base.Close() // releases the shared lock
	if err := flock(base, unix.LOCK_SH); err != nil {
		return "", nil, fmt.Errorf("lock base dir: %w", err)
	}
	dir, err := os.MkdirTemp(p.cfg.BaseDir, prefix)
	if err != nil {
		return "", nil, err
	}
	if p.diskFS && prefix != ".probe-" {
		// Mounted before the lock is taken: the lock is on the directory as every later
		// open sees it, the filesystem's root.
		if err := p.mountDiskFS(dir); err != nil {
			_ = os.Remove(dir)
			return "", nil, err
		}
	}
	lock, err := os.Open(dir)
	if err == nil {
		if err = flock(lock, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = lock.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("lock workspace: %w", err)
	}
	return dir, lock, nil
}

// sweep removes the workspaces under BaseDir that no live sandbox holds and
// returns how many.
func (p *provider) sweep() (int, error) {
	base, err := os.Open(p.cfg.BaseDir)
	if err != nil {
		return 0, err
	}
	defer base.Close()
	if err := flock(base, unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("lock base dir: %w", err)
	}
	entries, err := base.ReadDir(-1)
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !workspaceDirName.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(p.cfg.BaseDir, e.Name())
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone meanwhile, or not a plain directory
		}
		lock := os.NewFile(uintptr(fd), dir)
		if err := flock(lock, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = lock.Close() // in use
			continue
		}
		err = removeWorkspace(dir)
		removeGitDirs(p.cfg.BaseDir, dir)
		if p.cgroupParent != "" {
			removeCgroupDir(filepath.Join(p.cgroupParent, cgroupPrefix+e.Name()))
		}
		_ = lock.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	// Save git dirs whose workspace is gone (a crash between the two removals).
	if dirs, err := os.ReadDir(filepath.Join(p.cfg.BaseDir, savegitRoot)); err == nil {
		for _, e := range dirs {
			if _, err := os.Lstat(filepath.Join(p.cfg.BaseDir, e.Name())); errors.Is(err, fs.ErrNotExist) {
				removeGitDirs(p.cfg.BaseDir, e.Name())
			}
		}
	}
	// Images of workspace filesystems whose workspace is gone.
	if imgs, err := filepath.Glob(filepath.Join(p.cfg.BaseDir, ".disk", "*.img")); err == nil {
		for _, img := range imgs {
			ws := filepath.Join(p.cfg.BaseDir, strings.TrimSuffix(filepath.Base(img), ".img"))
			if _, err := os.Lstat(ws); errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(img)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// sweepAtStart runs sweep and logs what it did; a failing sweep does not
// keep the provider from starting.
func (p *provider) sweepAtStart() {
	p.sweepSockets()
	n, err := p.sweep()
	if err != nil {
		p.log.Warn().Err(err).Int("removed", n).Str("base_dir", p.cfg.BaseDir).Msg("sweep of stale sandbox workspaces incomplete")
		return
	}
	if n > 0 {
		p.log.Info().Int("removed", n).Str("base_dir", p.cfg.BaseDir).Msg("removed sandbox workspaces left by a crash")
	}
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// diskUsage returns the bytes of disk allocated to the files and directories
// under root (st_blocks × 512, each inode once), without following symbolic
// links. A directory the sandbox user made unreadable is made readable to
// its owner again when that is us, so nothing can hide from the count.
func diskUsage(ctx context.Context, root string) (int64, error) {
	seen := make(map[[2]uint64]bool)
	var total int64
	var walk func(dir string) error
	walk = func(dir string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrPermission) {
			if cerr := os.Chmod(dir, 0o700); cerr == nil {
				entries, err = os.ReadDir(dir)
			}
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return err
			}
			if key := [2]uint64{st.Dev, st.Ino}; !seen[key] {
				seen[key] = true
				total += st.Blocks * 512
			}
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return 0, err
	}
	total += st.Blocks * 512
	if err := walk(root); err != nil {
		return 0, err
	}
	return total, nil
}

// allocated is the disk a file occupies, st_blocks × 512.
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// usage returns the workspace's last measured disk usage.
func (s *sandbox) usage() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

func (s *sandbox) addUsage(delta int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used = max(s.used+delta, 0)
}

// fileSizeLimit is the RLIMIT_FSIZE of the next command: Limits.FileSizeBytes,
// lowered to what is left of the disk quota.
func (s *sandbox) fileSizeLimit() int64 {
	limit := s.p.cfg.Limits.FileSizeBytes
	if q := s.p.cfg.DiskQuota; q > 0 {
		limit = min(limit, max(q-s.usage(), 0))
	}
	return limit
}

// measure records the workspace's disk usage after a command and returns
// how far it is over the quota (0 without a quota or when within).
func (s *sandbox) measure(ctx context.Context) int64 {
	q := s.p.cfg.DiskQuota
	if q == 0 {
		return 0
	}
	used, err := diskUsage(ctx, s.workspace)
	if err != nil {
		// Keep the last value: a cancelled caller or a racing removal
		// must not reset the count.
		s.p.log.Debug().Err(err).Str("key", s.key).Msg("measure workspace disk usage")
		return max(s.usage()-q, 0)
	}
	s.mu.Lock()
	s.used = used
	s.mu.Unlock()
	return max(used-q, 0)
}
