package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

func (s *sandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	rel, err := s.local(name)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.ops.Done()
	r, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, s.pathErr(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %q: not a regular file", name)
	}
	limit := s.p.cfg.Limits.FileSizeBytes
	if fi.Size() > limit {
		return nil, fmt.Errorf("read %q: %d bytes, over %d: %w", name, fi.Size(), limit, ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("read %q: over %d bytes: %w", name, limit, ErrTooLarge)
	}
	return data, nil
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
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := s.mkdirs(r, path.Dir(rel)); err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %q: %w", name, s.pathErr(err))
	}
	if s.p.chownUID >= 0 {
		if err := f.Chown(s.p.chownUID, s.p.chownGID); err != nil {
			_ = f.Close()
			return fmt.Errorf("write %q: %w", name, err)
		}
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %q: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %q: %w", name, err)
	}
	return nil
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
