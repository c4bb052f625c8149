package sandbox

import (
	"fmt"
	"path/filepath"

	"github.com/rs/zerolog"
)

// newProvider is what the bwrap and process providers share before they part: prlimit found,
// the limits clamped to the hard ones, the sandbox user, the base directory prepared, the
// memory bound chosen, what a previous run left swept, and the disk bound chosen.
func newProvider(name string, cfg Config, log zerolog.Logger) (*provider, error) {
	prlimit, err := lookPath(cfg.PrlimitPath)
	if err != nil {
		return nil, fmt.Errorf("prlimit not found (Debian package util-linux): %w", err)
	}
	cfg.Limits = clampToHard(cfg.Limits, log)
	p := &provider{name: name, cfg: cfg, log: log, prlimit: prlimit}
	p.setUser()
	if err := p.prepareBase(); err != nil {
		return nil, err
	}
	p.chooseMemoryBound()
	p.sweepAtStart()
	p.chooseDiskBound()
	return p, nil
}

// newProcess builds the plain-process provider: commands run as ordinary
// child processes in the workspace directory, with the allowlisted
// environment, the limits and process-group kill, but no isolation at all.
func newProcess(cfg Config, log zerolog.Logger) (Provider, error) {
	// No RLIMIT_NPROC (limitProcesses stays false): without a user namespace of its own it
	// counts every process of the sandbox uid on the host, and a busy uid could not fork.
	p, err := newProvider(KindProcess, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("process sandbox: %w", err)
	}
	cfg = p.cfg
	p.inside = func(ws string) string { return ws }
	p.wrap = func(ws, dir string, _, inner []string) wrapped {
		return wrapped{argv: inner, dir: filepath.Join(ws, filepath.FromSlash(dir))}
	}
	uid, _ := p.sandboxIDs()
	log.Warn().Str("base_dir", cfg.BaseDir).Uint32("uid", uid).Str("memory_bound", p.memoryBound).
		Str("memory_bound_why", p.memoryWhy).Str("cgroup_parent", p.cgroupParent).Int64("memory_bytes", cfg.Limits.MemoryBytes).Bool("process_limit", false).
		Msg("SANDBOX DOES NOT ISOLATE: provider \"process\" runs commands as plain processes that can read, write and reach " +
			"whatever this user can; use it only where bubblewrap is unavailable (LOGBOOK_SANDBOX=bwrap)")
	return p, nil
}
