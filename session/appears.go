package session

import (
	"context"
	"fmt"
)

// actorKinds are every actor kind, so a lookup by actor id alone can use the
// (actor_kind, actor_id, created_at) index.
var actorKinds = []string{string(ActorUser), string(ActorBot), string(ActorSystem), string(ActorSandbox), string(ActorGitHub)}

const sqlActorAppears = `
SELECT EXISTS (SELECT 1 FROM events WHERE actor_kind = ANY($1::text[]) AND actor_id = $2)`

// ActorAppears reports whether id is the actor id of some event in the log, of any kind (a
// Slack user id, the bot's user id, a system part's name).
func (s *Store) ActorAppears(ctx context.Context, id string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, sqlActorAppears, actorKinds, id).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up actor %q: %w", id, err)
	}
	return ok, nil
}

const sqlChannelAppears = `SELECT EXISTS (SELECT 1 FROM sessions WHERE channel_id = $1)`

// ChannelAppears reports whether some session of the log is in the Slack channel id.
func (s *Store) ChannelAppears(ctx context.Context, channel string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, sqlChannelAppears, channel).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up channel %q: %w", channel, err)
	}
	return ok, nil
}
