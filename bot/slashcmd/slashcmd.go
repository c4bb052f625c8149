// Package slashcmd is /logbook's table of subcommands: each one's name, its line in
// `/logbook help`, who may run it and what answers it. The text is parsed once, here; the
// packages that own a job (bot, settings, memory, budget) give their commands and serve
// registers them all in one Table, so help lists every subcommand there is.
package slashcmd

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/logbook/logbook/session/slacktext"
	"github.com/slack-go/slack"
)

// Who says who may run a command.
type Who int

const (
	// Anyone who can type /logbook, people of other organisations (Slack Connect) included;
	// the command sees Call.External and scopes its answer itself.
	Anyone Who = iota
	// Home is the people of the workspace's organisation only: others get Command.Refusal.
	Home
)

// Call is one run of a command.
type Call struct {
	slack.SlashCommand        // as Slack sent it
	Args               string // the text after the subcommand's name, trimmed
	// Team is the team the command runs for: Slack's team_id, else the table's.
	Team string
	// External: the person's team is not the workspace's (Slack Connect).
	External bool
}

// Command is one subcommand of /logbook.
type Command struct {
	Name string // what follows /logbook: "search"
	// Usage is its line in /logbook help, without the bullet; "" when another command's line
	// tells of it too (remember, memory and forget share one).
	Usage string
	Who   Who
	// Refusal answers a person Who excludes.
	Refusal string
	Run     func(ctx context.Context, c Call) string
}

// Help is the text around the commands' lines in /logbook help.
type Help struct {
	Intro []string // lines before the commands' (the first is the title, the others bulleted)
	Outro string   // the last line
}

// Table is /logbook's subcommands, in the order help lists them.
type Table struct {
	team string
	help Help
	cmds []Command
}

// New returns an empty table; team is the workspace's team id ("": every person counts as
// the workspace's).
func New(team string, help Help) *Table { return &Table{team: team, help: help} }

// Add registers commands. A name registered twice, or a command without a name or a Run,
// is a programming error and panics.
func (t *Table) Add(cmds ...Command) *Table {
	for _, c := range cmds {
		if c.Name == "" || c.Run == nil || c.Name == "help" {
			panic(fmt.Sprintf("slashcmd: command %q has no name or no Run, or is help", c.Name))
		}
		if t.find(c.Name) != nil {
			panic("slashcmd: /logbook " + c.Name + " registered twice")
		}
		t.cmds = append(t.cmds, c)
	}
	return t
}

// Names are the registered commands' names, in order.
func (t *Table) Names() []string {
	out := make([]string, len(t.cmds))
	for i, c := range t.cmds {
		out[i] = c.Name
	}
	return out
}

func (t *Table) find(name string) *Command {
	for i := range t.cmds {
		if t.cmds[i].Name == name {
			return &t.cmds[i]
		}
	}
	return nil
}

// Answer answers /logbook (bot.SlashHandler's shape): nothing or help is the help, a
// registered name runs its command, anything else is named as not existing, with the help.
func (t *Table) Answer(ctx context.Context, cmd slack.SlashCommand) string {
	sub, rest, _ := strings.Cut(strings.TrimSpace(cmd.Text), " ")
	if sub == "" || sub == "help" {
		return t.HelpText()
	}
	c := t.find(sub)
	if c == nil {
		return "There is no `/logbook " + cutCommand(sub) + "`: type `/logbook help`, or one of these.\n" + t.HelpText()
	}
	external := t.team != "" && cmd.TeamID != "" && cmd.TeamID != t.team
	if external && c.Who == Home {
		return c.Refusal
	}
	return c.Run(ctx, Call{SlashCommand: cmd, Args: strings.TrimSpace(rest), Team: cmp.Or(cmd.TeamID, t.team), External: external})
}

// HelpText is /logbook help: the intro, every command's line in order, the outro.
func (t *Table) HelpText() string {
	var sb strings.Builder
	for i, l := range t.help.Intro {
		if i > 0 {
			sb.WriteString("• ")
		}
		sb.WriteString(l + "\n")
	}
	for _, c := range t.cmds {
		if c.Usage != "" {
			sb.WriteString("• " + c.Usage + "\n")
		}
	}
	sb.WriteString(t.help.Outro)
	return strings.TrimRight(sb.String(), "\n")
}

// cutCommand is an unknown subcommand as the answer names it: at most 40 characters, shown
// as typed inside a code span (no backtick to end it, Slack's &, < and > escaped).
func cutCommand(sub string) string {
	if r := []rune(sub); len(r) > 40 {
		sub = string(r[:40]) + "…"
	}
	return strings.NewReplacer("`", "'", "&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(sub)
}

// ParseAdmins reads LOGBOOK_ADMINS: Slack user ids, comma-separated; the people who may run
// the commands that change a channel (Who: Admins).
func ParseAdmins(s string) ([]string, error) {
	var ids []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slacktext.IsUserID(f) {
			return nil, fmt.Errorf("%q is not a Slack user id (U… or W…)", f)
		}
		ids = append(ids, f)
	}
	return ids, nil
}

// Mentions names admins (ParseAdmins' ids) as Slack user mentions, "<@U1>, <@U2>", to say who
// may resume or change something; ids that are not Slack user ids are left out, so nothing
// but a person is ever pinged. "" when there are none.
func Mentions(admins []string) string {
	var out []string
	for _, id := range admins {
		if slacktext.IsUserID(id) {
			out = append(out, "<@"+id+">")
		}
	}
	return strings.Join(out, ", ")
}

// AgentCommands are the subcommands as a Slack code channel's commands
// (agents.conversations.setCommands): each name, and the first line of its usage.
func (t *Table) AgentCommands() []slack.AgentCommand {
	if t == nil {
		return nil
	}
	out := make([]slack.AgentCommand, 0, len(t.cmds))
	for _, c := range t.cmds {
		usage, _, _ := strings.Cut(c.Usage, "\n")
		if r := []rune(usage); len(r) > 200 {
			usage = string(r[:199]) + "…"
		}
		out = append(out, slack.AgentCommand{Name: c.Name, Description: usage})
	}
	return out
}
