package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
)

// newConfigCmd is `logbook config` (cobra's shape, as every subcommand; what it runs is its own): every channel's settings (/logbook config) and their
// history, from the records.
func newConfigCmd(e env) *cobra.Command {
	var channel string
	cmd := &cobra.Command{
		Use:   "config",
		Short: "List every channel's settings and their history; show one's sources; apply a settings file (DATABASE_URL)",
		Long: `List the settings admins set per channel with /logbook config (` + strings.Join(settings.Names, ", ") + `):
for each channel, the current value of each setting it has a record of, then every change,
oldest first, with who made it, when, and the old and new value. A setting a channel has no
record of (or reset with /logbook config <name> default) is the environment's default:
LOGBOOK_MODEL, LOGBOOK_TOOL_APPROVAL, LOGBOOK_THREAD_REPLIES, and none for the others, as
this process's environment shows them at the top.

'logbook config show <channel>' shows one channel's effective settings, where each comes
from and its ledger's head; 'logbook config apply -f channels.yaml [--dry-run]' applies
channels' settings kept in a file (see their --help).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			return withRead(ctx, e, primaryReads, func(d *readDeps) error {
				hist, err := d.store.ChannelSettingsHistory(ctx, channel)
				if err != nil {
					return err
				}
				printChannelSettings(e, hist)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "", "only this channel (its id, e.g. C0123ABCD)")
	cmd.AddCommand(newConfigShowCmd(e), newConfigApplyCmd(e)) // configapply.go
	return cmd
}

// printChannelSettings prints the environment's defaults, then each channel's settings and
// history (hist by channel, oldest first).
func printChannelSettings(e env, hist []session.ChannelSetting) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	fmt.Fprintln(w, "Defaults (this environment):")
	for _, d := range [][2]string{{settings.Model, "LOGBOOK_MODEL"}, {settings.Approvals, "LOGBOOK_TOOL_APPROVAL"}, {settings.ThreadReplies, "LOGBOOK_THREAD_REPLIES"}} {
		v := strings.TrimSpace(e.getenv(d[1]))
		fmt.Fprintf(w, "  %s\t%s\t(%s)\n", d[0], shown(v, v != ""), d[1])
	}
	if len(hist) == 0 {
		fmt.Fprintln(w, "\nNo channel has settings of its own.")
		return
	}
	for i := 0; i < len(hist); {
		j := i
		for j < len(hist) && hist[j].Team == hist[i].Team && hist[j].Channel == hist[i].Channel {
			j++
		}
		fmt.Fprintf(w, "\nChannel %s (team %s):\n", hist[i].Channel, hist[i].Team)
		current := map[string]session.ChannelSetting{}
		for _, h := range hist[i:j] {
			current[h.Name] = h
		}
		for _, n := range settings.Names {
			if h, ok := current[n]; ok {
				fmt.Fprintf(w, "  %s\t%s\tset by %s at %s\n", n, shown(h.New, h.Set), h.SetBy, h.SetAt.UTC().Format(time.RFC3339))
			}
		}
		fmt.Fprintln(w, "  history:")
		for _, h := range hist[i:j] {
			fmt.Fprintf(w, "    %s\t%s\t%s\t%s → %s\n", h.SetAt.UTC().Format(time.RFC3339), h.SetBy, h.Name, shown(h.Old, h.OldSet), shown(h.New, h.Set))
		}
		i = j
	}
}

// shown is a value on one line, quoted; "default" when unset (a default unset: none).
func shown(v string, set bool) string {
	if !set {
		return "default"
	}
	if v == "" {
		return `""`
	}
	if r := []rune(v); len(r) > 100 {
		v = string(r[:100]) + "…"
	}
	return fmt.Sprintf("%q", v)
}

// defaultBudget is LOGBOOK_BUDGET's channel budget as the daily_budget setting shows it.
func defaultBudget(cfg serveConfig) string {
	if !cfg.Budget.Limits.HasChannel {
		return ""
	}
	return cfg.Budget.Limits.Channel.String()
}

// settingsLimits are what the budget and the setup step read of a channel's settings: its
// daily_budget and setup records, else the environment's (env). A daily_budget of "none"
// counts as no record: LOGBOOK_BUDGET's channel budget applies (bot/budget's contract).
type settingsLimits struct {
	s    *settings.Settings
	team string
	env  budget.EnvLimits
}

func (l settingsLimits) DailyBudget(ctx context.Context, channel string) (budget.Money, bool, error) {
	c, err := l.s.For(ctx, l.team, channel)
	if err != nil {
		return 0, false, err
	}
	r, ok := c.Record(settings.DailyBudget)
	v := strings.TrimSpace(strings.TrimSuffix(strings.ToLower(r.New), "/day"))
	if !ok || v == "none" || v == "" {
		return l.env.DailyBudget(ctx, channel)
	}
	m, err := budget.ParseMoney(v)
	if err != nil {
		return 0, false, fmt.Errorf("daily_budget of %s: %w", channel, err)
	}
	return m, true, nil
}

func (l settingsLimits) SetupCommand(ctx context.Context, channel string) (string, bool, error) {
	c, err := l.s.For(ctx, l.team, channel)
	if err != nil {
		return "", false, err
	}
	if _, ok := c.Record(settings.Setup); ok {
		return c.SetupCommand(), c.SetupCommand() != "", nil
	}
	return l.env.SetupCommand(ctx, channel)
}
