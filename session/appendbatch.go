package session

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Batched is one session's append in AppendBatch: the events to append to session ID, and
// what became of them.
type Batched struct {
	ID     ID
	Events []NewEvent
	// Stored and Err are set by AppendBatch, as Append would return them.
	Stored []Event
	Err    error
}

// AppendBatch appends each item's events to its session as Append does, with all of them in
// one transaction sent in one round trip: one commit for them all (group commit). When it
// returns, every item with a nil Err is durably stored. An item refused before anything is sent
// (ErrUnknownType, ErrInvalidEvent, *TooLargeError...) gets its error and is left out of the
// transaction. An item of a single event goes as the one-event statement unless its session
// has other items in the batch; what that statement leaves to logbook_append (its session has
// no session_work row or does not exist, its key was stored meanwhile) is appended after the
// commit. When the server refuses the transaction (one item's invalid payload, a key stored by
// a concurrent append, a deadlock), nothing of it was written, and each item is then appended
// alone, so an item's error is its own. When the transaction's outcome is unknown (the
// connection broke, ctx ended), every item gets that error and none is sent again: an append
// that did commit would be written twice but for its idempotency keys.
//
// Two batches at once that share sessions can deadlock on the sessions' append locks (the
// server then refuses one, whose items are appended alone): a caller keeps each session to one
// batch at a time.
func (s *Store) AppendBatch(ctx context.Context, items []Batched) {
	calls := make([]*appendCall, len(items))
	b := &pgx.Batch{}
	// A session with several items keeps their order only if none of them can be left to
	// logbook_append after the commit: such a session's items all call it in the batch.
	per := make(map[ID]int, len(items))
	for _, it := range items {
		per[it.ID]++
	}
	for i := range items {
		items[i].Stored, items[i].Err = nil, nil
		c, err := s.newAppendCall(items[i].ID, AppendOptions{}, items[i].Events)
		if err != nil || c == nil {
			items[i].Err = err
			continue
		}
		calls[i] = c
		if sql, args, ok := c.oneStatement(); ok && per[c.id] == 1 {
			c.statement = true
			b.Queue(sql, args...)
		} else {
			b.Queue(sqlAppend, c.args...)
		}
	}
	if b.Len() == 0 {
		return
	}
	if b.Len() == 1 {
		// An item alone is an append like any other: one statement.
		for i, c := range calls {
			if c != nil {
				items[i].Stored, items[i].Err = s.sendOne(ctx, c)
			}
		}
		return
	}
	left, err := s.sendBatch(ctx, b, calls, items)
	var refused *pgconn.PgError
	if err == nil {
		// What the one-event statement left to logbook_append (it wrote nothing of them).
		for _, i := range left {
			items[i].Stored, items[i].Err = s.callAppend(ctx, s.pool, calls[i])
		}
		return
	}
	if !errors.As(err, &refused) {
		for i, c := range calls {
			if c != nil {
				items[i].Stored, items[i].Err = nil, s.appendError(c.id, c.opts, err)
			}
		}
		return
	}
	for i, c := range calls {
		if c == nil {
			continue
		}
		items[i].Stored, items[i].Err = s.sendOne(ctx, c)
	}
}

// sendBatch sends b (calls' appends, in order) and reads each call's rows into its item's
// Stored. Only a nil error means the transaction committed: the rows of every call are read
// before the commit is known, when the batch's results are closed. left lists the items whose
// one-event statement wrote nothing and left them to logbook_append.
func (s *Store) sendBatch(ctx context.Context, b *pgx.Batch, calls []*appendCall, items []Batched) (left []int, failed error) {
	br := s.pool.SendBatch(ctx, b)
	for i, c := range calls {
		if c == nil {
			continue
		}
		rows, err := br.Query()
		if err == nil {
			items[i].Stored, err = c.readRows(rows)
		}
		if c.statement && errors.Is(err, errNoRow) {
			left, err = append(left, i), nil
		}
		if err != nil {
			failed = err
			break
		}
	}
	if err := br.Close(); failed == nil {
		failed = err
	}
	return left, failed
}
