package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeInstall writes a bin directory whose pg_ctl prints a version like the real one, and
// an initdb that does nothing.
func fakeInstall(t *testing.T, root string, major int) string {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(major), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{
		"pg_ctl": fmt.Sprintf("#!/bin/sh\necho 'pg_ctl (PostgreSQL) %d.3 (Debian %d.3-1)'\n", major, major),
		"initdb": "#!/bin/sh\nexit 0\n",
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindPicksInstallation(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir14 := fakeInstall(t, root, 14)
	dir16 := fakeInstall(t, root, 16)
	dir9 := fakeInstall(t, root, 9) // sorts after 16 as a string: newest must be numeric
	onPath := t.TempDir()
	pathDir := fakeInstall(t, onPath, 15)
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	withPath := func(name string) (string, error) { return filepath.Join(pathDir, name), nil }
	glob := filepath.Join(root, "*", "bin")

	for _, tc := range []struct {
		name      string
		lookPath  func(string) (string, error)
		wantMajor int
		wantDir   string
		wantErr   string
	}{
		{"newest when none on PATH", noPath, 0, dir16, ""},
		{"PATH wins for a new cluster", withPath, 0, pathDir, ""},
		{"the cluster's version", withPath, 14, dir14, ""},
		{"an old cluster's version", noPath, 9, dir9, ""},
		{"cluster's version missing", withPath, 13, "", "created by PostgreSQL 13, but only PostgreSQL 15, 14, 16, 9 is installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := finder{lookPath: tc.lookPath, globs: []string{glob}}
			b, err := f.find(context.Background(), tc.wantMajor)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("find: %v, want error containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "apt-get install -y postgresql-13") {
					t.Errorf("error %q does not say how to install version 13", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("find: %v", err)
			}
			if b.dir != tc.wantDir {
				t.Errorf("find chose %s (PostgreSQL %d), want %s", b.dir, b.major, tc.wantDir)
			}
		})
	}
}

func TestFindNothingInstalledSaysHowToInstall(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	// A directory with pg_ctl but no initdb is a client-only install: not enough.
	clientOnly := filepath.Join(empty, "17", "bin")
	if err := os.MkdirAll(clientOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clientOnly, "pg_ctl"), []byte("#!/bin/sh\necho 'pg_ctl (PostgreSQL) 17.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := finder{
		lookPath: func(string) (string, error) { return "", errors.New("not found") },
		globs:    []string{filepath.Join(empty, "*", "bin")},
	}
	_, err := f.find(context.Background(), 0)
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("find: %v, want ErrNotInstalled", err)
	}
	for _, want := range []string{"apt-get install -y postgresql", "brew install postgresql@16", "DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	// Start reports the same before touching the directory.
	dir := filepath.Join(t.TempDir(), "pg")
	_, err = start(context.Background(), Options{Dir: dir}, f)
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("start: %v, want ErrNotInstalled", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("start created %s although nothing is installed", dir)
	}
}
