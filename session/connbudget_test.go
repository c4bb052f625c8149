package session_test

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

// defaultServer is PostgreSQL's defaults: max_connections 100, 3 slots for superusers.
var defaultServer = session.Limits{MaxConnections: 100, SuperuserReserved: 3, Login: "bot", RoleLimit: -1, Database: "x", DatabaseLimit: -1}

// fleet is replicas replicas of serve's pools (main and gateway of pool and gw, listen), all
// logging in as bot, with the watch on a peer's claim when there are several, and the extra
// roles; reserve 6 (serve's default).
func fleet(replicas, pool, gw int, extra ...session.ConnRole) session.ConnBudget {
	b := session.ConnBudget{Replicas: replicas, Reserve: 6, Roles: []session.ConnRole{
		{Name: "main", Max: pool, Direct: true, Login: "bot"},
		{Name: "gateway", Max: gw, Direct: true, Login: "bot"},
		{Name: "listen", Max: 1, Direct: true, Login: "bot"},
	}}
	if replicas > 1 {
		b.Roles = append(b.Roles, session.ConnRole{Name: "watch", Max: 1, Direct: true, Login: "bot"})
	}
	b.Roles = append(b.Roles, extra...)
	return b
}

// pooled is b behind a PgBouncer: main and gateway are its clients.
func pooled(b session.ConnBudget) session.ConnBudget {
	b.Pooled = true
	b.Roles = append([]session.ConnRole(nil), b.Roles...)
	for i, r := range b.Roles {
		if r.Name == "main" || r.Name == "gateway" {
			b.Roles[i].Direct, b.Roles[i].Login = false, ""
		}
	}
	return b
}

// withReserve is b with another reserve.
func withReserve(b session.ConnBudget, n int) session.ConnBudget { b.Reserve = n; return b }

// The measurement: 13 connections per replica at most, and one more in a fleet (the
// watch on a peer's liveness claim); ten replicas on a default server cannot fit, six can; the
// refusal spells the formula and its numbers.
func TestConnBudgetCheck(t *testing.T) {
	t.Parallel()
	audit := []session.ConnRole{{Name: "audit", Max: 4, Direct: true, Login: "bot"}, {Name: "retention", Max: 2, Direct: true, Login: "bot"}}
	cases := []struct {
		name    string
		budget  session.ConnBudget
		limits  session.Limits
		per     int
		need    int
		refused string // "" fits
	}{
		{name: "one replica", budget: fleet(1, 8, 4), per: 13, need: 19, limits: defaultServer},
		{name: "six fit", budget: fleet(6, 8, 4), per: 14, need: 90, limits: defaultServer},
		{name: "seven do not", budget: fleet(7, 8, 4), per: 14, need: 104, limits: defaultServer, refused: "= 104 > 97"},
		{name: "ten do not", budget: fleet(10, 8, 4), per: 14, need: 146, limits: defaultServer,
			refused: "database connections do not fit: LOGBOOK_REPLICAS 10 × (main 8 + gateway 4 + listen 1 + watch 1) + LOGBOOK_DB_RESERVE 6 = 146 > 97 " +
				"that PostgreSQL lets ordinary clients open (max_connections 100 − superuser_reserved_connections 3 − reserved_connections 0); " +
				"at most 6 replicas fit: lower LOGBOOK_DB_POOL or LOGBOOK_DB_GATEWAY_POOL, raise the limit, or put PgBouncer in front (docs/replicas.md: the connection budget)"},
		{name: "ten with small pools", budget: fleet(10, 4, 2), per: 8, need: 86, limits: defaultServer},
		{name: "reserved_connections (16+)", budget: fleet(7, 8, 4), per: 14, need: 104,
			limits:  session.Limits{MaxConnections: 100, SuperuserReserved: 3, Reserved: 5, RoleLimit: -1, DatabaseLimit: -1},
			refused: "= 104 > 92 that PostgreSQL lets ordinary clients open (max_connections 100 − superuser_reserved_connections 3 − reserved_connections 5); at most 6 replicas fit"},
		{name: "the reserve", budget: withReserve(fleet(1, 8, 4), 90), per: 13, need: 103, limits: defaultServer,
			refused: "LOGBOOK_DB_RESERVE 90 = 103 > 97"},
		{name: "scheduled audit with retention", budget: fleet(5, 8, 4, audit...), per: 20, need: 106, limits: defaultServer,
			refused: "LOGBOOK_REPLICAS 5 × (main 8 + gateway 4 + listen 1 + watch 1 + audit 4 + retention 2) + LOGBOOK_DB_RESERVE 6 = 106 > 97"},
		{name: "database limit", budget: fleet(3, 8, 4), per: 14, need: 48,
			limits:  session.Limits{MaxConnections: 400, SuperuserReserved: 3, RoleLimit: -1, Database: "x", DatabaseLimit: 40},
			refused: "= 48 > 40, the CONNECTION LIMIT of database x (datconnlimit); at most 2 replicas fit"},
		{name: "a superuser is not bound by the database's limit", budget: fleet(3, 8, 4), per: 14, need: 48,
			limits: session.Limits{MaxConnections: 400, SuperuserReserved: 3, RoleLimit: 1, Superuser: true, Database: "x", DatabaseLimit: 40}},
		{name: "role limit", budget: fleet(3, 8, 4), per: 14, need: 48,
			limits:  session.Limits{MaxConnections: 400, SuperuserReserved: 3, Login: "bot", RoleLimit: 30, DatabaseLimit: -1},
			refused: "LOGBOOK_REPLICAS 3 × (main 8 + gateway 4 + listen 1 + watch 1) = 42 log in as bot > 30, its CONNECTION LIMIT (rolconnlimit); at most 2 replicas fit"},
		{name: "another login's limit", budget: fleet(3, 8, 4), per: 14, need: 48,
			limits: session.Limits{MaxConnections: 400, SuperuserReserved: 3, Login: "someone", RoleLimit: 1, DatabaseLimit: -1}},
		{name: "through PgBouncer only listen and watch count", budget: pooled(fleet(10, 8, 4)), per: 2, need: 26, limits: defaultServer},
		{name: "PgBouncer's clients count against no role", budget: pooled(fleet(10, 8, 4)), per: 2, need: 26,
			limits: session.Limits{MaxConnections: 400, SuperuserReserved: 3, Login: "bot", RoleLimit: 20, DatabaseLimit: -1}},
	}
	for _, c := range cases {
		b := c.budget
		if b.PerReplica() != c.per || b.Need() != c.need {
			t.Errorf("%s: per replica %d, need %d; want %d, %d (%s)", c.name, b.PerReplica(), b.Need(), c.per, c.need, b.Formula())
		}
		err := b.Check(c.limits)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.refused)
		}
	}
}

// Through PgBouncer, the pools are its clients: the fleet's count of them, beside how many
// replicas fit in what PostgreSQL allows.
func TestConnBudgetPgBouncerClientsAndFit(t *testing.T) {
	t.Parallel()
	b := pooled(fleet(10, 8, 4))
	if got := b.PgBouncerClients(); got != 120 {
		t.Errorf("PgBouncer clients: %d, want 10 × (8 + 4) = 120", got)
	}
	if got := fleet(10, 8, 4).PgBouncerClients(); got != 0 {
		t.Errorf("PgBouncer clients without one: %d, want 0", got)
	}
	if got, want := b.Formula(), "LOGBOOK_REPLICAS 10 × (listen 1 + watch 1) + LOGBOOK_DB_RESERVE 6 = 26"; got != want {
		t.Errorf("formula: %q, want %q", got, want)
	}
	for _, c := range []struct {
		budget session.ConnBudget
		n, fit int
	}{
		{b, 97, 45},                    // (97 − 6) / 2
		{fleet(6, 8, 4), 97, 6},        // (97 − 6) / 14
		{fleet(6, 8, 4), 5, 0},         // not even the reserve
		{session.ConnBudget{}, 100, 0}, // no connections per replica
	} {
		if got := c.budget.Fits(c.n); got != c.fit {
			t.Errorf("%s: %d fit in %d, want %d", c.budget.Formula(), got, c.n, c.fit)
		}
	}
}
