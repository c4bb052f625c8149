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

// 00210 gives each channel a ledger. The rows written before it (a setting, notes one of
// them forgotten and one purged, a repository, a budget raise) get their ledger events, in
// the order they were written, each "at" its row's time: the projections agree with the
// ledgers at once, every chain verifies, and a change made afterwards by the application's
// role goes on the same ledger.
func TestChannelLedgerMigrationRecordsTheRowsFromBefore(t *testing.T) {
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
	if _, err := p.UpTo(ctx, 209); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO channel_settings (team, channel, name, value, set_by, set_at) VALUES ('T1', 'C0000008', 'model', 'm1', 'UADMIN', now() - interval '3 days')`,
		`INSERT INTO channel_memory (team, channel, text, by_kind, by_id, created_at) VALUES ('T1', 'C0000008', 'kept', 'user', 'UADMIN', now() - interval '2 days')`,
		`INSERT INTO channel_memory (team, channel, text, by_kind, by_id, session_id, call_id) VALUES ('T1', 'C0000008', 'by the agent', 'agent', 'UBOT', gen_random_uuid(), 'call-1')`,
		`INSERT INTO channel_memory (team, channel, text, by_kind, by_id, purged_at) VALUES ('T1', 'C0000008', NULL, 'user', 'UADMIN', now())`,
		`INSERT INTO channel_memory_forgotten (note_id, forgotten_by) SELECT min(id), 'UADMIN' FROM channel_memory`,
		`INSERT INTO channel_repos (team, channel, url, branch, set_by) VALUES ('T1', 'C0000008', 'https://github.com/acme/app', '', 'UADMIN')`,
		`INSERT INTO budget_raises (day, scope, subject, channel, amount, raised_by) VALUES (current_date, 'person', 'U2', 'C0000008', 1000, 'UADMIN')`,
		`INSERT INTO schedules (team, channel, spec, prompt, added_by) VALUES ('T1', 'C0000008', '@daily', 'standup', 'UADMIN')`,
		`INSERT INTO schedule_removals (schedule_id, removed_by, reason) SELECT max(id), 'system', 'the channel went private' FROM schedules`,
		`INSERT INTO mcp_tokens (server, channel, sealed, connected_by, connected_at) VALUES ('docs', 'C0000008', '\x00', 'ada@example.com', now())`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := migrations.Up(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	pool, err := session.Connect(ctx, dsn, session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := session.NewStore(pool, session.Options{})
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0000008", Name: "model", New: "m2", Set: true, SetBy: "UADMIN"}); err != nil {
		t.Fatalf("a change as logbook_app after the migration: %v", err)
	}
	id, err := st.Ledger(ctx, "C0000008")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, id, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	var types []session.Type
	for _, e := range evs {
		types = append(types, e.Type)
	}
	want := []session.Type{session.TypeSettingChanged, session.TypeNoteAdded, session.TypeNoteAdded, session.TypeNoteAdded,
		session.TypeNoteForgotten, session.TypeRepoSet, session.TypeBudgetRaised, session.TypeScheduleAdded, session.TypeScheduleRemoved,
		session.TypeConnectorConnected, session.TypeSettingChanged}
	if len(types) != len(want) {
		t.Fatalf("ledger events %v; want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("ledger events %v; want %v", types, want)
		}
	}
	var last session.SettingChanged
	if err := evs[len(evs)-1].Decode(&last); err != nil || last.Old == nil || *last.Old != "m1" {
		t.Errorf("the change after the migration: %+v, %v; want old m1", last, err)
	}
	if v, err := st.Verify(ctx, id); err != nil || !v.OK {
		t.Errorf("the ledger's chain: %+v, %v", v, err)
	}
	if fs, err := st.CheckLedgers(ctx, ""); err != nil || len(fs) != 0 {
		t.Errorf("projections against the ledger after the migration: %v, %v", fs, err)
	}
}
