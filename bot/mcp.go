package bot

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/sandbox"
)

// openConnectors gives the cell the MCP connectors offered in its session's channel (none
// when the deployment has none or the channel is not named by any server's channels). Local
// servers run in the cell's sandbox.
func (c *Cell) openConnectors(ctx context.Context) {
	d := c.deps
	if d.Features.Connectors == nil {
		return
	}
	ch := c.sess.Key.Channel
	name := ""
	if d.Features.Channel != nil {
		name = d.Features.Channel(ctx, ch)
	}
	var sb connectors.Sandbox
	if c.hands != nil {
		sb = c.hands
	}
	if s := d.Features.Connectors.Session(ch, name, sb, c.log); s.Offers() {
		c.mcp = s
	}
}

// closeConnectors ends the cell's connections and stops its local servers, before its
// sandbox closes.
func (c *Cell) closeConnectors() {
	if c.mcp != nil {
		c.mcp.Close()
	}
}

// Start starts a long-lived process in the sandbox (a local MCP server), provisioning the
// sandbox first if need be. A sandbox that cannot (the "none" provider) gives
// sandbox.ErrDisabled.
func (h *Hands) Start(ctx context.Context, req sandbox.StartRequest) (*sandbox.Process, error) {
	return do(ctx, h, func(sb sandbox.Sandbox) (*sandbox.Process, error) {
		st, ok := sb.(sandbox.Starter)
		if !ok {
			return nil, sandbox.ErrDisabled
		}
		return st.Start(ctx, req)
	})
}

// connectorApproval is the approval mode of a connector tool: LOGBOOK_TOOL_APPROVAL's, made ask
// where the server's approve patterns name the tool.
func (t *turn) connectorApproval(mode, tool string) string {
	if mode == ApprovalAllow && t.mcp != nil && connectors.IsTool(tool) && t.mcp.Approve(tool) {
		return ApprovalAsk
	}
	return mode
}

// connectorPattern reports whether an entry of LOGBOOK_TOOL_APPROVAL names connector tools:
// mcp__<server>__<tool>, where a pattern (path.Match syntax, e.g. mcp__sentry__* or mcp__*)
// stands for names the servers give at run time.
func connectorPattern(tool string) bool {
	_, err := path.Match(tool, "")
	return connectors.IsTool(tool) && err == nil
}

// matchConnector is the mode of the most specific pattern of rules that matches a connector
// tool's name (the longest one; an exact name is looked up before), or "".
func matchConnector(rules map[string]string, tool string) string {
	if !connectors.IsTool(tool) {
		return ""
	}
	best, mode := "", ""
	for pat, m := range rules {
		ok, _ := path.Match(pat, tool)
		if ok && connectors.IsTool(pat) && (len(pat) > len(best) || len(pat) == len(best) && pat < best) {
			best, mode = pat, m
		}
	}
	return mode
}

// ConnectorsCommand is /logbook mcp: the MCP servers offered in the channel it is typed in,
// their tools and whether each is reachable. channelName names a channel id (nil: servers
// named by channel name are not matched). Serve registers it only when there are servers.
func ConnectorsCommand(c *connectors.Connectors, channelName func(ctx context.Context, id string) string, log zerolog.Logger) slashcmd.Command {
	return slashcmd.Command{Name: "mcp", Who: slashcmd.Anyone,
		Usage: "`/logbook mcp` lists the MCP servers and tools offered in this channel, and whether each is reachable.",
		Run: func(ctx context.Context, cmd slashcmd.Call) string {
			name := ""
			if channelName != nil {
				name = channelName(ctx, cmd.ChannelID)
			}
			return connectorsText(c.Check(ctx, cmd.ChannelID, name, log))
		}}
}

// maxListedTools bounds the tools /logbook mcp names per server.
const maxListedTools = 30

func connectorsText(sts []connectors.Status) string {
	if len(sts) == 0 {
		return "No MCP server is offered in this channel (a server's `channels` in LOGBOOK_MCP_CONFIG names where it is)."
	}
	var sb strings.Builder
	sb.WriteString("MCP servers offered in this channel:\n")
	for _, st := range sts {
		switch {
		case !st.Checked:
			fmt.Fprintf(&sb, "• *%s* (local, %s): runs in each thread's sandbox, started on first use; not checked from here\n", st.Server, st.Transport)
			continue
		case !st.Reachable:
			fmt.Fprintf(&sb, "• *%s* (remote, %s): :warning: unreachable — %s\n", st.Server, st.Transport, mrkdwn.EscapeText(st.Error))
			continue
		}
		fmt.Fprintf(&sb, "• *%s* (remote, %s): reachable, %d tools\n", st.Server, st.Transport, len(st.Tools))
		for i, t := range st.Tools {
			if i == maxListedTools {
				fmt.Fprintf(&sb, "    … and %d more\n", len(st.Tools)-i)
				break
			}
			note := ""
			if t.Approve {
				note = " (needs approval)"
			}
			fmt.Fprintf(&sb, "    `%s`%s\n", t.Name, note)
		}
	}
	return sb.String()
}
