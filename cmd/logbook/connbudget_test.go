package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// defaultServer is PostgreSQL's defaults: max_connections 100, 3 slots for superusers.
var defaultServer = session.Limits{MaxConnections: 100, SuperuserReserved: 3, Login: "bot", RoleLimit: -1, Database: "x", DatabaseLimit: -1}

func budgetOf(t *testing.T, extra map[string]string) connBudget {
	t.Helper()
	vars := baseVars()
	for k, v := range extra {
		vars[k] = v
	}
	cfg, err := load(vars)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.budget()
}

// The measurement: 13 connections per replica at most, and one more in a fleet (the
// watch on a peer's liveness claim); ten replicas on a default server cannot fit, six can; the
// refusal spells the formula and its numbers.
func TestConnBudgetFormula(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		vars    map[string]string
		limits  session.Limits
		per     int
		need    int
		refused string // "" fits
	}{
		{name: "one replica", per: 13, need: 19, limits: defaultServer},
		{name: "six fit", vars: map[string]string{"LOGBOOK_REPLICAS": "6"}, per: 14, need: 90, limits: defaultServer},
		{name: "seven do not", vars: map[string]string{"LOGBOOK_REPLICAS": "7"}, per: 14, need: 104, limits: defaultServer,
			refused: "= 104 > 97"},
		{name: "ten do not", vars: map[string]string{"LOGBOOK_REPLICAS": "10"}, per: 14, need: 146, limits: defaultServer,
			refused: "LOGBOOK_REPLICAS 10 × (main 8 + gateway 4 + listen 1 + watch 1) + LOGBOOK_DB_RESERVE 6 = 146 > 97 that PostgreSQL lets ordinary clients open " +
				"(max_connections 100 − superuser_reserved_connections 3 − reserved_connections 0); at most 6 replicas fit"},
		{name: "ten with small pools", vars: map[string]string{"LOGBOOK_REPLICAS": "10", "LOGBOOK_DB_POOL": "4", "LOGBOOK_DB_GATEWAY_POOL": "2"},
			per: 8, need: 86, limits: defaultServer},
		{name: "reserved_connections (16+)", vars: map[string]string{"LOGBOOK_REPLICAS": "7"}, per: 14, need: 104,
			limits:  session.Limits{MaxConnections: 100, SuperuserReserved: 3, Reserved: 5, RoleLimit: -1, DatabaseLimit: -1},
			refused: "= 104 > 92 that PostgreSQL lets ordinary clients open (max_connections 100 − superuser_reserved_connections 3 − reserved_connections 5); at most 6 replicas fit"},
		{name: "the reserve", vars: map[string]string{"LOGBOOK_DB_RESERVE": "90"}, per: 13, need: 103, limits: defaultServer,
			refused: "LOGBOOK_DB_RESERVE 90 = 103 > 97"},
		{name: "scheduled audit with retention", vars: map[string]string{"LOGBOOK_AUDIT_SCHEDULE": "@daily", "LOGBOOK_AUDIT_DEST": "/tmp/x",
			"LOGBOOK_RETENTION": "400d", "LOGBOOK_REPLICAS": "5"}, per: 20, need: 106, limits: defaultServer,
			refused: "LOGBOOK_REPLICAS 5 × (main 8 + gateway 4 + listen 1 + watch 1 + audit 4 + retention 2) + LOGBOOK_DB_RESERVE 6 = 106 > 97"},
		{name: "database limit", vars: map[string]string{"LOGBOOK_REPLICAS": "3"}, per: 14, need: 48,
			limits:  session.Limits{MaxConnections: 400, SuperuserReserved: 3, RoleLimit: -1, Database: "x", DatabaseLimit: 40},
			refused: "= 48 > 40, the CONNECTION LIMIT of database x (datconnlimit); at most 2 replicas fit"},
		{name: "a superuser is not bound by the database's limit", vars: map[string]string{"LOGBOOK_REPLICAS": "3"}, per: 14, need: 48,
			limits: session.Limits{MaxConnections: 400, SuperuserReserved: 3, RoleLimit: 1, Superuser: true, Database: "x", DatabaseLimit: 40}},
		{name: "role limit", vars: map[string]string{"LOGBOOK_REPLICAS": "3"}, per: 14, need: 48,
			limits:  session.Limits{MaxConnections: 400, SuperuserReserved: 3, Login: "bot", RoleLimit: 30, DatabaseLimit: -1},
			refused: "LOGBOOK_REPLICAS 3 × (main 8 + gateway 4 + listen 1 + watch 1) = 42 log in as bot > 30, its CONNECTION LIMIT (rolconnlimit); at most 2 replicas fit"},
		{name: "another login's limit", vars: map[string]string{"LOGBOOK_REPLICAS": "3"}, per: 14, need: 48,
			limits: session.Limits{MaxConnections: 400, SuperuserReserved: 3, Login: "someone", RoleLimit: 1, DatabaseLimit: -1}},
		{name: "through PgBouncer only listen and watch count", vars: map[string]string{"LOGBOOK_REPLICAS": "10", "LOGBOOK_DB_POOLER": "pgbouncer",
			"LOGBOOK_DIRECT_DATABASE_URL": "postgres://bot@db:5432/x"}, per: 2, need: 26, limits: defaultServer},
	}
	for _, c := range cases {
		b := budgetOf(t, c.vars)
		if b.perReplica() != c.per || b.need() != c.need {
			t.Errorf("%s: per replica %d, need %d; want %d, %d (%s)", c.name, b.perReplica(), b.need(), c.per, c.need, b.formula())
		}
		err := b.check(c.limits)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.refused)
		}
	}
}

// The start line holds the budget per role, the fleet's need and the server's caps; through
// PgBouncer it also says what was not checked.
func TestConnBudgetLogLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	b := budgetOf(t, map[string]string{"LOGBOOK_REPLICAS": "10", "LOGBOOK_DB_POOLER": "pgbouncer", "LOGBOOK_DIRECT_DATABASE_URL": "postgres://bot@db:5432/x"})
	b.log(zerolog.New(&out), defaultServer)
	var line struct {
		PerReplica  map[string]int `json:"per_replica"`
		Need        int            `json:"need"`
		Available   int            `json:"available"`
		Fit         int            `json:"replicas_fit"`
		Clients     int            `json:"pgbouncer_clients"`
		PgBouncer   string         `json:"pgbouncer"`
		Formula     string         `json:"formula"`
		IdleTimeout string         `json:"idle_timeout"`
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if line.PerReplica["main"] != 8 || line.PerReplica["gateway"] != 4 || line.PerReplica["listen"] != 1 || line.PerReplica["watch"] != 1 ||
		line.Need != 26 || line.Available != 97 || line.Fit != 45 || line.Clients != 120 || !strings.Contains(line.PgBouncer, "not checked") ||
		line.Formula != "LOGBOOK_REPLICAS 10 × (listen 1 + watch 1) + LOGBOOK_DB_RESERVE 6 = 26" || line.IdleTimeout != "1m0s" {
		t.Errorf("budget line: %s", out.String())
	}
}
