package web

import (
	"context"
	"html/template"
	"net/http"
	"time"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/session"
)

// UsageReader reads the model spend (session.Store has it).
type UsageReader interface {
	Usage(ctx context.Context, from, to time.Time, channel string) ([]session.UsageRow, error)
}

// FeedbackReader reads the 👍/👎 on replies per channel and model (session.Store has it).
type FeedbackReader interface {
	Feedback(ctx context.Context, from, to time.Time, channel string) ([]session.FeedbackRow, error)
}

// usageData is the usage page: the report and its chart.
type usageData struct {
	Report budget.Report
	Chart  template.HTML // an SVG drawn here, no script
	Days   int
}

// usage is GET /usage?days=N&channel=C: the model spend and tokens per channel, person and
// day over the last N UTC days (default 14, at most 366), with a chart of the spend per day.
// Channels a non-auditor may not see now are left out, and so are their people's calls there.
func (s *server) usage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := r.URL.Query()
	days := 14
	if d := v.Get("days"); d != "" {
		n, err := parsePositive(d, 366)
		if err != nil {
			s.page(w, http.StatusBadRequest, "message", pageData{Title: "Usage", Message: "“days” is a number of days from 1 to 366."})
			return
		}
		days = n
	}
	to := session.UTCDay(s.now()).AddDate(0, 0, 1)
	from := to.AddDate(0, 0, -days)
	rows, err := s.cfg.Usage.Usage(ctx, from, to, v.Get("channel"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	shown := rows[:0:0]
	for _, u := range rows {
		if !s.hidden(ctx, u.Channel) {
			shown = append(shown, u)
		}
	}
	rep := budget.NewReport(shown, from, to, s.cfg.Currency)
	for i := range rep.Channels {
		rep.Channels[i].Key = "#" + s.channelName(ctx, rep.Channels[i].Key)
	}
	if s.cfg.Feedback != nil {
		fb, err := s.cfg.Feedback.Feedback(ctx, from, to, v.Get("channel"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		kept := fb[:0:0]
		for _, f := range fb {
			if !s.hidden(ctx, f.Channel) {
				f.Channel = "#" + s.channelName(ctx, f.Channel)
				kept = append(kept, f)
			}
		}
		rep.AddFeedback(kept)
	}
	data := pageData{Title: "Usage", Channel: v.Get("channel"),
		Usage: &usageData{Report: rep, Chart: template.HTML(rep.SVG()), Days: days}} //nolint:gosec // drawn here, every text escaped
	s.respond(w, r, "usage", data, access{action: "usage", query: r.URL.RawQuery, results: len(shown)})
}

// parsePositive reads a number from 1 to most.
func parsePositive(s string, most int) (int, error) {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' || n > most {
			return 0, errBadNumber
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > most {
		return 0, errBadNumber
	}
	return n, nil
}

type badNumber struct{}

func (badNumber) Error() string { return "not a number in range" }

var errBadNumber error = badNumber{}

const usageTemplate = `
{{define "usage"}}{{template "head" .}}
<h1>Model usage</h1>
{{with .Usage}}
<p class="meta">{{.Report.From.Format "2006-01-02"}} to today (UTC days), in {{.Report.Currency}}: {{.Report.All.Cost}} for {{.Report.All.Calls}} calls{{if .Report.All.Estimated}}, {{.Report.All.Estimated}} of them charged from an estimate (they failed part way: a broken stream, a stop, a timeout){{end}}{{if .Report.All.Refused}}, {{.Report.All.Refused}} refused by a budget{{end}}.
<a href="/usage?days=7">7 days</a> · <a href="/usage?days=30">30 days</a> · <a href="/usage?days=90">90 days</a></p>
<figure class="chart">{{.Chart}}<figcaption>Spend per day</figcaption></figure>
{{template "usageTable" (usageSection "Per channel" .Report.Channels)}}
{{template "usageTable" (usageSection "Per person" .Report.People)}}
{{template "usageTable" (usageSection "Per day" .Report.Days)}}
<h2>Feedback</h2>
<table class="usage feedback"><thead><tr><th scope="col">channel</th><th scope="col">model</th><th scope="col">👍</th><th scope="col">👎</th><th scope="col" title="each person's latest click on each reply">ratio</th></tr></thead><tbody>
{{range .Report.Feedback}}<tr><th scope="row">{{.Channel}}</th><td data-label="model">{{if .Model}}{{.Model}}{{else}}(logbook){{end}}</td><td data-label="👍">{{.Positive}}</td><td data-label="👎">{{.Negative}}</td><td data-label="ratio">{{.Percent}}</td></tr>
{{else}}<tr><td colspan="5" class="empty">No feedback on replies.</td></tr>{{end}}</tbody></table>
{{end}}
{{template "foot" .}}{{end}}
{{define "usageTable"}}<h2>{{.Title}}</h2>
<table class="usage"><thead><tr><th scope="col"></th><th scope="col">cost</th><th scope="col">calls</th><th scope="col" title="calls that failed part way, charged what was sent and streamed: tokens estimated by logbook">estimated</th><th scope="col">refused</th><th scope="col">input tokens</th><th scope="col">output tokens</th><th scope="col">cache read</th><th scope="col">cache write</th></tr></thead><tbody>
{{range .Totals}}<tr><th scope="row">{{if .Key}}{{.Key}}{{else}}(nobody){{end}}</th><td data-label="cost">{{.Cost}}</td><td data-label="calls">{{.Calls}}</td><td data-label="estimated">{{.Estimated}}</td><td data-label="refused">{{.Refused}}</td><td data-label="input tokens">{{.InputTokens}}</td><td data-label="output tokens">{{.OutputTokens}}</td><td data-label="cache read">{{.CacheReadTokens}}</td><td data-label="cache write">{{.CacheWriteTokens}}</td></tr>
{{else}}<tr><td colspan="9" class="empty">No model calls.</td></tr>{{end}}</tbody></table>{{end}}
`

type usageSection struct {
	Title  string
	Totals []budget.Total
}
