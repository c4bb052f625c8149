package web

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// evalData is an eval record's page (issue 50: `logbook replay --from`, `logbook eval`): the
// recorded turn and the replayed one side by side — replies, tool calls, tokens, cost.
type evalData struct {
	Original, OriginalURL string
	Channel               string
	From, Turn            int64
	Model, Tools          string
	Sandbox               string // what other calls of the sandbox's tools ran in (Tools "sandbox")
	Instructions          string // "" when the channel's were kept
	AgentsMD              bool
	Done                  bool // the record has its summary (replay_completed)
	Summary               session.ReplayCompleted
	Recorded, Replayed    []evalEntry
	Rows                  []evalRow
}

// evalEntry is one event of a side: a reply, a tool call or its result.
type evalEntry struct {
	Kind, Text string
	Error      bool
}

// evalRow is one line of the comparison table.
type evalRow struct{ Name, Recorded, Replayed string }

// eval is GET /evals/{id}: the eval record id beside the original turn it ran again. Anything
// other than an eval record is not found here.
func (s *server) eval(w http.ResponseWriter, r *http.Request) {
	a := access{action: "view"}
	sess, evs, ok := s.load(w, r, a)
	if !ok {
		return
	}
	a.session = sess.ID
	link, isEval, err := session.ReplayOf(evs)
	if err != nil || !isEval || !sess.Key.Replay() {
		s.notFound(w, r, a)
		return
	}
	d := evalData{Original: link.Original.String(), OriginalURL: "/sessions/" + link.Original.String(), Channel: "#" + s.channelName(r.Context(), sess.Key.Channel),
		From: link.Seq, Turn: link.Turn, Model: link.Model, Tools: link.Tools, Sandbox: link.Sandbox, Instructions: link.Instructions, AgentsMD: link.AgentsMD != ""}
	last := len(evs)
	if n := len(evs); n > 1 && evs[n-1].Type == session.TypeReplayCompleted && evs[n-1].Decode(&d.Summary) == nil {
		d.Done, last = true, n-1
	}
	d.Replayed = evalEntries(evs[1:last], link.Turn)
	if d.Done {
		orig, err := s.cfg.Sessions.Events(r.Context(), link.Original, session.Range{From: link.Turn, To: d.Summary.RecordedThrough})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		d.Recorded = evalEntries(orig, link.Turn)
		sm, cur := d.Summary, d.Summary.Currency
		d.Rows = []evalRow{
			{"replies", fmt.Sprint(sm.Recorded.Replies), fmt.Sprint(sm.Replayed.Replies)},
			{"tool calls", fmt.Sprint(sm.Recorded.ToolCalls), fmt.Sprintf("%d: %d the same, %d different, %d new (%d recorded not made)",
				sm.Replayed.ToolCalls, sm.Same, sm.Different, sm.New, sm.Missing)},
			{"model calls", fmt.Sprint(sm.Recorded.ModelCalls), fmt.Sprint(sm.Replayed.ModelCalls)},
			{"input tokens", fmt.Sprint(sm.Recorded.InputTokens), fmt.Sprint(sm.Replayed.InputTokens)},
			{"output tokens", fmt.Sprint(sm.Recorded.OutputTokens), fmt.Sprint(sm.Replayed.OutputTokens)},
			{"cost (" + cur + ")", evalCost(sm.Recorded), evalCost(sm.Replayed)},
		}
	}
	s.respond(w, r, "eval", pageData{Title: "What-if of session " + link.Original.String(), Eval: &d},
		access{action: "view", session: sess.ID, results: len(d.Recorded) + len(d.Replayed)})
}

func evalCost(s session.EvalSide) string {
	c := budget.Money(s.CostMicros).String()
	if s.Unpriced > 0 {
		c += fmt.Sprintf(" (+%d calls without a price)", s.Unpriced)
	}
	return c
}

// evalEntries are the agent's events of turn among evs: its replies, tool calls and results.
func evalEntries(evs []session.Event, turn int64) []evalEntry {
	var out []evalEntry
	for _, e := range evs {
		if e.Payload == nil {
			out = append(out, evalEntry{Kind: string(e.Type), Text: "(removed by retention)"})
			continue
		}
		switch e.Type {
		case session.TypeAssistantMessage:
			var m session.AssistantMessage
			if e.Decode(&m) != nil || m.Turn != turn || m.Text == "" {
				continue
			}
			t := m.Text
			if m.Usage != nil {
				t += fmt.Sprintf("\n— %s, %d in / %d out tokens", m.Usage.Model, m.Usage.InputTokens, m.Usage.OutputTokens)
			}
			out = append(out, evalEntry{Kind: "reply", Text: t})
		case session.TypeToolCall:
			var c session.ToolCall
			if e.Decode(&c) == nil {
				out = append(out, evalEntry{Kind: "tool call", Text: clip.Text(c.Name+" "+string(c.Input), 500)})
			}
		case session.TypeToolResult:
			var res session.ToolResult
			if e.Decode(&res) == nil && (e.Actor.ID == "brain" || e.Actor.Kind == session.ActorSandbox) {
				out = append(out, evalEntry{Kind: "result", Text: clip.Text(strings.TrimSpace(res.Content), 500), Error: res.IsError})
			}
		}
	}
	return out
}

const evalTemplate = `
{{define "eval"}}{{template "head" .}}
{{with .Eval}}
<h1>What-if of a turn</h1>
<p class="meta">Session <a href="{{.OriginalURL}}">{{.Original}}</a> in {{.Channel}}, from its message at seq {{.From}} (turn {{.Turn}}), run again under <strong>{{.Model}}</strong>;
a tool call identical to a recorded one served from the recording, {{if eq .Tools "sandbox"}}another of the sandbox's run in a sandbox restored to that point ({{.Sandbox}}){{else}}any other refused ({{.Tools}}){{end}}{{if .Instructions}}; the channel's instructions replaced{{end}}{{if .AgentsMD}}; an AGENTS.md given{{end}}.
Nothing of it reached Slack; the original session is unchanged.</p>
{{if .Instructions}}<details><summary>Instructions it ran under</summary><pre>{{.Instructions}}</pre></details>{{end}}
{{if .Done}}
<p class="meta">Status: {{.Summary.Status}}{{with .Summary.Error}}: {{.}}{{end}}. The reply {{if .Summary.ReplyChanged}}<strong>changed</strong>{{else}}is the same{{end}}.</p>
<table class="usage"><thead><tr><th></th><th>recorded</th><th>replayed</th></tr></thead><tbody>
{{range .Rows}}<tr><th scope="row">{{.Name}}</th><td data-label="recorded">{{.Recorded}}</td><td data-label="replayed">{{.Replayed}}</td></tr>
{{end}}</tbody></table>
{{else}}<p class="meta">The what-if has no summary: it is still running, or stopped before it ended.</p>{{end}}
<div class="eval">
<section><h2>Recorded</h2>{{range .Recorded}}<div class="entry"><strong>{{.Kind}}</strong>{{if .Error}} (error){{end}}<pre>{{.Text}}</pre></div>{{else}}<p class="empty">Nothing.</p>{{end}}</section>
<section><h2>Replayed</h2>{{range .Replayed}}<div class="entry"><strong>{{.Kind}}</strong>{{if .Error}} (error){{end}}<pre>{{.Text}}</pre></div>{{else}}<p class="empty">Nothing.</p>{{end}}</section>
</div>
{{end}}
{{template "foot" .}}{{end}}
`
