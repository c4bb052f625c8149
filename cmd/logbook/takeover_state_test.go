package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// takeover and handback check the session's state and say it: a second takeover is refused
// naming who holds it and since when, handback says whom it took the session from, and a
// handback of a session the bot has is refused (issue 29: each appended its event blindly).
func TestTakeoverAndHandbackCheckTheSessionsState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	s, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: "U1"}, Payload: session.UserMessage{User: "U1", Text: "hi"}}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL}
	id := s.ID.String()
	dir := t.TempDir()

	if err, _, out, stderr := runCLI(t, vars, "takeover", id, "--as", "alice", "--dir", filepath.Join(dir, "a")); err != nil || !strings.Contains(out, "taken over by alice") {
		t.Fatalf("first takeover: %v\n%s%s", err, out, stderr)
	}
	err, code, _, _ := runCLI(t, vars, "takeover", id, "--as", "bob", "--dir", filepath.Join(dir, "b"))
	if err == nil || code != 1 || !strings.Contains(err.Error(), "taken over already, by alice since ") || !strings.Contains(err.Error(), "logbook handback "+id) {
		t.Fatalf("second takeover: %v (exit %d); want a refusal naming alice, since when, and handback", err, code)
	}
	if err, _, out, _ := runCLI(t, vars, "handback", id, "--as", "bob"); err != nil || !strings.Contains(out, "handed back by bob (taken over by alice since ") {
		t.Fatalf("handback: %v\n%s", err, out)
	}
	if err, _, _, _ := runCLI(t, vars, "handback", id, "--as", "bob"); err == nil || !strings.Contains(err.Error(), "is not taken over: the bot has it") {
		t.Fatalf("handback of a session the bot has: %v", err)
	}
	evs, err := store.Events(ctx, s.ID, session.Range{Types: []session.Type{session.TypeTakenOver, session.TypeHandedBack}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Type != session.TypeTakenOver || evs[1].Type != session.TypeHandedBack {
		t.Fatalf("the log has %d takeover events; want one taken_over and one handed_back", len(evs))
	}
}
