package localpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInstalled means no PostgreSQL server binaries (initdb and pg_ctl) were found. Its
// message says how to get them.
var ErrNotInstalled = errors.New("no PostgreSQL server found (looked for initdb and pg_ctl on PATH, " +
	"in /usr/lib/postgresql/*/bin and in Homebrew's postgresql@*): " +
	"install one with `sudo apt-get install -y postgresql` (Debian/Ubuntu) or " +
	"`brew install postgresql@16` (macOS), or set DATABASE_URL to an existing server")

// binaries is one PostgreSQL installation: a directory holding initdb and pg_ctl (pg_ctl
// finds postgres next to itself), and its major version.
type binaries struct {
	dir   string
	major int
}

func (b binaries) initdb() string { return filepath.Join(b.dir, "initdb") }
func (b binaries) pgCtl() string  { return filepath.Join(b.dir, "pg_ctl") }

// tool is another program of the installation, e.g. pg_basebackup: next to pg_ctl, or next
// to what pg_ctl links to (a pg_ctl on PATH may be a symbolic link into the installation).
func (b binaries) tool(name string) string {
	if p := filepath.Join(b.dir, name); isExecutable(p) {
		return p
	}
	if real, err := filepath.EvalSymlinks(b.pgCtl()); err == nil {
		if p := filepath.Join(filepath.Dir(real), name); isExecutable(p) {
			return p
		}
	}
	return filepath.Join(b.dir, name)
}

// finder locates installations. The fields are the places it looks; tests replace them.
type finder struct {
	// lookPath is exec.LookPath.
	lookPath func(file string) (string, error)
	// globs are patterns of further bin directories, e.g. /usr/lib/postgresql/*/bin.
	globs []string
}

func defaultFinder() finder {
	return finder{
		lookPath: exec.LookPath,
		globs: []string{
			"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
			"/usr/pgsql-*/bin",                   // RHEL, Fedora (PGDG)
			"/opt/homebrew/opt/postgresql@*/bin", // Homebrew on Apple silicon (keg-only)
			"/usr/local/opt/postgresql@*/bin",    // Homebrew on Intel
		},
	}
}

// find returns the installation to use. With wantMajor > 0 (the data directory's
// PG_VERSION) only that major version will do; otherwise the one on PATH wins, then the
// newest of the rest. It returns ErrNotInstalled when there is none at all.
func (f finder) find(ctx context.Context, wantMajor int) (binaries, error) {
	var dirs []string
	pathDir := ""
	if p, err := f.lookPath("pg_ctl"); err == nil {
		pathDir = filepath.Dir(p)
		dirs = append(dirs, pathDir)
	}
	for _, g := range f.globs {
		m, _ := filepath.Glob(g) // the only error is a bad pattern, and ours are constant
		dirs = append(dirs, m...)
	}

	var found []binaries
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] || !isExecutable(filepath.Join(d, "initdb")) || !isExecutable(filepath.Join(d, "pg_ctl")) {
			continue
		}
		seen[d] = true
		major, err := majorVersion(ctx, filepath.Join(d, "pg_ctl"))
		if err != nil {
			continue // a broken installation is as good as none; others may work
		}
		found = append(found, binaries{dir: d, major: major})
	}
	if err := ctx.Err(); err != nil {
		return binaries{}, fmt.Errorf("look for PostgreSQL: %w", err) // not "not installed"
	}
	if len(found) == 0 {
		return binaries{}, ErrNotInstalled
	}
	if wantMajor > 0 {
		for _, b := range found {
			if b.major == wantMajor {
				return b, nil
			}
		}
		var have []string
		for _, b := range found {
			have = append(have, strconv.Itoa(b.major))
		}
		return binaries{}, fmt.Errorf("the data directory was created by PostgreSQL %d, but only PostgreSQL %s is installed: "+
			"install version %d (`sudo apt-get install -y postgresql-%d` on Debian/Ubuntu) or move the directory away to start afresh",
			wantMajor, strings.Join(have, ", "), wantMajor, wantMajor)
	}
	// PATH first (the user's choice), then the newest.
	for _, b := range found {
		if b.dir == pathDir {
			return b, nil
		}
	}
	return slices.MaxFunc(found, func(a, b binaries) int { return a.major - b.major }), nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// majorVersion runs `pg_ctl --version` ("pg_ctl (PostgreSQL) 15.10 (Debian ...)") and
// returns the major version, 15.
func majorVersion(ctx context.Context, pgCtl string) (int, error) {
	out, err := exec.CommandContext(ctx, pgCtl, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("run %s --version: %w", pgCtl, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s --version: unexpected output %q", pgCtl, bytes.TrimSpace(out))
	}
	return strconv.Atoi(string(m[1]))
}
