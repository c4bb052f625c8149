package session

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolOptions configure Connect.
type PoolOptions struct {
	// Role, when set, is assumed on every connection (SET ROLE), so the process works with
	// that role's privileges: logbook_app for the bot, logbook_auditor for audit reads.
	Role string
	// IdleInTransaction ends a session left idle inside a transaction after this long, so a
	// stuck caller cannot hold the log's locks (default 5s).
	IdleInTransaction time.Duration
	MaxConns          int32 // default: pgxpool's
}

// Connect opens a pool on dsn for the log. Errors never include the DSN's password.
func Connect(ctx context.Context, dsn string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", redactedError{err})
	}
	idle := opts.IdleInTransaction
	if idle == 0 {
		idle = 5 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(idle.Milliseconds())
	cfg.ConnConfig.RuntimeParams["application_name"] = "logbook"
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.Role != "" {
		role := opts.Role
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize())
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database %s@%s:%d/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host,
			cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// redactedError hides the text of DSN parse errors, which may quote the DSN.
type redactedError struct{ err error }

func (e redactedError) Error() string {
	return "the database URL is malformed (not shown: it may hold a password)"
}
func (e redactedError) Unwrap() error { return e.err }
