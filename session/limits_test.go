package session_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// TestServerLimits reads the caps of a login of its own, with a connection limit on the role
// and on the database, as that login sees them.
func TestServerLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	admin := superuser(t, dbURL)
	var want session.Limits
	if err := admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int, current_database()`).
		Scan(&want.MaxConnections, &want.SuperuserReserved, &want.Database); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	login := "limits_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, `CREATE ROLE `+login+` LOGIN CONNECTION LIMIT 7`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+login) })
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{want.Database}.Sanitize()+` CONNECTION LIMIT 9`); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dbURL)
	u.User = url.User(login)
	pool, err := session.Connect(ctx, u.String(), session.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	got, err := session.ServerLimits(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxConnections != want.MaxConnections || got.SuperuserReserved != want.SuperuserReserved {
		t.Errorf("server caps = %d/%d, want %d/%d", got.MaxConnections, got.SuperuserReserved, want.MaxConnections, want.SuperuserReserved)
	}
	if got.Login != login || got.RoleLimit != 7 || got.Superuser {
		t.Errorf("login = %s limit %d superuser %v, want %s limit 7, not superuser", got.Login, got.RoleLimit, got.Superuser, login)
	}
	if got.Database != want.Database || got.DatabaseLimit != 9 {
		t.Errorf("database = %s limit %d, want %s limit 9", got.Database, got.DatabaseLimit, want.Database)
	}
	if got.Available() != got.MaxConnections-got.SuperuserReserved-got.Reserved {
		t.Errorf("available = %d from %+v", got.Available(), got)
	}
}

// TestConnectClosesIdleConnections: a pool past its peak gives its connections back after
// PoolOptions.IdleTimeout, and they are named for their pool in pg_stat_activity.
func TestConnectClosesIdleConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: 4, Name: "idletest",
		IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	admin := superuser(t, dbURL)
	named := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'logbook-idletest'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The peak: four connections held at once.
	var conns []interface{ Release() }
	for range 4 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if n := named(); n != 4 {
		t.Fatalf("%d connections named logbook-idletest at the peak, want 4", n)
	}
	for _, c := range conns {
		c.Release()
	}
	deadline := time.Now().Add(10 * time.Second)
	for pool.Stat().TotalConns() > 0 || named() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle connections still open after 10s: pool %d, server %d", pool.Stat().TotalConns(), named())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWarmOpensTheConnections: Warm opens that many of a pool's connections (never more than
// MaxConns), so the first burst finds them made.
func TestWarmOpensTheConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	for _, c := range []struct{ warm, max, want int32 }{{0, 3, 1}, {3, 3, 3}, {5, 2, 2}} {
		pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: c.max})
		if err != nil {
			t.Fatal(err)
		}
		if err := session.Warm(ctx, pool, c.warm); err != nil {
			t.Fatal(err)
		}
		if got := pool.Stat().TotalConns(); got != c.want {
			t.Errorf("Warm %d, MaxConns %d: %d connections open, want %d", c.warm, c.max, got, c.want)
		}
		pool.Close()
	}
}
