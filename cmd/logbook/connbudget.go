package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// The connection budget's settings (issue 33): serve's pools, its fleet and the reserve, as
// the session.ConnBudget that serve checks against the server's caps and logs at start.

const (
	defaultDBPool        = 8 // LOGBOOK_DB_POOL: the cells, the indexer, the web pages
	defaultDBGatewayPool = 4 // LOGBOOK_DB_GATEWAY_POOL: the gateway's appends, so an ack never queues; the lease renewals
	// defaultDBReserve is LOGBOOK_DB_RESERVE: connections left for clients other than the
	// replicas — one `logbook audit` run (its pool of auditPoolSize), `logbook migrate` (1)
	// and an operator's psql (1).
	defaultDBReserve = auditPoolSize + 2
	// defaultPgBouncerPool is LOGBOOK_PGBOUNCER_POOL behind a PgBouncer: its own defaults,
	// default_pool_size 20 and reserve_pool_size 0, for logbook's one database and user.
	defaultPgBouncerPool = 20
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
	// PgBouncerPool is LOGBOOK_PGBOUNCER_POOL: the server connections the PgBouncer in front
	// (LOGBOOK_DB_POOLER=pgbouncer) may open to this database; 0 without one.
	PgBouncerPool int
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
	if v := strings.TrimSpace(e.getenv("LOGBOOK_PGBOUNCER_POOL")); v != "" || cfg.DBPooler == poolerPgBouncer {
		if cfg.DBPooler != poolerPgBouncer {
			return fmt.Errorf("LOGBOOK_PGBOUNCER_POOL=%q is the pool of a PgBouncer at DATABASE_URL: set LOGBOOK_DB_POOLER=pgbouncer too, or unset it", v)
		}
		d.PgBouncerPool = defaultPgBouncerPool
		if v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10000 {
				return fmt.Errorf("LOGBOOK_PGBOUNCER_POOL=%q is not a number of server connections (1 to 10000): PgBouncer's default_pool_size + reserve_pool_size", v)
			}
			d.PgBouncerPool = n
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

// budget is cfg's connection budget: main and gateway pools, the LISTEN connection (which
// also holds the liveness claim), with LOGBOOK_REPLICAS above 1 and no PgBouncer the watch on
// a peer's claim (watchesPeers), and with LOGBOOK_AUDIT_SCHEDULE the scheduled export's pools
// (the auditor's, and retention's with LOGBOOK_RETENTION). Behind PgBouncer its pool
// (LOGBOOK_PGBOUNCER_POOL) is counted once for the fleet.
func (cfg serveConfig) budget() session.ConnBudget {
	pooled := cfg.DBPooler == poolerPgBouncer
	main, direct := loginOf(cfg.DatabaseURL), loginOf(cfg.DirectDatabaseURL)
	if pooled {
		main = "" // PgBouncer logs in to PostgreSQL as whom its configuration says
	}
	b := session.ConnBudget{Replicas: cfg.DB.Replicas, Reserve: cfg.DB.Reserve, Pooled: pooled, PgBouncerPool: cfg.DB.PgBouncerPool, Roles: []session.ConnRole{
		{Name: "main", Max: cfg.DB.Pool, Direct: !pooled, Login: main},
		{Name: "gateway", Max: cfg.DB.GatewayPool, Direct: !pooled, Login: main},
	}}
	if cfg.Liveness != livenessHeartbeat {
		b.Roles = append(b.Roles, session.ConnRole{Name: "listen", Max: 1, Direct: true, Login: direct})
	}
	if cfg.watchesPeers() {
		b.Roles = append(b.Roles, session.ConnRole{Name: "watch", Max: 1, Direct: true, Login: direct})
	}
	if a := cfg.AuditSchedule; a != nil {
		audit := direct
		if cfg.DB.AuditURL != "" {
			audit = loginOf(cfg.DB.AuditURL)
		}
		b.Roles = append(b.Roles, session.ConnRole{Name: "audit", Max: auditPoolSize, Direct: true, Login: audit})
		if a.keep > 0 {
			ret := audit
			if cfg.DB.RetentionURL != "" {
				ret = loginOf(cfg.DB.RetentionURL)
			}
			b.Roles = append(b.Roles, session.ConnRole{Name: "retention", Max: retentionPoolSize, Direct: true, Login: ret})
		}
	}
	return b
}

// watchesPeers says the replicas watch each other's liveness claims, each on a connection of
// its own (bot.RunnerConfig.WatchPeers): in a fleet (LOGBOOK_REPLICAS above 1) not behind
// PgBouncer. Behind PgBouncer a fleet may be large (issue 53: fifty replicas), and two direct
// connections each would fill a default server before PgBouncer's pool; there each replica
// holds one, its LISTEN connection with its liveness claim — the least a replica can hold,
// since PostgreSQL freeing that connection's lock is how peers learn it died — and a dead
// peer's sessions are found by a dead-owner scan through PgBouncer (orphanScanBehindPgBouncer).
func (cfg serveConfig) watchesPeers() bool {
	return cfg.DB.Replicas > 1 && cfg.DBPooler != poolerPgBouncer && cfg.Liveness != livenessHeartbeat
}

// orphanScanBehindPgBouncer is how often a fleet behind PgBouncer, which has no watch, looks
// for a dead peer's sessions (bot.RunnerConfig.OrphanInterval): one cheap statement through
// PgBouncer, so a kill -9's turns resume within about this long.
const orphanScanBehindPgBouncer = 2 * time.Second

// orphanInterval is bot.RunnerConfig.OrphanInterval: orphanScanBehindPgBouncer for a fleet
// behind PgBouncer, else none (the watch and the poll find dead peers' sessions).
func (cfg serveConfig) orphanInterval() time.Duration {
	if cfg.DB.Replicas > 1 && (cfg.DBPooler == poolerPgBouncer || cfg.Liveness == livenessHeartbeat) {
		return orphanScanBehindPgBouncer
	}
	return 0
}

// loginOf is the user a database URL logs in as ("" when it cannot be parsed).
func loginOf(dsn Secret) string {
	c, err := pgx.ParseConfig(dsn.Reveal())
	if err != nil {
		return ""
	}
	return c.User
}

// logBudget writes b in one line at start: per role, the fleet's need and the server's caps.
func logBudget(log zerolog.Logger, b session.ConnBudget, l session.Limits) {
	roles := zerolog.Dict()
	for _, r := range b.Roles {
		roles.Int(r.Name, r.Max)
	}
	ev := log.Info().Dict("per_replica", roles).Int("per_replica_postgres", b.PerReplica()).Int("replicas", b.Replicas).
		Int("reserve", b.Reserve).Int("need", b.Need()).Str("formula", b.Formula()).
		Int("max_connections", l.MaxConnections).Int("superuser_reserved_connections", l.SuperuserReserved).
		Int("reserved_connections", l.Reserved).Int("available", l.Available()).
		Str("idle_timeout", session.IdleConnTimeout.String())
	if b.PerReplica() > 0 {
		ev = ev.Int("replicas_fit", b.Fits(l.Available()))
	} else {
		ev = ev.Str("replicas_fit", "any: the replicas hold no connection of their own")
	}
	if l.DatabaseLimit >= 0 {
		ev = ev.Int("datconnlimit", l.DatabaseLimit)
	}
	if l.RoleLimit >= 0 {
		ev = ev.Str("login", l.Login).Int("rolconnlimit", l.RoleLimit)
	}
	if b.Pooled {
		// What logbook cannot see: PgBouncer's own settings, and how many server
		// connections its pool opens beside these.
		ev = ev.Int("pgbouncer_clients", b.PgBouncerClients()).Int("pgbouncer_pool", b.PgBouncerPool).Str("pgbouncer",
			"not checked: PgBouncer's max_client_conn must be at least pgbouncer_clients, and its "+
				"default_pool_size + reserve_pool_size at most pgbouncer_pool (LOGBOOK_PGBOUNCER_POOL), counted in need")
	}
	ev.Msg("database connections: budget")
}
