package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

func (f *fixture) note(channel, text, by string) session.Note {
	f.t.Helper()
	n, err := f.store.AddNote(f.ctx, session.Note{Team: "T0000001", Channel: channel, Text: text, ByKind: session.NoteByUser, By: by})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// Issue 49: the search page finds memory notes (the Kind filter: all, messages, notes),
// with their id, text, who added them, when and the channel; never a forgotten one, nor one
// of a channel that became private to a non-auditor. The transcript page shows at a turn the
// notes it was offered, escaped.
func TestSearchAndTranscriptPagesShowMemoryNotes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kept := f.note("C0000001", "the billing timeout is 30s <script>alert(1)</script>", "U0000001")
	forgotten := f.note("C0000001", "the billing timeout was 10s", "U0000001")
	if _, err := f.store.ForgetNote(f.ctx, "T0000001", "C0000001", forgotten.ID, "U0000002"); err != nil {
		t.Fatal(err)
	}
	private := f.note("C0000003", "the reorg timeout note", "U0000001")

	_, body, _ := f.get("/search?q=timeout", asAlice)
	for _, want := range []string{
		fmt.Sprintf(`data-note="%d"`, kept.ID), fmt.Sprintf("Memory note %d", kept.ID),
		"the billing <mark>timeout</mark> is 30s &lt;script&gt;", "added by alice · #general",
		"billing-api crash loop", // the messages too, by default
	} {
		if !strings.Contains(body, want) {
			t.Errorf("search as alice lacks %q:\n%s", want, body)
		}
	}
	for _, never := range []string{"was 10s", "reorg timeout note", "<script>alert"} {
		if strings.Contains(body, never) {
			t.Errorf("search as alice shows %q", never)
		}
	}
	if _, body, _ := f.get("/search?q=timeout", asAuditor); !strings.Contains(body, fmt.Sprintf("Memory note %d", private.ID)) {
		t.Error("search hides a now-private channel's note from an auditor")
	}
	if _, body, _ := f.get("/search?q=timeout&kind=notes", asAlice); !strings.Contains(body, fmt.Sprintf("Memory note %d", kept.ID)) ||
		strings.Contains(body, "billing-api crash loop") || !strings.Contains(body, `<option value="notes" selected>`) {
		t.Errorf("kind=notes: want the note alone:\n%s", body)
	}
	if _, body, _ := f.get("/search?q=timeout&kind=messages", asAlice); strings.Contains(body, "data-note=") || !strings.Contains(body, "billing-api crash loop") {
		t.Errorf("kind=messages: want the messages alone:\n%s", body)
	}
	if _, body, _ := f.get("/search?q=timeout&kind=note", asAlice); !strings.Contains(body, "Cannot search for that: unknown kind") {
		t.Errorf("kind=note is not explained:\n%s", body)
	}
	var logged []string
	for _, r := range f.accessLog() {
		if r.Action == "search" {
			logged = append(logged, r.Query)
		}
	}
	if len(logged) < 3 || logged[0] != "timeout" || logged[2] != "timeout kind:notes" {
		t.Errorf("search access records: %q", logged)
	}

	id := f.sessions["billing-api crash loop"]
	if _, err := f.store.Append(f.ctx, id, session.NewEvent{Type: session.TypeTurnSettings, Actor: sys,
		Payload: session.TurnSettings{Turn: 12, Hash: "ab12cd34ef56ab12", Model: "offline", Memory: []int64{kept.ID, forgotten.ID}}}); err != nil {
		t.Fatal(err)
	}
	_, body, _ = f.get("/sessions/"+id.String(), asAlice)
	if !strings.Contains(body, fmt.Sprintf(`data-note="%d"`, kept.ID)) || !strings.Contains(body, "the billing timeout is 30s &lt;script&gt;") ||
		strings.Contains(body, "<script>alert") || strings.Contains(body, "was 10s") {
		t.Errorf("transcript page: want note %d escaped and the forgotten one without its text:\n%s", kept.ID, body)
	}
	if _, body, _ := f.get("/sessions/"+id.String()+"?deleted=1", asAuditor); !strings.Contains(body, "the billing timeout was 10s") {
		t.Error("the auditor's transcript lacks the forgotten note's text")
	}
}
