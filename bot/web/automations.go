package web

import (
	"context"
	"net/http"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/session"
)

// RunReader reads the runs of schedules and hooks (session.Store has it).
type RunReader interface {
	AutomationRuns(ctx context.Context, f session.RunFilter) ([]session.AutomationRun, error)
}

// runRow is one run on the automations page.
type runRow struct {
	At      string
	What    string // "schedule 3", "hook alerts"
	Channel string // #name
	Outcome string
	Failed  bool
	Session string // the transcript's path, "" when it started none
	Cost    string
}

// automationsData is the automations page.
type automationsData struct {
	Runs     []runRow
	Currency string
	Kind     string
	Name     string
}

// maxRunsShown bounds the runs the automations page shows.
const maxRunsShown = 200

// automations is GET /automations?kind=schedule|hook&name=N: the newest runs of every schedule
// and hook (time, outcome, session, cost), newest first. An auditor sees the whole
// organisation's; anyone else the runs in channels still public (the same rule as the
// transcripts). The view is in the access log.
func (s *server) automations(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	kind, name := q.Get("kind"), q.Get("name")
	if kind != "" && kind != session.AutomationSchedule && kind != session.AutomationHook {
		s.page(w, http.StatusBadRequest, "message", pageData{Title: "Schedules and hooks", Message: "“kind” is schedule or hook."})
		return
	}
	runs, err := s.cfg.Runs.AutomationRuns(ctx, session.RunFilter{Kind: kind, Name: name, Limit: maxRunsShown})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	loc := s.location(r)
	data := &automationsData{Currency: s.cfg.Currency, Kind: kind, Name: name}
	for _, run := range runs {
		if s.hidden(ctx, run.Channel) {
			continue
		}
		row := runRow{At: s.formatTime(run.At, loc), What: run.Kind + " " + run.Name, Channel: "#" + s.channelName(ctx, run.Channel),
			Outcome: "ran", Cost: budget.Money(run.CostMicros).String()}
		switch {
		case !run.OK:
			row.Outcome, row.Failed = "failed: "+run.Error, true
		case run.Late:
			row.Outcome = "ran late"
		}
		if run.Session != (session.ID{}) {
			row.Session = "/sessions/" + run.Session.String()
		}
		data.Runs = append(data.Runs, row)
	}
	s.respond(w, r, "automations", pageData{Title: "Schedules and hooks", Automations: data},
		access{action: "automations", query: r.URL.RawQuery, results: len(data.Runs)})
}

const automationsTemplate = `
{{define "automations"}}{{template "head" .}}
<h1>Schedules and hooks</h1>
{{with .Automations}}
<p class="meta">The newest runs of every schedule and hook{{if .Kind}} ({{.Kind}}{{with .Name}} {{.}}{{end}}){{end}}, newest first; cost in {{if .Currency}}{{.Currency}}{{else}}the prices' currency{{end}}.
<a href="/automations?kind=schedule">schedules</a> · <a href="/automations?kind=hook">hooks</a> · <a href="/automations">all</a></p>
<table class="usage"><thead><tr><th>time</th><th>what</th><th>channel</th><th>outcome</th><th>session</th><th>cost</th></tr></thead><tbody>
{{range .Runs}}<tr><td>{{.At}}</td><td>{{.What}}</td><td>{{.Channel}}</td><td>{{if .Failed}}<strong>{{.Outcome}}</strong>{{else}}{{.Outcome}}{{end}}</td><td>{{with .Session}}<a href="{{.}}">transcript</a>{{end}}</td><td>{{.Cost}}</td></tr>
{{else}}<tr><td colspan="6" class="empty">No runs yet.</td></tr>{{end}}</tbody></table>
{{end}}
{{template "foot" .}}{{end}}
`
