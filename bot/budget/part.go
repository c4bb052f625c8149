package budget

import (
	"context"

	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

var budgetActor = session.Actor{Kind: session.ActorSystem, ID: "budget"}

// Part gives each turn's reply the budget notices its thread has not had yet: once the agent
// answered, when the channel's or the person's daily budget is nearly spent. (The admission
// of each model call is the turn's own: Budget.For.)
func (b *Budget) Part() part.Part { return noticesPart{b} }

type noticesPart struct{ b *Budget }

func (p noticesPart) Offer(_ context.Context, s part.Scope) (part.Offer, error) {
	return part.Offer{Answered: func(ctx context.Context) ([]string, error) { return p.notices(ctx, s) }}, nil
}

// notices records the notices the session has not had yet (budget_notice, by the budget) and
// returns their text for the reply's footer. A budget that cannot be read is logged: the reply
// goes out without the notice, and the next turn looks again. An error is the log's.
func (p noticesPart) notices(ctx context.Context, s part.Scope) ([]string, error) {
	ns, err := p.b.Notices(ctx, s.Session.Key.Channel, s.Requester)
	if err != nil {
		s.Logger.Warn().Err(err).Msg("budget: could not read today's spend for the notice")
		return nil, nil
	}
	had := map[string]bool{}
	for _, e := range session.Select(s.Log.Snapshot(), session.Range{Types: []session.Type{session.TypeBudgetNotice}}) {
		had[e.IdempotencyKey] = true
	}
	var lines []string
	for _, n := range ns {
		if had[n.Key()] {
			continue
		}
		if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeBudgetNotice, Actor: budgetActor, IdempotencyKey: n.Key(), Payload: n}); err != nil {
			return lines, err
		}
		lines = append(lines, n.Text)
	}
	return lines, nil
}
