package bot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/logbook/logbook/session"
)

// logStore is what a cell needs of session.Store.
type logStore interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	AcquireLeaseWith(ctx context.Context, id session.ID, owner string, ttl time.Duration, o session.LeaseOptions) (session.Lease, error)
	ReleaseLease(ctx context.Context, l session.Lease) error
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	AppendWith(ctx context.Context, id session.ID, opts session.AppendOptions, evs ...session.NewEvent) ([]session.Event, error)
	Notify(ctx context.Context, id session.ID, sender string) error
}

// cellLog is one session's log as its cell sees it. Every append carries the lease epoch, so
// the database refuses it once another replica has taken the session. What the cell has read
// or appended is kept in memory as a contiguous prefix of the log (seqs are dense, so the
// event of seq n is known[n-1]): a turn reads the log from the database once, and afterwards
// only what others appended since (sync). It satisfies brain.Log; Events answers from memory,
// as of the last sync or append — a gap left by someone else's append (seen when one of ours
// comes back with a seq past the known prefix) is read first.
//
// A cellLog belongs to one cell, but the cell's agent and sandbox call it from their own
// goroutines while the cell waits, so it is locked.
type cellLog struct {
	store logStore
	id    session.ID
	epoch int64

	mu    sync.Mutex
	known []session.Event // seq 1..len(known)
	ahead []session.Event // our own appends past a gap, by seq
	reads int             // round trips that read the log, for tests and metrics
	// lineage is a fork's prefix (prefix), read once when lineageRead.
	lineage     [][]session.Event
	lineageRead bool

	// fenced, when set, is called when an append is refused as fenced: the lease is lost
	// whichever part of the cell appended, and the cell stops at once (see Cell.run).
	fenced func()
}

func newCellLog(store logStore, id session.ID, epoch int64) *cellLog {
	return &cellLog{store: store, id: id, epoch: epoch}
}

// sync reads what was appended after the known prefix: the whole log the first time, then
// only the tail. One round trip.
func (l *cellLog) sync(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncLocked(ctx)
}

func (l *cellLog) syncLocked(ctx context.Context) error {
	evs, err := l.store.Events(ctx, l.id, session.Range{From: int64(len(l.known)) + 1})
	if err != nil {
		return err
	}
	l.reads++
	l.add(evs)
	return nil
}

// prime takes the log as read with the lease (session.Store.LeaseSession), in place of the
// cell's first sync.
func (l *cellLog) prime(evs []session.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(evs)
	l.reads++
}

// syncUnless is sync, skipped when skip is set and no gap waits to be read.
func (l *cellLog) syncUnless(ctx context.Context, skip bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if skip && len(l.ahead) == 0 {
		return nil
	}
	return l.syncLocked(ctx)
}

// add puts stored events into the prefix, or beyond it when they leave a gap.
func (l *cellLog) add(evs []session.Event) {
	for _, e := range evs {
		switch n := int64(len(l.known)); {
		case e.Seq <= n:
			// Already known (an idempotent append that found its earlier event).
		case e.Seq == n+1:
			l.known = append(l.known, e)
		default:
			if i, found := slices.BinarySearchFunc(l.ahead, e.Seq, func(a session.Event, s int64) int { return int(a.Seq - s) }); !found {
				l.ahead = slices.Insert(l.ahead, i, e)
			}
		}
	}
	for len(l.ahead) > 0 && l.ahead[0].Seq <= int64(len(l.known))+1 {
		if l.ahead[0].Seq == int64(len(l.known))+1 {
			l.known = append(l.known, l.ahead[0])
		}
		l.ahead = l.ahead[1:]
	}
}

// head is the seq of the last known event.
func (l *cellLog) head() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.known))
}

// snapshot returns the known events. The slice is shared: callers must not modify it.
// Snapshot is snapshot, for the turn's parts (part.Log).
func (l *cellLog) Snapshot() []session.Event { return l.snapshot() }

func (l *cellLog) snapshot() []session.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.known[:len(l.known):len(l.known)]
}

// Events returns the known events selected by r, filling a gap first.
func (l *cellLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ahead) > 0 {
		if err := l.syncLocked(ctx); err != nil {
			return nil, err
		}
	}
	return session.Select(l.known, r), nil
}

// Append appends evs with the cell's epoch and keeps what was stored.
func (l *cellLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return l.appendWith(ctx, session.AppendOptions{Epoch: l.epoch}, evs...)
}

// AppendAt is Append only while the session's head is still head (the seq of the last event
// the caller read): otherwise nothing is written and the error matches session.ErrConflict.
func (l *cellLog) AppendAt(ctx context.Context, head int64, evs ...session.NewEvent) ([]session.Event, error) {
	return l.appendWith(ctx, session.AppendOptions{Epoch: l.epoch, CheckSeq: true, ExpectedSeq: head}, evs...)
}

func (l *cellLog) appendWith(ctx context.Context, o session.AppendOptions, evs ...session.NewEvent) ([]session.Event, error) {
	stored, err := l.store.AppendWith(ctx, l.id, o, evs...)
	if err != nil {
		if errors.Is(err, session.ErrFenced) && l.fenced != nil {
			l.fenced()
		}
		return nil, err
	}
	l.mu.Lock()
	l.add(stored)
	l.mu.Unlock()
	return stored, nil
}

// prefix is, for a fork (its first event a session_forked), the conversation it continues:
// each ancestor's events through the seq it was branched at, oldest ancestor first (what
// session.Store.Lineage names, read through the cell's store). nil for a session that is no
// fork. Read once a cell: an ancestor's events up to a fork's seq never change (retention may
// purge their payloads; the next cell reads that).
func (l *cellLog) prefix(ctx context.Context) ([][]session.Event, error) {
	l.mu.Lock()
	if l.lineageRead {
		defer l.mu.Unlock()
		return l.lineage, nil
	}
	if len(l.known) == 0 {
		if err := l.syncLocked(ctx); err != nil {
			l.mu.Unlock()
			return nil, err
		}
	}
	first := l.known[:min(1, len(l.known))]
	l.mu.Unlock()
	segs, err := session.Prefix(ctx, l.store, first)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", l.id, err)
	}
	l.mu.Lock()
	l.lineage, l.lineageRead = segs, true
	l.mu.Unlock()
	return segs, nil
}

// Prefix is prefix, for the hands (hands.Lineage): a fork's sandbox starts from its parent's
// saved work.
func (l *cellLog) Prefix(ctx context.Context) ([][]session.Event, error) { return l.prefix(ctx) }
