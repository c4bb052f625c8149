package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// Via is the path of the change (ViaSlash, ViaCLI, ViaWeb, ViaFile); "" is ViaSlash.
	Via string
}

const sqlSetChannelRepo = `INSERT INTO channel_repos (team, channel, url, branch, set_by) VALUES ($1, $2, $3, $4, $5)
RETURNING id, set_at, logbook_ledger($1, $2)`

// SetChannelRepo records r as its channel's repository: a repo_set event of the channel's
// ledger and, in the same transaction, its row (the old ones stay).
func (s *Store) SetChannelRepo(ctx context.Context, r ChannelRepo) (ChannelRepo, error) {
	r.Via = cmp.Or(r.Via, ViaSlash)
	if r.Team == "" || r.Channel == "" || r.SetBy == "" || !validVia(r.Via) {
		return r, fmt.Errorf("set channel repository: %w: team, channel, who set it and a known way are required", ErrInvalidEvent)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		var ledger ID
		if err := tx.QueryRow(ctx, sqlSetChannelRepo, r.Team, r.Channel, r.URL, r.Branch, r.SetBy).Scan(&id, &r.SetAt, &ledger); err != nil {
			return err
		}
		_, err := s.appendLedger(ctx, tx, ledger, TypeRepoSet, ledgerActor(r.SetBy, r.Via), "repo/"+strconv.FormatInt(id, 10),
			RepoSet{ID: id, Team: r.Team, URL: r.URL, Branch: r.Branch, By: r.SetBy, Via: r.Via, At: r.SetAt})
		return err
	})
	if err != nil {
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
