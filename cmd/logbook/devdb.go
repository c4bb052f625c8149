package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A running `logbook dev` with a PostgreSQL of its own leaves that database's URL in a file
// of the user's cache directory, removed when dev stops; search, transcript and audit use it
// when DATABASE_URL is unset and the server answers.

// devDatabaseFile is where dev leaves the URL: <user cache dir>/logbook/dev-database-url.
func devDatabaseFile() string { return filepath.Join(cacheDir(), "logbook", "dev-database-url") }

// devDatabaseWait bounds how long a CLI waits for dev's server to answer.
const devDatabaseWait = 2 * time.Second

// publishDevDatabase writes url to path (mode 0600, atomically); the returned func removes
// it again unless another dev has replaced it meanwhile.
func publishDevDatabase(path, url string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("publish the dev database URL: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(url+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("publish the dev database URL: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("publish the dev database URL: %w", err)
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == url {
			os.Remove(path)
		}
	}, nil
}

// runningDevDatabase returns the URL left in path by a running dev, once its server answers.
func runningDevDatabase(ctx context.Context, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	url := strings.TrimSpace(string(b))
	if url == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	ctx, cancel := context.WithTimeout(ctx, devDatabaseWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", fmt.Errorf("the dev database named in %s does not answer (is logbook dev still running?): %w", path, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.Ping(ctx); err != nil {
		return "", fmt.Errorf("the dev database named in %s does not answer: %w", path, err)
	}
	return url, nil
}

// cliDatabaseURL is DATABASE_URL or, when it is unset, the database of a running
// `logbook dev` (saying so in one line on stderr). The error names both ways.
func cliDatabaseURL(ctx context.Context, e env) (string, error) {
	u, err := databaseURL(e)
	if err == nil {
		return u, nil
	}
	path := devDatabaseFile()
	dev, derr := runningDevDatabase(ctx, path)
	if derr == nil {
		fmt.Fprintf(e.stderr, "logbook: DATABASE_URL is not set: using the database of the running logbook dev (%s)\n", dev)
		return dev, nil
	}
	if errors.Is(derr, os.ErrNotExist) {
		return "", err
	}
	return "", fmt.Errorf("%w; %v", err, derr)
}
