package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// The connection budget (issue 33): how many connections one replica may open, per role, and
// whether LOGBOOK_REPLICAS of them and the reserve fit in what the server allows.

const (
	defaultDBPool        = 8 // LOGBOOK_DB_POOL: the cells, the indexer, the web pages
	defaultDBGatewayPool = 4 // LOGBOOK_DB_GATEWAY_POOL: the gateway's appends, so an ack never queues; the lease renewals
	// defaultDBReserve is LOGBOOK_DB_RESERVE: connections left for clients other than the
	// replicas — one `logbook audit` run (its pool of auditPoolSize), `logbook migrate` (1)
	// and an operator's psql (1).
	defaultDBReserve = auditPoolSize + 2
	// auditPoolSize and retentionPoolSize are the audit commands' and the scheduled
	// export's pools.
	auditPoolSize     = 4
	retentionPoolSize = 2
)

// dbConfig is the connection settings: the pools' sizes, the fleet, the reserve.
type dbConfig struct {
	Pool        int // LOGBOOK_DB_POOL
	GatewayPool int // LOGBOOK_DB_GATEWAY_POOL
	Replicas    int // LOGBOOK_REPLICAS
	Reserve     int // LOGBOOK_DB_RESERVE
	// AuditURL and RetentionURL are the scheduled export's own URLs, when set: only their
	// logins are read, to know which role limit their connections count against.
	AuditURL, RetentionURL Secret
}

// readDB reads the connection settings.
func (cfg *serveConfig) readDB(e env) error {
	d := &cfg.DB
	r := envReader{e: e}
	d.Pool = orInt(r.int("LOGBOOK_DB_POOL"), defaultDBPool)
	d.GatewayPool = orInt(r.int("LOGBOOK_DB_GATEWAY_POOL"), defaultDBGatewayPool)
	d.Replicas = orInt(r.int("LOGBOOK_REPLICAS"), 1)
	if r.err != nil {
		return r.err
	}
	d.Reserve = defaultDBReserve
	if v := strings.TrimSpace(e.getenv("LOGBOOK_DB_RESERVE")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("LOGBOOK_DB_RESERVE=%q is not a whole number of connections (0 or more)", v)
		}
		d.Reserve = n
	}
	for name, n := range map[string]int{"LOGBOOK_DB_POOL": d.Pool, "LOGBOOK_DB_GATEWAY_POOL": d.GatewayPool, "LOGBOOK_REPLICAS": d.Replicas} {
		if n > 10000 {
			return fmt.Errorf("%s=%d: at most 10000", name, n)
		}
	}
	d.AuditURL = Secret(strings.TrimSpace(e.getenv("LOGBOOK_AUDIT_DATABASE_URL")))
	d.RetentionURL = Secret(strings.TrimSpace(e.getenv("LOGBOOK_RETENTION_DATABASE_URL")))
	return nil
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// connRole is one kind of connection a replica opens.
type connRole struct {
	Name string
	Max  int
	// Direct: to PostgreSQL itself. Else to the PgBouncer at DATABASE_URL.
	Direct bool
	// Login is the role it logs in as ("" when unknown: it does not count against a role's
	// limit).
	Login string
}

// connBudget is what one replica may open, and what the fleet needs.
type connBudget struct {
	Replicas int
	Reserve  int
	Pooled   bool // DATABASE_URL is a PgBouncer
	Roles    []connRole
}

// budget is cfg's connection budget: main and gateway pools, the LISTEN connection (which
// also holds the liveness claim), with LOGBOOK_REPLICAS above 1 the watch on a peer's claim, and with LOGBOOK_AUDIT_SCHEDULE the scheduled export's
// pools (the auditor's, and retention's with LOGBOOK_RETENTION).
func (cfg serveConfig) budget() connBudget {
	pooled := cfg.DBPooler == poolerPgBouncer
	main, direct := loginOf(cfg.DatabaseURL), loginOf(cfg.DirectDatabaseURL)
	if pooled {
		main = "" // PgBouncer logs in to PostgreSQL as whom its configuration says
	}
	b := connBudget{Replicas: cfg.DB.Replicas, Reserve: cfg.DB.Reserve, Pooled: pooled, Roles: []connRole{
		{Name: "main", Max: cfg.DB.Pool, Direct: !pooled, Login: main},
		{Name: "gateway", Max: cfg.DB.GatewayPool, Direct: !pooled, Login: main},
		{Name: "listen", Max: 1, Direct: true, Login: direct},
	}}
	if cfg.DB.Replicas > 1 {
		// bot.RunnerConfig.WatchPeers: a fleet's replicas watch each other's liveness claims.
		b.Roles = append(b.Roles, connRole{Name: "watch", Max: 1, Direct: true, Login: direct})
	}
	if a := cfg.AuditSchedule; a != nil {
		audit := direct
		if cfg.DB.AuditURL != "" {
			audit = loginOf(cfg.DB.AuditURL)
		}
		b.Roles = append(b.Roles, connRole{Name: "audit", Max: auditPoolSize, Direct: true, Login: audit})
		if a.keep > 0 {
			ret := audit
			if cfg.DB.RetentionURL != "" {
				ret = loginOf(cfg.DB.RetentionURL)
			}
			b.Roles = append(b.Roles, connRole{Name: "retention", Max: retentionPoolSize, Direct: true, Login: ret})
		}
	}
	return b
}

// loginOf is the user a database URL logs in as ("" when it cannot be parsed).
func loginOf(dsn Secret) string {
	c, err := pgx.ParseConfig(dsn.Reveal())
	if err != nil {
		return ""
	}
	return c.User
}

// perReplica is how many connections one replica opens to PostgreSQL itself at most.
func (b connBudget) perReplica() int {
	n := 0
	for _, r := range b.Roles {
		if r.Direct {
			n += r.Max
		}
	}
	return n
}

// need is what the fleet and the reserve may hold on PostgreSQL at once.
func (b connBudget) need() int { return b.Replicas*b.perReplica() + b.Reserve }

// pgbouncerClients is how many clients the fleet may hold on the PgBouncer (0 without one).
func (b connBudget) pgbouncerClients() int {
	n := 0
	for _, r := range b.Roles {
		if !r.Direct {
			n += r.Max
		}
	}
	return b.Replicas * n
}

// formula spells need out: "LOGBOOK_REPLICAS 10 × (main 8 + gateway 4 + listen 1) + LOGBOOK_DB_RESERVE 6 = 136".
func (b connBudget) formula() string {
	var parts []string
	for _, r := range b.Roles {
		if r.Direct {
			parts = append(parts, fmt.Sprintf("%s %d", r.Name, r.Max))
		}
	}
	return fmt.Sprintf("LOGBOOK_REPLICAS %d × (%s) + LOGBOOK_DB_RESERVE %d = %d", b.Replicas, strings.Join(parts, " + "), b.Reserve, b.need())
}

// fits is how many replicas fit in n connections beside the reserve.
func (b connBudget) fits(n int) int {
	per := b.perReplica()
	if per == 0 || n < b.Reserve {
		return 0
	}
	return (n - b.Reserve) / per
}

// check says whether the fleet fits in the server's caps: the connections ordinary clients
// may open (max_connections less the reserved slots), the database's limit, and the login's.
// The error spells the formula and the numbers, and what to change.
func (b connBudget) check(l session.Limits) error {
	const fix = "lower LOGBOOK_DB_POOL or LOGBOOK_DB_GATEWAY_POOL, raise the limit, or put PgBouncer in front " +
		"(README: Running many replicas)"
	if need, avail := b.need(), l.Available(); need > avail {
		return fmt.Errorf("database connections do not fit: %s > %d that PostgreSQL lets ordinary clients open "+
			"(max_connections %d − superuser_reserved_connections %d − reserved_connections %d); at most %d replicas fit: %s",
			b.formula(), avail, l.MaxConnections, l.SuperuserReserved, l.Reserved, b.fits(avail), fix)
	}
	if l.Superuser {
		return nil // neither limit binds a superuser
	}
	if l.DatabaseLimit >= 0 && b.need() > l.DatabaseLimit {
		return fmt.Errorf("database connections do not fit: %s > %d, the CONNECTION LIMIT of database %s (datconnlimit); "+
			"at most %d replicas fit: %s", b.formula(), l.DatabaseLimit, l.Database, b.fits(l.DatabaseLimit), fix)
	}
	if l.RoleLimit >= 0 {
		per, parts := 0, []string(nil)
		for _, r := range b.Roles {
			if r.Direct && r.Login == l.Login {
				per += r.Max
				parts = append(parts, fmt.Sprintf("%s %d", r.Name, r.Max))
			}
		}
		if per > 0 && b.Replicas*per > l.RoleLimit {
			return fmt.Errorf("database connections do not fit: LOGBOOK_REPLICAS %d × (%s) = %d log in as %s > %d, its CONNECTION LIMIT "+
				"(rolconnlimit); at most %d replicas fit: %s", b.Replicas, strings.Join(parts, " + "), b.Replicas*per, l.Login,
				l.RoleLimit, l.RoleLimit/per, fix)
		}
	}
	return nil
}

// log writes the budget in one line at start: per role, the fleet's need and the server's caps.
func (b connBudget) log(log zerolog.Logger, l session.Limits) {
	roles := zerolog.Dict()
	for _, r := range b.Roles {
		roles.Int(r.Name, r.Max)
	}
	ev := log.Info().Dict("per_replica", roles).Int("per_replica_postgres", b.perReplica()).Int("replicas", b.Replicas).
		Int("reserve", b.Reserve).Int("need", b.need()).Str("formula", b.formula()).
		Int("max_connections", l.MaxConnections).Int("superuser_reserved_connections", l.SuperuserReserved).
		Int("reserved_connections", l.Reserved).Int("available", l.Available()).Int("replicas_fit", b.fits(l.Available())).
		Str("idle_timeout", session.IdleConnTimeout.String())
	if l.DatabaseLimit >= 0 {
		ev = ev.Int("datconnlimit", l.DatabaseLimit)
	}
	if l.RoleLimit >= 0 {
		ev = ev.Str("login", l.Login).Int("rolconnlimit", l.RoleLimit)
	}
	if b.Pooled {
		// What logbook cannot see: PgBouncer's own settings, and how many server
		// connections its pool opens beside these.
		ev = ev.Int("pgbouncer_clients", b.pgbouncerClients()).Str("pgbouncer",
			"not checked: PgBouncer's max_client_conn must be at least pgbouncer_clients, and its pool "+
				"(default_pool_size per database and user) must fit in available beside need")
	}
	ev.Msg("database connections: budget")
}
