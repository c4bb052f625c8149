package settings

import (
	"context"
	"errors"
	"strconv"

	"github.com/logbook/logbook/session"
)

// ReportStore is what a Report reads besides the settings (*session.Store has it): what the
// log knows of the channel, its settings' records, and its ledger.
type ReportStore interface {
	ChannelSeen(ctx context.Context, channel string) (session.ChannelSeen, error)
	ChannelSettings(ctx context.Context, team, channel string) (map[string]session.ChannelSetting, error)
	ChannelSettingsHistory(ctx context.Context, channel string) ([]session.ChannelSetting, error)
	Ledger(ctx context.Context, channel string) (session.ID, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
}

// Where a setting's effective value comes from.
const (
	SourceLedger      = "ledger"      // the channel's record, an event of its ledger
	SourceEnvironment = "environment" // the environment variable that sets the default
	SourceDefault     = "default"     // logbook's own default
)

// Report is a channel's effective settings, where each comes from, and their history: what
// `logbook config show` prints and the web's channel settings page shows.
type Report struct {
	Team    string // "" when logbook has stored nothing of the channel
	Channel string
	Ledger  session.Head // seq 0: the channel has no ledger yet
	// Settings are every setting, in Names' order.
	Settings []Sourced
	// History is every change of the channel's settings, oldest first.
	History []Recorded
}

// Sourced is a setting's effective value and its source. From is the environment variable
// (SourceEnvironment); Record is the change that set it (SourceLedger) or, for a default,
// the reset that brought it back (nil when the channel never had a record of it).
type Sourced struct {
	Name, Value string
	Source      string
	From        string
	Record      *Recorded
}

// Recorded is a change of a setting with its ledger event's seq (0: none, which audit verify
// reports) and the way it came (session.ViaSlash, ...).
type Recorded struct {
	session.ChannelSetting
	Seq int64
}

// Report reads the channel's report (a default is the environment's when Config's
// FromEnvironment says so). Errors are the stores'.
func (s *Settings) Report(ctx context.Context, st ReportStore, channel string) (Report, error) {
	rep := Report{Channel: channel}
	seen, err := st.ChannelSeen(ctx, channel)
	if err != nil {
		return rep, err
	}
	rep.Team = seen.Team
	cur, err := s.For(ctx, seen.Team, channel)
	if err != nil {
		return rep, err
	}
	latest, err := st.ChannelSettings(ctx, seen.Team, channel)
	if err != nil {
		return rep, err
	}
	var events []session.Event
	switch id, err := st.Ledger(ctx, channel); {
	case errors.Is(err, session.ErrNotFound):
	case err != nil:
		return rep, err
	default:
		if events, err = st.Events(ctx, id, session.Range{}); err != nil {
			return rep, err
		}
	}
	if len(events) > 0 {
		head := events[len(events)-1]
		rep.Ledger = session.Head{Seq: head.Seq, Hash: head.Hash}
	}
	byKey := map[string]session.Event{}
	for _, ev := range events {
		if ev.Type == session.TypeSettingChanged {
			byKey[ev.IdempotencyKey] = ev
		}
	}
	recorded := func(r session.ChannelSetting) Recorded {
		rec := Recorded{ChannelSetting: r}
		if ev, ok := byKey["setting/"+strconv.FormatInt(r.ID, 10)]; ok {
			rec.Seq = ev.Seq
			var p session.SettingChanged
			if ev.Decode(&p) == nil {
				rec.Via = p.Via
			}
		}
		return rec
	}
	for _, n := range Names {
		src := Sourced{Name: n, Value: cur.Value(n), Source: SourceDefault}
		if r, ok := cur.Record(n); ok {
			rec := recorded(r)
			src.Source, src.Record = SourceLedger, &rec
		} else {
			if from := s.DefaultFrom(n); src.Value != "" && from != "" && s.cfg.FromEnvironment[n] {
				src.Source, src.From = SourceEnvironment, from
			}
			if r, ok := latest[n]; ok && !r.Set {
				rec := recorded(r)
				src.Record = &rec
			}
		}
		rep.Settings = append(rep.Settings, src)
	}
	hist, err := st.ChannelSettingsHistory(ctx, channel)
	if err != nil {
		return rep, err
	}
	for _, h := range hist {
		if seen.Team == "" || h.Team == seen.Team {
			rep.History = append(rep.History, recorded(h))
		}
	}
	return rep, nil
}

// Reports are s's reports over a store: what the web's channel settings page reads.
type Reports struct {
	Settings *Settings
	Store    ReportStore
}

// Report is the channel's report (Settings.Report).
func (r Reports) Report(ctx context.Context, channel string) (Report, error) {
	return r.Settings.Report(ctx, r.Store, channel)
}
