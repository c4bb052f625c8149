package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

// Retention covers channel memory: a note older than the period loses its text (and is never
// offered again) unless a legal hold covers its channel, the person who asked, or the session
// it came from; the app cannot change a note itself.
func TestRetentionPurgesChannelMemoryExceptHeldNotes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	held := f.open(t, "C0000001", "1700000000.000100")
	f.open(t, "C00000HC", "1700000000.000200") // a channel hold needs the channel in the log
	add := func(channel, by string, sid session.ID) session.Note {
		t.Helper()
		n, err := f.app.AddNote(ctx, session.Note{Team: "T0000001", Channel: channel, Text: "note of " + by + " in " + channel,
			ByKind: session.NoteByUser, By: by, Session: sid})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	plain := add("C0000001", "U0000001", session.ID{})
	byChannel := add("C00000HC", "U0000001", session.ID{})
	byActor := add("C0000001", "U00000HA", session.ID{})
	bySession := add("C0000001", "U0000001", held.ID)
	person := audit.Who{Name: "legal@example.com"}
	for _, h := range [][2]string{{string(audit.HoldChannel), "C00000HC"}, {string(audit.HoldSession), held.ID.String()}} {
		if _, err := audit.AddHold(ctx, f.auditorPool, person, audit.HoldScope(h[0]), h[1], "litigation"); err != nil {
			t.Fatal(err)
		}
	}
	// An actor hold needs the actor in the log.
	f.append(t, held.ID, session.Actor{Kind: session.ActorUser, ID: "U00000HA"}, session.TypeUserMessage, map[string]any{"text": "hi"})
	if _, err := audit.AddHold(ctx, f.auditorPool, person, audit.HoldActor, "U00000HA", "investigation"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.appPool.Exec(ctx, `UPDATE channel_memory SET text = 'changed'`); err == nil {
		t.Fatal("the app changed a note")
	}
	ret, err := audit.NewRetention(f.retention, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ret.PurgeMemory(ctx, f.dbNow(t).Add(-24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("purge before every note: %d, %v", n, err)
	}
	time.Sleep(2 * time.Millisecond) // the retention period is 1ms: let it pass (not a timing assertion)
	if _, err := ret.Purge(ctx, audit.Who{Name: "retention", System: true}, f.dbNow(t)); err != nil {
		t.Fatal(err)
	}
	all, err := f.app.Notes(ctx, "T0000001", "", true, 100)
	if err != nil {
		t.Fatal(err)
	}
	purged := map[int64]bool{}
	for _, n := range all {
		purged[n.ID] = n.Purged
		if n.Purged != (n.Text == "") {
			t.Errorf("note %d: purged %v, text %q", n.ID, n.Purged, n.Text)
		}
	}
	if !purged[plain.ID] || purged[byChannel.ID] || purged[byActor.ID] || purged[bySession.ID] {
		t.Fatalf("purged: %v (plain %d, channel %d, actor %d, session %d)", purged, plain.ID, byChannel.ID, byActor.ID, bySession.ID)
	}
	offered, err := f.app.Notes(ctx, "T0000001", "C0000001", false, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range offered {
		if n.ID == plain.ID {
			t.Fatal("a purged note is offered")
		}
	}
}
