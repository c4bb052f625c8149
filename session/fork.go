package session

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Forks (issue 50). A fork is a session of its own — its own thread, its own chain from the
// genesis hash — whose first event is a session_forked naming the parent, the seq it was taken
// at and the hash of the parent's event there. It copies nothing of the parent: whoever needs
// the conversation it continues (the brain, the sandbox's saved work) reads the parent's log
// through that seq (Lineage). The hash makes the reference verifiable against the parent's
// chain, also once retention purged the parent's payloads (the hashes stay).

// maxLineage bounds how many ancestors Lineage follows: a fork of a fork of ... A reference
// always names an event that existed before the fork, so a cycle cannot be built; the bound
// keeps a corrupted log from looping.
const maxLineage = 64

// ForkPoint is one ancestor of a fork: the session and the seq through which its
// conversation is the fork's.
type ForkPoint struct {
	Session ID
	Through int64
}

// ForkReference returns the session_forked payload for a fork of parent at seq: the parent's
// thread and the hash of its event at seq. Errors: ErrNotFound (no such session or event),
// ErrInvalidEvent (seq < 1, or the parent is a channel's ledger).
func (s *Store) ForkReference(ctx context.Context, parent ID, seq int64) (SessionForked, error) {
	if seq < 1 {
		return SessionForked{}, fmt.Errorf("fork session %s at %d: %w: seq must be 1 or more", parent, seq, ErrInvalidEvent)
	}
	sess, err := s.Session(ctx, parent)
	if err != nil {
		return SessionForked{}, fmt.Errorf("fork: %w", err)
	}
	if sess.Key.ThreadTS == LedgerThread {
		return SessionForked{}, fmt.Errorf("fork session %s: %w: a channel's ledger is no thread", parent, ErrInvalidEvent)
	}
	hash, err := s.HashAt(ctx, parent, seq)
	if err != nil {
		return SessionForked{}, fmt.Errorf("fork: %w", err)
	}
	return SessionForked{Parent: parent, Seq: seq, Hash: hex.EncodeToString(hash),
		ParentChannel: sess.Key.Channel, ParentThreadTS: sess.Key.ThreadTS}, nil
}

// Forked returns the session_forked event that opens session id, and false when the session
// is no fork (its first event is something else, or it has none).
func (s *Store) Forked(ctx context.Context, id ID) (SessionForked, bool, error) {
	evs, err := s.Events(ctx, id, Range{From: 1, To: 1})
	if err != nil {
		return SessionForked{}, false, err
	}
	return ForkedBy(evs)
}

// ForkedBy reads the fork reference from a session's events (oldest first, from seq 1): false
// when the first is no session_forked.
func ForkedBy(evs []Event) (SessionForked, bool, error) {
	if len(evs) == 0 || evs[0].Seq != 1 || evs[0].Type != TypeSessionForked {
		return SessionForked{}, false, nil
	}
	var f SessionForked
	if err := evs[0].Decode(&f); err != nil {
		return SessionForked{}, false, err
	}
	return f, true, nil
}

// EventReader reads a session's events in a range (a Store, a cell's fenced log, an export).
type EventReader interface {
	Events(ctx context.Context, id ID, r Range) ([]Event, error)
}

// Prefix is, for a fork whose events (from seq 1) are evs, the conversation it continues: each
// ancestor's events through the seq it was branched at, oldest ancestor first, read through r.
// nil for a session that is no fork. The cell builds a fork's model history from it, and
// replay serves the same to the agent it runs again: one reading for both.
func Prefix(ctx context.Context, r EventReader, evs []Event) ([][]Event, error) {
	var segs [][]Event
	first := evs[:min(1, len(evs))]
	for n := 0; ; n++ {
		f, ok, err := ForkedBy(first)
		if err != nil {
			return nil, fmt.Errorf("read a fork reference: %w", err)
		}
		if !ok {
			break
		}
		if n == maxLineage {
			return nil, fmt.Errorf("read a fork's lineage: %w: more than %d ancestors", ErrInvalidEvent, maxLineage)
		}
		pevs, err := r.Events(ctx, f.Parent, Range{From: 1, To: f.Seq})
		if err != nil {
			return nil, fmt.Errorf("read the parent %s of a fork: %w", f.Parent, err)
		}
		segs = append(segs, pevs)
		first = pevs[:min(1, len(pevs))]
	}
	slices.Reverse(segs)
	return segs, nil
}

// Lineage returns the ancestors of session id, oldest first: for a fork of a fork, the
// grandparent through the seq the parent was taken at, then the parent through the seq id
// was taken at. A session that is no fork has none.
func (s *Store) Lineage(ctx context.Context, id ID) ([]ForkPoint, error) {
	var out []ForkPoint
	for cur := id; ; {
		f, ok, err := s.Forked(ctx, cur)
		if err != nil {
			return nil, fmt.Errorf("lineage of session %s: %w", id, err)
		}
		if !ok {
			break
		}
		if len(out) == maxLineage {
			return nil, fmt.Errorf("lineage of session %s: %w: more than %d ancestors", id, ErrInvalidEvent, maxLineage)
		}
		out = append(out, ForkPoint{Session: f.Parent, Through: f.Seq})
		cur = f.Parent
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Fork is a session branched from another.
type Fork struct {
	Session   ID
	Channel   string
	ThreadTS  string
	Seq       int64 // the parent's seq it was taken at
	CreatedAt time.Time
}

// The index events_session_forked (migrations/00250) serves this.
const sqlForks = `
SELECT e.session_id, s.channel_id, s.thread_ts, (e.payload->>'seq')::bigint, e.created_at
FROM events e JOIN sessions s ON s.id = e.session_id
WHERE e.type = 'session_forked' AND e.seq = 1 AND e.payload->>'parent' = $1::text
ORDER BY e.created_at, e.session_id`

// Forks returns the sessions branched from parent (not their forks), oldest first.
func (s *Store) Forks(ctx context.Context, parent ID) ([]Fork, error) {
	rows, err := s.pool.Query(ctx, sqlForks, parent.String())
	if err != nil {
		return nil, fmt.Errorf("forks of session %s: %w", parent, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fork, error) {
		var f Fork
		err := r.Scan(&f.Session, &f.Channel, &f.ThreadTS, &f.Seq, &f.CreatedAt)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("forks of session %s: %w", parent, err)
	}
	return out, nil
}

// ForkCheck is the outcome of checking a fork's reference against its parent's chain.
type ForkCheck struct {
	Fork   ID
	Parent ID
	Seq    int64
	OK     bool
	Reason string // why not, when !OK
}

// VerifyFork checks the reference of a fork (f, read from its first event): the parent's
// chain verifies through f.Seq and its event at f.Seq has the hash the fork recorded. A
// parent whose payloads retention purged still verifies (its hashes stay). err is only for
// failures to read.
func (s *Store) VerifyFork(ctx context.Context, fork ID, f SessionForked) (ForkCheck, error) {
	c := ForkCheck{Fork: fork, Parent: f.Parent, Seq: f.Seq}
	want, err := hex.DecodeString(f.Hash)
	if err != nil || len(want) != 32 {
		c.Reason = fmt.Sprintf("the fork's reference holds no valid hash (%q)", f.Hash)
		return c, nil
	}
	pv, err := s.Verify(ctx, f.Parent)
	if err != nil {
		return c, err
	}
	switch {
	case pv.Events == 0:
		c.Reason = fmt.Sprintf("the parent session %s has no events", f.Parent)
	case !pv.OK && pv.BrokenSeq <= f.Seq:
		c.Reason = fmt.Sprintf("the parent's chain breaks at seq %d, at or before the fork's seq %d: %s", pv.BrokenSeq, f.Seq, pv.Reason)
	default:
		got, err := s.HashAt(ctx, f.Parent, f.Seq)
		if errors.Is(err, ErrNotFound) {
			c.Reason = fmt.Sprintf("the parent has no event %d", f.Seq)
			return c, nil
		}
		if err != nil {
			return c, err
		}
		if !bytes.Equal(got, want) {
			c.Reason = fmt.Sprintf("the parent's event %d has hash %x, the fork recorded %s", f.Seq, got, f.Hash)
			return c, nil
		}
		c.OK = true
	}
	return c, nil
}
