package main

import (
	"bytes"
	"context"
	"errors"
	"os/user"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// The operator of an audit command comes from --as, LOGBOOK_AUDIT_OPERATOR, USER, then the OS
// account, and the record says which (issue 17: with USER unset, as in containers and cron,
// the commands refused to run).
func TestAuditOperatorFallsBackToTheOSAccount(t *testing.T) {
	t.Parallel()
	account := func() (string, error) { return "svc-audit", nil }
	cases := []struct {
		flag       string
		vars       map[string]string
		name, from string
	}{
		{"alice", map[string]string{"LOGBOOK_AUDIT_OPERATOR": "bob", "USER": "carol"}, "alice", "--as"},
		{"", map[string]string{"LOGBOOK_AUDIT_OPERATOR": "bob", "USER": "carol"}, "bob", "LOGBOOK_AUDIT_OPERATOR"},
		{"", map[string]string{"USER": "carol"}, "carol", "USER"},
		{"", map[string]string{"USER": "  "}, "svc-audit", "os-account"},
		{"", nil, "svc-audit", "os-account"},
	}
	for _, c := range cases {
		e := env{getenv: func(k string) string { return c.vars[k] }, account: account}
		who, err := operator(e, c.flag)
		if err != nil || who.Name != c.name || who.Source != c.from || who.System {
			t.Errorf("operator(%q, %v) = %+v, %v; want %s from %s", c.flag, c.vars, who, err, c.name, c.from)
		}
	}
	unknown := env{getenv: func(string) string { return "" }, account: func() (string, error) { return "", errors.New("no passwd entry") }}
	if _, err := operator(unknown, ""); err == nil {
		t.Error("no name from anywhere: want an error")
	}
}

// End to end: `logbook audit verify` with no USER runs, and its access record names the OS
// account and says so.
func TestAuditCommandWithoutUSERRecordsTheOSAccount(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	vars := map[string]string{"DATABASE_URL": dbURL}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"audit", "verify"}, func(k string) string { return vars[k] },
		nil, &out, &errOut); err != nil {
		t.Fatalf("audit verify without USER: %v\n%s", err, errOut.String())
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := session.Connect(context.Background(), dbURL, session.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var who, source, action string
	if err := pool.QueryRow(context.Background(), `SELECT who, who_source, action FROM audit_access`).Scan(&who, &source, &action); err != nil {
		t.Fatal(err)
	}
	if who != me.Username || source != "os-account" || action != "verify" {
		t.Errorf("access record: who %q from %q, action %q; want %q from os-account, verify", who, source, action, me.Username)
	}
}
