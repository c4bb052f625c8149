package session

import (
	"fmt"
	"strings"
)

// The connection budget (issue 33): how many connections one replica may open, per role, and
// whether a fleet of them and a reserve for other clients fit in what the server allows
// ([Limits]). The caller builds the budget from its settings; the refusals name logbook
// serve's (LOGBOOK_REPLICAS, LOGBOOK_DB_RESERVE, LOGBOOK_DB_POOL, LOGBOOK_DB_GATEWAY_POOL),
// which docs/replicas.md quotes.

// ConnRole is one kind of connection a replica opens: a pool, or a dedicated connection.
type ConnRole struct {
	Name string // as the formula and the start line show it: "main", "listen"...
	Max  int    // connections, at most
	// Direct: to PostgreSQL itself. Else to the PgBouncer in front of it.
	Direct bool
	// Login is the role it logs in as ("" when unknown: it does not count against a role's
	// limit).
	Login string
}

// ConnBudget is what one replica may open, and what the fleet needs.
type ConnBudget struct {
	Replicas int
	Reserve  int  // connections left for clients other than the replicas
	Pooled   bool // the pools' connections go through a PgBouncer
	// PgBouncerPool is the server connections the PgBouncer may open to this database
	// (default_pool_size + reserve_pool_size): the fleet's pools' connections as PostgreSQL
	// sees them, counted once however many replicas share it.
	PgBouncerPool int
	Roles         []ConnRole
}

// PerReplica is how many connections one replica opens to PostgreSQL itself at most.
func (b ConnBudget) PerReplica() int {
	n := 0
	for _, r := range b.Roles {
		if r.Direct {
			n += r.Max
		}
	}
	return n
}

// Need is what the fleet, its PgBouncer and the reserve may hold on PostgreSQL at once.
func (b ConnBudget) Need() int { return b.Replicas*b.PerReplica() + b.PgBouncerPool + b.Reserve }

// PgBouncerClients is how many clients the fleet may hold on the PgBouncer (0 without one).
func (b ConnBudget) PgBouncerClients() int {
	n := 0
	for _, r := range b.Roles {
		if !r.Direct {
			n += r.Max
		}
	}
	return b.Replicas * n
}

// Formula spells Need out: "LOGBOOK_REPLICAS 10 × (main 8 + gateway 4 + listen 1) + LOGBOOK_DB_RESERVE 6 = 136".
func (b ConnBudget) Formula() string {
	var parts []string
	for _, r := range b.Roles {
		if r.Direct {
			parts = append(parts, fmt.Sprintf("%s %d", r.Name, r.Max))
		}
	}
	pool := ""
	if b.PgBouncerPool > 0 {
		pool = fmt.Sprintf(" + LOGBOOK_PGBOUNCER_POOL %d", b.PgBouncerPool)
	}
	per := "(" + strings.Join(parts, " + ") + ")"
	if len(parts) == 0 {
		per = "(none of their own)" // LOGBOOK_LIVENESS=heartbeat behind PgBouncer
	}
	return fmt.Sprintf("LOGBOOK_REPLICAS %d × %s%s + LOGBOOK_DB_RESERVE %d = %d", b.Replicas, per, pool, b.Reserve, b.Need())
}

// Fits is how many replicas fit in n connections beside the PgBouncer's pool and the reserve
// (0 also when the replicas hold none of their own: any number fits if the rest does).
func (b ConnBudget) Fits(n int) int {
	per, fixed := b.PerReplica(), b.PgBouncerPool+b.Reserve
	if per == 0 || n < fixed {
		return 0
	}
	return (n - fixed) / per
}

// fix is what to change when the fleet does not fit: behind PgBouncer its pool, not "put
// PgBouncer in front" (issue 53: the advice a fleet already behind one got).
func (b ConnBudget) fix() string {
	if b.Pooled && b.PerReplica() > 0 {
		return "set LOGBOOK_LIVENESS=heartbeat (with LOGBOOK_PEER_ADDR: a replica then holds no connection of its own), " +
			"lower LOGBOOK_PGBOUNCER_POOL (and PgBouncer's default_pool_size + reserve_pool_size with it), " +
			"lower LOGBOOK_DB_RESERVE, raise the limit, or run fewer replicas (docs/replicas.md: behind PgBouncer)"
	}
	if b.Pooled {
		return "lower LOGBOOK_PGBOUNCER_POOL (and PgBouncer's default_pool_size + reserve_pool_size with it), " +
			"lower LOGBOOK_DB_RESERVE, or raise the limit (docs/replicas.md: behind PgBouncer)"
	}
	return "lower LOGBOOK_DB_POOL or LOGBOOK_DB_GATEWAY_POOL, raise the limit, or put PgBouncer in front " +
		"(docs/replicas.md: the connection budget)"
}

// Check says whether the fleet fits in the server's caps: the connections ordinary clients
// may open (max_connections less the reserved slots), the database's limit, and the login's.
// The error spells the formula and the numbers, and what to change.
func (b ConnBudget) Check(l Limits) error {
	fix := b.fix()
	if need, avail := b.Need(), l.Available(); need > avail {
		return fmt.Errorf("database connections do not fit: %s > %d that PostgreSQL lets ordinary clients open "+
			"(max_connections %d − superuser_reserved_connections %d − reserved_connections %d); at most %d replicas fit: %s",
			b.Formula(), avail, l.MaxConnections, l.SuperuserReserved, l.Reserved, b.Fits(avail), fix)
	}
	if l.Superuser {
		return nil // neither limit binds a superuser
	}
	if l.DatabaseLimit >= 0 && b.Need() > l.DatabaseLimit {
		return fmt.Errorf("database connections do not fit: %s > %d, the CONNECTION LIMIT of database %s (datconnlimit); "+
			"at most %d replicas fit: %s", b.Formula(), l.DatabaseLimit, l.Database, b.Fits(l.DatabaseLimit), fix)
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
