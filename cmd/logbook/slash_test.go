package main

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/grants"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/session"
)

// slashHelpGolden is /logbook help as serve wires it with every part on: every subcommand of
// the table, budget and mcp included (issue 26: help listed neither).
const slashHelpGolden = "logbook — an agent whose every thread is a searchable record.\n" +
	"• Mention @logbook in a public channel to start a thread; reply in the thread to continue.\n" +
	"• `stop` in a thread (or the 🛑 reaction, or the stop button) stops a running answer; `mute` / `unmute` silence and resume me there.\n" +
	"• `/logbook search <words>` finds past threads in public channels (quotes for phrases, -word to exclude, OR); in a channel shared with another organisation, only that channel's.\n" +
	"• *Open transcript* in the ⋯ menu of any message of a thread links that thread's transcript (`/logbook transcript` tells you so).\n" +
	"• `/logbook repo` says which repository this channel's sandboxes check out; an admin sets it with `/logbook repo <https-url> [branch]` or `off`.\n" +
	"• `/logbook mcp` lists the MCP servers and tools offered in this channel, and whether each is reachable.\n" +
	"• `/logbook config` shows this channel's settings (model, instructions, approvals, thread replies, daily budget, setup); an admin changes one with `/logbook config <name> <value>`.\n" +
	"• `/logbook remember <text>` adds a note to this channel's memory (offered to me in new threads); `/logbook memory` lists the notes, `/logbook forget <id>` removes one.\n" +
	"• `/logbook budget` shows today's model spend and budgets here; an admin raises one for today with `/logbook budget raise <amount> [<member ID>]`.\n" +
	"• " + schedule.Usage + "\n" +
	"• " + grants.Usage + "\n" +
	"Private channels and DMs are never stored."

func TestSlashHelpListsEverySubcommand(t *testing.T) {
	t.Parallel()
	bgt, err := budget.New(budget.Config{Store: &session.Store{}})
	if err != nil {
		t.Fatal(err)
	}
	tb := slashTable(slashParts{Team: "T1", Budget: bgt, MCP: connectors.New(connectors.Config{}, connectors.Options{}), Log: zerolog.Nop(),
		Schedules: schedule.New(&session.Store{}, nil, schedule.Config{}), Grants: &session.Store{}})
	for _, text := range []string{"", "help"} {
		if got := tb.Answer(context.Background(), slack.SlashCommand{Text: text, TeamID: "T1", ChannelID: "C1"}); got != slashHelpGolden {
			t.Errorf("/logbook %s:\n%s\nwant:\n%s", text, got, slashHelpGolden)
		}
	}
	if got, want := len(tb.Names()), 11; got != want { // search transcript repo mcp config remember memory forget budget schedule grants
		t.Errorf("%d subcommands %v, want %d", got, tb.Names(), want)
	}
	// Without a budget or schedules there is neither command, nor a line for it; without MCP
	// servers /logbook mcp says there are none here (issue 46: it said there was no such
	// subcommand).
	bare := slashTable(slashParts{Team: "T1", Log: zerolog.Nop()})
	if got := bare.Answer(context.Background(), slack.SlashCommand{Text: "mcp", TeamID: "T1", ChannelID: "C1"}); !strings.Contains(got, "No MCP server is configured") {
		t.Errorf("/logbook mcp without servers: %q", got)
	}
	for _, name := range []string{"budget", "schedule"} {
		if got := bare.Answer(context.Background(), slack.SlashCommand{Text: name, TeamID: "T1", ChannelID: "C1"}); got[:14] != "There is no `/" {
			t.Errorf("/logbook %s without one: %q", name, got)
		}
	}
}
