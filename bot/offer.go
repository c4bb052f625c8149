package bot

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
)

// offered is what a turn's parts offered it that the turn uses after the brain's turn is
// prepared.
type offered struct {
	asks     []func(tool string) bool
	notes    []string // lines under the reply: the parts' Notes, then what Answered said
	answered []func(ctx context.Context) ([]string, error)
	steered  []func(ctx context.Context, through int64) error
	waiting  []func(ctx context.Context, waiting bool)
}

// offer gives bt what each of parts offers s, in order — tools, toolsets, guidance — and
// records what the turn runs under: rec, the turn's own fields, with the parts' (turn_settings,
// when the channel has settings or a part says so). A part's error ends the turn (part.Part).
func offer(ctx context.Context, parts []part.Part, s part.Scope, bt *brain.Turn, rec session.TurnSettings) (offered, error) {
	var o offered
	record := s.Channel != nil
	for _, p := range parts {
		po, err := p.Offer(ctx, s)
		if err != nil {
			return o, err
		}
		bt.Tools = append(bt.Tools, po.Tools...)
		bt.Toolsets = append(bt.Toolsets, po.Toolsets...)
		guide(&bt.Guidance, po.Guidance)
		if po.Settings != nil {
			po.Settings(&rec)
			record = true
		}
		if po.Asks != nil {
			o.asks = append(o.asks, po.Asks)
		}
		o.notes = append(o.notes, po.Notes...)
		if po.Answered != nil {
			o.answered = append(o.answered, po.Answered)
		}
		if po.Steered != nil {
			o.steered = append(o.steered, po.Steered)
		}
		if po.Waiting != nil {
			o.waiting = append(o.waiting, po.Waiting)
		}
	}
	if record {
		if err := settings.RecordTurn(ctx, s.Log, rec); err != nil {
			s.Logger.Warn().Err(err).Msg("could not record the turn's settings")
		}
	}
	return o, nil
}

// guide adds a part's guidance to g: each field is one part's.
func guide(g *brain.Guidance, add brain.Guidance) {
	if add.Instructions != "" {
		g.Instructions = add.Instructions
	}
	if add.Repo.Path != "" {
		g.Repo = add.Repo
	}
	g.Nested = append(g.Nested, add.Nested...)
	g.Memory = append(g.Memory, add.Memory...)
}

// ask reports whether a part has a person approve each call of tool.
func (o offered) ask(tool string) bool {
	for _, ask := range o.asks {
		if ask(tool) {
			return true
		}
	}
	return false
}

// settle has the parts that are Settlers settle what a dead cell left of theirs, on every
// turn that answers, before anything is delivered. An error ends the turn.
func settle(ctx context.Context, parts []part.Part, s part.Scope) error {
	for _, p := range parts {
		if st, ok := p.(part.Settler); ok {
			if err := st.Settle(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// present is reply as the thread shows it: the first Presenter among parts that shows it
// otherwise gives the text its message carries instead of the model's (the event keeps its
// id, so delivery's metadata and records still name the reply). logbook's own text (Own: a
// canned reply, a notice) is shown as it is. An error is the Presenter's: the turn stays open.
func present(ctx context.Context, parts []part.Part, s part.Scope, reply session.Event) (session.Event, error) {
	var presenters []part.Presenter
	for _, p := range parts {
		if pr, ok := p.(part.Presenter); ok {
			presenters = append(presenters, pr)
		}
	}
	var msg session.AssistantMessage
	if len(presenters) == 0 || reply.Decode(&msg) != nil || msg.Own {
		return reply, nil
	}
	for _, pr := range presenters {
		text, ok, err := pr.Present(ctx, s, reply)
		if err != nil {
			return reply, err
		}
		if !ok {
			continue
		}
		msg.Text = text
		raw, err := json.Marshal(msg)
		if err != nil {
			return reply, fmt.Errorf("present reply %s: %w", reply.ID, err)
		}
		shown := reply
		shown.Payload = raw
		return shown, nil
	}
	return reply, nil
}

// footers is the lines the parts that are Footers put under a reply of the turn s, read as
// it is delivered.
func footers(parts []part.Part, s part.Scope) []string {
	var lines []string
	for _, p := range parts {
		if f, ok := p.(part.Footer); ok {
			lines = append(lines, f.Footer(s)...)
		}
	}
	return lines
}

// answer tells the parts the agent answered, and keeps the lines they put under the reply.
// An error is the log's.
func (o *offered) answer(ctx context.Context) error {
	for _, a := range o.answered {
		lines, err := a(ctx)
		o.notes = append(o.notes, lines...)
		if err != nil {
			return err
		}
	}
	return nil
}

// steer tells the parts messages up to through joined the turn. An error is the log's.
func (o offered) steer(ctx context.Context, through int64) error {
	for _, f := range o.steered {
		if err := f(ctx, through); err != nil {
			return err
		}
	}
	return nil
}

// wait tells the parts the turn starts (true) or stops (false) waiting for a person.
func (o offered) wait(ctx context.Context, waiting bool) {
	for _, f := range o.waiting {
		f(ctx, waiting)
	}
}
