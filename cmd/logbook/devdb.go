package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A running `logbook dev` with a PostgreSQL of its own leaves that database's URL in a file
// of the user's cache directory, one file per data directory (two dev runs on two data dirs
// never share one), removed when dev stops. search, transcript and audit use it when
// DATABASE_URL is unset and its server answers; with several live, they name them and ask for
// DATABASE_URL.

// devDatabaseDir is where dev leaves the URLs: <user cache dir>/logbook/dev-databases.
func devDatabaseDir() string { return filepath.Join(cacheDir(), "logbook", "dev-databases") }

// devDatabaseFile is the file in dir for the dev whose PostgreSQL keeps its data in dataDir.
func devDatabaseFile(dir, dataDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dataDir)))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".url")
}

// devDatabaseWait bounds how long a CLI waits for a dev's server to answer.
const devDatabaseWait = 2 * time.Second

// devDatabase is what one dev left: its database's URL and its data directory.
type devDatabase struct {
	url, dataDir string
}

// publishDevDatabase writes url and dataDir to path (mode 0600, atomically); the returned
// func removes it again unless another dev has replaced it meanwhile.
func publishDevDatabase(path, url, dataDir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("publish the dev database URL: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(url+"\n"+dataDir+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("publish the dev database URL: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("publish the dev database URL: %w", err)
	}
	return func() {
		if d, err := readDevDatabase(path); err == nil && d.url == url {
			os.Remove(path)
		}
	}, nil
}

// readDevDatabase reads one file publishDevDatabase wrote.
func readDevDatabase(path string) (devDatabase, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return devDatabase{}, err
	}
	url, dataDir, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if url = strings.TrimSpace(url); url == "" {
		return devDatabase{}, fmt.Errorf("%s is empty", path)
	}
	return devDatabase{url: url, dataDir: strings.TrimSpace(dataDir)}, nil
}

// runningDevDatabases reads every URL left in dir and returns the devs whose server answers,
// by data directory, and why each of the others is not used (a dev that died without
// removing its file, say). A missing dir is no dev at all.
func runningDevDatabases(ctx context.Context, dir string) (live []devDatabase, stale []error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.url"))
	for _, path := range files {
		d, err := readDevDatabase(path)
		if err == nil {
			err = pingDevDatabase(ctx, d.url)
		}
		if err != nil {
			stale = append(stale, fmt.Errorf("the dev database named in %s does not answer (is logbook dev still running?): %w", path, err))
			continue
		}
		live = append(live, d)
	}
	slices.SortFunc(live, func(a, b devDatabase) int { return strings.Compare(a.dataDir, b.dataDir) })
	return live, stale
}

func pingDevDatabase(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, devDatabaseWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// cliDatabaseURL is DATABASE_URL or, when it is unset, the database of the running
// `logbook dev` (saying which on stderr). The error names both ways.
func cliDatabaseURL(ctx context.Context, e env) (string, error) {
	return pickDatabaseURL(ctx, e, devDatabaseDir())
}

// pickDatabaseURL is cliDatabaseURL with the devs' files in dir. Several live devs are not
// guessed between: the error lists them and says to set DATABASE_URL.
func pickDatabaseURL(ctx context.Context, e env, dir string) (string, error) {
	u, err := databaseURL(e)
	if err == nil {
		return u, nil
	}
	live, stale := runningDevDatabases(ctx, dir)
	switch {
	case len(live) == 1:
		fmt.Fprintf(e.stderr, "logbook: DATABASE_URL is not set: using the database of the running logbook dev "+
			"with data dir %s (%s)\n", orNone(live[0].dataDir), live[0].url)
		return live[0].url, nil
	case len(live) > 1:
		var runs []string
		for _, d := range live {
			runs = append(runs, fmt.Sprintf("  data dir %s: DATABASE_URL='%s'", orNone(d.dataDir), d.url))
		}
		return "", fmt.Errorf("DATABASE_URL is not set and %d logbook dev runs are live; set DATABASE_URL to the one you mean:\n%s",
			len(live), strings.Join(runs, "\n"))
	case len(stale) > 0:
		return "", fmt.Errorf("%w; %w", err, errors.Join(stale...))
	}
	return "", err
}
