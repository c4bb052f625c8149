package web

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/logbook/logbook/bot/settings"
)

// ChannelSettingsReader reads a channel's effective settings, their sources and history
// (settings.Reports).
type ChannelSettingsReader interface {
	Report(ctx context.Context, channel string) (settings.Report, error)
}

// settingRow is one setting on the channel settings page.
type settingRow struct {
	Name, Value, Source string
}

// changeRow is one change of the channel's settings.
type changeRow struct {
	At, By, Via, Name, Old, New string
	Seq                         int64
}

// channelSettingsData is the channel settings page.
type channelSettingsData struct {
	Channel, Name, Team string
	LedgerSeq           int64
	LedgerHash          string
	Settings            []settingRow
	History             []changeRow
}

// channelSettings is GET /channels/{channel}/settings, for auditors: the channel's effective
// settings with where each comes from (its ledger: who, when, how, seq; the environment; the
// default), the head of its ledger, and every change, oldest first. The view is in the access
// log.
func (s *server) channelSettings(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !identityFrom(ctx).Auditor {
		// A refused look is on the record too: who probed which channel's settings.
		if err := record(ctx, s.cfg.AccessLog, r, access{action: "channel_settings", query: clean(r.PathValue("channel"), 40), status: http.StatusForbidden}); err != nil {
			s.unrecorded(w, err)
			return
		}
		s.page(w, http.StatusForbidden, "message", pageData{Title: "Auditors only", Message: "Only an auditor may see a channel's settings and their history here."})
		return
	}
	channel := r.PathValue("channel")
	if !settings.ValidChannelID(channel) {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Channel settings", Message: "That is not a channel id (e.g. C0123ABCD)."})
		return
	}
	rep, err := s.cfg.ChannelSettings.Report(ctx, channel)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	loc := s.location(r)
	data := &channelSettingsData{Channel: channel, Name: "#" + s.channelName(ctx, channel), Team: rep.Team,
		LedgerSeq: rep.Ledger.Seq, LedgerHash: hex.EncodeToString(rep.Ledger.Hash)}
	for _, c := range rep.Settings {
		src := c.Source
		switch {
		case c.Source == settings.SourceLedger:
			src = fmt.Sprintf("ledger: %s, %s via %s (seq %d)", c.Record.SetBy, s.formatTime(c.Record.SetAt, loc), c.Record.Via, c.Record.Seq)
		case c.Source == settings.SourceEnvironment:
			src = "environment: " + c.From
		}
		if c.Source != settings.SourceLedger && c.Record != nil {
			src += fmt.Sprintf("; reset by %s, %s (seq %d)", c.Record.SetBy, s.formatTime(c.Record.SetAt, loc), c.Record.Seq)
		}
		data.Settings = append(data.Settings, settingRow{Name: c.Name, Value: c.Value, Source: src})
	}
	for _, h := range rep.History {
		row := changeRow{At: s.formatTime(h.SetAt, loc), By: h.SetBy, Via: h.Via, Name: h.Name, Old: "default", New: "default", Seq: h.Seq}
		if h.OldSet {
			row.Old = fmt.Sprintf("%q", h.Old)
		}
		if h.Set {
			row.New = fmt.Sprintf("%q", h.New)
		}
		data.History = append(data.History, row)
	}
	s.respond(w, r, "channelsettings", pageData{Title: "Settings of " + data.Name, ChannelSettings: data},
		access{action: "channel_settings", query: channel, results: len(data.History)})
}

const channelSettingsTemplate = `
{{define "channelsettings"}}{{template "head" .}}
{{with .ChannelSettings}}
<h1>Settings of {{.Name}}</h1>
<p class="meta">{{.Channel}}{{with .Team}}, team {{.}}{{end}}. Ledger: {{if .LedgerSeq}}seq {{.LedgerSeq}}, hash <code>{{.LedgerHash}}</code> — the position a turn starting now records{{else}}none yet (nothing was ever changed in this channel){{end}}.</p>
<table class="usage"><thead><tr><th>setting</th><th>value</th><th>source</th></tr></thead><tbody>
{{range .Settings}}<tr><td>{{.Name}}</td><td>{{if .Value}}<code>{{.Value}}</code>{{else}}(none){{end}}</td><td>{{.Source}}</td></tr>
{{end}}</tbody></table>
<h2>History</h2>
<table class="usage"><thead><tr><th>time</th><th>who</th><th>via</th><th>setting</th><th>old → new</th><th>seq</th></tr></thead><tbody>
{{range .History}}<tr><td>{{.At}}</td><td>{{.By}}</td><td>{{.Via}}</td><td>{{.Name}}</td><td>{{.Old}} → {{.New}}</td><td>{{.Seq}}</td></tr>
{{else}}<tr><td colspan="6" class="empty">No change yet.</td></tr>{{end}}</tbody></table>
{{end}}
{{template "foot" .}}{{end}}
`
