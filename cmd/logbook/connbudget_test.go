package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// defaultServer is PostgreSQL's defaults: max_connections 100, 3 slots for superusers.
var defaultServer = session.Limits{MaxConnections: 100, SuperuserReserved: 3, Login: "bot", RoleLimit: -1, Database: "x", DatabaseLimit: -1}

func budgetOf(t *testing.T, extra map[string]string) session.ConnBudget {
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

// The settings make serve's budget (session.ConnBudget checks it): main and gateway pools of
// LOGBOOK_DB_POOL and LOGBOOK_DB_GATEWAY_POOL, the LISTEN connection, the watch on a peer's
// claim in a fleet, the scheduled export's pools, each under the login of its URL; through
// PgBouncer the pools are its clients, not PostgreSQL's.
func TestConnBudgetFromSettings(t *testing.T) {
	t.Parallel()
	role := func(name string, max int, login string) session.ConnRole {
		return session.ConnRole{Name: name, Max: max, Direct: true, Login: login}
	}
	cases := []struct {
		name string
		vars map[string]string
		want session.ConnBudget
	}{
		{name: "defaults", want: session.ConnBudget{Replicas: 1, Reserve: 6,
			Roles: []session.ConnRole{role("main", 8, "bot"), role("gateway", 4, "bot"), role("listen", 1, "bot")}}},
		{name: "a fleet with small pools", vars: map[string]string{"LOGBOOK_REPLICAS": "10", "LOGBOOK_DB_POOL": "4", "LOGBOOK_DB_GATEWAY_POOL": "2"},
			want: session.ConnBudget{Replicas: 10, Reserve: 6,
				Roles: []session.ConnRole{role("main", 4, "bot"), role("gateway", 2, "bot"), role("listen", 1, "bot"), role("watch", 1, "bot")}}},
		{name: "the reserve", vars: map[string]string{"LOGBOOK_DB_RESERVE": "90"}, want: session.ConnBudget{Replicas: 1, Reserve: 90,
			Roles: []session.ConnRole{role("main", 8, "bot"), role("gateway", 4, "bot"), role("listen", 1, "bot")}}},
		{name: "scheduled audit with retention", vars: map[string]string{"LOGBOOK_AUDIT_SCHEDULE": "@daily", "LOGBOOK_AUDIT_DEST": "/tmp/x",
			"LOGBOOK_RETENTION": "400d", "LOGBOOK_REPLICAS": "5", "LOGBOOK_AUDIT_DATABASE_URL": "postgres://auditor@db/x"},
			want: session.ConnBudget{Replicas: 5, Reserve: 6, Roles: []session.ConnRole{role("main", 8, "bot"), role("gateway", 4, "bot"),
				role("listen", 1, "bot"), role("watch", 1, "bot"), role("audit", 4, "auditor"), role("retention", 2, "auditor")}}},
		{name: "retention's own login", vars: map[string]string{"LOGBOOK_AUDIT_SCHEDULE": "@daily", "LOGBOOK_AUDIT_DEST": "/tmp/x",
			"LOGBOOK_RETENTION": "400d", "LOGBOOK_RETENTION_DATABASE_URL": "postgres://purger@db/x"},
			want: session.ConnBudget{Replicas: 1, Reserve: 6, Roles: []session.ConnRole{role("main", 8, "bot"), role("gateway", 4, "bot"),
				role("listen", 1, "bot"), role("audit", 4, "bot"), role("retention", 2, "purger")}}},
		{name: "through PgBouncer", vars: map[string]string{"LOGBOOK_REPLICAS": "10", "LOGBOOK_DB_POOLER": "pgbouncer",
			"LOGBOOK_DIRECT_DATABASE_URL": "postgres://direct@db:5432/x"},
			want: session.ConnBudget{Replicas: 10, Reserve: 6, Pooled: true, PgBouncerPool: 20, Roles: []session.ConnRole{{Name: "main", Max: 8}, {Name: "gateway", Max: 4},
				role("listen", 1, "direct")}}},
		{name: "through PgBouncer with its pool", vars: map[string]string{"LOGBOOK_REPLICAS": "50", "LOGBOOK_DB_POOLER": "pgbouncer",
			"LOGBOOK_DIRECT_DATABASE_URL": "postgres://direct@db:5432/x", "LOGBOOK_PGBOUNCER_POOL": "15"},
			want: session.ConnBudget{Replicas: 50, Reserve: 6, Pooled: true, PgBouncerPool: 15, Roles: []session.ConnRole{{Name: "main", Max: 8}, {Name: "gateway", Max: 4},
				role("listen", 1, "direct")}}},
	}
	for _, c := range cases {
		if got := budgetOf(t, c.vars); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
	// The formula serve refuses a fleet with, from the settings to the message.
	err := budgetOf(t, map[string]string{"LOGBOOK_REPLICAS": "10"}).Check(defaultServer)
	if want := "LOGBOOK_REPLICAS 10 × (main 8 + gateway 4 + listen 1 + watch 1) + LOGBOOK_DB_RESERVE 6 = 146 > 97"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ten replicas on a default server: %v, want an error with %q", err, want)
	}
}

// The start line holds the budget per role, the fleet's need and the server's caps; through
// PgBouncer it also says what was not checked.
func TestConnBudgetLogLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	b := budgetOf(t, map[string]string{"LOGBOOK_REPLICAS": "10", "LOGBOOK_DB_POOLER": "pgbouncer", "LOGBOOK_DIRECT_DATABASE_URL": "postgres://bot@db:5432/x"})
	logBudget(zerolog.New(&out), b, defaultServer)
	var line struct {
		PerReplica  map[string]int `json:"per_replica"`
		Need        int            `json:"need"`
		Available   int            `json:"available"`
		Fit         int            `json:"replicas_fit"`
		Clients     int            `json:"pgbouncer_clients"`
		Pool        int            `json:"pgbouncer_pool"`
		PgBouncer   string         `json:"pgbouncer"`
		Formula     string         `json:"formula"`
		IdleTimeout string         `json:"idle_timeout"`
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if line.PerReplica["main"] != 8 || line.PerReplica["gateway"] != 4 || line.PerReplica["listen"] != 1 || line.PerReplica["watch"] != 0 ||
		line.Need != 36 || line.Available != 97 || line.Fit != 71 || line.Clients != 120 || line.Pool != 20 || !strings.Contains(line.PgBouncer, "not checked") ||
		line.Formula != "LOGBOOK_REPLICAS 10 × (listen 1) + LOGBOOK_PGBOUNCER_POOL 20 + LOGBOOK_DB_RESERVE 6 = 36" || line.IdleTimeout != "1m0s" {
		t.Errorf("budget line: %s", out.String())
	}
}

// #53: fifty replicas behind PgBouncer fit a default server below 80 % of max_connections:
// one direct connection each (LISTEN with the liveness claim; no watch), PgBouncer's pool
// counted once, the reserve. PgBouncer's own server connections are no longer left out (45
// replicas with two direct connections each passed, and filled the server), and a fleet behind PgBouncer that does not fit is told to shrink the
// pool, not to put PgBouncer in front.
func TestFiftyReplicasBehindPgBouncerFitADefaultServer(t *testing.T) {
	t.Parallel()
	behind := map[string]string{"LOGBOOK_REPLICAS": "50", "LOGBOOK_DB_POOLER": "pgbouncer", "LOGBOOK_DIRECT_DATABASE_URL": "postgres://direct@db:5432/x"}
	b := budgetOf(t, behind)
	if err := b.Check(defaultServer); err != nil {
		t.Fatalf("fifty replicas behind PgBouncer on a default server: %v", err)
	}
	if need := b.Need(); need != 50+20+6 || need >= defaultServer.MaxConnections*80/100 {
		t.Fatalf("fifty replicas behind PgBouncer need %d connections (%s), want 76: below 80 %% of max_connections", need, b.Formula())
	}
	if want := "LOGBOOK_REPLICAS 50 × (listen 1) + LOGBOOK_PGBOUNCER_POOL 20 + LOGBOOK_DB_RESERVE 6 = 76"; b.Formula() != want {
		t.Fatalf("formula %q, want %q", b.Formula(), want)
	}
	behind["LOGBOOK_PGBOUNCER_POOL"] = "50"
	err := budgetOf(t, behind).Check(defaultServer)
	if err == nil || !strings.Contains(err.Error(), "LOGBOOK_PGBOUNCER_POOL 50") || !strings.Contains(err.Error(), "lower LOGBOOK_PGBOUNCER_POOL") ||
		strings.Contains(err.Error(), "put PgBouncer in front") {
		t.Fatalf("a PgBouncer pool of 50 beside fifty replicas: %v, want a refusal that counts the pool and says to lower it", err)
	}
	if !strings.Contains(err.Error(), "set LOGBOOK_LIVENESS=heartbeat") {
		t.Fatalf("a fleet whose direct connections do not fit is not told of heartbeat claims: %v", err)
	}
	// A heartbeat fleet holds none: the advice is about the pool and the reserve alone.
	hb := budgetOf(t, map[string]string{"LOGBOOK_REPLICAS": "50", "LOGBOOK_DB_POOLER": "pgbouncer", "LOGBOOK_PGBOUNCER_POOL": "95",
		"LOGBOOK_LIVENESS": "heartbeat", "LOGBOOK_PEER_ADDR": "10.0.0.5", "LOGBOOK_HTTP_ADDR": ":8080"})
	if err := hb.Check(defaultServer); err == nil || strings.Contains(err.Error(), "LOGBOOK_LIVENESS") ||
		strings.Contains(err.Error(), "fewer replicas") || !strings.Contains(err.Error(), "lower LOGBOOK_PGBOUNCER_POOL") {
		t.Fatalf("a heartbeat fleet with a PgBouncer pool of 95: %v, want a refusal that says to lower the pool only", err)
	}
	for _, bad := range []map[string]string{
		{"LOGBOOK_PGBOUNCER_POOL": "20"}, // no PgBouncer declared
		{"LOGBOOK_DB_POOLER": "pgbouncer", "LOGBOOK_DIRECT_DATABASE_URL": "postgres://direct@db:5432/x", "LOGBOOK_PGBOUNCER_POOL": "zero"},
	} {
		vars := baseVars()
		for k, v := range bad {
			vars[k] = v
		}
		if _, err := load(vars); err == nil || !strings.Contains(err.Error(), "LOGBOOK_PGBOUNCER_POOL") {
			t.Errorf("%v: %v, want an error naming LOGBOOK_PGBOUNCER_POOL", bad, err)
		}
	}
}
