package budget

import (
	"fmt"
	"strings"
)

// Call is the largest model call a turn makes: its input, the history at the context budget
// (LOGBOOK_CONTEXT_BUDGET, none of it read from the prompt cache), and its output at the
// output limit (LOGBOOK_MAX_OUTPUT_TOKENS). Tokens.
type Call struct {
	Input, Output int64
}

// Worst is the most one call of the model named by spec ("anthropic:claude-sonnet-4-5", as
// LOGBOOK_MODEL and the model setting take it) can cost, and the output alone, the least a
// call is held at before it runs. ok false: the model has no price (or is offline).
func (p Prices) Worst(spec string, c Call) (worst, output Money, ok bool) {
	provider, model, found := strings.Cut(spec, ":")
	if !found {
		provider, model = "", spec
	}
	if provider == "offline" || spec == "offline" {
		return 0, 0, false
	}
	pr, ok := p.For(provider, model)
	if !ok {
		return 0, 0, false
	}
	return pr.Cost(Usage{Input: c.Input, Output: c.Output}), pr.Cost(Usage{Output: c.Output}), true
}

// Shortfall says what a daily budget of limit (named by what, "LOGBOOK_BUDGET's channel
// budget") means when it is below the worst case of one call of the model spec: every call
// is held at its input plus its whole output limit before it runs, and refused when that does
// not fit in what is left of the day. "" when the budget covers a call, or the model has no
// price. A zero budget is taken as meant to stop every call and is not questioned.
func (p Prices) Shortfall(what string, limit Money, spec string, c Call) string {
	worst, output, ok := p.Worst(spec, c)
	if !ok || limit == 0 || limit >= worst {
		return ""
	}
	msg := fmt.Sprintf("%s of %s %s is below what one model call of %s can cost: %s %s "+
		"(%d input tokens, the context budget, and %d output tokens, the output limit).",
		what, limit, p.Currency, spec, worst, p.Currency, c.Input, c.Output)
	if limit < output {
		return msg + fmt.Sprintf(" Each call is held at its input plus its whole output limit (%s %s alone) before it runs, "+
			"so every call will be refused: raise the budget, or lower LOGBOOK_MAX_OUTPUT_TOKENS.", output, p.Currency)
	}
	return msg + " Each call is held at its input plus its whole output limit before it runs, " +
		"so a long thread's calls will be refused even on a day with nothing spent."
}
