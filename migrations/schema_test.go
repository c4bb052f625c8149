package migrations_test

import (
	"context"
	"database/sql"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/migrations/pgtest"
)

var update = flag.Bool("update", false, "rewrite testdata/schema.sql from a freshly migrated database")

// goldenSchema is the file that holds the schema the migrations make.
const goldenSchema = "testdata/schema.sql"

// The schema a fresh database has after every migration is the one in testdata/schema.sql, so
// that the file reads as the current definition of every table and function (logbook_append,
// say, which migration after migration redefines), and a migration's commit shows what it
// changed as that file's diff. The database is migrated here with migrations.Up, as `logbook
// migrate up` does, rather than copied from pgtest's template.
func TestSchemaGolden(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, err := dumpSchema(ctx, migratedDatabase(ctx, t))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		writeGolden(t, got)
		return
	}
	want, err := os.ReadFile(goldenSchema)
	if err != nil {
		t.Fatalf("read the golden schema (go test ./migrations -run TestSchemaGolden -update writes it): %v", err)
	}
	if d := schemaDiff(string(want), got); d != "" {
		t.Errorf("the migrated schema differs from %s (- file, + database). If the migrations mean it, rewrite the file with\n"+
			"    go test ./migrations -run TestSchemaGolden -update\nand commit it with them.\n\n%s", goldenSchema, d)
	}
}

// migratedDatabase returns the URL of a fresh database that migrations.Up has taken to the
// latest migration.
func migratedDatabase(ctx context.Context, t *testing.T) string {
	t.Helper()
	url := pgtest.NewEmpty(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	return url
}

// writeGolden replaces the golden schema with got.
func writeGolden(t *testing.T, got string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(goldenSchema), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenSchema, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
}

// schemaDiff returns a unified diff from the golden schema want to the database's got, or ""
// when they are the same.
func schemaDiff(want, got string) string {
	if want == got {
		return ""
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(want), B: difflib.SplitLines(got),
		FromFile: goldenSchema, ToFile: "migrated database", Context: 3,
	})
	if err != nil || d == "" {
		// The texts differ in a way a line diff does not show (no newline at the end, say).
		return "--- " + goldenSchema + "\n" + want + "\n+++ migrated database\n" + got
	}
	return d
}
