package migrations_test

import (
	"context"
	"database/sql"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/migrations/pgtest"
)

// update makes TestSchemaGolden rewrite the golden schema instead of comparing with it.
var update = flag.Bool("update", false, "rewrite testdata/schema.sql from a freshly migrated database")

// goldenSchema is the file that holds the schema the migrations make.
const goldenSchema = "testdata/schema.sql"

// The schema a fresh database has after every migration is the one in testdata/schema.sql, so
// that the file reads as the current definition of every table and function (logbook_append,
// say, which migration after migration redefines), and a migration's commit shows what it
// changed as that file's diff. The database is migrated here with migrations.Up, as `logbook
// migrate up` does, rather than copied from pgtest's template.
//
// Definitions print as the server prints them, and a major version of PostgreSQL may print one
// differently from another (the file was written by 15, Debian bookworm's): a diff in spelling
// alone, on a server of another version, says that rather than that a migration changed.
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
	if d := schemaDiff(goldenSchema, string(want), "migrated database", got); d != "" {
		t.Errorf("the migrated schema differs from %s (- file, + database). If the migrations mean it, rewrite the file with\n"+
			"    go test ./migrations -run TestSchemaGolden -update\nand commit it with them. (A diff in spelling alone comes from a "+
			"PostgreSQL major version other than the file's.)\n\n%s", goldenSchema, d)
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

// schemaDiff returns a unified diff from the dump a (named aName) to the dump b, or "" when they
// are the same.
func schemaDiff(aName, a, bName, b string) string {
	if a == b {
		return ""
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(b), FromFile: aName, ToFile: bName, Context: 3,
	})
	if err != nil || d == "" {
		// The texts differ in a way a line diff does not show (no newline at the end, say).
		return "--- " + aName + "\n" + a + "\n+++ " + bName + "\n" + b
	}
	return d
}

// A golden file that cannot see a change cannot fail on it: each change to a migrated database
// here, one after the other, changes its dump, and the diff shows the change. Among them are an
// edit inside logbook_append's body, which is what the file is most for, and a grant and an
// owner, which say who may do what. A partitioned table, which the dump cannot show, makes it
// fail instead of leaving the table out.
func TestSchemaGoldenSeesChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.New(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before, err := dumpSchema(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range schemaChanges() {
		if _, err := db.ExecContext(ctx, c.sql); err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		after, err := dumpSchema(ctx, url)
		if err != nil {
			t.Fatalf("after %s: %v", c.sql, err)
		}
		d := schemaDiff("before", before, "after", after)
		if !strings.Contains(d, "\n"+c.shows+"\n") {
			t.Errorf("after %s the diff does not show %q:\n%s", c.sql, c.shows, d)
		}
		before = after
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE golden_probe_parted (a int) PARTITION BY RANGE (a)`); err != nil {
		t.Fatal(err)
	}
	if _, err := dumpSchema(ctx, url); err == nil || !strings.Contains(err.Error(), "public.golden_probe_parted") {
		t.Errorf("a schema with a partitioned table dumped with error %v, want one that names the table", err)
	}
}

// schemaChange is a statement that changes a migrated schema and a line its dump's diff shows
// for it.
type schemaChange struct {
	sql   string
	shows string
}

// schemaChanges lists changes of each kind of object the dump shows, in an order they can be
// applied to a migrated database one after the other.
func schemaChanges() []schemaChange {
	return []schemaChange{
		{`DO $$ DECLARE def text; BEGIN
			SELECT pg_get_functiondef('public.logbook_append'::regproc) INTO STRICT def;
			EXECUTE replace(def, 'AS $function$', E'AS $function$\n-- a changed body');
		END $$`, "+-- a changed body"},
		{`ALTER FUNCTION logbook_payload_int(jsonb, text) STABLE`, "+ STABLE"},
		{`ALTER FUNCTION logbook_purge_memory(timestamptz) OWNER TO CURRENT_USER`,
			"-ALTER ROUTINE public.logbook_purge_memory(p_cutoff timestamp with time zone) OWNER TO logbook_retention;"},
		{`GRANT EXECUTE ON FUNCTION logbook_purge_memory(timestamptz) TO logbook_auditor`,
			"+GRANT EXECUTE ON ROUTINE public.logbook_purge_memory(p_cutoff timestamp with time zone) TO logbook_auditor;"},
		{`ALTER TABLE sessions ADD COLUMN golden_probe text DEFAULT 'x'`, "+    golden_probe text DEFAULT 'x'::text,"},
		{`ALTER TABLE sessions ALTER COLUMN golden_probe SET NOT NULL`, "+    golden_probe text DEFAULT 'x'::text NOT NULL,"},
		{`ALTER TABLE sessions ADD CONSTRAINT golden_probe_set CHECK (golden_probe <> '')`,
			"+    CONSTRAINT golden_probe_set CHECK ((golden_probe <> ''::text)),"},
		{`DROP INDEX events_time`, "-CREATE INDEX events_time ON public.events USING btree (created_at);"},
		{`ALTER TABLE events DISABLE TRIGGER events_append_only_row`,
			"+ALTER TABLE public.events DISABLE TRIGGER events_append_only_row;"},
		{`REVOKE INSERT ON events FROM logbook_app`, "+GRANT SELECT ON TABLE public.events TO logbook_app;"},
		{`GRANT UPDATE (golden_probe) ON sessions TO logbook_app`,
			"+GRANT UPDATE (golden_probe) ON TABLE public.sessions TO logbook_app;"},
		{`ALTER TYPE logbook_appended ADD ATTRIBUTE golden_probe integer`, "+    golden_probe integer"},
		{`CREATE VIEW golden_probe_view AS SELECT 1 AS one`, "+CREATE VIEW public.golden_probe_view AS"},
		{`ALTER SEQUENCE events_position_seq CACHE 5`, "+CREATE SEQUENCE public.events_position_seq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 5;"},
		{`COMMENT ON TABLE leases IS 'probe'`, "+COMMENT ON TABLE public.leases IS 'probe';"},
	}
}
