package session

import (
	"context"
	"fmt"
	"time"
)

// sqlGrantEvents reads the grants made in a channel's sessions since a time, and their
// revocations, in the order they were written. Grants live minutes (bot.GrantTTL), so the
// window keeps the read on events_time.
const sqlGrantEvents = `SELECT ` + eventColumns + ` FROM events
WHERE created_at >= $2 AND type = ANY($3)
  AND session_id IN (SELECT id FROM sessions WHERE channel_id = $1)
ORDER BY position`

// GrantEvents returns the approval_grant and approval_grant_revoked events of the channel's
// sessions written at or after since, oldest first (for /logbook grants: which grants are
// live, and which session holds the one to revoke).
func (s *Store) GrantEvents(ctx context.Context, channel string, since time.Time) ([]Event, error) {
	evs, err := s.queryEvents(ctx, sqlGrantEvents, []any{channel, since,
		[]string{string(TypeApprovalGrant), string(TypeApprovalGrantRevoked)}})
	if err != nil {
		return nil, fmt.Errorf("grants of channel %s: %w", channel, err)
	}
	return evs, nil
}
