package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
)

// TestAppendBatchCommitsTogetherAndKeepsErrorsApart appends to three sessions in one
// AppendBatch: every item is stored as Append would store it (a key repeated inside the batch
// is a duplicate), in one transaction (the rows share one xmin), and the chains verify. What the
// one-event statement leaves to logbook_append (a key stored earlier in the batch, a session
// without its session_work row) is appended after the batch commits. An item refused before
// sending (an unknown type) gets its own error; an item the server refuses (a session that does
// not exist) fails only itself.
func TestAppendBatchCommitsTogetherAndKeepsErrorsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dbURL := newStore(t)
	su := superuser(t, dbURL)
	a, b, c := openSession(t, st, "1700000000.000001"), openSession(t, st, "1700000000.000002"), openSession(t, st, "1700000000.000003")
	d := openSession(t, st, "1700000000.000004")
	if _, err := su.Exec(ctx, `DELETE FROM session_work WHERE session_id = $1`, d.ID); err != nil {
		t.Fatal(err)
	}
	keyed := func(text, key string) session.NewEvent {
		e := msg(text)
		e.IdempotencyKey = key
		return e
	}
	xmins := func(ids ...session.ID) int {
		t.Helper()
		var n int
		if err := su.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM events WHERE session_id = ANY($1)`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	items := []session.Batched{
		{ID: a.ID, Events: []session.NewEvent{keyed("one", "a/1")}},
		{ID: b.ID, Events: []session.NewEvent{keyed("two", "b/2"), keyed("three", "b/3")}},
		{ID: c.ID, Events: []session.NewEvent{keyed("four", "c/4")}},
		{ID: a.ID, Events: []session.NewEvent{keyed("one again", "a/1")}},
		{ID: c.ID, Events: []session.NewEvent{{Type: "no_such_type", Actor: user1, Payload: session.UserMessage{Text: "x"}}}},
		{ID: d.ID, Events: []session.NewEvent{keyed("no row", "d/1")}},
	}
	st.AppendBatch(ctx, items)
	for i, want := range []int{1, 2, 1, 1, 0, 1} {
		if i == 4 {
			continue
		}
		if items[i].Err != nil || len(items[i].Stored) != want {
			t.Fatalf("item %d: %d stored, error %v; want %d stored", i, len(items[i].Stored), items[i].Err, want)
		}
	}
	if items[0].Stored[0].Duplicate || !items[3].Stored[0].Duplicate || items[3].Stored[0].Seq != items[0].Stored[0].Seq {
		t.Errorf("the repeated key: first %+v, again %+v; want the second a duplicate of the first", items[0].Stored[0], items[3].Stored[0])
	}
	if !errors.Is(items[4].Err, session.ErrUnknownType) || items[4].Stored != nil {
		t.Errorf("unknown type: %v, %d stored; want ErrUnknownType, nothing", items[4].Err, len(items[4].Stored))
	}
	if n := xmins(a.ID, b.ID, c.ID); n != 1 {
		t.Errorf("the batch's rows were written by %d transactions, want 1", n)
	}
	mustVerify(t, st, a.ID, 1)
	mustVerify(t, st, b.ID, 2)
	mustVerify(t, st, c.ID, 1)
	mustVerify(t, st, d.ID, 1)
	if n := xmins(a.ID, b.ID, c.ID, d.ID); n != 2 {
		t.Errorf("the batch and the session without a row were written by %d transactions, want 2", n)
	}

	missing := session.ID(uuid.New())
	items = []session.Batched{
		{ID: a.ID, Events: []session.NewEvent{keyed("five", "a/5")}},
		{ID: missing, Events: []session.NewEvent{keyed("lost", "m/1")}},
		{ID: b.ID, Events: []session.NewEvent{keyed("six", "b/6"), keyed("two again", "b/2")}},
	}
	st.AppendBatch(ctx, items)
	if !errors.Is(items[1].Err, session.ErrNotFound) || items[1].Stored != nil {
		t.Errorf("a session that does not exist: %v, %d stored; want ErrNotFound, nothing", items[1].Err, len(items[1].Stored))
	}
	if items[0].Err != nil || len(items[0].Stored) != 1 || items[2].Err != nil || len(items[2].Stored) != 2 || !items[2].Stored[1].Duplicate {
		t.Fatalf("beside a refused item: %+v / %+v; want both stored alone", items[0], items[2])
	}
	mustVerify(t, st, a.ID, 2)
	mustVerify(t, st, b.ID, 3)
}

// A session's items in one batch keep their order, even when the session has no session_work
// row (opened by an older binary), which would leave a one-event statement to logbook_append
// after the commit while its later item was written in the batch.
func TestAppendBatchKeepsASessionsItemsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dbURL := newStore(t)
	s := openSession(t, st, "1700000000.000005")
	if _, err := superuser(t, dbURL).Exec(ctx, `DELETE FROM session_work WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	items := []session.Batched{
		{ID: s.ID, Events: []session.NewEvent{msg("first, alone")}},
		{ID: s.ID, Events: []session.NewEvent{msg("second"), msg("third")}},
	}
	st.AppendBatch(ctx, items)
	if items[0].Err != nil || items[1].Err != nil || len(items[0].Stored) != 1 || len(items[1].Stored) != 2 {
		t.Fatalf("items: %+v / %+v", items[0], items[1])
	}
	if a, b := items[0].Stored[0].Seq, items[1].Stored[0].Seq; a != 1 || b != 2 {
		t.Fatalf("seqs %d then %d, want 1 then 2 (the batch's order)", a, b)
	}
	mustVerify(t, st, s.ID, 3)
}
