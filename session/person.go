package session

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PersonSession is a session a person posted in, with the time of their latest post there.
type PersonSession struct {
	Session
	LastPost time.Time
}

// sqlPersonSessions reads one person's posts by time (events_actor_time), newest sessions first.
const sqlPersonSessions = `SELECT s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at, max(e.created_at) AS last_post
FROM events e JOIN sessions s ON s.id = e.session_id
WHERE e.actor_kind = 'user' AND e.actor_id = $1 AND e.created_at >= $2 AND e.type = 'user_message'
GROUP BY s.id, s.team_id, s.channel_id, s.thread_ts, s.created_at
ORDER BY last_post DESC, s.id
LIMIT $3`

// PersonSessions returns the sessions person (a Slack user id) posted in since since, the one
// they posted in last first, at most limit of them. Only that person's own posts are read: it
// is what App Home shows them, and nobody else.
func (s *Store) PersonSessions(ctx context.Context, person string, since time.Time, limit int) ([]PersonSession, error) {
	if person == "" {
		return nil, fmt.Errorf("sessions of a person: %w: no user id", ErrInvalidEvent)
	}
	rows, err := s.pool.Query(ctx, sqlPersonSessions, person, since, limit)
	if err != nil {
		return nil, fmt.Errorf("sessions of %s: %w", person, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PersonSession, error) {
		var p PersonSession
		err := r.Scan(&p.ID, &p.Key.Team, &p.Key.Channel, &p.Key.ThreadTS, &p.CreatedAt, &p.LastPost)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("sessions of %s: %w", person, err)
	}
	return out, nil
}
