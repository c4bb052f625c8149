package session

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Eval records (issue 50). A what-if (`logbook replay --from`, `logbook eval`) records what a
// turn did when run again under other settings as a session of its own, of kind replay
// (migrations/00330): in its original's channel, under a thread ts no Slack ts looks like
// (ReplayThreadPrefix and its id), chained from the genesis hash like any session. Its first
// event, replay_started, names the original, the seq of the user message the what-if ran
// from and the hash of the original's event there (as session_forked does for a fork), so
// `audit verify` checks the link against the original's chain. It never holds a
// user_message, so the runner never wakes it, and it is no thread: the thread listings
// leave it out and nothing of it reaches Slack.

// Session kinds (sessions.kind).
const (
	KindThread = "thread"
	KindReplay = "replay"
)

// ReplayThreadPrefix starts the thread ts of every replay session (sessions_replay_thread).
const ReplayThreadPrefix = "replay-"

// Replay reports whether k is a replay session's key (an eval record), not a Slack thread's.
func (k ThreadKey) Replay() bool { return strings.HasPrefix(k.ThreadTS, ReplayThreadPrefix) }

const sqlOpenReplay = `
WITH s AS (
    INSERT INTO sessions (id, team_id, channel_id, thread_ts, kind) VALUES ($1, $2, $3, $4, 'replay')
    RETURNING id, team_id, channel_id, thread_ts, created_at
), w AS (
    INSERT INTO session_work (session_id, pending) SELECT s.id, false FROM s
)
SELECT id, team_id, channel_id, thread_ts, created_at FROM s`

// OpenReplay creates a new replay session (an eval record) in the channel of original.
func (s *Store) OpenReplay(ctx context.Context, original Session) (Session, error) {
	if original.Key.Replay() {
		return Session{}, fmt.Errorf("open an eval record of %s: %w: it is an eval record itself", original.ID, ErrInvalidEvent)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Session{}, fmt.Errorf("open an eval record: new id: %w", err)
	}
	sess, err := scanSession(s.pool.QueryRow(ctx, sqlOpenReplay, id, original.Key.Team, original.Key.Channel, ReplayThreadPrefix+id.String()))
	if err != nil {
		return Session{}, fmt.Errorf("open an eval record of %s: %w", original.ID, err)
	}
	sess.Created = true
	return sess, nil
}

// ReplayReference returns the replay_started link for an eval record of original run from its
// event at seq: the original's thread and the hash of that event. Errors: ErrNotFound (no such
// event).
func (s *Store) ReplayReference(ctx context.Context, original Session, seq int64) (ReplayStarted, error) {
	hash, err := s.HashAt(ctx, original.ID, seq)
	if err != nil {
		return ReplayStarted{}, fmt.Errorf("eval record of %s at %d: %w", original.ID, seq, err)
	}
	return ReplayStarted{Original: original.ID, Seq: seq, Hash: hex.EncodeToString(hash),
		OriginalChannel: original.Key.Channel, OriginalThreadTS: original.Key.ThreadTS}, nil
}

// ReplayOf reads the link of an eval record from its events (oldest first, from seq 1): false
// when the first is no replay_started.
func ReplayOf(evs []Event) (ReplayStarted, bool, error) {
	if len(evs) == 0 || evs[0].Seq != 1 || evs[0].Type != TypeReplayStarted {
		return ReplayStarted{}, false, nil
	}
	var r ReplayStarted
	if err := evs[0].Decode(&r); err != nil {
		return ReplayStarted{}, false, err
	}
	return r, true, nil
}

// VerifyReplay checks an eval record's link as VerifyFork checks a fork's: the original's
// chain verifies through r.Seq and its event there has the recorded hash.
func (s *Store) VerifyReplay(ctx context.Context, id ID, r ReplayStarted) (ForkCheck, error) {
	return s.VerifyFork(ctx, id, SessionForked{Parent: r.Original, Seq: r.Seq, Hash: r.Hash})
}

const sqlChannelThreads = `
SELECT s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at FROM sessions s
WHERE s.channel_id = $1 AND s.kind = 'thread' AND s.thread_ts <> '` + LedgerThread + `'
  AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.created_at >= $2)
ORDER BY s.created_at DESC, s.id DESC
LIMIT $3`

// ChannelThreads returns the channel's threads' sessions (not its ledger, not eval records)
// with an event at or after since, newest session first, at most limit of them: what
// `logbook eval` runs the what-if over.
func (s *Store) ChannelThreads(ctx context.Context, channel string, since time.Time, limit int) ([]Session, error) {
	rows, err := s.pool.Query(ctx, sqlChannelThreads, channel, since, limit)
	if err != nil {
		return nil, fmt.Errorf("list the threads of %s: %w", channel, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Session, error) { return scanSession(row) })
	if err != nil {
		return nil, fmt.Errorf("list the threads of %s: %w", channel, err)
	}
	return out, nil
}
