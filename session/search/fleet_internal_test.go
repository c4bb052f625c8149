package search

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// Issue 53: every replica's indexer polled every 2 s, so ten replicas made ten transactions
// a poll interval and indexed ten small batches. An indexer that finds another at work (the
// cursor moved since it last found or left it) waits twice as long next time, up to Fleet ×
// Poll; one that finds the cursor where it left it comes back to Poll; alone it never backs
// off.
func TestIndexerBacksOffWhileAnotherIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	const poll = 2 * time.Second
	opts := IndexerOptions{Poll: poll, Fleet: 4}
	a := NewIndexer(store, pool, zerolog.New(zerolog.NewTestWriter(t)), opts)
	b := NewIndexer(store, pool, zerolog.New(zerolog.NewTestWriter(t)), opts)
	sess, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	post := func() {
		t.Helper()
		n++
		ts := "1700000000.00" + string(rune('1'+n)) + "00"
		if _, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage,
			Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"}, IdempotencyKey: "msg:" + ts,
			Payload: session.UserMessage{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100", TS: ts,
				User: "U0000001", UserName: "ada", Text: "deploy"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The log is read gap-safe: an event is readable once every transaction older than its
	// own has ended, in the whole cluster (other tests' too). Wait for that, as Sync does.
	readable := func() {
		t.Helper()
		var target uint64
		if err := pool.QueryRow(ctx, sqlNextXID).Scan(&target); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var xmin uint64
			if err := pool.QueryRow(ctx, sqlOldestRunning).Scan(&xmin); err != nil {
				t.Fatal(err)
			}
			if xmin >= target {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("a transaction in the cluster has run for a minute: the log cannot be read past it")
			}
			<-time.After(10 * time.Millisecond) // polling the database's horizon, not a timing assertion
		}
	}
	poll1 := func(ix *Indexer, name string, wantRead bool, wantOthers bool) {
		t.Helper()
		if wantRead {
			readable()
		}
		got, others, err := ix.catchUp(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if (got > 0) != wantRead || others != wantOthers {
			t.Fatalf("%s read %d events, found another indexer at work %v; want events %v, another %v", name, got, others, wantRead, wantOthers)
		}
	}

	post()
	poll1(a, "a", true, false)  // its first step: nothing to compare with
	poll1(b, "b", false, false) // the cursor is where a left it, and b had not seen it before
	post()
	poll1(a, "a", true, false) // where a left it
	poll1(b, "b", false, true) // a moved it since b saw it
	post()
	poll1(b, "b", true, false) // b finds it where it saw it last, and indexes
	poll1(a, "a", false, true)

	for _, c := range []struct {
		wait   time.Duration
		others bool
		want   time.Duration
	}{
		{poll, true, 2 * poll},
		{2 * poll, true, 4 * poll},
		{4 * poll, true, 4 * poll}, // Fleet × Poll at most
		{4 * poll, false, 2 * poll},
		{poll, false, poll},
	} {
		if got := a.nextWait(c.wait, c.others); got != c.want {
			t.Errorf("after a wait of %v and another indexer at work %v: wait %v, want %v", c.wait, c.others, got, c.want)
		}
	}
	alone := NewIndexer(store, pool, zerolog.New(zerolog.NewTestWriter(t)), IndexerOptions{Poll: poll})
	if got := alone.nextWait(poll, true); got != poll {
		t.Errorf("an indexer alone (Fleet 1) waits %v after finding another at work, want Poll %v", got, poll)
	}
}
