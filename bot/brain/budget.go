package brain

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/logbook/logbook/session"
)

// Meter admits a turn's model calls against a budget (Turn.Meter). The brain asks it before
// every model call — reply rounds, continuations, summaries and titles, each retry again —
// and tells it what the call cost once it answered.
type Meter interface {
	// Admit is asked before a call starts, with the most it may cost: its input (estimated
	// in tokens) and its output limit (max_output_tokens). An *OverBudgetError says the call
	// must not start: a reply round then ends the turn with the error's Reply; a title or a
	// summary is skipped, a continuation leaves the reply cut. Any other error stops the call
	// the same way (what it would cost cannot be known). settle is called exactly once after
	// an admitted call: with its usage, or nil when it failed.
	Admit(ctx context.Context, c MeteredCall) (settle func(ctx context.Context, u *session.Usage), err error)
}

// MeteredCall is what Meter.Admit is told of a model call about to start.
type MeteredCall struct {
	Purpose         Purpose
	Provider, Model string // as configured; the answer's model may be more precise
	InputTokens     int64  // estimated from the request's text
	MaxOutputTokens int64
}

// OverBudgetError is a model call a Meter refused: Reply says in the thread why, and who can
// raise the budget; Code is the error event's code ("channel_budget", "person_budget", ...).
type OverBudgetError struct {
	Code  string
	Reply string
	Err   error // what made the spend unknowable, for Code "budget_unknown"; nil otherwise
}

func (e *OverBudgetError) Error() string {
	if e.Err != nil {
		return "budget: " + e.Code + ": " + e.Err.Error()
	}
	return "over budget: " + e.Code
}

func (e *OverBudgetError) Unwrap() error { return e.Err }

// admit asks m (nil: no meter) whether req may be sent; the settle it returns is never nil.
func (b *Brain) admit(ctx context.Context, m Meter, req Request) (func(context.Context, *session.Usage), error) {
	if m == nil {
		return func(context.Context, *session.Usage) {}, nil
	}
	p := b.cfg.Provider
	settle, err := m.Admit(ctx, MeteredCall{Purpose: req.Purpose, Provider: p.Name(), Model: p.Model(),
		InputTokens: int64(estimateTokens(req.System, req.Messages, req.Tools)), MaxOutputTokens: req.MaxTokens})
	var ob *OverBudgetError
	switch {
	case errors.As(err, &ob):
		return nil, fmt.Errorf("admit a %s call: %w", cmp.Or(req.Purpose, PurposeReply), err)
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &OverBudgetError{Code: "budget_unknown", Err: err,
			Reply: "I did not call the model: this channel's spend could not be checked against its budget. The error is recorded in the log."}
	}
	if settle == nil {
		settle = func(context.Context, *session.Usage) {}
	}
	return settle, nil
}
