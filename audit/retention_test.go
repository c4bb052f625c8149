package audit_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

func payloadCount(t *testing.T, f fixture, id session.ID) (kept, purged int) {
	t.Helper()
	err := f.su.QueryRow(context.Background(), `SELECT count(payload), count(*) - count(payload) FROM events WHERE session_id = $1`,
		id).Scan(&kept, &purged)
	if err != nil {
		t.Fatal(err)
	}
	return kept, purged
}

func TestRetentionPurgesExpiredSessionsExceptHeldOnes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	person := audit.Who{Name: "legal@example.com"}
	byChannel := f.open(t, "C00000HC", "1700000000.000100") // held by channel
	byActor := f.open(t, "C0000001", "1700000000.000200")   // held by an actor who posted in it
	released := f.open(t, "C0000001", "1700000000.000300")  // held, then released
	plain := f.open(t, "C0000001", "1700000000.000400")     // never held
	for _, s := range []session.Session{byChannel, released, plain} {
		f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "secret plans"})
		f.append(t, s.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "noted"})
	}
	f.append(t, byActor.ID, bob, session.TypeUserMessage, map[string]any{"text": "bob's words"})
	f.append(t, byActor.ID, botA, session.TypeAssistantMessage, map[string]any{"text": "ok"})

	auditorPool := f.auditorPool
	if _, err := audit.AddHold(ctx, auditorPool, person, audit.HoldChannel, "C00000HC", "litigation 2025-17"); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.AddHold(ctx, auditorPool, person, audit.HoldActor, bob.ID, "investigation"); err != nil {
		t.Fatal(err)
	}
	h, err := audit.AddHold(ctx, auditorPool, person, audit.HoldSession, released.ID.String(), "temporary")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.AddHold(ctx, auditorPool, person, audit.HoldSession, "not-a-uuid", "x"); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("hold on a malformed session id: %v, want ErrInvalid", err)
	}
	if _, err := audit.AddHold(ctx, auditorPool, person, audit.HoldChannel, "C1", " "); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("hold without a reason: %v, want ErrInvalid", err)
	}
	if err := audit.RemoveHold(ctx, auditorPool, person, h.ID, "case closed"); err != nil {
		t.Fatal(err)
	}
	if err := audit.RemoveHold(ctx, auditorPool, person, h.ID, "again"); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("removing a removed hold: %v, want ErrNotFound", err)
	}
	holds, err := audit.Holds(ctx, auditorPool)
	if err != nil || len(holds) != 2 {
		t.Fatalf("open holds %+v, %v; want 2", holds, err)
	}

	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is old enough a day ago.
	if ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t).Add(-24*time.Hour)); err != nil || len(ps) != 0 {
		t.Fatalf("purge with a cutoff before every event: %+v, %v", ps, err)
	}
	time.Sleep(2 * time.Millisecond) // the retention period is 1ms: let it pass (not a timing assertion)
	ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t))
	if err != nil {
		t.Fatal(err)
	}
	purgedIDs := map[session.ID]audit.Purge{}
	for _, p := range ps {
		purgedIDs[p.Session] = p
	}
	if len(ps) != 2 || purgedIDs[released.ID].Purged != 2 || purgedIDs[plain.ID].Purged != 2 {
		t.Fatalf("purges %+v; want the released and the plain session, 2 events each", ps)
	}
	for _, s := range []session.Session{byChannel, byActor} {
		if kept, purged := payloadCount(t, f, s.ID); kept != 2 || purged != 0 {
			t.Errorf("held session %s: %d payloads kept, %d purged", s.ID, kept, purged)
		}
	}
	for _, s := range []session.Session{released, plain} {
		if kept, purged := payloadCount(t, f, s.ID); kept != 0 || purged != 2 {
			t.Errorf("expired session %s: %d payloads kept, %d purged", s.ID, kept, purged)
		}
		head, _ := f.app.Head(ctx, s.ID)
		if p := purgedIDs[s.ID]; p.FromSeq != 1 || p.ToSeq != 2 || p.HeadSeq != head.Seq {
			t.Errorf("purge record %+v, head %d", p, head.Seq)
		}
	}
	// Chains still verify, counting the purged events.
	r, err := audit.NewVerifier(f.auditor).Verify(ctx, audit.VerifyOptions{})
	if err != nil || !r.OK() || r.Purged != 4 || r.Events != 8 {
		t.Fatalf("verify after purge: %+v, %v", r, err)
	}
	// The purge records are append-only rows anyone auditing can read.
	var records int
	if err := auditorPool.QueryRow(ctx, `SELECT count(*) FROM audit_purges`).Scan(&records); err != nil || records != 2 {
		t.Errorf("audit_purges has %d rows (%v), want 2", records, err)
	}
	// A second purge finds nothing new.
	if ps, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t)); err != nil || len(ps) != 0 {
		t.Errorf("second purge: %+v, %v", ps, err)
	}
	// An export shows the skeleton and says the payload was purged.
	bucket, dir := newBucket(t)
	if _, err := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{}).Export(ctx,
		audit.Query{From: f.dbNow(t).Add(-time.Hour), To: f.dbNow(t).Add(time.Minute), Actors: []string{alice.ID}}, bucket, ""); err != nil {
		t.Fatal(err)
	}
	var sawPurged, sawKept bool
	for _, e := range jsonlEvents(t, filepath.Join(dir, "events.jsonl")) {
		if e["purged"] == true && e["payload"] == nil && e["payload_hash"] != "" {
			sawPurged = true
		}
		if e["purged"] == false && e["payload"] != nil {
			sawKept = true
		}
	}
	if !sawPurged || !sawKept {
		t.Errorf("export after purge: purged skeleton seen %v, held payload seen %v", sawPurged, sawKept)
	}
}

func TestNobodyButTheRetentionPathChangesRecords(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := f.open(t, "C0000001", "1700000000.000100")
	f.append(t, s.ID, alice, session.TypeUserMessage, map[string]any{"text": "x"})
	if _, err := audit.RecordAccess(ctx, f.auditorPool, audit.Who{Name: "auditor"}, "export", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.AddHold(ctx, f.auditorPool, audit.Who{Name: "auditor"}, audit.HoldChannel, "C0000001", "hold"); err != nil {
		t.Fatal(err)
	}
	denied := func(who string, pool *pgxpool.Pool, stmt string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, stmt, args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s: %s: got %v, want SQLSTATE 42501 (insufficient privilege)", who, stmt, err)
		}
	}
	app := f.appPool
	for _, stmt := range []string{
		`UPDATE events SET payload = NULL`,
		`DELETE FROM events`,
		`UPDATE sessions SET channel_id = 'C9'`,
		`DELETE FROM sessions`,
		`TRUNCATE events CASCADE`,
		`SELECT * FROM logbook_purge_expired(now(), 'r', 'w')`,
		`SELECT count(*) FROM audit_access`,
		`INSERT INTO audit_holds (hold_id, action, scope, value, reason, who) VALUES (gen_random_uuid(), 'remove', 'channel', 'C0000001', 'r', 'w')`,
		`DELETE FROM audit_holds`,
		`INSERT INTO audit_purges (session_id, from_seq, to_seq, purged, head_seq, head_hash, last_event_at, cutoff, reason, who)
		 SELECT id, 1, 1, 1, 1, '\x00', now(), now(), 'r', 'w' FROM sessions`,
	} {
		denied("logbook_app", app, stmt)
	}
	// The auditor reads everything and appends records, but changes nothing.
	for _, stmt := range []string{
		`UPDATE events SET payload = NULL`,
		`DELETE FROM audit_access`,
		`UPDATE audit_holds SET reason = 'x'`,
		`DELETE FROM audit_runs`,
		`SELECT * FROM logbook_purge_expired(now(), 'r', 'w')`,
	} {
		denied("logbook_auditor", f.auditorPool, stmt)
	}
	// Even the migration owner (a superuser) cannot change a record with the triggers on.
	for _, stmt := range []string{
		`UPDATE audit_access SET who = 'someone else'`,
		`DELETE FROM audit_holds`,
		`TRUNCATE audit_runs`,
		`DELETE FROM audit_purges`,
	} {
		denied("superuser", f.su, stmt)
	}
	// The retention role itself cannot edit outside the purge function.
	denied("logbook_retention", f.retention, `UPDATE events SET payload = NULL`)
	denied("logbook_retention", f.retention, `DELETE FROM audit_holds`)
	var n int
	if err := f.su.QueryRow(ctx, `SELECT count(payload) FROM events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("payloads left: %d (%v), want 1", n, err)
	}
}
