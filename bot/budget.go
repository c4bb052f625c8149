package bot

import (
	"context"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/session"
)

// Budget meters a turn's model calls and says when a daily budget is nearly spent (a
// *budget.Budget; Features.Budget).
type Budget interface {
	// For is the meter of one turn, whose calls count against channel's budget and person's.
	For(channel, person string, sess session.ID, turn int64) brain.Meter
	// Notices are the notices a thread of channel should get now for person's turn; each is
	// recorded under its Key, so a thread gets it once.
	Notices(ctx context.Context, channel, person string) ([]session.BudgetNotice, error)
}

var budgetActor = session.Actor{Kind: session.ActorSystem, ID: "budget"}

// budgetNotices records the budget notices this session has not had yet (budget_notice, by
// the budget) and keeps their text for the reply's footer. A budget that cannot be read is
// logged: the reply goes out without the notice, and the next turn looks again.
func (t *turn) budgetNotices(ctx context.Context) error {
	if t.features.Budget == nil {
		return nil
	}
	ns, err := t.features.Budget.Notices(ctx, t.sess.Key.Channel, t.state.lastUserMsg.User)
	if err != nil {
		t.log.Warn().Err(err).Msg("budget: could not read today's spend for the notice")
		return nil
	}
	had := map[string]bool{}
	for _, e := range session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeBudgetNotice}}) {
		had[e.IdempotencyKey] = true
	}
	for _, n := range ns {
		if had[n.Key()] {
			continue
		}
		if _, err := t.flog.Append(ctx, session.NewEvent{Type: session.TypeBudgetNotice, Actor: budgetActor, IdempotencyKey: n.Key(), Payload: n}); err != nil {
			return err
		}
		t.notes = append(t.notes, n.Text)
	}
	return nil
}
