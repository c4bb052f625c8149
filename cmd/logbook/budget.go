package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
)

// budgetConfig is LOGBOOK_PRICES, LOGBOOK_BUDGET, LOGBOOK_SETUP_COMMAND and
// LOGBOOK_SETUP_EGRESS, read once.
type budgetConfig struct {
	Prices budget.Prices
	Limits budget.Limits
	// Setup is every channel's setup command unless its settings say otherwise; SetupEgress
	// what it may reach besides the sandbox's allowlist, while it runs.
	Setup       string
	SetupEgress egress.Allowlist
}

// readBudget reads the prices (which the footer shows too), the budgets and the setup step.
func (cfg *serveConfig) readBudget(e env) error {
	var err error
	if cfg.Budget.Prices, err = budget.ParsePrices(e.getenv("LOGBOOK_PRICES")); err != nil {
		return err
	}
	cfg.Footer.Price = footerPrice(cfg.Budget.Prices)
	if cfg.Budget.Limits, err = budget.ParseLimits(e.getenv("LOGBOOK_BUDGET")); err != nil {
		return err
	}
	cfg.Budget.Setup = strings.TrimSpace(e.getenv("LOGBOOK_SETUP_COMMAND"))
	if cfg.Budget.SetupEgress, err = egress.ParseAllowlist(e.getenv("LOGBOOK_SETUP_EGRESS")); err != nil {
		return fmt.Errorf("LOGBOOK_SETUP_EGRESS: %w", err)
	}
	return nil
}

// footerPrice is the footer's price of a model, from LOGBOOK_PRICES: the longest prefix that
// names it, as the budget prices it.
func footerPrice(p budget.Prices) func(model string) (bot.Price, bool) {
	return func(model string) (bot.Price, bool) {
		pr, ok := p.For("", model)
		return bot.Price{Input: float64(pr.In) / 1e6, Output: float64(pr.Out) / 1e6}, ok
	}
}

// channelLimits are the channels' budgets and setup commands: a channel's settings records
// (/logbook config daily_budget, setup; channelconfig.go), else the environment's.
func channelLimits(cfg serveConfig, s *settings.Settings, team string) budget.ChannelLimits {
	env := budget.EnvLimits{Limits: cfg.Budget.Limits, Setup: cfg.Budget.Setup}
	if s == nil {
		return env
	}
	return settingsLimits{s: s, team: team, env: env}
}

// newBudget is the meter of every turn's model calls.
func newBudget(cfg serveConfig, store *session.Store, log zerolog.Logger, s *settings.Settings, team string, m *telemetry.Metrics) (*budget.Budget, error) {
	return budget.New(budget.Config{Store: store, Prices: cfg.Budget.Prices, Limits: cfg.Budget.Limits,
		Channels: channelLimits(cfg, s, team), Admins: cfg.Admins, Log: log.With().Str("part", "budget").Logger(), Metrics: m})
}

func newUsageCmd(e env) *cobra.Command {
	var (
		since, until, channel string
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Print the model spend and tokens per channel, person and day (DATABASE_URL)",
		Long: `Print what the model calls cost: per channel, per person and per UTC day, with their calls,
the calls a budget refused, and their input, output and prompt-cache tokens; and the 👍/👎
people gave the replies, per channel and model (each person's latest click on a reply). Costs are in
the prices' currency (LOGBOOK_PRICES, else the built-in USD list prices), as each call was
priced when it answered; a call still running (or whose process died) counts at the most it
could cost, as the budget counts it.

--since and --until take a date (2024-05-01), a time or an age (7d, 2w); the default is the
last 7 days, today included.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			now := time.Now()
			from, err := parseWhen(cmp.Or(since, "6d"), now)
			if err != nil {
				return usage(e, c, fmt.Errorf("--since: %w", err))
			}
			to := now
			if until != "" {
				if to, err = parseWhen(until, now); err != nil {
					return usage(e, c, fmt.Errorf("--until: %w", err))
				}
				to = to.Add(-time.Nanosecond) // the day it falls in is the last one, unless it is midnight
			}
			to = session.UTCDay(to).AddDate(0, 0, 1)
			if !session.UTCDay(from).Before(to) {
				return usage(e, c, errors.New("--since is after --until"))
			}
			prices, err := budget.ParsePrices(e.getenv("LOGBOOK_PRICES"))
			if err != nil {
				return usage(e, c, err)
			}
			ctx := c.Context()
			return withRead(ctx, e, primaryReads, func(d *readDeps) error {
				rows, err := d.store.Usage(ctx, from, to, channel)
				if err != nil {
					return err
				}
				r := budget.NewReport(rows, from, to, prices.Currency)
				fb, err := d.store.Feedback(ctx, from, to, channel)
				if err != nil {
					return err
				}
				r.AddFeedback(fb)
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(r)
				}
				return r.WriteText(e.stdout)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "from this day (default 6d: the last 7 days)")
	f.StringVar(&until, "until", "", "up to this time (default now)")
	f.StringVar(&channel, "channel", "", "only this channel (a Slack channel id)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// setupConfig is the channels' setup step: each channel's command (its settings, else
// LOGBOOK_SETUP_COMMAND), LOGBOOK_SETUP_EGRESS while it runs, cached per commit.
func setupConfig(cfg serveConfig, store *session.Store, s *settings.Settings, team string) hands.SetupConfig {
	limits := channelLimits(cfg, s, team)
	return hands.SetupConfig{
		Command: func(ctx context.Context, _, channel string) (string, error) {
			cmd, ok, err := limits.SetupCommand(ctx, channel)
			if !ok {
				return "", err
			}
			return cmd, err
		},
		Egress: cfg.Budget.SetupEgress,
		Cache:  store,
	}
}

// budgetCall is the largest model call a turn makes under cfg: the context budget's input
// and the output limit (LOGBOOK_CONTEXT_BUDGET, LOGBOOK_MAX_OUTPUT_TOKENS, or the brain's
// defaults).
func budgetCall(cfg serveConfig) budget.Call {
	return budget.Call{Input: int64(cmp.Or(cfg.ContextBudget, brain.DefaultContextBudget)),
		Output: int64(cmp.Or(cfg.MaxOutputTokens, brain.DefaultMaxTokens))}
}

// budgetWarnings are LOGBOOK_BUDGET's budgets that are below one call's worst case of
// LOGBOOK_MODEL, each said with the figure. They are accepted: an operator may mean to keep
// a channel to short threads, and a budget is raised for the day with /logbook budget raise.
func budgetWarnings(cfg serveConfig) []string {
	var out []string
	l, call := cfg.Budget.Limits, budgetCall(cfg)
	if l.HasChannel {
		if w := cfg.Budget.Prices.Shortfall("LOGBOOK_BUDGET's channel budget", l.Channel, cfg.Model, call); w != "" {
			out = append(out, w)
		}
	}
	if l.HasPerson {
		if w := cfg.Budget.Prices.Shortfall("LOGBOOK_BUDGET's person budget", l.Person, cfg.Model, call); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// dailyBudgetNote is what /logbook config says after a change to a channel's daily_budget or
// model: the channel's budget is below one call's worst case of its model, with the figure.
func dailyBudgetNote(cfg serveConfig) func(c settings.Channel) string {
	return func(c settings.Channel) string {
		v := strings.TrimSpace(strings.TrimSuffix(strings.ToLower(c.Value(settings.DailyBudget)), "/day"))
		if v == "" || v == "none" {
			return ""
		}
		m, err := budget.ParseMoney(v)
		if err != nil {
			return ""
		}
		return cfg.Budget.Prices.Shortfall("This channel's daily budget", m, cmp.Or(c.Value(settings.Model), cfg.Model), budgetCall(cfg))
	}
}
