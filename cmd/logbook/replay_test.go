package main

import (
	"context"
	"strings"
	"testing"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// A session whose recorded request hash is not the one today's code builds from its log makes
// logbook replay print the divergence with both sides and exit 1; naming no session, or a
// session and an export, is a usage error (exit 2).
func TestReplayExitsOneOnADivergence(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	seedREADMEThread(t, dbURL)
	ctx := context.Background()
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	s, err := store.SessionByThread(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	started, err := store.Append(ctx, s.ID, session.NewEvent{Type: session.TypeTurnStarted, Actor: cell, Payload: session.TurnStarted{Through: 1}})
	if err != nil {
		t.Fatal(err)
	}
	turn := started[0].Seq
	if _, err := store.Append(ctx, s.ID,
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
			Payload: session.AssistantMessage{Text: "Check the migration's lock timeout.", Turn: turn,
				Usage: &session.Usage{Provider: "anthropic", Model: "claude-test", InputTokens: 50, OutputTokens: 8, StopReason: "end_turn",
					RequestHash: strings.Repeat("ab", 32)}}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{Turn: turn, Status: session.StatusOK, Through: 1}}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": dbURL}
	err, code, out, _ := runCLI(t, vars, "replay", "C0000001", "1700000000.000100")
	if err == nil || code != 1 || !strings.Contains(out, "diverged at seq 3 (turn 2): model request differs") ||
		!strings.Contains(out, "recorded: request abababababab answered by this message") || !strings.Contains(out, "replayed: request ") ||
		!strings.Contains(out, "identical through seq 2") {
		t.Fatalf("replay of a session whose request hash differs: exit %d, %v\n%s", code, err, out)
	}
	if _, code, _, _ := runCLI(t, vars, "replay"); code != 2 {
		t.Fatalf("replay without a session: exit %d, want 2", code)
	}
	if _, code, _, _ := runCLI(t, vars, "replay", s.ID.String(), "--dir", t.TempDir()); code != 2 {
		t.Fatalf("replay of a session and an export: exit %d, want 2", code)
	}
}
