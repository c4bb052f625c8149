package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// The file methods never block on what a sandboxed command may plant in the
// workspace. Each checks ctx and the sandbox between steps; the steps
// themselves cannot wait on another process:
//
//   - the name is first stat'ed through os.Root and anything but a regular
//     file is refused, so a FIFO or device is never opened at all;
//   - the open adds O_NONBLOCK and O_NOCTTY: if the name was swapped for a
//     FIFO after the stat, opening it for reading returns at once and for
//     writing fails with ENXIO instead of waiting for the other end;
//   - the opened file is fstat'ed and refused unless regular (this closes the
//     window between stat and open); O_NONBLOCK means nothing to a regular
//     file, and closing a file that was never a pipe's end cannot block.
//
// Reads and writes go in chunks with ctx and the sandbox checked between
// them, so a cancelled call or a Close ends a large transfer early.

// fileChunk is how much ReadFile and WriteFile move between checks of ctx.
const fileChunk = 1 << 20

func (s *sandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	rel, err := s.local(name)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.ops.Done()
	if err := s.step(ctx); err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	r, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, fi, err := s.openRegular(ctx, r, rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	defer f.Close()
	limit := s.p.cfg.Limits.FileSizeBytes
	if fi.Size() > limit {
		return nil, fmt.Errorf("read %q: %d bytes, over %d: %w", name, fi.Size(), limit, ErrTooLarge)
	}
	data := make([]byte, 0, min(fi.Size(), limit)+1)
	for {
		if err := s.step(ctx); err != nil {
			return nil, fmt.Errorf("read %q: %w", name, err)
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.Read(data[len(data):min(cap(data), len(data)+fileChunk)])
		data = data[:len(data)+n]
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("read %q: over %d bytes: %w", name, limit, ErrTooLarge)
		}
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", name, err)
		}
	}
}

func (s *sandbox) WriteFile(ctx context.Context, name string, data []byte) error {
	rel, err := s.local(name)
	if err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	if rel == "." {
		return fmt.Errorf("write %q: is the workspace directory", name)
	}
	if limit := s.p.cfg.Limits.FileSizeBytes; int64(len(data)) > limit {
		return fmt.Errorf("write %q: %d bytes, over %d: %w", name, len(data), limit, ErrTooLarge)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ops.Done()
	if err := s.step(ctx); err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	defer r.Close()
	// With a quota, refuse data that would take the workspace over it,
	// counting the file it replaces as freed.
	var oldAlloc int64
	if q := s.p.cfg.DiskQuota; q > 0 {
		if fi, err := r.Stat(rel); err == nil && fi.Mode().IsRegular() {
			oldAlloc = allocated(fi)
		}
		if would := s.usage() - oldAlloc + int64(len(data)); would > q {
			return fmt.Errorf("write %q: %w", name, &DiskQuotaError{Usage: would, Quota: q})
		}
	}
	if err := s.refuseGitDir(r, rel, nil); err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	if err := s.mkdirs(r, path.Dir(rel)); err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	// Truncated only once the file opened is known to lie outside any git directory.
	f, _, err := s.openRegular(ctx, r, rel, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	if err := s.refuseGitDir(r, rel, f); err == nil {
		err = f.Truncate(0)
	} else {
		_ = f.Close()
		return fmt.Errorf("write %q: %w", name, err)
	}
	if s.p.chownUID >= 0 {
		if err := f.Chown(s.p.chownUID, s.p.chownGID); err != nil {
			_ = f.Close()
			return fmt.Errorf("write %q: %w", name, err)
		}
	}
	for rest := data; len(rest) > 0; {
		if err := s.step(ctx); err != nil {
			_ = f.Close()
			return fmt.Errorf("write %q: %w", name, err)
		}
		n, err := f.Write(rest[:min(len(rest), fileChunk)])
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("write %q: %w", name, err)
		}
		rest = rest[n:]
	}
	if s.p.cfg.DiskQuota > 0 {
		if fi, err := f.Stat(); err == nil {
			s.addUsage(allocated(fi) - oldAlloc)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	return nil
}

// step returns ctx's error, or ErrLost when the sandbox went away meanwhile.
func (s *sandbox) step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.gone:
		return s.lostErr()
	default:
		return nil
	}
}

// openRegular opens rel in r with flag, without ever blocking, and returns
// it only if it is a regular file; anything else is ErrNotRegular.
func (s *sandbox) openRegular(ctx context.Context, r *os.Root, rel string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	fi, err := r.Stat(rel)
	switch {
	case err == nil:
		if !fi.Mode().IsRegular() {
			return nil, nil, notRegular(fi.Mode())
		}
	case flag&os.O_CREATE != 0 && errors.Is(err, fs.ErrNotExist):
	default:
		return nil, nil, s.pathErr(err)
	}
	if err := s.step(ctx); err != nil {
		return nil, nil, err
	}
	f, err := r.OpenFile(rel, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY, perm)
	if errors.Is(err, syscall.ENXIO) {
		// A FIFO without a reader, or a device without its driver,
		// planted after the stat.
		return nil, nil, fmt.Errorf("special file: %w", ErrNotRegular)
	}
	if err != nil {
		return nil, nil, s.pathErr(err)
	}
	fi, err = f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, notRegular(fi.Mode())
	}
	return f, fi, nil
}

// notRegular names what a non-regular file is.
func notRegular(m fs.FileMode) error {
	kind := "special file"
	switch {
	case m.IsDir():
		kind = "directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeCharDevice != 0:
		kind = "character device"
	case m&fs.ModeDevice != 0:
		kind = "block device"
	case m&fs.ModeSymlink != 0:
		kind = "symbolic link"
	}
	return fmt.Errorf("%s: %w", kind, ErrNotRegular)
}

// mkdirs creates the missing directories of dir (a clean local path), each
// owned by the sandbox user.
func (s *sandbox) mkdirs(r *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := r.Mkdir(p, 0o755)
		switch {
		case err == nil:
			if s.p.chownUID >= 0 {
				if err := r.Chown(p, s.p.chownUID, s.p.chownGID); err != nil {
					return err
				}
			}
		case errors.Is(err, os.ErrExist):
			fi, serr := r.Stat(p)
			if serr != nil {
				return s.pathErr(serr)
			}
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", p)
			}
		default:
			return s.pathErr(err)
		}
	}
	return nil
}
