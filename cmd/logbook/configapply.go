package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
)

// newConfigShowCmd is `logbook config show <channel>`: each setting's effective value and
// where it comes from, and the channel ledger's head.
func newConfigShowCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "show <channel id>",
		Short: "Show a channel's effective settings, where each comes from, and its ledger's head (DATABASE_URL)",
		Long: `Show each setting of the channel (` + strings.Join(settings.Names, ", ") + `) as a turn
would read it now: its value and its source — "ledger" (who set it, when, through what, and
the seq of its setting_changed event in the channel's ledger), "environment" (the LOGBOOK_*
variable of this process's environment that gives the default: run it with serve's
environment), or "default" (logbook's own). Then the head of the channel's ledger: its seq
and hash, the position a turn starting now would record in turn_settings.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			channel := args[0]
			if !settings.ValidChannelID(channel) {
				return usageError{fmt.Errorf("%q is not a channel id (e.g. C0123ABCD)", channel)}
			}
			s, err := cliSettingsConfig(e)
			if err != nil {
				return err
			}
			return withRead(ctx, e, primaryReads, func(d *readDeps) error {
				return showChannel(ctx, e, d.store, settings.New(settingsConfig(s, d.store, cliModels(s))), channel)
			})
		},
	}
}

// cliSettingsConfig reads what the channels' settings default to and are checked against, as
// serve reads them: the model and its providers, LOGBOOK_TOOL_APPROVAL, LOGBOOK_BUDGET,
// LOGBOOK_SETUP_COMMAND, LOGBOOK_THREAD_REPLIES.
func cliSettingsConfig(e env) (serveConfig, error) {
	var cfg serveConfig
	cfg.readModel(e)
	if err := cfg.readReplies(e); err != nil {
		return cfg, err
	}
	var err error
	if cfg.ThreadReplies, err = bot.ParseThreadReplies(e.getenv("LOGBOOK_THREAD_REPLIES")); err != nil {
		return cfg, fmt.Errorf("LOGBOOK_THREAD_REPLIES=%w", err)
	}
	return cfg, nil
}

// cliModels checks a model setting as serve does: its provider can be built from this
// environment (the same keys and base URLs).
func cliModels(cfg serveConfig) *bot.Models {
	return &bot.Models{New: func(spec string) (bot.Agent, error) {
		if _, err := brain.NewProvider(spec, cfg.providers()); err != nil {
			return nil, err
		}
		return nil, nil
	}}
}

// showChannel prints the channel's effective settings, their sources and its ledger's head.
func showChannel(ctx context.Context, e env, store *session.Store, s *settings.Settings, channel string) error {
	rep, err := s.Report(ctx, store, channel)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	team := rep.Team
	if team == "" {
		team = "unknown: logbook has stored nothing of this channel"
	}
	fmt.Fprintf(w, "Channel %s (team %s)\n", channel, team)
	if rep.Ledger.Seq == 0 {
		fmt.Fprintln(w, "Ledger: none yet (nothing was ever changed in this channel)")
	} else {
		fmt.Fprintf(w, "Ledger: seq %d, hash %s\n", rep.Ledger.Seq, hex.EncodeToString(rep.Ledger.Hash))
	}
	fmt.Fprintln(w, "\nsetting\tvalue\tsource")
	for _, c := range rep.Settings {
		var source string
		switch c.Source {
		case settings.SourceLedger:
			source = "ledger: " + recordedText(*c.Record)
		case settings.SourceEnvironment:
			source = "environment: " + c.From
		default:
			source = "default"
		}
		if c.Source != settings.SourceLedger && c.Record != nil {
			source += "; reset by " + recordedText(*c.Record)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, shownValue(c.Value), source)
	}
	return nil
}

// recordedText is who made a change, when and through what, and its event's seq in the
// ledger.
func recordedText(r settings.Recorded) string {
	text := fmt.Sprintf("%s at %s", r.SetBy, r.SetAt.UTC().Format(time.RFC3339))
	if r.Via != "" {
		text += " via " + r.Via
	}
	if r.Seq == 0 {
		return text + ", no ledger event (run logbook audit verify)"
	}
	return text + fmt.Sprintf(", seq %d", r.Seq)
}

// shownValue is a value on one line, quoted; "(none)" when empty.
func shownValue(v string) string {
	if v == "" {
		return "(none)"
	}
	return shown(v, true)
}

// newConfigApplyCmd is `logbook config apply -f channels.yaml [--dry-run]`: channels'
// settings kept as code, applied by CI.
func newConfigApplyCmd(e env) *cobra.Command {
	var file, as string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply -f channels.yaml [--dry-run]",
		Short: "Apply channels' settings kept in a file: a dry run prints the diff (DATABASE_URL)",
		Long: `Apply a settings file kept in a repository:

  channels:
    C0123ABCD:
      model: anthropic:claude-sonnet-4-5
      instructions: Answer in English.
      daily_budget: 20/day
      approvals: shell=ask

Each setting the file names is pinned in its channel ("default" resets it to the
environment's default); a setting it does not name is left as it is. --dry-run prints the diff
(per channel: setting, old → new) and writes nothing. Otherwise each change is one
setting_changed event of the channel's ledger, its actor the operator (--as, else
LOGBOOK_AUDIT_OPERATOR, else USER) and its way "file"; a setting that already holds its value
writes nothing, so a second apply prints "no changes".

Refused, with a line naming each, exit 1 and nothing written: a key that is not a setting,
a value /logbook config would refuse (a model this environment cannot run, an approvals
policy naming an unknown tool, ...: run it with serve's environment), a channel logbook does
not know, a private one. With SLACK_BOT_TOKEN (and SLACK_API_URL) Slack's conversations.info
says whether a channel exists and is public; without it, a channel is known and public when
logbook stored a thread of it (serve stores public channels' messages only), and one it
has only a ledger of, or nothing, is refused.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("say which file: -f channels.yaml")}
			}
			return configApply(c.Context(), e, file, as, dryRun)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the settings file (YAML)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the diff, write nothing")
	cmd.Flags().StringVar(&as, "as", "", "who applies it (default LOGBOOK_AUDIT_OPERATOR, then USER)")
	return cmd
}

// configApply reads file, checks it whole, and prints (dryRun) or applies its changes.
func configApply(ctx context.Context, e env, file, as string, dryRun bool) error {
	who, err := operator(e, as)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return usageError{fmt.Errorf("read the settings file: %w", err)}
	}
	cfg, err := cliSettingsConfig(e)
	if err != nil {
		return err
	}
	return withRead(ctx, e, primaryReads, func(d *readDeps) error {
		s := settings.New(settingsConfig(cfg, d.store, cliModels(cfg)))
		chans, problems := s.ReadFile(data)
		teams := map[string]string{}
		if len(problems) == 0 {
			look := newChannelLookup(e, d.store)
			for _, c := range chans {
				team, why, err := look.check(ctx, c.Channel)
				if err != nil {
					return err
				}
				if why != "" {
					problems = append(problems, fmt.Sprintf("line %d: %s: %s", c.Line, c.Channel, why))
				}
				teams[c.Channel] = team
			}
		}
		if len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintf(e.stderr, "%s: %s\n", file, p)
			}
			what := "1 problem"
			if len(problems) > 1 {
				what = strconv.Itoa(len(problems)) + " problems"
			}
			return exitError{code: 1, err: fmt.Errorf("%s refused (%s): nothing written", file, what)}
		}
		var plan []settings.Change
		for _, c := range chans {
			ch, err := s.Plan(ctx, teams[c.Channel], c)
			if err != nil {
				return err
			}
			plan = append(plan, ch...)
		}
		if len(plan) == 0 {
			fmt.Fprintln(e.stdout, "no changes")
			return nil
		}
		for i, c := range plan {
			if i == 0 || plan[i-1].Channel != c.Channel {
				fmt.Fprintf(e.stdout, "%s (team %s):\n", c.Channel, c.Team)
			}
			line := fmt.Sprintf("  %s: %s → %s", c.Name, shown(c.Old, c.OldSet), shown(c.New, c.Set))
			if !dryRun {
				rec, err := s.Apply(ctx, c, who.Name, session.ViaFile)
				if err != nil {
					return fmt.Errorf("%s (%d of %d changes written; apply again to finish): %w", line, i, len(plan), err)
				}
				line += fmt.Sprintf(" (ledger seq %d)", rec.Ledger.Seq)
			}
			fmt.Fprintln(e.stdout, line)
		}
		if dryRun {
			fmt.Fprintf(e.stdout, "%d changes; dry run: nothing written\n", len(plan))
		} else {
			fmt.Fprintf(e.stdout, "%d changes written by %s (%s), via file\n", len(plan), who.Name, who.Source)
		}
		return nil
	})
}

// channelLookup says whether a channel is known and public: Slack's conversations.info with
// SLACK_BOT_TOKEN, else the log.
type channelLookup struct {
	store *session.Store
	api   *slack.Client // nil: no SLACK_BOT_TOKEN
	team  string        // the token's team, asked once
}

func newChannelLookup(e env, store *session.Store) *channelLookup {
	l := &channelLookup{store: store}
	if token := strings.TrimSpace(e.getenv("SLACK_BOT_TOKEN")); token != "" {
		var opts []slack.Option
		if u := strings.TrimSpace(e.getenv("SLACK_API_URL")); u != "" {
			if !strings.HasSuffix(u, "/") {
				u += "/"
			}
			opts = append(opts, slack.OptionAPIURL(u))
		}
		l.api = slack.New(token, opts...)
	}
	return l
}

// check returns the channel's team and, when it may not be applied to, why ("" when it may);
// err is for failures to ask.
func (l *channelLookup) check(ctx context.Context, channel string) (team, why string, err error) {
	seen, err := l.store.ChannelSeen(ctx, channel)
	if err != nil {
		return "", "", err
	}
	if l.api == nil {
		switch {
		case seen.Threads == 0 && !seen.Ledger:
			return "", "unknown channel: logbook has stored nothing of it (with SLACK_BOT_TOKEN, Slack is asked)", nil
		case seen.Threads == 0:
			return "", "visibility unknown: logbook stored no thread of it, only settings; set SLACK_BOT_TOKEN to ask Slack whether it is public", nil
		}
		return seen.Team, "", nil
	}
	ch, err := l.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: channel})
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se) && se.Err == "channel_not_found":
		return "", "unknown channel: Slack has no channel " + channel + " this bot can see", nil
	case err != nil:
		return "", "", fmt.Errorf("ask Slack about %s (conversations.info): %w", channel, err)
	case ch.IsPrivate || ch.IsIM || ch.IsMpIM:
		return "", "private channel: logbook keeps nothing of private conversations", nil
	}
	if seen.Team != "" {
		return seen.Team, "", nil
	}
	if l.team == "" {
		t, err := l.api.AuthTestContext(ctx)
		if err != nil {
			return "", "", fmt.Errorf("ask Slack for the bot's team (auth.test): %w", err)
		}
		l.team = t.TeamID
	}
	return l.team, "", nil
}
