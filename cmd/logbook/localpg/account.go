package localpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// account is the unprivileged user the server runs as when the caller is root.
type account struct {
	name     string
	uid, gid uint32
}

// runAs picks the account for a root caller: the owner of an existing cluster if that is
// not root (so a directory keeps working), else the system user name, created when missing.
// It says which account on log (one line), and that it creates one when it does.
func runAs(ctx context.Context, data, name string, log io.Writer) (*account, error) {
	if fi, err := os.Stat(data); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			a := &account{name: strconv.Itoa(int(st.Uid)), uid: st.Uid, gid: st.Gid}
			if u, err := user.LookupId(a.name); err == nil {
				a.name = u.Username
			}
			fmt.Fprintf(log, "running as root: PostgreSQL runs as user %s, the owner of %s (it refuses to run as root)\n", a.name, data)
			return a, nil
		}
	}
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		fmt.Fprintf(log, "running as root: creating the system user %s (no home, no login shell) to run PostgreSQL as (it refuses to run as root)\n", name)
		if err := createSystemUser(ctx, name); err != nil {
			return nil, err
		}
		u, err = user.Lookup(name)
	}
	if err != nil {
		return nil, fmt.Errorf("look up user %s to run PostgreSQL as (it refuses to run as root): %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %s has uid 0; PostgreSQL refuses to run as root: choose another user", name)
	}
	fmt.Fprintf(log, "running as root: PostgreSQL runs as the system user %s (it refuses to run as root)\n", name)
	return &account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// createSystemUser runs useradd (in Debian's required "passwd" package) for a system user
// with its own group, no home and no login shell. A concurrent creation is not an error.
func createSystemUser(ctx context.Context, name string) error {
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		useradd = "/usr/sbin/useradd"
	}
	out, err := exec.CommandContext(ctx, useradd, "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
		"--comment", "logbook local PostgreSQL", name).CombinedOutput()
	if err != nil {
		if _, lerr := user.Lookup(name); lerr == nil {
			return nil // someone else created it meanwhile
		}
		return fmt.Errorf("create system user %s to run PostgreSQL as (it refuses to run as root): %w: %s; "+
			"create it yourself (useradd --system --user-group %s) or run logbook dev as a normal user", name, err, tail(out, 3), name)
	}
	return nil
}

// canReach checks that the account may search every directory from / down to dir, going by
// the mode bits (owner, primary group, others).
func (a *account) canReach(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("check %s: %w", d, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		perm := fi.Mode().Perm()
		can := perm&0o001 != 0 ||
			(st.Uid == a.uid && perm&0o100 != 0) ||
			(st.Gid == a.gid && perm&0o010 != 0)
		if !can {
			return fmt.Errorf("PostgreSQL runs as user %s (it refuses to run as root), who cannot enter %s (mode %v): "+
				"choose a directory outside it or make it searchable (chmod o+x %s)", a.name, d, perm, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// chownTree gives dir and everything in it to the account, where not already its.
func chownTree(dir string, a *account) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid == a.uid && st.Gid == a.gid {
			return nil
		}
		if err := os.Lchown(path, int(a.uid), int(a.gid)); err != nil {
			return fmt.Errorf("give %s to user %s: %w", path, a.name, err)
		}
		return nil
	})
}
