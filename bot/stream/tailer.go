// Package stream follows the log out of logbook (issue 51): one Tailer runs, for each sink (a
// webhook, the audit stream), a loop that reads the log in commit order from the sink's
// durable cursor and hands the events to the sink.
//
// Gap-safe: the loop reads with session.Store.ReadAll, in (transaction id, position) order and
// only below the oldest running transaction (pg_snapshot_xmin). A position is taken at INSERT,
// not at COMMIT, so a transaction that commits late may hold a lower position than events
// already read; it also holds a transaction id that was running when those were read, so its
// events were not readable then and are read, in full, once it ends. Nothing committed is ever
// behind the cursor.
//
// One replica per sink: the loop holds the sink's lease (session.Store.ClaimStream, a row of
// stream_cursors with an owner and an expiry), renews it as it goes, and moves the cursor only
// as the lease's owner (AdvanceStream). A replica killed with -9 leaves its lease to expire;
// another then claims it and resumes from the cursor. A replica that loses its lease (stalled
// past the expiry) finds out at its next advance and stops delivering.
//
// At least once: the cursor moves after the sink took the events, so a replica that dies in
// between delivers them again from the next owner. Each event's stable id is its session id
// and seq (ID), which the receiver uses to drop repeats.
package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/session"
)

// ID is the stable id of an event across deliveries: "<session id>.<seq>".
func ID(e session.Event) string { return fmt.Sprintf("%s.%d", e.SessionID, e.Seq) }

// Sink takes events in the log's commit order.
type Sink interface {
	// Name names the sink's cursor and lease (stream_cursors.sink): stable across restarts.
	Name() string
	// Deliver takes evs, in order, and returns how many of them it took (a prefix); an error
	// says why it stopped before the end. The tailer moves the cursor past what was taken and
	// offers the rest again after a backoff. Deliver must return when ctx ends.
	Deliver(ctx context.Context, evs []session.Event) (int, error)
}

// Store is the log and the sinks' cursors (*session.Store).
type Store interface {
	ReadAll(ctx context.Context, after session.Cursor, limit int) ([]session.Event, session.Cursor, error)
	ClaimStream(ctx context.Context, sink, owner string, ttl time.Duration) (session.StreamLease, bool, error)
	AdvanceStream(ctx context.Context, sink, owner string, c session.Cursor, ttl time.Duration) (time.Time, error)
	ReleaseStream(ctx context.Context, sink, owner string) error
}

// Options configure a Tailer. Zero values take defaults.
type Options struct {
	Owner string        // this replica's name, the lease's owner (required)
	Lease time.Duration // how long a lease lasts unrenewed (default 15s); renewed every third of it
	Poll  time.Duration // how often an idle sink looks for new events (default 500ms)
	// BusyPoll is the wait after a read that found events (default 50ms, at most Poll): each
	// empty read after it doubles the wait up to Poll. A sink that is being fed keeps up within
	// BusyPoll (the lag behind appends); an idle one still reads once per Poll.
	BusyPoll time.Duration
	Batch    int // events read at once (default 500)
	// Backoff is the first wait after a failed delivery or read, doubled each time up to
	// MaxBackoff (defaults 1s and 1m).
	Backoff, MaxBackoff time.Duration
	// After waits (default time.After); tests inject a clock.
	After func(time.Duration) <-chan time.Time
	Log   zerolog.Logger
	// Delivered, when set, is called after each advance of a sink's cursor with the events it
	// took (benchmarks and tests measure lag with it).
	Delivered func(sink string, evs []session.Event)
}

// Tailer runs each sink's loop.
type Tailer struct {
	store Store
	sinks []Sink
	o     Options
}

// New returns a tailer of sinks over store.
func New(store Store, sinks []Sink, o Options) *Tailer {
	o.Lease = cmp.Or(o.Lease, 15*time.Second)
	o.Poll = cmp.Or(o.Poll, 500*time.Millisecond)
	o.BusyPoll = min(cmp.Or(o.BusyPoll, 50*time.Millisecond), o.Poll)
	o.Batch = cmp.Or(o.Batch, 500)
	o.Backoff = cmp.Or(o.Backoff, time.Second)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, time.Minute)
	if o.After == nil {
		o.After = time.After
	}
	return &Tailer{store: store, sinks: sinks, o: o}
}

// Run follows the log for every sink until ctx ends, then releases its leases and returns nil.
// Failures (the database gone, a sink refusing) are logged and retried with backoff.
func (t *Tailer) Run(ctx context.Context) error {
	if t.o.Owner == "" {
		return errors.New("stream: the tailer needs an owner name")
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range t.sinks {
		g.Go(func() error { t.follow(gctx, s); return nil })
	}
	return g.Wait()
}

// follow is one sink's loop: hold the lease, read, deliver, advance.
func (t *Tailer) follow(ctx context.Context, s Sink) {
	log := t.o.Log.With().Str("sink", s.Name()).Logger()
	var (
		held    bool
		cursor  session.Cursor
		renewAt time.Time
		backoff time.Duration
		idle    = t.o.Poll // the wait after the next empty read
	)
	defer func() {
		if held {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := t.store.ReleaseStream(rctx, s.Name(), t.o.Owner); err != nil {
				log.Warn().Err(err).Msg("stream: could not release the lease")
			}
		}
	}()
	fail := func(err error, what string) {
		backoff = min(cmp.Or(backoff*2, t.o.Backoff), t.o.MaxBackoff)
		if ctx.Err() == nil {
			log.Warn().Err(err).Dur("retry_in", backoff).Msg("stream: " + what)
		}
		t.wait(ctx, backoff)
	}
	for ctx.Err() == nil {
		if !held || time.Now().After(renewAt) {
			l, ok, err := t.store.ClaimStream(ctx, s.Name(), t.o.Owner, t.o.Lease)
			if err != nil {
				fail(err, "could not claim the lease")
				continue
			}
			if !ok {
				if held {
					log.Info().Msg("stream: another replica took the lease over")
				}
				held = false
				t.wait(ctx, t.o.Lease/3)
				continue
			}
			if !held {
				log.Info().Uint64("tx_id", l.Cursor.TxID).Int64("position", l.Cursor.Position).Msg("stream: holding the lease; resuming from the cursor")
				cursor = l.Cursor
			}
			held, renewAt = true, time.Now().Add(t.o.Lease/3)
		}
		evs, next, err := t.store.ReadAll(ctx, cursor, t.o.Batch)
		if err != nil {
			fail(err, "could not read the log")
			continue
		}
		if len(evs) == 0 {
			backoff = 0
			t.wait(ctx, idle)
			idle = min(idle*2, t.o.Poll)
			continue
		}
		idle = t.o.BusyPoll
		n, derr := s.Deliver(ctx, evs)
		if n > 0 {
			at, err := cursorAt(evs, n, cursor, next)
			if err != nil {
				log.Error().Err(err).Msg("stream: cannot place the cursor")
				return
			}
			if _, err := t.store.AdvanceStream(ctx, s.Name(), t.o.Owner, at, t.o.Lease); err != nil {
				if errors.Is(err, session.ErrStreamLeaseLost) {
					log.Warn().Msg("stream: lost the lease; another replica delivers from its cursor")
					held = false
					continue
				}
				// The events were delivered; delivering them again is allowed (same ids).
				fail(err, "could not advance the cursor")
				held = false // claim again: the cursor in the database is the truth
				continue
			}
			cursor, renewAt = at, time.Now().Add(t.o.Lease/3)
			if t.o.Delivered != nil {
				t.o.Delivered(s.Name(), evs[:n])
			}
		}
		if derr != nil {
			fail(derr, "the sink did not take every event")
			continue
		}
		backoff = 0
	}
}

// cursorAt is the cursor after evs[n-1]: evs were read after from, next is the cursor after
// the last of them.
func cursorAt(evs []session.Event, n int, from, next session.Cursor) (session.Cursor, error) {
	if n <= 0 {
		return from, nil
	}
	if n >= len(evs) {
		return next, nil
	}
	if evs[n-1].TxID == 0 {
		return from, fmt.Errorf("event %s has no transaction id", ID(evs[n-1]))
	}
	return session.Cursor{TxID: evs[n-1].TxID, Position: evs[n-1].Position}, nil
}

func (t *Tailer) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-t.o.After(d):
	}
}
