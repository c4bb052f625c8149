package bot

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// A cell writes to Slack only while its lease holds. The database fences the log (an append
// with a lost lease's epoch fails with session.ErrFenced), but nothing fences Slack: a cell
// that lost its lease while alive (a renewal that failed under load, a liveness claim taken
// over) could go on posting beside the new owner's reply. So every Slack call a turn makes
// through the Deliverer first asks the cell's leaseFence, and a message made in Slack is
// followed by its record: a record refused as fenced makes the cell remove that message (the
// new owner never takes over a message the log does not name: it removes it too).

// errLeaseEnding says the cell's lease may have ended by the cell's own clock (or the cell
// was cancelled): it makes no more Slack calls.
var errLeaseEnding = errors.New("the cell's lease may have ended: no more Slack writes")

// leaseFence is the cell's lease deadline on its own clock, moved on by each renewal, and the
// lease's epoch: every message the cell makes in Slack carries it in its metadata (stamp), so
// a later cell tells an older owner's message from its own and never takes a newer owner's.
type leaseFence struct {
	clock  Clock
	margin time.Duration // writes stop this long before the deadline (the renewal's own margin)
	epoch  int64
	until  atomic.Int64 // unix nanoseconds
	// claimUntil, when set, is until when the runner trusts the liveness claim the lease was
	// taken with (a heartbeat claim; the zero time: no such bound): a process paused past it
	// writes nothing more, though the renewal that would tell it has not run yet.
	claimUntil func() time.Time
}

func newLeaseFence(clock Clock, until time.Time, margin time.Duration, epoch int64) *leaseFence {
	f := &leaseFence{clock: clock, margin: margin, epoch: epoch}
	f.until.Store(until.UnixNano())
	return f
}

// extend moves the deadline to until (a renewal landed).
func (f *leaseFence) extend(until time.Time) {
	// A closed fence stays closed: a renewal answered after an append was refused as fenced
	// (sent before the lease moved) must not reopen it.
	for {
		cur := f.until.Load()
		if cur == 0 || f.until.CompareAndSwap(cur, until.UnixNano()) {
			return
		}
	}
}

// close ends the fence at once: an append was refused as fenced, so another cell owns the
// session whatever the cell's clock says.
func (f *leaseFence) close() { f.until.Store(0) }

// closed reports whether close was called.
func (f *leaseFence) closed() bool { return f != nil && f.until.Load() == 0 }

// check reports errLeaseEnding once ctx ended or the lease's deadline, less the margin, has
// passed on the cell's clock. A nil fence (no cell: a test, a tool) always passes.
func (f *leaseFence) check(ctx context.Context) error {
	if f == nil {
		return nil
	}
	if ctx.Err() != nil {
		return errLeaseEnding
	}
	now := f.clock.Now()
	if !now.Before(time.Unix(0, f.until.Load()).Add(-f.margin)) {
		return errLeaseEnding
	}
	if f.claimUntil != nil {
		if u := f.claimUntil(); !u.IsZero() && !now.Before(u) {
			return errLeaseEnding
		}
	}
	return nil
}

type fenceKey struct{}

// withFence makes f the fence of every Slack call made with ctx.
func withFence(ctx context.Context, f *leaseFence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// unfenced is ctx for removing what a fenced cell left in Slack: the removal must not wait
// for a lease the cell no longer has. Its own timeout bounds it.
func unfenced(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithValue(context.WithoutCancel(ctx), fenceKey{}, (*leaseFence)(nil)), 10*time.Second)
}

func fenceOf(ctx context.Context) *leaseFence {
	f, _ := ctx.Value(fenceKey{}).(*leaseFence)
	return f
}

// epochOf is the lease epoch of the Slack calls made with ctx: 0 when unknown (no cell).
func epochOf(ctx context.Context) int64 {
	if f := fenceOf(ctx); f != nil {
		return f.epoch
	}
	return 0
}

// orphanSearch is the search, after the message a turn began with, for the bot's messages of
// that turn that the log does not name: a cell that died, or lost its lease, between Slack's
// answer and its record; a call whose answer was lost. A message the log does not name is
// never taken over by another cell — only removed — so the cell that made it may remove it
// too (a fenced record) and the thread still shows one reply.
type orphanSearch struct {
	d       *Deliverer
	clock   Clock
	flog    *cellLog
	channel string
	thread  string
	turnSeq int64
	botUser string
}

// searchTries and searchBackoff bound how long a failing search is retried (on the clock)
// before the turn is left for a later attempt: a search that failed must not lead to a post.
const (
	searchTries   = 4
	searchBackoff = 250 * time.Millisecond
)

// find returns the orphans (known: more messages of this cell the log may not name yet),
// oldest first, each with the lease epoch its metadata names; a newer owner's are never among
// them (unknownBotMessages). searched is false when the thread cannot be searched at all (the bot's user is unknown,
// Slack refuses the search for good): then nothing was looked for. A search that keeps failing is an error.
func (s orphanSearch) find(ctx context.Context, known ...string) (orphans []botMessage, searched bool, err error) {
	if s.botUser == "" {
		return nil, false, nil
	}
	// Read the log first: a message the new owner recorded since must look named here, or
	// this cell would take it for an orphan.
	if err := s.flog.sync(ctx); err != nil {
		return nil, true, fmt.Errorf("read the log before looking for the turn's messages: %w", err)
	}
	evs := s.flog.snapshot()
	names := knownMessages(thread.FoldTurns(evs), evs)
	for _, ts := range known {
		names[ts] = true
	}
	after := startedAfter(evs, s.turnSeq, s.thread)
	for try := 0; ; try++ {
		orphans, err = s.d.unknownBotMessages(ctx, s.channel, s.thread, after, s.botUser, names, s.flog.epoch)
		if err == nil {
			return orphans, true, nil
		}
		if errors.Is(err, errUnavailable) || permanent(err) {
			// The thread can never be searched (no scope, say): as with no bot user, nothing
			// is looked for — waiting would lose the reply for good.
			return nil, false, nil
		}
		if try+1 >= searchTries || ctx.Err() != nil || errors.Is(err, errLeaseEnding) {
			return nil, true, fmt.Errorf("look for the turn's messages the log does not name (%d tries): %w", try+1, err)
		}
		select {
		case <-ctx.Done():
			return nil, true, ctx.Err()
		case <-s.clock.After(searchBackoff << try):
		}
	}
}

// recordTries bounds appendSure.
const recordTries = 3

// appendSure appends evs, which must all carry idempotency keys, and tries again while the
// answer is neither success nor a refusal: the record of a message already in Slack is worth
// a few tries, since without it the cell cannot tell whether the lease still held.
func appendSure(ctx context.Context, flog *cellLog, clock Clock, evs ...session.NewEvent) error {
	for try := 0; ; try++ {
		_, err := flog.Append(ctx, evs...)
		if err == nil || errors.Is(err, session.ErrFenced) || try+1 >= recordTries || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-clock.After(searchBackoff << try):
		}
	}
}

// named reports whether the log, read again, names message ts: a stream_started (an earlier
// try of a record that was answered as fenced, or the new owner's record of a message it
// found) or a delivery of it. Then it is the log's to finish, not the fenced cell's to remove.
// It fails closed: when the log cannot be read (a few tries), the message is kept, with the
// error — a message left twice in a thread is better than a reply removed that the log names.
func named(ctx context.Context, flog *cellLog, clock Clock, ts string) (bool, error) {
	for try := 0; ; try++ {
		err := flog.sync(ctx)
		if err == nil {
			break
		}
		if try+1 >= recordTries || ctx.Err() != nil {
			return true, fmt.Errorf("read the log before removing message %s: %w", ts, err)
		}
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("read the log before removing message %s: %w", ctx.Err(), err)
		case <-clock.After(searchBackoff << try):
		}
	}
	evs := flog.snapshot()
	if knownMessages(thread.FoldTurns(evs), evs)[ts] {
		return true, nil
	}
	_, ok := session.FirstRecord(evs, session.Range{Types: []session.Type{session.TypeStreamStarted}},
		func(p session.StreamStarted) bool { return p.TS == ts })
	return ok, nil
}
