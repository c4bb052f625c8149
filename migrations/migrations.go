// Package migrations holds logbook's schema as numbered SQL files, embedded in the binary and
// applied with goose (github.com/pressly/goose/v3).
//
// The first migration creates the cluster-wide roles logbook_app (INSERT and SELECT on the
// log), logbook_auditor (read-only) and logbook_retention (the only role that may purge), so
// the connection that runs `logbook migrate up` needs CREATEROLE (or the roles must exist).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the SQL migrations.
//
//go:embed *.sql
var FS embed.FS

// Status is one migration's state.
type Status struct {
	Version int64
	Source  string
	Applied bool
}

// provider is goose's over db. Every migration runs under a PostgreSQL session advisory lock
// (goose's default lock id), so replicas that all run `migrate up` at once take turns: the
// first applies what is pending, the others then find nothing to do. A waiter tries again
// every second, for up to ten minutes.
func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and reports each one to out (nil: silent).
func Up(ctx context.Context, db *sql.DB, out io.Writer) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if out != nil {
		for _, r := range results {
			fmt.Fprintf(out, "applied %s (%s)\n", r.Source.Path, r.Duration.Round(1e6))
		}
	}
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// List returns the state of every known migration.
func List(ctx context.Context, db *sql.DB) ([]Status, error) {
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{Version: s.Source.Version, Source: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}
