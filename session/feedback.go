package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FeedbackRow is the feedback on the replies of one channel written by one model: each
// person's latest click on each reply, counted by rating. Model "" is logbook's own text.
type FeedbackRow struct {
	Channel, Model     string
	Positive, Negative int64
}

// sqlFeedback counts each person's latest click on each reply (events_feedback, 00320).
const sqlFeedback = `WITH latest AS (
  SELECT DISTINCT ON (e.payload->>'reply', e.actor_id) s.channel_id,
    coalesce(e.payload->>'model', '') AS model, e.payload->>'rating' AS rating
  FROM events e JOIN sessions s ON s.id = e.session_id
  WHERE e.type = 'feedback' AND e.created_at >= $1 AND e.created_at < $2
    AND ($3 = '' OR s.channel_id = $3) AND e.payload IS NOT NULL
  ORDER BY e.payload->>'reply', e.actor_id, e.position DESC)
SELECT channel_id, model,
  count(*) FILTER (WHERE rating = 'positive')::bigint,
  count(*) FILTER (WHERE rating = 'negative')::bigint
FROM latest GROUP BY channel_id, model ORDER BY channel_id, model`

// Feedback returns the feedback given in [from, to) (UTC days; channel "": every channel) per
// channel and model, ordered by channel and model: of the clicks a person made on one reply,
// the latest in the range is the one counted.
func (s *Store) Feedback(ctx context.Context, from, to time.Time, channel string) ([]FeedbackRow, error) {
	rows, err := s.pool.Query(ctx, sqlFeedback, UTCDay(from), UTCDay(to), channel)
	if err != nil {
		return nil, fmt.Errorf("read feedback: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FeedbackRow, error) {
		var f FeedbackRow
		err := r.Scan(&f.Channel, &f.Model, &f.Positive, &f.Negative)
		return f, err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read feedback: %w", err)
	}
	return out, nil
}
