package session

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// sqlChannelsWithSetting is each channel's newest change of a setting, when its value is one
// of those asked for (a reset one has no value).
const sqlChannelsWithSetting = `SELECT id, team, channel, name, old_value, value, set_by, set_at FROM (
    SELECT DISTINCT ON (team, channel) id, team, channel, name, old_value, value, set_by, set_at
      FROM channel_settings WHERE name = $1 ORDER BY team, channel, id DESC) c
WHERE value = ANY($2)`

// ChannelsWithSetting returns the channels whose setting name is now one of values (the
// newest change of each, by team and channel): the channels that opted in to something (a
// review of their repository's pull requests, bot/review).
func (s *Store) ChannelsWithSetting(ctx context.Context, name string, values []string) ([]ChannelSetting, error) {
	rows, err := s.pool.Query(ctx, sqlChannelsWithSetting, name, values)
	if err != nil {
		return nil, fmt.Errorf("read the channels with %s set: %w", name, err)
	}
	cs, err := pgx.CollectRows(rows, scanChannelSetting)
	if err != nil {
		return nil, fmt.Errorf("read the channels with %s set: %w", name, err)
	}
	return cs, nil
}
