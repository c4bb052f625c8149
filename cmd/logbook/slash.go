package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/grants"
	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/recall"
	"github.com/logbook/logbook/bot/repo"
	"github.com/logbook/logbook/bot/review"
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
	Dir      *directory.Directory // nil: no visibility re-check, no channel names (tests only)
	Repos    *repo.Channels
	Settings *settings.Settings
	Memory   *memory.Memory
	Budget   *budget.Budget         // nil: no /logbook budget
	MCP      *connectors.Connectors // nil: no /logbook mcp
	// Schedules answers /logbook schedule (nil: none).
	Schedules *schedule.Scheduler
	// Review answers /logbook review (nil: none).
	Review *review.Trigger
	// Grants answers /logbook grants (nil: none).
	Grants grants.Store
	Log    zerolog.Logger
}

// slashTable is every subcommand of /logbook, registered once: /logbook help lists them in
// this order.
func slashTable(p slashParts) *slashcmd.Table {
	var vis recall.Visibility
	var channelName func(ctx context.Context, id string) string
	var private func(ctx context.Context, id string) (bool, error)
	if p.Dir != nil {
		vis, channelName, private = p.Dir, p.Dir.ChannelName, p.Dir.ChannelPrivate
	}
	t := slashcmd.New(p.Team, slashHelp()).Add(recall.Command(p.Search, vis), transcriptCommand(), repo.SlashCommand(p.Repos, p.Admins))
	t.Add(connectors.Command(p.MCP, channelName, p.Log)) // without servers, it says there are none
	t.Add(settings.Command(p.Settings))
	t.Add(memory.Commands(p.Memory, private)...)
	if p.Budget != nil {
		t.Add(p.Budget.SlashCommand())
	}
	if p.Schedules != nil {
		t.Add(schedule.Command(p.Schedules))
	}
	if p.Review != nil {
		t.Add(p.Review.Command())
	}
	if p.Grants != nil {
		t.Add(grants.Command(p.Grants, p.Admins, time.Now, p.Log))
	}
	return t
}

// transcriptCommand is /logbook transcript: Slack does not say which thread a slash command
// was typed in, so it points to the message shortcut that does (bot.TranscriptShortcut).
func transcriptCommand() slashcmd.Command {
	return slashcmd.Command{Name: "transcript", Who: slashcmd.Anyone,
		Usage: "*Open transcript* in the ⋯ menu of any message of a thread links that thread's transcript (`/logbook transcript` tells you so).",
		Run: func(context.Context, slashcmd.Call) string {
			return "Slack does not tell a slash command which thread it was typed in: on any message of the thread, " +
				"open its ⋯ menu and choose *Open transcript* (a message shortcut), or open the thread's page on logbook's web pages."
		}}
}

// slashHelp is the text around the commands' lines in /logbook and /logbook help.
func slashHelp() slashcmd.Help {
	return slashcmd.Help{Intro: []string{
		"logbook — an agent whose every thread is a searchable record.",
		"Mention @" + "logbook in a public channel to start a thread; reply in the thread to continue.",
		"`stop` in a thread (or the 🛑 reaction, or the stop button) stops a running answer; `mute` / `unmute` silence and resume me there.",
	},
		Outro: "Private channels and DMs are never stored."}
}
