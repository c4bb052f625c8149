package session

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Limits are the server's caps on connections, as seen by one login in one database: what a
// fleet of replicas must fit in.
type Limits struct {
	// MaxConnections is the server's max_connections.
	MaxConnections int
	// SuperuserReserved is superuser_reserved_connections: slots only superusers may take.
	SuperuserReserved int
	// Reserved is reserved_connections (PostgreSQL 16 and later; 0 before): slots only
	// members of pg_use_reserved_connections may take.
	Reserved int
	// Login is the login role (session_user, not a role assumed with SET ROLE); RoleLimit is
	// its rolconnlimit, -1 when it has none.
	Login     string
	RoleLimit int
	// Superuser says the login is a superuser, whom neither RoleLimit nor DatabaseLimit bind.
	Superuser bool
	// Database is the current database; DatabaseLimit its datconnlimit, -1 when it has none.
	Database      string
	DatabaseLimit int
}

// Available is how many connections ordinary clients may open on the whole server:
// max_connections less the slots kept for superusers and for pg_use_reserved_connections.
// (A superuser could take those too; they are left for the operator who must get in when
// everything else is full.)
func (l Limits) Available() int { return l.MaxConnections - l.SuperuserReserved - l.Reserved }

// RowQuerier runs a query that returns one row: a pool, a connection or a transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sqlLimits reads the caps. reserved_connections is read with missing_ok: NULL before 16.
const sqlLimits = `SELECT current_setting('max_connections')::int,
	current_setting('superuser_reserved_connections')::int,
	coalesce(current_setting('reserved_connections', true), '0')::int,
	r.rolname, r.rolconnlimit, r.rolsuper, d.datname, d.datconnlimit
FROM pg_roles r, pg_database d
WHERE r.rolname = session_user AND d.datname = current_database()`

// ServerLimits reads the server's connection caps through q.
func ServerLimits(ctx context.Context, q RowQuerier) (Limits, error) {
	var l Limits
	err := q.QueryRow(ctx, sqlLimits).Scan(&l.MaxConnections, &l.SuperuserReserved, &l.Reserved,
		&l.Login, &l.RoleLimit, &l.Superuser, &l.Database, &l.DatabaseLimit)
	if err != nil {
		return Limits{}, fmt.Errorf("read the server's connection limits: %w", err)
	}
	return l, nil
}
