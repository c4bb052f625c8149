package brain

import (
	"context"
	"slices"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// refreshTools sets the turn's tools: the brain's own (the sandbox's, read_log), the parts'
// (Turn.Tools), and the toolsets' current ones. A name offered twice keeps its first tool.
func (b *Brain) refreshTools(ctx context.Context, st *turn) {
	var all []Tool
	if st.Hands != nil {
		all = handsTools(st.Hands, b.cfg.CommandTimeout)
	}
	all = append(all, st.Tools...)
	for _, ts := range st.Toolsets {
		all = append(all, ts.Tools(ctx)...)
	}
	st.offered, st.tools = st.offered[:0], nil
	st.byName = map[string]Tool{ToolReadLog: readLogTool(b, st)} // offered by toolsFor, with a summary
	for _, t := range all {
		s := t.Spec()
		if _, dup := st.byName[s.Name]; dup {
			st.log.Warn().Str("tool", s.Name).Msg("two tools of one name offered; the first is kept")
			continue
		}
		st.byName[s.Name] = t
		st.offered = append(st.offered, t)
		st.tools = append(st.tools, s)
	}
}

// toolsFor is the tools a round offers: the turn's, and read_log when the history opens with
// a summary.
func (st *turn) toolsFor(h history) []ToolSpec {
	if h.Summary.ToSeq > 0 {
		return append(slices.Clip(st.tools), st.byName[ToolReadLog].Spec())
	}
	return st.tools
}

// toolCall is the tool_call payload of use: an MCP tool's calls name their server and tool,
// and whether the server marks the tool read-only (safe to repeat after a crash).
func (st *turn) toolCall(use ToolUse) session.ToolCall {
	c := session.ToolCall{CallID: use.ID, Name: use.Name, Input: use.Input}
	if t, ok := st.byName[use.Name]; ok {
		s := t.Spec()
		c.Server, c.Tool, c.ReadOnly = s.Server, s.Tool, s.ReadOnly
	}
	return c
}

// rerunnable are the calls repair runs again instead of recording an unknown outcome: those
// of read-only tools (an MCP server says so) the turn still offers.
func (st *turn) rerunnable(c session.ToolCall) (ToolUse, bool) {
	if !c.ReadOnly {
		return ToolUse{}, false
	}
	if _, offered := st.byName[c.Name]; !offered {
		return ToolUse{}, false
	}
	return ToolUse{ID: c.CallID, Name: c.Name, Input: c.Input}, true
}

// Recoverer is a Tool whose interrupted call's outcome its own records in the log may tell
// (a file attach_file shared before the process died): repair records that outcome instead
// of an unknown one, so the model does not do it again.
type Recoverer interface {
	Recover(evs []session.Event, call session.ToolCall) (Outcome, bool)
}

// recovered is what the offered tool of call says, from evs, the interrupted call did.
func (st *turn) recovered(evs []session.Event, call session.ToolCall) (Outcome, bool) {
	if r, ok := st.byName[call.Name].(Recoverer); ok {
		return r.Recover(evs, call)
	}
	return Outcome{}, false
}

// keptFromRunning reports whether a decision other than approval kept the call from running.
func keptFromRunning(folded *thread.Turns, id string) bool {
	_, p, ok := folded.Decision(id)
	return ok && p.Decision != session.DecisionApproved
}
