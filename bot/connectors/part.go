package connectors

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

// Part offers each turn the tools of the MCP servers of its channel (mcp__<server>__<tool>),
// refreshed before each model call, and has a person approve the calls the servers' approve
// patterns name. A server that could not be started or reached is said under the reply, once
// per thread (connector_unavailable). A cell keeps its channel's Session (its connections, its local servers,
// started in the cell's sandbox) for its length, and closes it when it ends. channelName
// names a channel id for servers listed by channel name (nil: ids only).
func (c *Connectors) Part(channelName func(ctx context.Context, id string) string) part.Part {
	return connectorsPart{c: c, channelName: channelName}
}

type connectorsPart struct {
	c           *Connectors
	channelName func(ctx context.Context, id string) string
}

// cellKey is the key of a cell's Session in its part.Cell.
type cellKey struct{}

func (p connectorsPart) Offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	v, ok := s.Cell.Value(cellKey{}, func() (any, func()) {
		ch, name := s.Session.Key.Channel, ""
		if p.channelName != nil {
			name = p.channelName(ctx, ch)
		}
		var sb Sandbox
		if s.Hands != nil {
			sb = s.Hands
		}
		sess := p.c.Session(ch, name, sb, s.Cell.Log)
		return sess, sess.Close
	})
	sess, _ := v.(*Session)
	if !ok || sess == nil || !sess.Offers() {
		return part.Offer{}, nil
	}
	w := &watch{sess: sess, s: s}
	return part.Offer{
		Toolsets: []brain.Toolset{watched{Toolset(sess), w}},
		Asks:     func(tool string) bool { return IsTool(tool) && sess.Approve(tool) },
		Answered: func(ctx context.Context) ([]string, error) {
			changed, err := w.answered(ctx)
			if err != nil {
				return nil, err
			}
			down, err := unavailable(ctx, s, sess)
			return append(changed, down...), err
		},
	}, nil
}

// connectorsActor records what the connectors met: a changed tool description, a server
// that could not be started or reached.
var connectorsActor = session.Actor{Kind: session.ActorSystem, ID: "connectors"}

// watch records, in a turn's session, the tool descriptions its listings found changed
// (mcp_tool_changed), and tells the thread under the reply.
type watch struct {
	sess *Session
	s    part.Scope

	mu      sync.Mutex
	pending []Change // taken from the session, not yet recorded
	told    []string // lines for the reply
}

// record appends the changes the session's listings met; one that cannot be appended now is
// tried again at the next listing or once the agent answered.
func (w *watch) record(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, w.sess.Changes()...)
	for len(w.pending) > 0 {
		c := w.pending[0]
		text := fmt.Sprintf(":warning: MCP server %s changed what its tool %s tells the model since this channel first listed it (%s); "+
			"the agent was given the new description, and both are in the transcript.",
			mrkdwn.EscapeText(c.Server), c.Name, c.FirstSeen.UTC().Format("2006-01-02 15:04 UTC"))
		ev := session.MCPToolChanged{Server: c.Server, Tool: c.Tool, Name: c.Name, Before: c.Before, After: c.After,
			BeforeSHA256: hex.EncodeToString(c.BeforeSHA256), AfterSHA256: hex.EncodeToString(c.AfterSHA256), FirstSeen: c.FirstSeen, Text: text}
		if _, err := w.s.Log.Append(ctx, session.NewEvent{Type: session.TypeMCPToolChanged, Actor: connectorsActor, IdempotencyKey: ev.Key(), Payload: ev}); err != nil {
			return err
		}
		w.pending = w.pending[1:]
		w.told = append(w.told, text)
	}
	return nil
}

func (w *watch) answered(ctx context.Context) ([]string, error) {
	if err := w.record(ctx); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.told, nil
}

// watched is a Toolset whose listings record the description changes they meet.
type watched struct {
	brain.Toolset
	w *watch
}

func (t watched) Tools(ctx context.Context) []brain.Tool {
	tools := t.Toolset.Tools(ctx)
	if err := t.w.record(ctx); err != nil {
		t.w.s.Logger.Warn().Err(err).Msg("a changed MCP tool description is not recorded yet; tried again when the agent answered")
	}
	return tools
}

// unavailable records, for each server the turn went without because it could not be started
// or reached, a connector_unavailable the thread has not had yet, and returns its line for the
// reply's footer. An error is the log's.
func unavailable(ctx context.Context, s part.Scope, sess *Session) ([]string, error) {
	down := sess.Unavailable()
	if len(down) == 0 {
		return nil, nil
	}
	had := map[string]bool{}
	for _, e := range session.Select(s.Log.Snapshot(), session.Range{Types: []session.Type{session.TypeConnectorUnavailable}}) {
		had[e.IdempotencyKey] = true
	}
	var lines []string
	for _, d := range down {
		what := "could not be reached"
		if !d.Remote {
			what = "could not be started in this thread's sandbox"
		}
		u := session.ConnectorUnavailable{Server: d.Server, Transport: d.Transport, Error: d.Error}
		u.Text = fmt.Sprintf(":warning: MCP server *%s* %s, so its tools were not offered: %s. `/logbook mcp` shows its state.",
			mrkdwn.EscapeText(d.Server), what, mrkdwn.EscapeText(d.Error))
		if had[u.Key()] {
			continue
		}
		if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeConnectorUnavailable, Actor: connectorsActor, IdempotencyKey: u.Key(), Payload: u}); err != nil {
			return lines, err
		}
		lines = append(lines, u.Text)
	}
	return lines, nil
}

// Source is what a Toolset calls: a *Session's tools and calls.
type Source interface {
	Tools(ctx context.Context) []Tool
	Call(ctx context.Context, name string, input json.RawMessage) Result
}

// Toolset is s's tools as the brain calls them: asked again before each model call, since a
// server may change its list.
func Toolset(s Source) brain.Toolset { return toolset{s} }

type toolset struct{ s Source }

func (ts toolset) Tools(ctx context.Context) []brain.Tool {
	var tools []brain.Tool
	for _, t := range ts.s.Tools(ctx) {
		spec := brain.ToolSpec{Name: t.Name, Description: t.Description, Schema: t.Schema, Server: t.Server, Tool: t.Tool, ReadOnly: t.ReadOnly}
		tools = append(tools, brain.NewTool(spec, func(ctx context.Context, use brain.ToolUse) brain.Outcome {
			return outcome(ts.s.Call(ctx, use.Name, use.Input))
		}))
	}
	return tools
}

// outcome is r as the brain takes a tool's result: its images as the server declared them.
func outcome(r Result) brain.Outcome {
	out := brain.Outcome{Content: r.Content, IsError: r.IsError}
	for _, im := range r.Images {
		out.Images = append(out.Images, brain.Media{MediaType: im.MIMEType, Data: im.Data})
	}
	return out
}
