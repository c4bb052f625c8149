package settings

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/slacktext"
)

// Command is `/logbook config`, for the people of the workspace's organisation only (people
// of other organisations, Slack Connect, may neither see nor change a channel's settings).
// s nil: the deployment keeps no channel settings, and the command says so.
//
//	/logbook config                        every setting of the channel: its value and where it comes from
//	/logbook config <name>                 one setting whole, with its history (newest first)
//	/logbook config <name> <value…>        an admin sets it (the rest of the line is the value)
//	/logbook config <name> default         an admin resets it to the environment's default
func Command(s *Settings) slashcmd.Command {
	return slashcmd.Command{Name: "config", Who: slashcmd.Home,
		Usage:   "`/logbook config` shows this channel's settings (model, instructions, approvals, thread replies, daily budget, setup); an admin changes one with `/logbook config <name> <value>`.",
		Refusal: "Only people of this workspace's organisation may see or change a channel's settings.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			return s.command(ctx, c.Team, c.ChannelID, c.UserID, c.Args)
		}}
}

// command is /logbook config's answer.
func (s *Settings) command(ctx context.Context, team, channel, user, args string) string {
	if s == nil || s.cfg.Store == nil {
		return "Channel settings are not kept in this deployment: they come from its environment."
	}
	if !strings.HasPrefix(channel, "C") && !strings.HasPrefix(channel, "G") {
		return "Settings belong to a channel: use `/logbook config` in the channel."
	}
	args = strings.TrimSpace(args)
	name, value, hasValue := strings.Cut(args, " ")
	value = strings.TrimSpace(value)
	switch {
	case name == "":
		return s.show(ctx, team, channel)
	case !slices.Contains(Names, name):
		return fmt.Sprintf("There is no setting `%s`. Settings: %s.", clip(name, 40), "`"+strings.Join(Names, "`, `")+"`")
	case !hasValue || value == "":
		return s.showOne(ctx, team, channel, name)
	}
	if !slices.Contains(s.cfg.Admins, user) {
		return "Only logbook's admins (LOGBOOK_ADMINS) may change a channel's settings."
	}
	reset := value == "default"
	rec, err := s.Set(ctx, team, channel, name, value, !reset, user)
	var inv *InvalidError
	switch {
	case errors.As(err, &inv):
		return fmt.Sprintf("`%s` was not changed: %s", name, inv.Err)
	case err != nil:
		return "The setting could not be saved; try again."
	}
	was := "the default"
	if rec.OldSet {
		was = code(rec.Old)
	}
	var reply string
	if reset {
		reply = fmt.Sprintf("`%s` of this channel is the default again (%s): %s; it was %s. (Changed by <@%s>; new turns use it.)",
			name, s.defaultFrom(name), code(s.cfg.Defaults[name]), was, user)
	} else {
		reply = fmt.Sprintf("`%s` of this channel is now %s; it was %s. (Changed by <@%s>; new turns use it.)", name, code(value), was, user)
	}
	return reply + s.note(ctx, team, channel, name)
}

// note is the line, if any, the setting's Note adds to the reply to a change.
func (s *Settings) note(ctx context.Context, team, channel, name string) string {
	n := s.cfg.Notes[name]
	if n == nil {
		return ""
	}
	c, err := s.For(ctx, team, channel)
	if err != nil {
		return ""
	}
	if line := n(c); line != "" {
		return "\n:warning: " + line
	}
	return ""
}

// show lists every setting of the channel.
func (s *Settings) show(ctx context.Context, team, channel string) string {
	c, err := s.For(ctx, team, channel)
	if err != nil {
		return "The channel's settings cannot be read right now."
	}
	var sb strings.Builder
	sb.WriteString("*This channel's settings* (a channel's setting wins over the environment's default):\n")
	for _, n := range Names {
		fmt.Fprintf(&sb, "• `%s`: %s — %s\n", n, clipCode(c.Value(n), 80), s.source(c, n))
	}
	sb.WriteString("`/logbook config <name>` shows one whole, with its history; an admin changes one with `/logbook config <name> <value>`, or `/logbook config <name> default`.")
	return sb.String()
}

// showOne shows one setting whole, and its history, newest first.
func (s *Settings) showOne(ctx context.Context, team, channel, name string) string {
	c, err := s.For(ctx, team, channel)
	if err != nil {
		return "The channel's settings cannot be read right now."
	}
	hist, err := s.cfg.Store.ChannelSettingsHistory(ctx, channel)
	if err != nil {
		return "The channel's settings cannot be read right now."
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "`%s` of this channel: %s — %s\n", name, clipCode(c.Value(name), 2500), s.source(c, name))
	n := 0
	for i := len(hist) - 1; i >= 0 && n < 10; i-- {
		h := hist[i]
		if h.Team != team || h.Name != name {
			continue
		}
		if n == 0 {
			sb.WriteString("History, newest first:\n")
		}
		n++
		fmt.Fprintf(&sb, "• %s %s: %s → %s\n", h.SetAt.UTC().Format("2006-01-02 15:04 UTC"), who(h.SetBy), valueText(h.Old, h.OldSet), valueText(h.New, h.Set))
	}
	return strings.TrimRight(sb.String(), "\n")
}

func (s *Settings) source(c Channel, name string) string {
	if r, ok := c.Record(name); ok {
		return fmt.Sprintf("set by %s on %s", who(r.SetBy), r.SetAt.UTC().Format(time.DateOnly))
	}
	return "default (" + s.defaultFrom(name) + ")"
}

func valueText(v string, set bool) string {
	if !set {
		return "default"
	}
	return clipCode(v, 80)
}

// who is who set a setting as the channel reads it: a person's mention, or — an operator's
// name from `logbook config apply` — that name as inert code, never a mention it could forge.
func who(by string) string {
	if slacktext.IsUserID(by) {
		return "<@" + by + ">"
	}
	return clipCode(by, 80) + " (operator)"
}

// code is v in a code span (Slack's escapes applied, no backtick to end it), "(none)" when empty.
func code(v string) string { return clipCode(v, 2500) }

func clipCode(v string, n int) string {
	if strings.TrimSpace(v) == "" {
		return "(none)"
	}
	v = strings.Join(strings.Fields(v), " ")
	return "`" + strings.NewReplacer("`", "'", "&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(clip(v, n)) + "`"
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// History lists every change of every channel's settings (channel "": all), by channel,
// oldest first: for `logbook config` (the CLI).
func (s *Settings) History(ctx context.Context, channel string) ([]session.ChannelSetting, error) {
	if s == nil || s.cfg.Store == nil {
		return nil, nil
	}
	return s.cfg.Store.ChannelSettingsHistory(ctx, channel)
}
