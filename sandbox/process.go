package sandbox

import (
	"fmt"
	"path/filepath"

	"github.com/rs/zerolog"
)

// newProcess builds the plain-process provider: commands run as ordinary
// child processes in the workspace directory, with the allowlisted
// environment, the limits and process-group kill, but no isolation at all.
func newProcess(cfg Config, log zerolog.Logger) (Provider, error) {
	prlimit, err := lookPath(cfg.PrlimitPath)
	if err != nil {
		return nil, fmt.Errorf("process sandbox: prlimit not found (Debian package util-linux): %w", err)
	}
	cfg.Limits = clampToHard(cfg.Limits, log)
	// No RLIMIT_NPROC: without a user namespace of its own it counts every
	// process of the sandbox uid on the host, and a busy uid could not fork.
	p := &provider{name: KindProcess, cfg: cfg, log: log, prlimit: prlimit}
	p.setUser()
	if err := p.prepareBase(); err != nil {
		return nil, fmt.Errorf("process sandbox: %w", err)
	}
	p.chooseMemoryBound()
	p.sweepAtStart()
	p.chooseDiskBound()
	p.inside = func(ws string) string { return ws }
	p.wrap = func(ws, dir string, _, inner []string) ([]string, string) {
		return inner, filepath.Join(ws, filepath.FromSlash(dir))
	}
	uid, _ := p.sandboxIDs()
	log.Warn().Str("base_dir", cfg.BaseDir).Uint32("uid", uid).Str("memory_bound", p.memoryBound).
		Str("memory_bound_why", p.memoryWhy).Str("cgroup_parent", p.cgroupParent).Int64("memory_bytes", cfg.Limits.MemoryBytes).Bool("process_limit", false).
		Msg("SANDBOX DOES NOT ISOLATE: provider \"process\" runs commands as plain processes that can read, write and reach " +
			"whatever this user can; use it only where bubblewrap is unavailable (LOGBOOK_SANDBOX=bwrap)")
	return p, nil
}
