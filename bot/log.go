package bot

import (
	"context"

	"github.com/logbook/logbook/session"
)

// fencedLog is one session's log bound to a lease epoch: every append carries the epoch, so
// the database refuses it once another replica has taken the session. It satisfies brain.Log.
type fencedLog struct {
	store *session.Store
	id    session.ID
	epoch int64
}

func (l fencedLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	return l.store.Events(ctx, l.id, r)
}

func (l fencedLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return l.store.AppendWith(ctx, l.id, session.AppendOptions{Epoch: l.epoch}, evs...)
}

// last returns the session's newest event of type t, or ok false.
func (l fencedLog) last(ctx context.Context, t session.Type) (session.Event, bool, error) {
	evs, err := l.store.Events(ctx, l.id, session.Range{Types: []session.Type{t}, Desc: true, Limit: 1})
	if err != nil || len(evs) == 0 {
		return session.Event{}, false, err
	}
	return evs[0], true, nil
}
