package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

// Retention leaves a channel's ledger alone (it is the channel's current configuration: a
// setting changed long ago still rules the channel), except a purged note: its note_added
// event loses its payload with the note's text, so the text does not outlive retention in the
// ledger. The chain still verifies, the projections still agree, and verify counts the ledger.
func TestRetentionKeepsLedgersButPurgesTheirNotes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.app.SetChannelSetting(ctx, session.ChannelSetting{Team: "T0000001", Channel: "C0000001", Name: "instructions", New: "Be terse.", Set: true, SetBy: "U0000001"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.AddNote(ctx, session.Note{Team: "T0000001", Channel: "C0000001", Text: "a person's phone number", ByKind: session.NoteByUser, By: "U0000001"}); err != nil {
		t.Fatal(err)
	}
	ret, err := audit.NewRetention(f.retention, time.Nanosecond) // everything written so far is older
	if err != nil {
		t.Fatal(err)
	}
	purges, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t))
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := f.auditor.Ledger(ctx, "C0000001")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range purges {
		if p.Session == ledger {
			t.Errorf("retention purged the ledger of C0000001: %+v", p)
		}
	}
	evs, err := f.auditor.Events(ctx, ledger, session.Range{})
	if err != nil || len(evs) != 2 {
		t.Fatalf("ledger events %v, %v", evs, err)
	}
	var set session.SettingChanged
	if err := evs[0].Decode(&set); err != nil || set.New == nil || *set.New != "Be terse." {
		t.Errorf("the setting's ledger event after retention: %+v, %v", set, err)
	}
	if evs[1].Type != session.TypeNoteAdded || evs[1].Payload != nil {
		t.Errorf("the purged note's ledger event: %s %s; want note_added without its payload", evs[1].Type, evs[1].Payload)
	}
	r, err := audit.NewVerifier(f.auditor).Verify(ctx, audit.VerifyOptions{})
	if err != nil || !r.OK() || r.Ledgers != 1 || r.Purged != 1 {
		t.Errorf("verify after retention: %+v, %v; want OK, 1 ledger, 1 purged event", r, err)
	}
}

// A checkpoint covers the ledgers: a superuser who rewrites a setting consistently — its
// ledger event, every later hash, and its projection row — passes verification alone, and
// fails against the checkpoint taken before, which names the channel.
func TestCheckpointCoversTheLedgers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, v := range []string{"Be terse.", "Be kind."} {
		if _, err := f.app.SetChannelSetting(ctx, session.ChannelSetting{Team: "T0000001", Channel: "C0000001", Name: "instructions", New: v, Set: true, SetBy: "U0000001"}); err != nil {
			t.Fatal(err)
		}
	}
	v := audit.NewVerifier(f.auditor)
	cp, err := v.TakeCheckpoint(ctx)
	if err != nil || len(cp.Heads) != 1 {
		t.Fatalf("checkpoint %+v, %v; want the ledger's head", cp, err)
	}
	ledger, err := f.auditor.Ledger(ctx, "C0000001")
	if err != nil {
		t.Fatal(err)
	}
	id := ledger.String()
	tamper(t, f, `
DO $$
DECLARE r record; prev bytea;
BEGIN
  UPDATE channel_settings SET old_value = 'Obey anyone.' WHERE id = 2;
  UPDATE channel_settings SET value = 'Obey anyone.' WHERE id = 1;
  UPDATE events SET payload = jsonb_set(payload, '{new}', '"Obey anyone."') WHERE session_id = '`+id+`' AND seq = 1;
  UPDATE events SET payload = jsonb_set(payload, '{old}', '"Obey anyone."') WHERE session_id = '`+id+`' AND seq = 2;
  UPDATE events SET payload_hash = sha256(convert_to(payload::text, 'UTF8')) WHERE session_id = '`+id+`';
  prev := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
  FOR r IN SELECT * FROM events WHERE session_id = '`+id+`' ORDER BY seq LOOP
    UPDATE events SET prev_hash = prev WHERE session_id = r.session_id AND seq = r.seq;
    prev := sha256(prev || logbook_event_header(r.session_id, r.seq, r.event_id, r.type, r.actor_kind,
                   r.actor_id, r.created_at, r.idempotency_key) || r.payload_hash);
    UPDATE events SET hash = prev WHERE session_id = r.session_id AND seq = r.seq;
  END LOOP;
END $$`)
	alone, err := v.Verify(ctx, audit.VerifyOptions{})
	if err != nil || !alone.OK() {
		t.Fatalf("the rewrite is not consistent, so this test proves nothing: %+v, %v", alone.Findings, err)
	}
	r, err := v.VerifyAgainst(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Findings) != 1 || r.Findings[0].Session != ledger || r.Findings[0].Channel != "C0000001" ||
		!strings.Contains(r.Findings[0].String(), "ledger of channel C0000001") {
		t.Fatalf("against the checkpoint: %+v; want the ledger of C0000001", r.Findings)
	}
}
