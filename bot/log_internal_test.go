package bot

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func newTestStore(t *testing.T) *session.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return session.NewStore(pool, session.Options{})
}

func seqsOf(evs []session.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// An append by someone else (the gateway) between the cell's own appends leaves a gap in
// what the cell knows; the next read fills it, so nothing appended by others is missed.
func TestCellLogFillsGapsLeftByOtherWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newTestStore(t)
	sess, err := store.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.1"})
	if err != nil {
		t.Fatal(err)
	}
	sys := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	l := newCellLog(store, sess.ID, 0)
	if err := l.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, session.NewEvent{Type: session.TypeTurnStarted, Actor: sys, Payload: session.TurnStarted{Through: 0}}); err != nil {
		t.Fatal(err)
	}
	other := session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"},
		Payload: session.UserMessage{TS: "1.2", Text: "meanwhile"}}
	if _, err := store.Append(ctx, sess.ID, other); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, session.NewEvent{Type: session.TypeQueued, Actor: sys, Payload: session.Queued{MessageSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	if l.head() != 1 {
		t.Fatalf("head %d: the cell cannot know seq 2 without reading it", l.head())
	}
	reads := l.reads
	evs, err := l.Events(ctx, session.Range{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seqsOf(evs)); got != "[1 2 3]" || evs[1].Type != session.TypeUserMessage {
		t.Fatalf("after the gap was filled: %v", got)
	}
	if l.reads != reads+1 {
		t.Fatalf("filling the gap took %d reads, want 1", l.reads-reads)
	}
	// With no gap, reads come from memory.
	if _, err := l.Events(ctx, session.Range{Types: []session.Type{session.TypeQueued}}); err != nil || l.reads != reads+1 {
		t.Fatalf("a read without a gap went to the database (%d reads, %v)", l.reads-reads, err)
	}
}
