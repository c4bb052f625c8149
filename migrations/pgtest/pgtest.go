// Package pgtest gives each test its own fresh PostgreSQL database, created from a template
// that holds every migration, and drops it when the test ends. Tests that use it may run in
// parallel and share nothing.
//
// The server is found through LOGBOOK_TEST_DATABASE_URL, then DATABASE_URL, then
// postgres://postgres@127.0.0.1:5432/postgres. The connecting role must be able to create
// databases and roles (the local trust-auth superuser is). When no server answers, the test
// fails with a message that says how to get one: it never skips.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose

	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/session"
)

// DefaultURL is used when neither LOGBOOK_TEST_DATABASE_URL nor DATABASE_URL is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

const howToGetOne = `no PostgreSQL server answers at %s: %v
Start one (on Debian: apt-get install -y postgresql && pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start),
or point LOGBOOK_TEST_DATABASE_URL at a server whose role may create databases and roles. .ci/run starts one for you.`

// ServerURL returns the URL of the server the tests use (its maintenance database).
func ServerURL() string {
	for _, k := range []string{"LOGBOOK_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return DefaultURL
}

// New creates a fresh, migrated database for tb and returns its URL. The database is dropped
// when tb ends.
func New(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, true)
}

// NewEmpty creates a fresh database with no migration applied (template0's contents) for tb
// and returns its URL. The database is dropped when tb ends.
func NewEmpty(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, false)
}

func newDatabase(tb testing.TB, migrated bool) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server := ServerURL()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		tb.Fatalf(howToGetOne, redact(server), err)
	}
	defer admin.Close(context.Background())

	tmpl := "template0"
	if migrated {
		if tmpl, err = ensureTemplate(ctx, admin, server); err != nil {
			tb.Fatalf("pgtest: prepare template database: %v", err)
		}
	}
	name := fmt.Sprintf("lbt_%d_%s", time.Now().UnixNano(), randHex(4))
	if err := createFromTemplate(ctx, admin, name, tmpl); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(server, name)
}

// ensureTemplate creates (once per set of migrations, across processes) a template database
// holding every migration, and returns its name.
func ensureTemplate(ctx context.Context, admin *pgx.Conn, server string) (string, error) {
	sum, err := migrationsDigest()
	if err != nil {
		return "", err
	}
	name := "lbt_template_" + sum[:16]
	// Serialise template builders across test processes.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", session.LockTestTemplate); err != nil {
		return "", err
	}
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", session.LockTestTemplate) //nolint:errcheck

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_wip"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", err
	}
	db, err := sql.Open("pgx", withDatabase(server, building))
	if err != nil {
		return "", err
	}
	err = migrations.Up(ctx, db, nil)
	db.Close()
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return name, nil
}

func createFromTemplate(ctx context.Context, admin *pgx.Conn, name, tmpl string) error {
	sqlText := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		_, err = admin.Exec(ctx, sqlText)
		var pgErr *pgconn.PgError
		// 55006: the template is briefly in use by another CREATE DATABASE.
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(20+attempt*10) * time.Millisecond):
		}
	}
	return err
}

func migrationsDigest() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

func withDatabase(server, name string) string {
	u, err := url.Parse(server)
	if err != nil || u.Scheme == "" {
		// keyword/value DSN
		return strings.TrimSpace(server) + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return "(the configured server)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprint(time.Now().UnixNano() % 1e6)
	}
	return hex.EncodeToString(b)
}
