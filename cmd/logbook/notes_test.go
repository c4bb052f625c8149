package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// Issue 49: `logbook search` finds the channels' memory notes (their id, text, who added
// them, when, the channel), alone with --kind notes or beside messages; a forgotten note is
// not found; `logbook transcript` shows at a turn the notes it was offered.
func TestSearchAndTranscriptShowMemoryNotes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	kept, err := store.AddNote(ctx, session.Note{Team: "T0000001", Channel: "C0000001", Text: "the staging database is db-2",
		ByKind: session.NoteByUser, By: "U0000001"})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := store.AddNote(ctx, session.Note{Team: "T0000001", Channel: "C0000001", Text: "the staging database is db-1, secretly",
		ByKind: session.NoteByUser, By: "U0000001"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.ForgetNote(ctx, "T0000001", "C0000001", gone.ID, "U0000002"); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.001200"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"}, IdempotencyKey: "m:1",
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.001200", TS: "1700000000.001200",
				User: "U0000001", UserName: "ada", Text: "which staging database?"}},
		session.NewEvent{Type: session.TypeTurnSettings, Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"},
			Payload: session.TurnSettings{Turn: 2, Hash: "ab12cd34ef56ab12", Model: "offline", Memory: []int64{gone.ID, kept.ID}}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
			Payload: session.AssistantMessage{Text: "db-2.", Turn: 2}},
	); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL, "USER": "op"}
	cli := func(args ...string) string {
		t.Helper()
		err, _, out, stderr := runCLI(t, vars, args...)
		if err != nil {
			t.Fatalf("logbook %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return out
	}

	out := cli("search", "staging", "database")
	note := fmt.Sprintf("Memory note %d — #C0000001, added by ada (U0000001), %s", kept.ID, kept.At.UTC().Format("2006-01-02T15:04:05Z"))
	for _, want := range []string{note, "   the **staging** **database** is db-2\n", "which **staging** **database**?", "session " + s.ID.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("search lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "db-1") {
		t.Errorf("search found the forgotten note:\n%s", out)
	}
	if out := cli("search", "--kind", "notes", "staging", "database"); !strings.Contains(out, note) || strings.Contains(out, "which") {
		t.Errorf("--kind notes: want the note alone:\n%s", out)
	}
	if out := cli("search", "--kind", "messages", "staging", "database"); strings.Contains(out, "Memory note") || !strings.Contains(out, "which") {
		t.Errorf("--kind messages: want the message alone:\n%s", out)
	}
	if out := cli("search", "--json", "--kind", "notes", "staging"); !strings.Contains(out, fmt.Sprintf(`"note_id": %d`, kept.ID)) || !strings.Contains(out, `"kind": "note"`) {
		t.Errorf("--json: the hit lacks its note id and kind:\n%s", out)
	}

	tr := cli("transcript", s.ID.String())
	if want := fmt.Sprintf("🧠 note %d by U0000001, %s:\n    | the staging database is db-2", kept.ID, kept.At.UTC().Format("2006-01-02 15:04 UTC")); !strings.Contains(tr, want) {
		t.Errorf("transcript lacks %q:\n%s", want, tr)
	}
	if want := fmt.Sprintf("🧠 note %d by U0000001", gone.ID); !strings.Contains(tr, want) || strings.Contains(tr, "secretly") {
		t.Errorf("transcript: want forgotten note %d named without its text:\n%s", gone.ID, tr)
	}

	// The transcript a takeover writes shows them too.
	dir := filepath.Join(t.TempDir(), "takeover")
	cli("takeover", s.ID.String(), "--as", "alice", "--dir", dir)
	md, err := os.ReadFile(filepath.Join(dir, "TRANSCRIPT.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "> the staging database is db-2") || strings.Contains(string(md), "not found in the channel's memory") {
		t.Errorf("TRANSCRIPT.md lacks note %d:\n%s", kept.ID, md)
	}
}
