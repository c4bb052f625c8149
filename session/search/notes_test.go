package search_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

func (f *fixture) note(n session.Note) session.Note {
	f.t.Helper()
	n.Team = "T0000001"
	out, err := f.store.AddNote(f.ctx, n)
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// noteIDs are the note ids of hits, 0 for a message.
func noteIDs(hits []search.Hit) []int64 {
	out := make([]int64, len(hits))
	for i, h := range hits {
		out[i] = h.NoteID
	}
	return out
}

// Issue 49: channel memory notes are found by search, alone (kind notes) or with the
// messages (kind all), under the same filters; a forgotten note and a purged one are not
// found; the default kind stays the messages alone.
func TestSearchFindsMemoryNotes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, search.Options{})
	s := f.open("C0000001", "1700000000.001200")
	f.append(s, userMsg(s, "U0000001", "alice", "1700000000.001200", "which staging database do we use?"))
	f.catchUp()

	purged := f.note(session.Note{Channel: "C0000001", Text: "the staging database was db-0", ByKind: session.NoteByUser, By: "U0000001"})
	var cutoff time.Time
	if err := f.admin.QueryRow(f.ctx, `SELECT clock_timestamp()`).Scan(&cutoff); err != nil {
		t.Fatal(err)
	}
	mine := f.note(session.Note{Channel: "C0000001", Text: "The staging database is db-2 (moved in May).", ByKind: session.NoteByUser, By: "U0000001"})
	agents := f.note(session.Note{Channel: "C0000001", Text: "staging deploys need an approval from ops", ByKind: session.NoteByAgent,
		By: "UB000001", Session: s.ID, ThreadTS: s.Key.ThreadTS, CallID: "toolu_1"})
	other := f.note(session.Note{Channel: "C0000002", Text: "the staging database password rotates weekly", ByKind: session.NoteByUser, By: "U0000002"})
	forgotten := f.note(session.Note{Channel: "C0000001", Text: "the staging database is db-1", ByKind: session.NoteByUser, By: "U0000001"})
	if _, err := f.store.ForgetNote(f.ctx, "T0000001", "C0000001", forgotten.ID, "U0000002"); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := f.admin.QueryRow(f.ctx, `SELECT logbook_purge_memory($1)`, cutoff).Scan(&n); err != nil || n != 1 {
		t.Fatalf("purge: %d notes, %v; want 1", n, err)
	}

	hits := f.search(search.Query{Text: "staging database", Kind: search.KindNotes})
	if got := noteIDs(hits); !slices.Equal(got, []int64{other.ID, mine.ID}) && !slices.Equal(got, []int64{mine.ID, other.ID}) {
		t.Fatalf("kind notes found notes %v (%q), want %d and %d only (not the forgotten %d, the purged %d)",
			got, texts(hits), mine.ID, other.ID, forgotten.ID, purged.ID)
	}
	for _, h := range hits {
		if h.NoteID != mine.ID {
			continue
		}
		// The note's text whole, who asked (with the name the log knows), when, where.
		if got := h.SnippetText("[", "]"); got != "The [staging] [database] is db-2 (moved in May)." {
			t.Errorf("snippet = %q", got)
		}
		if h.Kind != search.HitNote || h.ActorKind != "user" || h.ActorID != "U0000001" || h.ActorName != "alice" ||
			h.Channel != "C0000001" || !h.CreatedAt.Equal(mine.At) || h.SessionID != (session.ID{}) || h.Score <= 0 {
			t.Errorf("note hit = %+v", h)
		}
	}

	// The default is the messages alone, as before; all is both.
	if hits := f.search(search.Query{Text: "staging database"}); len(hits) != 1 || hits[0].NoteID != 0 || hits[0].SessionID != s.ID {
		t.Errorf("default kind: %+v, want the message alone", hits)
	}
	all := f.search(search.Query{Text: "staging database", Kind: search.KindAll})
	if got := noteIDs(all); len(got) != 3 || !slices.Contains(got, 0) || !slices.Contains(got, mine.ID) || !slices.Contains(got, other.ID) {
		t.Errorf("kind all: %v (%q), want the message and notes %d, %d", got, texts(all), mine.ID, other.ID)
	}
	if got := f.search(search.Query{Text: "staging database", Kind: search.KindAll, Limit: 2}); len(got) != 2 {
		t.Errorf("kind all, limit 2: %d hits", len(got))
	}

	// The filters of messages apply to notes.
	for _, c := range []struct {
		q    search.Query
		want []int64
	}{
		{search.Query{Text: "staging", Channel: "#C0000002"}, []int64{other.ID}},
		{search.Query{Text: "staging", Actor: "bot"}, []int64{agents.ID}},
		{search.Query{Text: "staging", Actor: "Alice"}, []int64{mine.ID}},
		{search.Query{Text: "staging", Actor: "U0000002"}, []int64{other.ID}},
		{search.Query{Text: "staging", Session: s.ID}, []int64{agents.ID}},
		{search.Query{Text: "staging", Since: time.Now().Add(time.Hour)}, nil},
		{search.Query{Text: "approval ops"}, []int64{agents.ID}},
	} {
		c.q.Kind = search.KindNotes
		if got := noteIDs(f.search(c.q)); !slices.Equal(got, c.want) && len(got)+len(c.want) > 0 {
			t.Errorf("%+v: notes %v, want %v", c.q, got, c.want)
		}
	}
	// A note the agent wrote leads to its thread.
	if hits := f.search(search.Query{Text: "approval", Kind: search.KindNotes}); len(hits) != 1 || hits[0].SessionID != s.ID ||
		hits[0].ActorKind != "bot" || hits[0].ThreadTS != s.Key.ThreadTS || !strings.Contains(hits[0].Permalink, "/archives/C0000001/p1700000000001200") {
		t.Errorf("agent's note hit = %+v", hits)
	}

	// Bad kinds are refused with a reason.
	for _, q := range []search.Query{
		{Text: "staging", Kind: "note"},
		{Text: "staging", Kind: search.KindNotes, Tools: true},
	} {
		var qe *search.QueryError
		if _, err := f.s.Search(f.ctx, q); !errors.As(err, &qe) || !errors.Is(err, search.ErrInvalidQuery) {
			t.Errorf("%+v: err = %v, want a QueryError", q, err)
		}
	}
}
