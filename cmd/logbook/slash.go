package main

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session/search"
)

// slashParts are what /logbook's subcommands answer from.
type slashParts struct {
	Team     string // the workspace's team id
	Admins   []string
	Search   *search.Searcher
	Dir      *bot.Directory // nil: no visibility re-check, no channel names (tests only)
	Repos    *bot.ChannelRepos
	Settings *settings.Settings
	Memory   *memory.Memory
	Budget   *budget.Budget         // nil: no /logbook budget
	MCP      *connectors.Connectors // nil: no /logbook mcp
	// Schedules answers /logbook schedule (nil: none).
	Schedules *schedule.Scheduler
	Log       zerolog.Logger
}

// slashTable is every subcommand of /logbook, registered once: /logbook help lists them in
// this order.
func slashTable(p slashParts) *slashcmd.Table {
	var vis bot.Visibility
	var channelName func(ctx context.Context, id string) string
	if p.Dir != nil {
		vis, channelName = p.Dir, p.Dir.ChannelName
	}
	t := bot.SlashTable(p.Search, vis, p.Team, p.Repos, p.Admins)
	if p.MCP != nil {
		t.Add(connectors.Command(p.MCP, channelName, p.Log))
	}
	t.Add(settings.Command(p.Settings))
	t.Add(memory.Commands(p.Memory)...)
	if p.Budget != nil {
		t.Add(p.Budget.SlashCommand())
	}
	if p.Schedules != nil {
		t.Add(schedule.Command(p.Schedules))
	}
	return t
}
