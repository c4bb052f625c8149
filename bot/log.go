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
