package audit_test

import (
	"context"
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
