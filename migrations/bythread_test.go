package migrations_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// 00050 keys a session by channel and thread. A database from before it may hold two sessions
// of one thread (opened through two organisations' team ids, in a Slack Connect channel):
// after the migration both rows and their events are still there, every lookup by thread
// gives the oldest, opening the thread through either team gives that one and opens nothing
// new, and the message stored in the newer one is still found by its ts.
func TestSessionsByThreadMigratesTwoSessionsOfOneThread(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewEmpty(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 49); err != nil {
		t.Fatal(err)
	}
	const (
		older = "0190d2f0-0000-7000-8000-000000000001"
		newer = "0190d2f0-0000-7000-8000-000000000002"
	)
	for _, q := range []string{
		`INSERT INTO sessions (id, team_id, channel_id, thread_ts, created_at) VALUES ('` + older + `', 'T0000002', 'C0000007', '1700000000.000100', now() - interval '1 hour')`,
		`INSERT INTO sessions (id, team_id, channel_id, thread_ts, created_at) VALUES ('` + newer + `', 'T0000001', 'C0000007', '1700000000.000100', now())`,
		`SELECT * FROM logbook_append('` + newer + `', NULL, NULL, ARRAY[gen_random_uuid()], ARRAY['user_message'], ARRAY['user'], ARRAY['U0000001'],
			ARRAY['{"text":"caught up"}'::jsonb], ARRAY['T0000001/C0000007/1700000000.000200'], ARRAY[false])`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := migrations.Up(ctx, db, nil); err != nil {
		t.Fatalf("migrate up over two sessions of one thread: %v", err)
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := session.NewStore(pool, session.Options{})
	for _, team := range []string{"T0000001", "T0000002", "T0000003"} {
		key := session.ThreadKey{Team: team, Channel: "C0000007", ThreadTS: "1700000000.000100"}
		got, err := st.SessionByThread(ctx, key)
		if err != nil || got.ID.String() != older {
			t.Fatalf("SessionByThread through %s = %v, %v; want the oldest %s", team, got.ID, err, older)
		}
		opened, err := st.Open(ctx, key)
		if err != nil || opened.ID.String() != older || opened.Created {
			t.Fatalf("Open through %s = %+v, %v; want the oldest, not created", team, opened, err)
		}
	}
	if got, err := st.SessionByMessage(ctx, "C0000007", "1700000000.000200"); err != nil || got.ID.String() != newer {
		t.Fatalf("the newer session's message: %v, %v", got.ID, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE channel_id = 'C0000007'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("sessions of the thread after the migration: %d, %v; want both kept", n, err)
	}
}
