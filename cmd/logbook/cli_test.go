package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// runCLI runs the command line args without a database, as main would, and returns the
// error run gave, its exit status, and what was printed.
func runCLI(t *testing.T, vars map[string]string, args ...string) (err error, code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, func(k string) string { return vars[k] }, strings.NewReader(""), &out, &errOut)
	if err != nil {
		code = exitCode(err)
	}
	return err, code, out.String(), errOut.String()
}

// A mistyped subcommand or an extra argument fails with exit status 2 and one line that
// names the word and the nearest command (issue 29: cobra printed the group's help and
// exited 0, so a cron job running "logbook audit verfy" never verified anything).
func TestUnknownSubcommandsAndExtraArgumentsExit2(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"audit", "verfy"}, `unknown command "verfy" for "logbook audit"; did you mean "verify"?`},
		{[]string{"audit", "bogus"}, `unknown command "bogus" for "logbook audit"; its commands: checkpoint, export, hold, keygen, purge, rebuild-projections, runs, schedule, tail, verify, verify-export`},
		{[]string{"migrate", "upp"}, `unknown command "upp" for "logbook migrate"; did you mean "up"?`},
		{[]string{"migrate", "down"}, `unknown command "down" for "logbook migrate"; its commands: status, up`},
		{[]string{"audit", "hold", "lst"}, `unknown command "lst" for "logbook audit hold"; did you mean "list"?`},
		{[]string{"audit", "verfy", "--session", "01a226cc-2ba6-7d4b-9f06-a738362db19d"}, `unknown command "verfy" for "logbook audit"; did you mean "verify"?`},
		{[]string{"serach", "x"}, `unknown command "serach" for "logbook"; did you mean "search"?`},
		{[]string{"audit", "keygen", "PREFIX"}, `audit keygen: takes no arguments (got "PREFIX"); usage: logbook audit keygen [--out <prefix>]`},
		{[]string{"audit", "runs", "extra"}, `audit runs: takes no arguments (got "extra")`},
		{[]string{"transcript", "a", "b", "c"}, `transcript: accepts between 1 and 2 arg(s), received 3`},
		{[]string{"search"}, `search: requires at least 1 arg(s), only received 0; usage: logbook search "<query>"`},
	}
	for _, c := range cases {
		err, code, stdout, _ := runCLI(t, nil, c.args...)
		if err == nil || code != 2 {
			t.Errorf("logbook %s: error %v, exit %d; want exit 2", strings.Join(c.args, " "), err, code)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("logbook %s: %q; want one line containing %q", strings.Join(c.args, " "), msg, c.want)
		}
		if stdout != "" {
			t.Errorf("logbook %s printed help on stdout:\n%s", strings.Join(c.args, " "), stdout)
		}
	}
	// A group alone still shows its help, successfully.
	if err, _, stdout, _ := runCLI(t, nil, "audit"); err != nil || !strings.Contains(stdout, "Available Commands") {
		t.Errorf("logbook audit: %v, help %q", err, stdout)
	}
}

// emptyDatabase creates a database that was never migrated, dropped when t ends.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	server := pgtest.ServerURL()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("lbt_empty_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), server)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Against a database that was never migrated, the reading commands and every audit command
// say the schema is missing and that `logbook migrate up` fixes it, as serve does (issue 29:
// they printed raw SQL errors, such as relation "search_docs" does not exist).
func TestCommandsOnAnUnmigratedDatabaseSayMigrateUp(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": emptyDatabase(t), "USER": "op", "LOGBOOK_AUDIT_ROLE": "none"}
	sid := "01a226cc-2ba6-7d4b-9f06-a738362db19d"
	out := t.TempDir()
	for _, args := range [][]string{
		{"search", "foo"},
		{"transcript", sid},
		{"takeover", sid, "--dir", filepath.Join(out, "t")},
		{"handback", sid},
		{"audit", "verify"},
		{"audit", "export", "--from", "2025-01-01", "--to", "2025-01-02", "--out", filepath.Join(out, "x")},
		{"audit", "checkpoint", "--out", filepath.Join(out, "cp.json")},
		{"audit", "hold", "list"},
		{"audit", "runs"},
		{"audit", "purge", "--older-than", "400d"},
	} {
		err, _, _, stderr := runCLI(t, vars, args...)
		if err == nil || !strings.Contains(err.Error(), "missing or older than this binary") || !strings.Contains(err.Error(), "logbook migrate up") ||
			strings.Contains(err.Error(), "SQLSTATE") || strings.Contains(stderr, "SQLSTATE") {
			t.Errorf("logbook %s on an unmigrated database: %v\n%s", strings.Join(args, " "), err, stderr)
		}
	}
}

// `audit export --out DIR` into a directory holding an export is refused, recording nothing
// and keeping the export intact; --overwrite replaces it whole and verify-export passes
// (issue 29: the second export silently replaced the first, exit 0).
func TestAuditExportRefusesANonEmptyOutUnlessOverwrite(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	vars := map[string]string{"DATABASE_URL": dbURL, "USER": "op"}
	dir := filepath.Join(t.TempDir(), "export")
	export := []string{"audit", "export", "--from", "2025-01-01", "--to", "2025-01-02", "--out", dir}
	if err, _, _, stderr := runCLI(t, vars, append(export, "--format", "csv")...); err != nil {
		t.Fatalf("first export: %v\n%s", err, stderr)
	}
	err, code, _, _ := runCLI(t, vars, export...)
	if err == nil || code != 1 || !strings.Contains(err.Error(), "holds an export already") || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("second export into %s: %v (exit %d); want a refusal naming --overwrite", dir, err, code)
	}
	if err, _, _, _ := runCLI(t, vars, "audit", "verify-export", dir); err != nil {
		t.Fatalf("the first export after the refusal: %v", err)
	}
	if err, _, _, stderr := runCLI(t, vars, append(export, "--overwrite")...); err != nil {
		t.Fatalf("export --overwrite: %v\n%s", err, stderr)
	}
	if err, _, out, _ := runCLI(t, vars, "audit", "verify-export", dir); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("the overwriting export: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "events.csv")); !os.IsNotExist(err) {
		t.Errorf("the first export's events.csv is beside the second export (%v)", err)
	}
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var exports int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_access WHERE action = 'export'`).Scan(&exports); err != nil {
		t.Fatal(err)
	}
	if exports != 2 {
		t.Errorf("%d export access records; want 2 (the refused export read nothing)", exports)
	}
}

// `audit hold add` names something the log has, or fails naming it (issue 29).
func TestAuditHoldAddRefusesWhatDoesNotExist(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": pgtest.New(t), "USER": "op"}
	for _, args := range [][]string{
		{"--session", "01a226cc-2ba6-7d4b-9f06-a738362db19d"},
		{"--channel", "C0TYPO01"},
		{"--actor", "U0TYPO01"},
	} {
		err, _, stdout, _ := runCLI(t, vars, append([]string{"audit", "hold", "add", "--reason", "litigation"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[1]) || !strings.Contains(err.Error(), "not found") {
			t.Errorf("hold add %s: %v, printed %q; want an error naming what was not found", strings.Join(args, " "), err, stdout)
		}
	}
	if err, code, _, _ := runCLI(t, vars, "audit", "hold", "add", "--session", "nope", "--reason", "x"); code != 2 || !strings.Contains(err.Error(), `--session "nope" is not a session id`) {
		t.Errorf("hold add --session nope: %v (exit %d)", err, code)
	}
	if err, _, stdout, _ := runCLI(t, vars, "audit", "hold", "list"); err != nil || strings.Count(stdout, "\n") != 1 {
		t.Errorf("holds after refusals: %v\n%s", err, stdout)
	}
}

// A bad argument gets one precise line, never a misleading one (issue 29: --limit 0 searched
// and printed "No messages match"; a web URL was "not a Slack channel id"; keygen's prefix
// was an "unknown command"; a bad retention period took two lines).
func TestBadArgumentsGetAPreciseLine(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "USER": "op"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"search", "--limit", "0", "foo"}, "--limit 0: give a number of hits from 1 to 200"},
		{[]string{"search", "--limit", "1000", "foo"}, "--limit 1000: give a number of hits from 1 to 200"},
		{[]string{"search", "--kind", "note", "foo"}, `--kind "note": give all, messages or notes`},
		{[]string{"search", "--kind", "notes", "--tools", "foo"}, "--tools searches tool calls, which are messages: not with --kind notes"},
		{[]string{"transcript", "https://example.com/foo"}, `"https://example.com/foo" is not a Slack permalink: "example.com" is not a Slack workspace`},
		{[]string{"transcript", "https://acme.slack.com/team/U1"}, `"https://acme.slack.com/team/U1" is not a Slack permalink (https://<workspace>.slack.com/archives/<channel>/p<ts>)`},
		{[]string{"audit", "keygen", "PREFIX"}, `takes no arguments (got "PREFIX")`},
		{[]string{"audit", "purge", "--older-than", "5x"}, `retention "5x": invalid audit request: use a positive period`},
		{[]string{"audit", "export", "--from", "2025-01-02", "--to", "2025-01-01", "--out", t.TempDir()}, "--to 2025-01-01 is not after --from 2025-01-02"},
		{[]string{"audit", "hold", "remove", "nope", "--reason", "x"}, `"nope" is not a hold id`},
		{[]string{"audit", "verify", "--session", "nope"}, `--session "nope" is not a session id`},
	}
	for _, c := range cases {
		err, code, stdout, stderr := runCLI(t, vars, c.args...)
		line := strings.TrimSpace(stderr)
		if err != nil && line == "" {
			line = err.Error()
		}
		if code != 2 || !strings.Contains(line, c.want) || strings.Contains(line, "\n") || stdout != "" {
			t.Errorf("logbook %s: exit %d, %q (stdout %q); want exit 2 and one line containing %q", strings.Join(c.args, " "), code, line, stdout, c.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "nothing-here")
	if err, code, _, _ := runCLI(t, vars, "audit", "verify-export", missing); code != 1 || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("verify-export of a missing directory: %v (exit %d)", err, code)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("verify-export created the directory it was asked to verify (%v)", err)
	}
}
