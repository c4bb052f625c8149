package session_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// Recent lists the sessions with an event since the given time, newest first, within the
// limit, whichever team owns their channel (a Slack Connect channel hosted by another
// organisation); an empty session (opened, nothing appended) is not active.
func TestRecentSessions(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	a, b, empty := openSession(t, st, "1700000001.000100"), openSession(t, st, "1700000002.000100"), openSession(t, st, "1700000003.000100")
	other, err := st.Open(ctx, session.ThreadKey{Team: "T0000002", Channel: "C0000009", ThreadTS: "1700000004.000100"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []session.ID{a.ID, b.ID, other.ID} {
		if _, err := st.Append(ctx, id, msg("hello")); err != nil {
			t.Fatal(err)
		}
	}
	// A channel's ledger is no thread: catch-up must not ask Slack for its replies (issue 49).
	if _, err := st.SetChannelRepo(ctx, session.ChannelRepo{Team: "T0000001", Channel: "C0000009", URL: "https://github.com/a/b", SetBy: "U1"}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Recent(ctx, time.Now().Add(-time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != other.ID || got[1].ID != b.ID || got[2].ID != a.ID || got[1].Key.ThreadTS != b.Key.ThreadTS ||
		got[0].Key.Team != "T0000002" {
		t.Fatalf("recent: %+v; want the other team's, b, then a (not the empty %s)", got, empty.ID)
	}
	if got, err := st.Recent(ctx, time.Now().Add(-time.Minute), 1); err != nil || len(got) != 1 || got[0].ID != other.ID {
		t.Fatalf("recent with limit 1: %+v %v", got, err)
	}
	if got, err := st.Recent(ctx, time.Now().Add(time.Minute), 10); err != nil || len(got) != 0 {
		t.Fatalf("recent since the future: %+v %v", got, err)
	}
}

// CheckWritable passes on a primary and says ErrReadOnly in a read-only session.
func TestCheckWritable(t *testing.T) {
	t.Parallel()
	st, _, dbURL := newStorePool(t, 1)
	if err := st.CheckWritable(context.Background()); err != nil {
		t.Fatal(err)
	}
	pool, err := session.Connect(context.Background(), dbURL+"&options=-c%20default_transaction_read_only%3Don", session.PoolOptions{Role: "logbook_app", MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := session.NewStore(pool, session.Options{}).CheckWritable(context.Background()); !errors.Is(err, session.ErrReadOnly) {
		t.Fatalf("read-only session: %v, want ErrReadOnly", err)
	}
}
