package connectors

import (
	"context"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slashcmd"
)

// Command is /logbook mcp: the MCP servers offered in the channel it is typed in,
// their tools and whether each is reachable. channelName names a channel id (nil: servers
// named by channel name are not matched). c nil: the deployment has no servers, and the
// command says so.
func Command(c *Connectors, channelName func(ctx context.Context, id string) string, log zerolog.Logger) slashcmd.Command {
	return slashcmd.Command{Name: "mcp", Who: slashcmd.Anyone,
		Usage: "`/logbook mcp` lists the MCP servers and tools offered in this channel, and whether each is reachable.",
		Run: func(ctx context.Context, cmd slashcmd.Call) string {
			if c == nil {
				return "No MCP server is configured on this deployment: an operator lists them in LOGBOOK_MCP_CONFIG (docs/connectors.md)."
			}
			name := ""
			if channelName != nil {
				name = channelName(ctx, cmd.ChannelID)
			}
			return connectorsText(c.Check(ctx, cmd.ChannelID, name, log))
		}}
}

// maxListedTools bounds the tools /logbook mcp names per server.
const maxListedTools = 30

func connectorsText(sts []Status) string {
	if len(sts) == 0 {
		return "No MCP server is offered in this channel (a server's `channels` in LOGBOOK_MCP_CONFIG names where it is)."
	}
	var sb strings.Builder
	sb.WriteString("MCP servers offered in this channel:\n")
	for _, st := range sts {
		switch {
		case !st.Checked && st.Failed != nil:
			fmt.Fprintf(&sb, "• *%s* (local, %s): :warning: could not be started in a thread's sandbox at %s (%d times in a row) — %s; threads leave it out until %s\n",
				st.Server, st.Transport, st.Failed.At.UTC().Format("15:04 UTC"), st.Failed.Count, mrkdwn.EscapeText(st.Failed.Error), st.Failed.Until.UTC().Format("15:04 UTC"))
			continue
		case !st.Checked:
			fmt.Fprintf(&sb, "• *%s* (local, %s): runs in each thread's sandbox, started on first use; not checked from here, and no start has failed on this replica\n", st.Server, st.Transport)
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
