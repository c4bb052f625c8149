package brain

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/logbook/logbook/session"
)

// stopKind is what a response's stop reason means for the loop.
type stopKind int

const (
	stopDone    stopKind = iota // end_turn, stop, stop_sequence: the answer is complete
	stopTools                   // tool_use, tool_calls, function_call: run the tools
	stopCut                     // max_tokens, length, model_context_window_exceeded: the output limit cut it
	stopPaused                  // pause_turn: the provider paused a long turn; send it back to continue
	stopRefused                 // refusal, content_filter: the model or its provider declined
	stopUnknown                 // a reason this package does not know: treated as done, and logged
)

// classifyStop maps a provider's stop reason to what the loop does with the response. The
// Anthropic Messages API's stop_reason is end_turn, tool_use, max_tokens, stop_sequence,
// pause_turn, refusal or model_context_window_exceeded; OpenAI Chat Completions'
// finish_reason is stop, tool_calls, length, content_filter or function_call (deprecated).
// Local OpenAI-compatible servers use the same words; "" (some omit it) counts as done.
func classifyStop(reason string) stopKind {
	switch reason {
	case "end_turn", "stop", "stop_sequence", "":
		return stopDone
	case "tool_use", "tool_calls", "function_call":
		return stopTools
	case "max_tokens", "length", "model_context_window_exceeded":
		return stopCut
	case "pause_turn":
		return stopPaused
	case "refusal", "content_filter":
		return stopRefused
	}
	return stopUnknown
}

// continuePrompt asks the model to go on with a reply the output limit cut.
const continuePrompt = "[harness] Your previous message was cut off by the output limit. Continue it exactly where it " +
	"stopped, without repeating anything and without any preamble."

// continueReply continues a reply that the output limit cut (or the provider paused), at most
// Config.MaxContinuations times: each call sends the history, the reply so far as the
// assistant's message and continuePrompt, with tools declared but not callable. It returns the
// whole text, the summed usage and whether the text is still cut. A failing continuation call
// ends the continuing; what arrived so far is kept. The partial texts live only in memory
// until the reply is appended: a crash in between re-runs the turn from the log.
func (b *Brain) continueReply(ctx context.Context, st *turn, req Request, resp Response, usage *session.Usage) (string, *session.Usage, bool) {
	text := resp.Text
	kind := classifyStop(resp.StopReason)
	for n := 0; n < b.cfg.MaxContinuations && (kind == stopCut || kind == stopPaused); n++ {
		if strings.TrimSpace(text) == "" {
			break // nothing to continue from (the limit was spent before any text)
		}
		next := req
		next.Messages = append(slices.Clip(req.Messages),
			Message{Role: RoleAssistant, Blocks: []Block{{Text: text}}},
			Message{Role: RoleUser, Blocks: []Block{{Text: continuePrompt}}})
		next.NoTools = len(next.Tools) > 0
		r, u, err := b.call(ctx, st.Meter, next, &st.live) // next.OnText streams into the same round
		if err != nil {
			st.log.Warn().Err(err).Int("continuation", n+1).Msg("continuing a cut reply failed; delivering it cut")
			break
		}
		st.log.Info().Int("continuation", n+1).Str("stop_reason", r.StopReason).Msg("continued a cut reply")
		text += r.Text
		usage = addUsage(usage, u)
		kind = classifyStop(r.StopReason)
	}
	return text, usage, kind == stopCut || kind == stopPaused
}

// addUsage sums two calls' usage; the stop reason, model and Ended are the later call's, and
// the sum is an estimate when either is.
func addUsage(a, b *session.Usage) *session.Usage {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	s := *a
	s.InputTokens += b.InputTokens
	s.OutputTokens += b.OutputTokens
	s.CacheReadTokens += b.CacheReadTokens
	s.CacheWriteTokens += b.CacheWriteTokens
	s.LatencyMS += b.LatencyMS
	s.StopReason = b.StopReason
	s.Model = b.Model
	s.Source, s.Ended = cmp.Or(b.Source, a.Source), b.Ended
	if a.Estimated() || b.Estimated() {
		s.Source = session.UsageEstimated
	}
	return &s
}

// cutNote closes a reply that is still cut after the continuations.
func (b *Brain) cutNote() string {
	return fmt.Sprintf("\n\n_(This reply was cut off: it reached the output limit of %d tokens. Ask me to continue.)_", b.cfg.MaxTokens)
}

// cutToolResult is the result of a tool call that the output limit cut: it is not run, since
// its input may be incomplete.
func (b *Brain) cutToolResult(name string) Outcome {
	return Outcome{IsError: true, Content: fmt.Sprintf(
		"not run: this %s call was cut off by the output limit (%d tokens) before its input was complete. "+
			"Retry with a smaller input: split large content over several calls (for a big file, write a first part, "+
			"then append the rest with run_command).", name, b.cfg.MaxTokens)}
}

// refusalText is the reply to a response the model or its provider declined.
func refusalText(resp Response) string {
	if resp.StopReason == "content_filter" {
		return "I can't give an answer to this: the model provider's content filter stopped the reply (finish reason content_filter)."
	}
	return "I can't help with this: the model declined to answer (stop reason refusal)."
}

// repeats notices a turn's tool calls failing identically: the same tool, the same input and
// the same error result, again and again.
type repeats struct {
	limit int
	seen  map[string]int
}

// record counts one outcome and reports whether this call has now failed identically limit
// times in the turn. Successes are not counted.
func (r *repeats) record(use ToolUse, out Outcome) bool {
	if !out.IsError || r.limit <= 0 {
		return false
	}
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	key := use.Name + "\x00" + canonicalJSON(use.Input) + "\x00" + out.Content
	r.seen[key]++
	return r.seen[key] >= r.limit
}

// canonicalJSON renders a JSON value with sorted keys and no spacing, so inputs that differ
// only in layout compare equal; invalid JSON is returned as it is.
func canonicalJSON(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(out)
}
