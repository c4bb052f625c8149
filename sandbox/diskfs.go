package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// With Config.DiskQuota, a bot running as root gives each workspace a filesystem of its own:
// an ext4 image under BaseDir/.disk, loop-mounted (nosuid, nodev) on the workspace directory
// before anything is written there. The kernel then refuses a write past its end (ENOSPC)
// while the command runs, whatever the command does — many files, sparse files, hard links,
// directories; inodes are bounded too. The image is the quota plus a slack of quota/32 + 1
// MiB (ext4's own metadata takes some of it), so one command can take the workspace at most
// that far over the quota; then measure reports it over, as below, and the command's result
// says the quota stopped it (ExecResult.DiskQuotaStopped).
//
// Without root (or where mkfs.ext4 or a loop device is missing) the quota is measured after
// each command only, as Config.DiskQuota says, and one command can overshoot it by as much as
// it writes: the startup log says so.

// diskSlack is how far past the quota a workspace's filesystem reaches.
func diskSlack(quota int64) int64 { return quota/32 + 1<<20 }

// chooseDiskBound decides whether workspaces get a filesystem of their own.
func (p *provider) chooseDiskBound() {
	if p.cfg.DiskQuota <= 0 {
		return
	}
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "not running as root"
	default:
		for _, tool := range []string{"mkfs.ext4", "mount"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = tool + " not found"
			}
		}
	}
	if why == "" {
		if err := p.probeDiskFS(); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		p.log.Warn().Str("why", why).Int64("disk_quota", p.cfg.DiskQuota).
			Msg("sandbox disk quota is MEASURED AFTER EACH COMMAND only: one command may write past it")
		return
	}
	p.diskFS = true
	p.log.Info().Int64("disk_quota", p.cfg.DiskQuota).Int64("slack", diskSlack(p.cfg.DiskQuota)).
		Msg("sandbox workspaces get a filesystem of their own: the disk quota holds while a command runs")
}

// probeDiskFS mounts and unmounts a workspace filesystem once.
func (p *provider) probeDiskFS() error {
	dir, err := os.MkdirTemp(p.cfg.BaseDir, ".probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := p.mountDiskFS(dir); err != nil {
		return err
	}
	return unmountDiskFS(dir)
}

// diskImage is the image file of the workspace dir.
func diskImage(dir string) string {
	return filepath.Join(filepath.Dir(dir), ".disk", filepath.Base(dir)+".img")
}

// mountDiskFS makes and mounts the filesystem of the fresh, empty workspace dir.
func (p *provider) mountDiskFS(dir string) error {
	img := diskImage(dir)
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return fmt.Errorf("workspace filesystem: %w", err)
	}
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		err = f.Truncate(p.cfg.DiskQuota + diskSlack(p.cfg.DiskQuota))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(name string, args ...string) error {
		if err != nil {
			return err
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = []string{"PATH=/usr/sbin:/sbin:" + defaultPath, "LANG=C"}
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, bytes.TrimSpace(out.Bytes()))
		}
		return nil
	}
	err = run("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode", "-E", "nodiscard", img)
	err = run("mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", img, dir)
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("workspace filesystem: %w", err)
	}
	_ = os.Remove(filepath.Join(dir, "lost+found"))
	return nil
}

// unmountDiskFS unmounts the workspace dir's own filesystem, if it has one, and removes its
// image.
func unmountDiskFS(dir string) error {
	img := diskImage(dir)
	if _, err := os.Stat(img); err != nil {
		return nil
	}
	var err error
	if isMountPoint(dir) {
		// Detached: a process still holding a file there does not keep it mounted.
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if rerr := os.Remove(img); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("unmount the workspace filesystem: %w", err)
	}
	return nil
}

func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(dir, &st) != nil || syscall.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// diskFull reports whether the workspace's own filesystem has no room left.
func (s *sandbox) diskFull() bool {
	if !s.p.diskFS {
		return false
	}
	var st unix.Statfs_t
	if unix.Statfs(s.workspace, &st) != nil {
		return false
	}
	return int64(st.Bavail)*st.Bsize < 64<<10
}

// quotaNote is the note a command's result gets when the quota stopped its writes.
func quotaNote(quota int64) string {
	return "\n[sandbox: the workspace's disk quota of " + strconv.FormatInt(quota, 10) +
		" bytes stopped this command's writes (No space left on device); remove files to make room]\n"
}
