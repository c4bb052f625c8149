package migrations_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/migrations/pgtest"
)

// Several replicas running `migrate up` at once on a fresh database all succeed, and each
// migration is applied exactly once. The database has goose's version table already (as after
// a first `migrate status`, or a deploy that applied part of the migrations): else goose's
// retries at creating that table happen to keep the replicas a second apart.
func TestUpConcurrentReplicas(t *testing.T) {
	dsn := pgtest.NewEmpty(t)
	{
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
		if err != nil {
			t.Fatal(err)
		}
		if v, err := p.GetDBVersion(context.Background()); err != nil || v != 0 {
			t.Fatalf("create goose's version table: version %d, %v", v, err)
		}
		db.Close()
	}
	const replicas = 6
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	start := make(chan struct{})
	for i := range replicas {
		wg.Go(func() {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			if err := db.PingContext(ctx); err != nil {
				errs[i] = err
				return
			}
			<-start
			errs[i] = migrations.Up(ctx, db, nil)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: migrate up: %v", i, err)
		}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT version_id, count(*) FROM goose_db_version WHERE version_id > 0 GROUP BY version_id ORDER BY version_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	st, err := migrations.List(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var v, count int64
		if err := rows.Scan(&v, &count); err != nil {
			t.Fatal(err)
		}
		n++
		if count != 1 {
			t.Errorf("migration %d applied %d times", v, count)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(st) {
		t.Fatalf("%d migrations recorded, %d known", n, len(st))
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d (%s) not applied", s.Version, s.Source)
		}
	}
}
