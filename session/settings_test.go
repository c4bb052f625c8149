package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

// A channel's setting is its newest row, which carries the value it replaced; resetting it to
// the default is a row too; rows are a record nobody may change.
func TestChannelSettingsAreRecordsWithOldAndNewValues(t *testing.T) {
	t.Parallel()
	st, pool, dbURL := newStorePool(t, 2)
	ctx := context.Background()
	if got, err := st.ChannelSettings(ctx, "T1", "C0001"); err != nil || len(got) != 0 {
		t.Fatalf("never set: %v %v", got, err)
	}
	set := func(name, value string, isSet bool, by string) session.ChannelSetting {
		t.Helper()
		c, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0001", Name: name, New: value, Set: isSet, SetBy: by})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := set("model", "anthropic:a", true, "U1"); c.OldSet || c.ID == 0 || c.SetAt.IsZero() {
		t.Fatalf("first: %+v", c)
	}
	if c := set("model", "openai:b", true, "U2"); !c.OldSet || c.Old != "anthropic:a" {
		t.Fatalf("second's old value: %+v", c)
	}
	if c := set("model", "", false, "U1"); !c.OldSet || c.Old != "openai:b" || c.Set {
		t.Fatalf("reset: %+v", c)
	}
	set("instructions", "be brief", true, "U1")
	got, err := st.ChannelSettings(ctx, "T1", "C0001")
	if err != nil || len(got) != 2 || got["model"].Set || got["instructions"].New != "be brief" || got["instructions"].SetBy != "U1" {
		t.Fatalf("current: %+v %v", got, err)
	}
	if other, err := st.ChannelSettings(ctx, "T1", "C0002"); err != nil || len(other) != 0 {
		t.Fatalf("another channel: %+v %v", other, err)
	}
	hist, err := st.ChannelSettingsHistory(ctx, "")
	if err != nil || len(hist) != 4 || hist[0].New != "anthropic:a" || hist[2].Set {
		t.Fatalf("history: %+v %v", hist, err)
	}
	if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: "C0001", Name: "model"}); !errors.Is(err, session.ErrInvalidEvent) {
		t.Fatalf("without who: %v", err)
	}
	for _, q := range []string{`UPDATE channel_settings SET value = ''`, `DELETE FROM channel_settings`} {
		if _, err := pool.Exec(ctx, q); err == nil {
			t.Fatalf("%s as the application role succeeded", q)
		}
		if _, err := superuser(t, dbURL).Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("%s as a superuser: %v", q, err)
		}
	}
}

// A channel's notes come newest first; a forgotten one is not offered (and cannot be forgotten
// twice), nor one of another channel; nobody changes a note.
func TestChannelMemoryNotesAndForgetting(t *testing.T) {
	t.Parallel()
	st, pool, dbURL := newStorePool(t, 2)
	ctx := context.Background()
	sess, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C0001", ThreadTS: "1.000001"})
	if err != nil {
		t.Fatal(err)
	}
	add := func(n session.Note) session.Note {
		t.Helper()
		n, err := st.AddNote(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := add(session.Note{Team: "T1", Channel: "C0001", Text: "first", ByKind: session.NoteByUser, By: "U1"})
	b := add(session.Note{Team: "T1", Channel: "C0001", Text: "second", ByKind: session.NoteByAgent, By: "UB1", Session: sess.ID, ThreadTS: "1.000001"})
	elsewhere := add(session.Note{Team: "T1", Channel: "C0002", Text: "elsewhere", ByKind: session.NoteByUser, By: "U1"})
	for _, bad := range []session.Note{{Team: "T1", Channel: "C0001", ByKind: session.NoteByUser, By: "U1"},
		{Team: "T1", Channel: "C0001", Text: strings.Repeat("x", session.MaxNoteText+1), ByKind: session.NoteByUser, By: "U1"},
		{Team: "T1", Channel: "C0001", Text: "x", ByKind: "robot", By: "U1"}} {
		if _, err := st.AddNote(ctx, bad); !errors.Is(err, session.ErrInvalidEvent) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	ns, err := st.Notes(ctx, "T1", "C0001", false, 10)
	if err != nil || len(ns) != 2 || ns[0].ID != b.ID || ns[0].Session != sess.ID || ns[0].ThreadTS != "1.000001" || ns[1].ID != a.ID {
		t.Fatalf("notes: %+v %v", ns, err)
	}
	if _, err := st.ForgetNote(ctx, "T1", "C0002", b.ID, "U2"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("forget from another channel: %v", err)
	}
	if _, err := st.ForgetNote(ctx, "T1", "C0001", b.ID, "U2"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ForgetNote(ctx, "T1", "C0001", b.ID, "U2"); !errors.Is(err, session.ErrForgotten) {
		t.Fatalf("forget twice: %v", err)
	}
	if ns, err := st.Notes(ctx, "T1", "C0001", false, 10); err != nil || len(ns) != 1 || ns[0].ID != a.ID {
		t.Fatalf("after forget: %+v %v", ns, err)
	}
	if all, err := st.Notes(ctx, "T1", "C0001", true, 10); err != nil || len(all) != 2 || !all[0].Forgotten || all[0].ForgottenBy != "U2" {
		t.Fatalf("all: %+v %v", all, err)
	}
	// Issue 49: a transcript reads the notes its turns were offered by id, forgotten ones
	// included (marked), never another channel's.
	byID, err := st.NotesByID(ctx, "T1", "C0001", []int64{b.ID, a.ID, elsewhere.ID, 999})
	if err != nil || len(byID) != 2 || byID[0].ID != a.ID || byID[0].Text != "first" || byID[0].Forgotten ||
		byID[1].ID != b.ID || byID[1].Text != "second" || !byID[1].Forgotten || byID[1].ForgottenBy != "U2" || byID[1].Session != sess.ID {
		t.Fatalf("notes by id: %+v %v", byID, err)
	}
	if none, err := st.NotesByID(ctx, "T1", "C0001", nil); err != nil || len(none) != 0 {
		t.Fatalf("notes by no id: %+v %v", none, err)
	}
	for _, q := range []string{`UPDATE channel_memory SET text = 'x'`, `DELETE FROM channel_memory`, `DELETE FROM channel_memory_forgotten`} {
		if _, err := pool.Exec(ctx, q); err == nil {
			t.Fatalf("%s as the application role succeeded", q)
		}
		if _, err := superuser(t, dbURL).Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("%s as a superuser: %v", q, err)
		}
	}
}

// A remember call replayed after a crash (the same session and call id) finds the note its
// first run stored instead of adding a second one; another call adds its own.
func TestRememberCallAddsItsNoteOnce(t *testing.T) {
	t.Parallel()
	st, _, _ := newStorePool(t, 2)
	ctx := context.Background()
	sess, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C0001", ThreadTS: "1.000001"})
	if err != nil {
		t.Fatal(err)
	}
	note := session.Note{Team: "T1", Channel: "C0001", Text: "deploys go through make ship", ByKind: session.NoteByAgent,
		By: "UB1", Session: sess.ID, ThreadTS: "1.000001", CallID: "toolu_1"}
	first, err := st.AddNote(ctx, note)
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := st.AddNote(ctx, note)
	if err != nil || replayed.ID != first.ID || !replayed.At.Equal(first.At) {
		t.Fatalf("replayed call: %+v %v, want note %d", replayed, err, first.ID)
	}
	note.CallID = "toolu_2"
	other, err := st.AddNote(ctx, note)
	if err != nil || other.ID == first.ID {
		t.Fatalf("another call: %+v %v", other, err)
	}
	ns, err := st.Notes(ctx, "T1", "C0001", false, 10)
	if err != nil || len(ns) != 2 {
		t.Fatalf("notes: %d %v, want 2", len(ns), err)
	}
}
