package brain

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// Connectors are the MCP tools offered in the turn's channel (a *connectors.Session): their
// definitions, cached by the session and refreshed when a server says they changed, and a
// call of one by its name mcp__<server>__<tool>. A failing call is a Result with IsError.
type Connectors interface {
	Tools(ctx context.Context) []connectors.Tool
	Call(ctx context.Context, name string, input json.RawMessage) connectors.Result
}

// refreshConnectors sets the turn's tools to its own plus the connectors' current ones.
func (b *Brain) refreshConnectors(ctx context.Context, st *turn) {
	if st.Connectors == nil {
		return
	}
	st.mcp = st.Connectors.Tools(ctx)
	own := slices.DeleteFunc(slices.Clone(st.tools), func(s ToolSpec) bool { return connectors.IsTool(s.Name) })
	for _, t := range st.mcp {
		own = append(own, ToolSpec{Name: t.Name, Description: t.Description, Schema: t.Schema})
	}
	st.tools = own
}

// connector is the offered MCP tool named name.
func (st *turn) connector(name string) (connectors.Tool, bool) {
	i := slices.IndexFunc(st.mcp, func(t connectors.Tool) bool { return t.Name == name })
	if i < 0 {
		return connectors.Tool{}, false
	}
	return st.mcp[i], true
}

// callConnector runs a connector tool's call: what the server said, or why it could not.
func (b *Brain) callConnector(ctx context.Context, t Turn, use ToolUse) toolOutcome {
	if t.Connectors == nil {
		return toolOutcome{Content: use.Name + " is not available: no MCP server is offered in this channel", IsError: true}
	}
	r := t.Connectors.Call(ctx, use.Name, use.Input)
	shown, notes := screenImages(r.Images, t.Keep != nil && t.Files != nil)
	content := r.Content
	if len(notes) > 0 {
		content = strings.TrimSpace(content + "\n" + strings.Join(notes, "\n"))
	}
	return toolOutcome{Content: content, IsError: r.IsError, Images: shown}
}

// toolCall is the tool_call payload of use: connector calls name their server and tool, and
// whether the server marks the tool read-only (safe to repeat after a crash).
func (st *turn) toolCall(use ToolUse) session.ToolCall {
	c := session.ToolCall{CallID: use.ID, Name: use.Name, Input: use.Input}
	if t, ok := st.connector(use.Name); ok {
		c.Server, c.Tool, c.ReadOnly = t.Server, t.Tool, t.ReadOnly
	}
	return c
}

// connectorSpec declares a connector tool the history calls and the turn no longer offers
// (its server gone from the channel or the file): the APIs want every called tool declared.
func connectorSpec(name string) ToolSpec {
	return ToolSpec{Name: name, Description: "An MCP tool no longer offered here; calling it fails.",
		Schema: map[string]any{"type": "object"}}
}

// rerunnable are the calls repair runs again instead of recording an unknown outcome: those of
// connector tools the server marks read-only, when the turn still has connectors.
func (st *turn) rerunnable(calls map[string]session.ToolCall, id string) (ToolUse, bool) {
	c, ok := calls[id]
	if !ok || st.Connectors == nil || !c.ReadOnly || !connectors.IsTool(c.Name) {
		return ToolUse{}, false
	}
	return ToolUse{ID: c.CallID, Name: c.Name, Input: c.Input}, true
}

// keptFromRunning reports whether a decision other than approval kept the call from running.
func keptFromRunning(folded *thread.Turns, id string) bool {
	_, p, ok := folded.Decision(id)
	return ok && p.Decision != session.DecisionApproved
}
