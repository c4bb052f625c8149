package session

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// ChannelSetting is one change of a channel's setting (/logbook config): Name's value went
// from Old to New. Set false (New "") resets it to the environment's default; OldSet false
// says it was the default before.
type ChannelSetting struct {
	ID            int64
	Team, Channel string
	Name          string
	Old, New      string
	OldSet, Set   bool
	SetBy         string
	SetAt         time.Time
	// Via is the path of the change (ViaSlash, ViaCLI, ViaWeb, ViaFile); "" is ViaSlash.
	Via string
	// Ledger is the setting_changed event of the channel's ledger that recorded it (set by
	// SetChannelSetting).
	Ledger Event
}

// sqlLockChannelSetting serialises changes of one (channel, name), taken before
// sqlSetChannelSetting (a statement of its own: the insert's snapshot must see the change
// that held the lock), so two admins' changes record each other's values.
const sqlLockChannelSetting = `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 7462))`

// sqlSetChannelSetting appends a change with the value it replaces, and returns the channel's
// ledger (opened on its first change).
const sqlSetChannelSetting = `INSERT INTO channel_settings (team, channel, name, old_value, value, set_by)
VALUES ($1, $2, $3, (SELECT value FROM channel_settings WHERE team = $1 AND channel = $2 AND name = $3 ORDER BY id DESC LIMIT 1), $4, $5)
RETURNING id, old_value, set_at, logbook_ledger($1, $2)`

// SetChannelSetting records a change of a channel's setting: a setting_changed event of the
// channel's ledger and, in the same transaction, its row (the old ones stay). It returns the
// change with the value it replaced and its ledger event. Errors: ErrInvalidEvent when team,
// channel, name or who is empty, or Via is unknown.
func (s *Store) SetChannelSetting(ctx context.Context, c ChannelSetting) (ChannelSetting, error) {
	c.Via = cmp.Or(c.Via, ViaSlash)
	if c.Team == "" || c.Channel == "" || c.Name == "" || c.SetBy == "" || !validVia(c.Via) {
		return c, fmt.Errorf("set channel setting: %w: team, channel, name, who set it and a known way are required", ErrInvalidEvent)
	}
	var value, old *string
	if c.Set {
		value = &c.New
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockChannelSetting, c.Team, c.Channel, c.Name); err != nil {
			return err
		}
		var ledger ID
		if err := tx.QueryRow(ctx, sqlSetChannelSetting, c.Team, c.Channel, c.Name, value, c.SetBy).Scan(&c.ID, &old, &c.SetAt, &ledger); err != nil {
			return err
		}
		var err error
		c.Ledger, err = s.appendLedger(ctx, tx, ledger, TypeSettingChanged, ledgerActor(c.SetBy, c.Via), "setting/"+strconv.FormatInt(c.ID, 10),
			SettingChanged{ID: c.ID, Team: c.Team, Name: c.Name, Old: old, New: value, By: c.SetBy, Via: c.Via, At: c.SetAt})
		return err
	})
	if err != nil {
		return c, fmt.Errorf("set %s of %s: %w", c.Name, c.Channel, err)
	}
	c.Old, c.OldSet = deref(old)
	return c, nil
}

const sqlChannelSettings = `SELECT DISTINCT ON (name) id, team, channel, name, old_value, value, set_by, set_at
FROM channel_settings WHERE team = $1 AND channel = $2 ORDER BY name, id DESC`

// ChannelSettings returns the newest change of each setting of the channel, by name (a
// setting reset to its default is there with Set false). No change at all: an empty map.
func (s *Store) ChannelSettings(ctx context.Context, team, channel string) (map[string]ChannelSetting, error) {
	rows, err := s.pool.Query(ctx, sqlChannelSettings, team, channel)
	if err != nil {
		return nil, fmt.Errorf("read the settings of %s: %w", channel, err)
	}
	cs, err := pgx.CollectRows(rows, scanChannelSetting)
	if err != nil {
		return nil, fmt.Errorf("read the settings of %s: %w", channel, err)
	}
	out := make(map[string]ChannelSetting, len(cs))
	for _, c := range cs {
		out[c.Name] = c
	}
	return out, nil
}

// sqlChannelSettingsAt is sqlChannelSettings with the head of the channel's ledger on every
// row, and one row of NULLs for the settings when the channel has none.
const sqlChannelSettingsAt = `SELECT l.seq, l.hash, c.id, c.team, c.channel, c.name, c.old_value, c.value, c.set_by, c.set_at
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT e.seq, e.hash FROM sessions s JOIN events e ON e.session_id = s.id
     WHERE s.channel_id = $2 AND s.thread_ts = '` + LedgerThread + `' AND s.by_thread
     ORDER BY e.seq DESC LIMIT 1) l ON true
LEFT JOIN (
    SELECT DISTINCT ON (name) id, team, channel, name, old_value, value, set_by, set_at
      FROM channel_settings WHERE team = $1 AND channel = $2 ORDER BY name, id DESC) c ON true`

// ChannelSettingsAt is ChannelSettings with the head of the channel's ledger at the same
// moment (seq 0 and nil hash when the channel has none), in one round trip: what a turn reads
// to say which ledger position it ran under.
func (s *Store) ChannelSettingsAt(ctx context.Context, team, channel string) (map[string]ChannelSetting, Head, error) {
	var head Head
	out := map[string]ChannelSetting{}
	rows, err := s.pool.Query(ctx, sqlChannelSettingsAt, team, channel)
	if err != nil {
		return nil, head, fmt.Errorf("read the settings of %s: %w", channel, err)
	}
	var seq, id *int64
	var hash []byte
	var c ChannelSetting
	var cteam, cchannel, name, setBy *string
	var old, value *string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&seq, &hash, &id, &cteam, &cchannel, &name, &old, &value, &setBy, &at}, func() error {
		if seq != nil {
			head = Head{Seq: *seq, Hash: hash}
		}
		if id == nil {
			return nil
		}
		c = ChannelSetting{ID: *id, Team: *cteam, Channel: *cchannel, Name: *name, SetBy: *setBy, SetAt: *at}
		c.Old, c.OldSet = deref(old)
		c.New, c.Set = deref(value)
		out[c.Name] = c
		return nil
	})
	if err != nil {
		return nil, head, fmt.Errorf("read the settings of %s: %w", channel, err)
	}
	return out, head, nil
}

const sqlChannelSettingsHistory = `SELECT id, team, channel, name, old_value, value, set_by, set_at
FROM channel_settings WHERE ($1 = '' OR channel = $1) ORDER BY team, channel, id`

// ChannelSettingsHistory returns every change of every channel's settings (channel "": all
// channels), by channel, oldest first.
func (s *Store) ChannelSettingsHistory(ctx context.Context, channel string) ([]ChannelSetting, error) {
	rows, err := s.pool.Query(ctx, sqlChannelSettingsHistory, channel)
	if err != nil {
		return nil, fmt.Errorf("read channel settings: %w", err)
	}
	cs, err := pgx.CollectRows(rows, scanChannelSetting)
	if err != nil {
		return nil, fmt.Errorf("read channel settings: %w", err)
	}
	return cs, nil
}

func scanChannelSetting(row pgx.CollectableRow) (ChannelSetting, error) {
	var c ChannelSetting
	var old, value *string
	err := row.Scan(&c.ID, &c.Team, &c.Channel, &c.Name, &old, &value, &c.SetBy, &c.SetAt)
	c.Old, c.OldSet = deref(old)
	c.New, c.Set = deref(value)
	return c, err
}

func deref(s *string) (string, bool) {
	if s == nil {
		return "", false
	}
	return *s, true
}
