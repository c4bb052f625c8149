package brain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

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
	// an admitted call: with its usage — for a call that failed after the provider accepted it
	// (a broken stream, a stop, a timeout), what was sent and what streamed, Usage.Source
	// saying whether the provider counted it or logbook estimated it — or nil when it failed
	// before the provider accepted it (connection refused, an HTTP error before any stream):
	// nothing reached the model.
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

// partialUsage is what a call that failed (err) after the provider accepted it spent, for its
// charge: part is what arrived of its stream; nil part (it never reached the model) is nil.
// Each count is the provider's where the stream carried it, else an estimate, and Source
// says which (UsageFromProvider only when every count was the provider's):
//
//   - input: the request's estimate (estimateTokens: a quarter of its text bytes, 4 per block,
//     an image's tokens), the one its admission was held at;
//   - output: estimateOutput of what streamed.
func (b *Brain) partialUsage(ctx context.Context, req Request, part *Partial, err error, latency time.Duration) *session.Usage {
	if part == nil {
		return nil
	}
	p := b.cfg.Provider
	u := &session.Usage{Provider: p.Name(), Model: cmp.Or(part.Model, p.Model()), Source: session.UsageFromProvider,
		Ended: callEnded(ctx, err), LatencyMS: latency.Milliseconds()}
	if part.InputKnown {
		u.InputTokens, u.CacheReadTokens, u.CacheWriteTokens = part.InputTokens, part.CacheReadTokens, part.CacheWriteTokens
	} else {
		u.InputTokens, u.Source = int64(estimateTokens(req.System, req.Messages, req.Tools)), session.UsageEstimated
	}
	if part.OutputKnown {
		u.OutputTokens = part.OutputTokens
	} else {
		u.OutputTokens, u.Source = estimateOutput(part.Pieces, part.Bytes), session.UsageEstimated
	}
	return u
}

// estimateOutput is the output tokens of a stream that brought pieces pieces of bytes bytes
// before it failed: a quarter of the bytes rounded up (the input's estimate: about four bytes a
// token in English and code), and never fewer than the pieces (a provider streams a token or
// more a piece).
func estimateOutput(pieces int, bytes int64) int64 {
	return max(int64(pieces), (bytes+3)/4)
}

// waitCut reports a call that failed, before any of its answer arrived, because it was
// stopped or timed out (ctx ended, or the HTTP client's timeout) — not refused by the provider
// nor unable to connect: the provider had the request (it may have been reading it, or
// writing an answer not yet sent: a non-streamed call, a stream's first event), so its input
// is charged, estimated.
func waitCut(ctx context.Context, err error) bool {
	var ne net.Error
	var pe *ProviderError
	switch {
	case ctx.Err() != nil:
		return true
	case errors.As(err, &pe) && pe.Status != 0:
		return false
	}
	return errors.As(err, &ne) && ne.Timeout()
}

// callEnded says why a call the provider had accepted ended without its whole answer: a
// deadline (the turn's wall time, the HTTP client's timeout), a cancelled ctx (a person's
// stop, the process ending), or a broken stream.
func callEnded(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return session.CallTimedOut
	case ctx.Err() != nil:
		return session.CallStopped
	}
	return session.CallBroken
}
