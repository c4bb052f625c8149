package search

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session"
)

// Summary describes one session for lists: its thread, title and activity.
type Summary struct {
	SessionID   session.ID `json:"session_id"`
	Team        string     `json:"team"`
	Channel     string     `json:"channel"`
	ThreadTS    string     `json:"thread_ts"`
	Title       string     `json:"title,omitempty"`      // from the latest title event
	FirstText   string     `json:"first_text,omitempty"` // start of the first (not deleted) user message
	StartedAt   time.Time  `json:"started_at"`
	LastEventAt time.Time  `json:"last_event_at"`
	Messages    int        `json:"messages"` // user and assistant messages
	Permalink   string     `json:"permalink,omitempty"`
}

// Heading is the title, else the first message, else the thread.
func (s Summary) Heading() string {
	switch {
	case s.Title != "":
		return s.Title
	case s.FirstText != "":
		return s.FirstText
	}
	return "Thread " + s.ThreadTS + " in #" + s.Channel
}

const summaryColumns = `session_id, team_id, channel_id, thread_ts, title, first_text, started_at,
last_event_at, messages`

func (s *Searcher) scanSummary(row pgx.Row) (Summary, error) {
	var m Summary
	err := row.Scan(&m.SessionID, &m.Team, &m.Channel, &m.ThreadTS, &m.Title, &m.FirstText,
		&m.StartedAt, &m.LastEventAt, &m.Messages)
	m.Permalink = s.Permalink(m.Channel, m.ThreadTS, "")
	return m, err
}

const sqlRecent = `SELECT ` + summaryColumns + ` FROM search_sessions
WHERE last_event_at < $1 ORDER BY last_event_at DESC LIMIT $2`

// Recent returns up to limit sessions (1..MaxLimit) with activity before `before` (zero:
// now and later), most recently active first.
func (s *Searcher) Recent(ctx context.Context, before time.Time, limit int) ([]Summary, error) {
	if s.standby != nil {
		return routed(ctx, s, func(x *Searcher) ([]Summary, error) { return x.Recent(ctx, before, limit) })
	}
	if limit <= 0 || limit > MaxLimit {
		limit = DefaultLimit
	}
	if before.IsZero() {
		before = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	rows, err := s.pool.Query(ctx, sqlRecent, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list recent sessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Summary, error) { return s.scanSummary(row) })
	if err != nil {
		return nil, fmt.Errorf("list recent sessions: %w", err)
	}
	return out, nil
}

// Summary returns the summary of one session, or session.ErrNotFound when the indexer has
// not seen it.
func (s *Searcher) Summary(ctx context.Context, id session.ID) (Summary, error) {
	if s.standby != nil {
		return routed(ctx, s, func(x *Searcher) (Summary, error) { return x.Summary(ctx, id) })
	}
	m, err := s.scanSummary(s.pool.QueryRow(ctx, `SELECT `+summaryColumns+` FROM search_sessions WHERE session_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Summary{}, fmt.Errorf("session %s: %w", id, session.ErrNotFound)
	}
	if err != nil {
		return Summary{}, fmt.Errorf("session %s: %w", id, err)
	}
	return m, nil
}

const sqlByThread = `
SELECT id FROM sessions WHERE channel_id = $1 AND thread_ts = $2
UNION
SELECT session_id FROM search_docs WHERE channel_id = $1 AND ts = $2 AND ts <> ''
LIMIT 2`

// SessionByThread finds the session of a thread from its channel and ts, without the team
// (which a permalink does not carry). ts may be the parent's ts or a reply's. Errors:
// session.ErrNotFound; an error saying so when two workspaces have such a thread.
func (s *Searcher) SessionByThread(ctx context.Context, channel, ts string) (session.ID, error) {
	if s.standby != nil {
		return routed(ctx, s, func(x *Searcher) (session.ID, error) { return x.SessionByThread(ctx, channel, ts) })
	}
	rows, err := s.pool.Query(ctx, sqlByThread, channel, ts)
	if err != nil {
		return session.ID{}, fmt.Errorf("session of thread %s/%s: %w", channel, ts, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[session.ID])
	if err != nil {
		return session.ID{}, fmt.Errorf("session of thread %s/%s: %w", channel, ts, err)
	}
	switch len(ids) {
	case 0:
		return session.ID{}, fmt.Errorf("session of thread %s/%s: %w", channel, ts, session.ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return session.ID{}, fmt.Errorf("session of thread %s/%s: several sessions match; use the session id", channel, ts)
}
