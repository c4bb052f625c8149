package budget

import (
	"cmp"
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/logbook/logbook/session"
)

// Total is the spend and tokens of one key (a day, a channel, a person, or everything).
type Total struct {
	Key              string `json:"key"`
	Calls            int64  `json:"calls"`
	Refused          int64  `json:"refused"`
	InputTokens      int64  `json:"input_tokens"`
	OutputTokens     int64  `json:"output_tokens"`
	CacheReadTokens  int64  `json:"cache_read_tokens"`
	CacheWriteTokens int64  `json:"cache_write_tokens"`
	Cost             Money  `json:"cost_micros"`
	// Estimated are the calls (among Calls) that failed part way and were charged what was
	// sent and streamed, their tokens estimated in part by logbook, not counted by the provider.
	Estimated int64 `json:"estimated"`
	// EvalCalls and EvalCost are the what-if replays' share of Calls and Cost (`logbook replay
	// --from`, `logbook eval`: charged to the channel's budget, marked as evals).
	EvalCalls int64 `json:"eval_calls,omitempty"`
	EvalCost  Money `json:"eval_cost_micros,omitempty"`
}

func (t *Total) add(u session.UsageRow) {
	t.Calls += u.Calls
	t.Refused += u.Refused
	t.InputTokens += u.InputTokens
	t.OutputTokens += u.OutputTokens
	t.CacheReadTokens += u.CacheReadTokens
	t.CacheWriteTokens += u.CacheWriteTokens
	t.Cost += Money(u.CostMicros)
	t.Estimated += u.Estimated
	t.EvalCalls += u.EvalCalls
	t.EvalCost += Money(u.EvalCostMicros)
}

// Report is the spend per channel, per person and per day over [From, To) (UTC days): what
// `logbook usage`, the usage page and audit exports show.
type Report struct {
	From, To time.Time
	Currency string
	Rows     []session.UsageRow // per day, channel and person
	Days     []Total            // every day of the range, in order, empty ones included
	Channels []Total            // by cost, highest first
	People   []Total            // by cost, highest first; Key "" is calls no person asked for
	All      Total
	// Feedback is the 👍/👎 on replies per channel and model (AddFeedback), by channel and model.
	Feedback []Rating `json:",omitempty"`
}

// Rating is the feedback on the replies one model wrote in one channel: each person's latest
// click on each reply. Ratio is the share of 👍 among them (0 to 1).
type Rating struct {
	Channel  string  `json:"channel"`
	Model    string  `json:"model"` // "" is logbook's own text
	Positive int64   `json:"positive"`
	Negative int64   `json:"negative"`
	Ratio    float64 `json:"ratio"`
}

// AddFeedback adds the feedback of rows (session.Store.Feedback over the report's days).
func (r *Report) AddFeedback(rows []session.FeedbackRow) {
	for _, f := range rows {
		rt := Rating{Channel: f.Channel, Model: f.Model, Positive: f.Positive, Negative: f.Negative}
		if n := f.Positive + f.Negative; n > 0 {
			rt.Ratio = float64(f.Positive) / float64(n)
		}
		r.Feedback = append(r.Feedback, rt)
	}
}

// Percent is r's share of 👍, as a whole percentage ("67%").
func (r Rating) Percent() string { return fmt.Sprintf("%.0f%%", r.Ratio*100) }

// NewReport sums rows up.
func NewReport(rows []session.UsageRow, from, to time.Time, currency string) Report {
	r := Report{From: session.UTCDay(from), To: session.UTCDay(to), Currency: currency, Rows: rows, All: Total{Key: "all"}}
	days := map[string]*Total{}
	for d := r.From; d.Before(r.To); d = d.AddDate(0, 0, 1) {
		k := d.Format(time.DateOnly)
		r.Days = append(r.Days, Total{Key: k})
		days[k] = &r.Days[len(r.Days)-1]
	}
	chans, people := map[string]*Total{}, map[string]*Total{}
	for _, u := range rows {
		if d := days[u.Day.Format(time.DateOnly)]; d != nil {
			d.add(u)
		}
		for _, g := range []struct {
			m   map[string]*Total
			key string
		}{{chans, u.Channel}, {people, u.Person}} {
			if g.m[g.key] == nil {
				g.m[g.key] = &Total{Key: g.key}
			}
			g.m[g.key].add(u)
		}
		r.All.add(u)
	}
	r.Channels, r.People = sorted(chans), sorted(people)
	return r
}

func sorted(m map[string]*Total) []Total {
	out := make([]Total, 0, len(m))
	for _, t := range m {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Total) int { return cmp.Or(cmp.Compare(b.Cost, a.Cost), cmp.Compare(a.Key, b.Key)) })
	return out
}

// WriteText writes r as aligned tables: per channel, per person, per day, and every row. A
// row's "estimated" counts its calls charged from logbook's estimate (Total.Estimated).
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "Model spend %s to %s (UTC days), in %s.\n", r.From.Format(time.DateOnly), r.To.AddDate(0, 0, -1).Format(time.DateOnly), r.Currency)
	section := func(title string, ts []Total) {
		fmt.Fprintf(tw, "\n%s\tcost\tcalls\testimated\trefused\tinput\toutput\tcache read\tcache write\t\n", title)
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", cmp.Or(t.Key, "(nobody)"), t.Cost, t.Calls, t.Estimated, t.Refused,
				t.InputTokens, t.OutputTokens, t.CacheReadTokens, t.CacheWriteTokens)
		}
	}
	section("channel", r.Channels)
	section("person", r.People)
	section("day", r.Days)
	section("total", []Total{r.All})
	if r.All.EvalCalls > 0 {
		fmt.Fprintf(tw, "\nevals (what-if replays, counted above)\tcost\tcalls\t\n")
		for _, t := range r.Channels {
			if t.EvalCalls > 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t\n", t.Key, t.EvalCost, t.EvalCalls)
			}
		}
	}
	if len(r.Feedback) > 0 {
		fmt.Fprintf(tw, "\nfeedback\tmodel\tpositive\tnegative\tratio\t\n")
		for _, f := range r.Feedback {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t\n", f.Channel, cmp.Or(f.Model, "(logbook)"), f.Positive, f.Negative, f.Percent())
		}
	}
	fmt.Fprintf(tw, "\nday\tchannel\tperson\tcost\tcalls\testimated\trefused\tinput\toutput\tcache read\tcache write\t\n")
	for _, u := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", u.Day.Format(time.DateOnly), u.Channel, cmp.Or(u.Person, "(nobody)"),
			Money(u.CostMicros), u.Calls, u.Estimated, u.Refused, u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens)
	}
	return tw.Flush()
}

// SVG is a bar chart of the spend per day, drawn here (no script): one bar a day, its
// height the day's cost against the highest day's, the amount above it and the date below.
func (r Report) SVG() string {
	// The plot sits right of the spend axis (its ticks and label) and above the day axis.
	const width, height, top, bottom, left, right = 480, 240, 20, 44, 56, 6
	n := max(len(r.Days), 1)
	slot := float64(width-left-right) / float64(n)
	var most Money
	for _, d := range r.Days {
		most = max(most, d.Cost)
	}
	cur := html.EscapeString(r.Currency)
	base := height - bottom
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" preserveAspectRatio="xMinYMin meet" role="img" aria-label="%s">`,
		width, height, html.EscapeString(fmt.Sprintf("model spend per day in %s", r.Currency)))
	fmt.Fprintf(&sb, `<title>%s</title>`, html.EscapeString(fmt.Sprintf("Model spend per day, %s, total %s", r.Currency, r.All.Cost)))
	// The spend axis: 0, half the highest day and the highest, with grid lines.
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, left, top, left, base)
	for _, k := range []int64{0, 1, 2} {
		v := Money(int64(most) * k / 2)
		if most == 0 && k > 0 {
			break
		}
		y := float64(base) - float64(height-top-bottom)*float64(k)/2
		fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, left, y, width-right, y)
		fmt.Fprintf(&sb, `<text class="tick" x="%d" y="%.1f" font-size="13" text-anchor="end">%s</text>`, left-4, y+4, v)
	}
	fmt.Fprintf(&sb, `<text class="axis-label" x="%d" y="%d" font-size="14" text-anchor="middle" transform="rotate(-90 %d %d)">spend (%s)</text>`,
		14, (top+base)/2, 14, (top+base)/2, cur)
	// The day axis.
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, left, base, width-right, base)
	fmt.Fprintf(&sb, `<text class="axis-label" x="%.1f" y="%d" font-size="14" text-anchor="middle">day (UTC)</text>`,
		float64(left+width-right)/2, height-6)
	for i, d := range r.Days {
		h := 0.0
		if most > 0 {
			h = float64(height-top-bottom) * float64(d.Cost) / float64(most)
		}
		x := float64(left) + float64(i)*slot
		y := float64(base) - h
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7bd0"><title>%s: %s %s, %d calls</title></rect>`,
			x+slot*0.15, y, slot*0.7, h, d.Key, d.Cost, cur, d.Calls)
		if d.Cost > 0 && n <= 31 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" font-size="13" text-anchor="middle">%s</text>`, x+slot/2, y-4, d.Cost)
		}
		if n <= 14 || i%max(n/10, 1) == 0 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" font-size="13" text-anchor="middle">%s</text>`, x+slot/2, base+15, d.Key[5:])
		}
	}
	sb.WriteString(`</svg>`)
	return sb.String()
}
