package main

import (
	"context"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// `logbook fork --dry-run` prints the reference and the post and writes nothing; `logbook
// fork` posts the new thread in the parent's channel (the emulator), its session begins with
// session_forked, the parent gets nothing, and `audit verify` checks the fork's reference.
func TestForkCommandBranchesAThread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.New(t)
	seedREADMEThread(t, dbURL)
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	parent, err := store.SessionByThread(ctx, session.ThreadKey{Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, parent.ID, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"}, Payload: session.AssistantMessage{Text: "roll back"}}); err != nil {
		t.Fatal(err)
	}
	emu := slackemu.MustStart(t, slackemu.Options{})
	vars := map[string]string{"DATABASE_URL": dbURL, "SLACK_BOT_TOKEN": emu.BotToken(), "SLACK_API_URL": emu.APIURL(),
		"LOGBOOK_AUDIT_OPERATOR": "fork-test"}

	err, _, out, stderr := runCLI(t, map[string]string{"DATABASE_URL": dbURL}, "fork", "C0000001", "1700000000.000100", "--at", "1", "--dry-run")
	if err != nil || !strings.Contains(out, "would fork session "+parent.ID.String()+" (C0000001 1700000000.000100) at seq 1, hash ") ||
		!strings.Contains(out, "dry run: nothing was posted or recorded") {
		t.Fatalf("dry run: %v\n%s%s", err, out, stderr)
	}
	if forks, err := store.Forks(ctx, parent.ID); err != nil || len(forks) != 0 || len(emu.History("C0000001")) != 0 {
		t.Fatalf("after a dry run: forks %+v (%v), posts %+v", forks, err, emu.History("C0000001"))
	}

	err, code, _, stderr := runCLI(t, vars, "fork", parent.ID.String())
	if err == nil || code != 2 || !strings.Contains(stderr, "--at must name the parent's seq") {
		t.Errorf("a session id without --at: %v (exit %d) %s", err, code, stderr)
	}
	if err, _, _, _ := runCLI(t, vars, "fork", parent.ID.String(), "--at", "9"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("--at past the parent's head: %v", err)
	}
	err, _, out, stderr = runCLI(t, vars, "fork", parent.ID.String(), "--at", "1")
	if err != nil || !strings.Contains(out, "forked session "+parent.ID.String()+" at seq 1") {
		t.Fatalf("fork: %v\n%s%s", err, out, stderr)
	}
	forks, err := store.Forks(ctx, parent.ID)
	if err != nil || len(forks) != 1 || forks[0].Seq != 1 {
		t.Fatalf("forks: %+v, %v", forks, err)
	}
	post, ok := emu.Message("C0000001", forks[0].ThreadTS)
	if !ok || !strings.Contains(post.Text, "Branched from") || !strings.Contains(post.Text, "at event 1") {
		t.Fatalf("the fork's post: %+v", post)
	}
	if evs, err := store.Events(ctx, parent.ID, session.Range{}); err != nil || len(evs) != 2 {
		t.Errorf("the parent's log: %d events, %v; want its 2", len(evs), err)
	}
	err, _, out, stderr = runCLI(t, vars, "audit", "verify", "--session", forks[0].Session.String())
	if err != nil {
		t.Errorf("audit verify of the fork: %v\n%s%s", err, out, stderr)
	}
}
