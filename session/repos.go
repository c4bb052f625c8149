package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ChannelRepo is a channel's repository as an admin set it (/logbook repo): URL "" says the
// channel has none, whatever the configuration says.
type ChannelRepo struct {
	Team, Channel string
	URL, Branch   string
	SetBy         string
	SetAt         time.Time
}

const sqlSetChannelRepo = `INSERT INTO channel_repos (team, channel, url, branch, set_by) VALUES ($1, $2, $3, $4, $5)
RETURNING set_at`

// SetChannelRepo records r as its channel's repository (a new row; the old ones stay).
func (s *Store) SetChannelRepo(ctx context.Context, r ChannelRepo) (ChannelRepo, error) {
	if r.Team == "" || r.Channel == "" || r.SetBy == "" {
		return r, fmt.Errorf("set channel repository: %w: team, channel and who set it are required", ErrInvalidEvent)
	}
	if err := s.pool.QueryRow(ctx, sqlSetChannelRepo, r.Team, r.Channel, r.URL, r.Branch, r.SetBy).Scan(&r.SetAt); err != nil {
		return r, fmt.Errorf("set the repository of %s: %w", r.Channel, err)
	}
	return r, nil
}

const sqlChannelRepo = `SELECT team, url, branch, set_by, set_at FROM channel_repos WHERE channel = $1
ORDER BY id DESC LIMIT 1`

// ChannelRepo returns the channel's repository as last set, by whichever team's admin (a Slack
// Connect channel has one id in every organisation it joins); ErrNotFound when it never was.
func (s *Store) ChannelRepo(ctx context.Context, channel string) (ChannelRepo, error) {
	r := ChannelRepo{Channel: channel}
	err := s.pool.QueryRow(ctx, sqlChannelRepo, channel).Scan(&r.Team, &r.URL, &r.Branch, &r.SetBy, &r.SetAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r, fmt.Errorf("repository of %s: %w", channel, ErrNotFound)
	case err != nil:
		return r, fmt.Errorf("read the repository of %s: %w", channel, err)
	}
	return r, nil
}
