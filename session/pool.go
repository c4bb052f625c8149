package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// PoolOptions configure Connect.
type PoolOptions struct {
	// Role, when set, is assumed on every connection (SET ROLE), so the process works with
	// that role's privileges: logbook_app for the bot, logbook_auditor for audit reads
	// (Pooled: checked, not assumed).
	Role string
	// IdleInTransaction ends a session left idle inside a transaction after this long, so a
	// stuck caller cannot hold the log's locks (default 5s).
	IdleInTransaction time.Duration
	MaxConns          int32 // default: pgxpool's
	// Name says what the pool is for; its connections show in pg_stat_activity as
	// application_name "logbook-<Name>" ("logbook" when empty).
	Name string
	// IdleTimeout closes a connection left idle this long (default IdleConnTimeout), so a
	// replica past its peak gives the server its connections back instead of holding them
	// for pgxpool's 30 minutes. No connection is kept open when idle (MinConns 0).
	IdleTimeout time.Duration
	// Pooled says dsn reaches a transaction-pooling PgBouncer, where consecutive
	// transactions of one client may run on different server connections: nothing
	// session-scoped may be set. Then Connect sends no startup parameter but
	// application_name (set idle_in_transaction_session_timeout on the login role instead:
	// ALTER ROLE ... SET), uses no named prepared statements (QueryExecModeCacheDescribe: PgBouncer before
	// 1.21 cannot pool them), and does not SET ROLE: the login must be Role itself or a
	// member that inherits its privileges (GRANT logbook_app TO the login), which Connect
	// checks. LISTEN and session advisory locks need a direct connection (Listen,
	// ListenClaimed).
	Pooled bool
	// Tracer traces the pool's statements, batches and connections (e.g. an OpenTelemetry
	// tracer); nil: none.
	Tracer pgx.QueryTracer
	// Lazy opens the pool without connecting: for a server that may be down now and is
	// fallen back from when it is (a standby). Connect then checks only the DSN.
	Lazy bool
	// ConnectTimeout bounds each new connection when the DSN sets no connect_timeout (0: the
	// DSN's, or none), so a server that does not answer at all fails a read in that time.
	ConnectTimeout time.Duration
}

// IdleConnTimeout is how long a pool's connection may stay idle before it is closed. The pool
// checks every idleCheckEvery, so an idle connection goes within IdleConnTimeout +
// idleCheckEvery.
const IdleConnTimeout = time.Minute

// pingAfterIdle is how long a connection must have been idle for the pool to ping it before
// handing it out. pgxpool pings one idle for more than a second, and a ping ("-- ping") is a
// round trip and a transaction of its own on the server: issue 53 found it doubled the
// transactions of every poll of an idle replica and grew a message's cost with the replicas
// (the more replicas, the more of their connections sit idle between two statements). A
// connection the server ended meanwhile (a restart) fails its next statement instead, and the
// pool drops it: every caller already retries or leaves the work to Slack's redelivery.
const pingAfterIdle = 30 * time.Second

const (
	idleCheckEvery = 15 * time.Second
	// A connection is replaced after connLifetime (plus up to connLifetimeJitter, so that
	// replicas started together do not reconnect together): a failover's new primary or a
	// rebalanced pooler gets its share back without a restart.
	connLifetime       = 30 * time.Minute
	connLifetimeJitter = 5 * time.Minute
)

// ErrStartupRefused means the server refused the startup parameters Connect sends, with
// SQLSTATE 08P01: what PgBouncer answers to a parameter it does not pass on (unless its
// ignore_startup_parameters lists it). Connect with PoolOptions.Pooled through a
// transaction-pooling PgBouncer.
var ErrStartupRefused = errors.New("the server refused the connection's startup parameters (a connection pooler such as PgBouncer?)")

// Connect opens a pool on dsn for the log. Errors never include the DSN's password; a
// refused startup wraps ErrStartupRefused.
func Connect(ctx context.Context, dsn string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", redactedError{err})
	}
	idle := opts.IdleInTransaction
	if idle == 0 {
		idle = 5 * time.Second
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A server that does not answer at all (a black-holed address) fails a connection
		// attempt in 10 s, not in the kernel's minutes: a caller retrying at start says why.
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "logbook"
	if opts.Name != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "logbook-" + opts.Name
	}
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = IdleConnTimeout
	if opts.IdleTimeout > 0 {
		cfg.MaxConnIdleTime = opts.IdleTimeout
	}
	cfg.HealthCheckPeriod = min(idleCheckEvery, cfg.MaxConnIdleTime)
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > pingAfterIdle }
	cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter = connLifetime, connLifetimeJitter
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	}
	if opts.Pooled {
		// Describe results are cached per connection, and every execution parses its statement
		// anew (unnamed, in one round trip): nothing prepared outlives a round trip.
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	} else {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(idle.Milliseconds())
		if opts.Role != "" {
			role := opts.Role
			cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize())
				return err
			}
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if opts.Lazy {
		return pool, nil
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if !opts.Pooled && errors.As(err, &pgErr) && pgErr.Code == "08P01" {
			err = fmt.Errorf("%w: %w", ErrStartupRefused, err)
		}
		return nil, fmt.Errorf("connect to database %s@%s:%d/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host,
			cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	if opts.Pooled && opts.Role != "" {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT pg_has_role(current_user, $1::text, 'USAGE')`, opts.Role).Scan(&ok); err != nil {
			pool.Close()
			return nil, fmt.Errorf("check the role of %s: %w", cfg.ConnConfig.User, err)
		}
		if !ok {
			pool.Close()
			return nil, fmt.Errorf("through a transaction pooler logbook cannot SET ROLE %s on shared connections: "+
				"connect as a login that has its privileges (GRANT %s TO %s; with INHERIT)", opts.Role, opts.Role, cfg.ConnConfig.User)
		}
	}
	return pool, nil
}

// Warm opens n of pool's connections (at most its MaxConns) at once, by holding them
// together, and hands them back: the first burst of work then does not wait while they are
// made one by one beside it (issue 33: a replica that restarted into a busy thread list had
// its first cells wait up to a second for a connection). Unused, they close after the pool's
// idle timeout like any other. Through a transaction-pooling PgBouncer it opens client
// connections only.
func Warm(ctx context.Context, pool *pgxpool.Pool, n int32) error {
	n = min(n, pool.Config().MaxConns)
	if n <= 1 {
		return nil
	}
	held := make(chan *pgxpool.Conn, n)
	g, gctx := errgroup.WithContext(ctx)
	for range n {
		g.Go(func() error {
			c, err := pool.Acquire(gctx)
			if err != nil {
				return err
			}
			held <- c
			return nil
		})
	}
	err := g.Wait()
	close(held)
	for c := range held {
		c.Release()
	}
	return err
}

// redactedError hides the text of DSN parse errors, which may quote the DSN.
type redactedError struct{ err error }

func (e redactedError) Error() string {
	return "the database URL is malformed (not shown: it may hold a password)"
}
func (e redactedError) Unwrap() error { return e.err }
