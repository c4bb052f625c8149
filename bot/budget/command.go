package budget

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

// Usage of /logbook budget.
const commandUsage = "`/logbook budget` shows today's spend and budgets here; an admin raises one for today (UTC) with " +
	"`/logbook budget raise <amount>` (this channel's) or `/logbook budget raise <amount> <member ID>` (a person's: " + memberIDHow + ")."

var mention = regexp.MustCompile(`^<@([UW][A-Z0-9]+)(?:\|[^>]*)?>$|^@?([UW][A-Z0-9]{2,})$`)

// memberIDHow says where a person's member ID is found.
const memberIDHow = "in Slack: their profile, ⋮, Copy member ID"

// SlashCommand is /logbook budget (Command), for anyone: a raise checks LOGBOOK_ADMINS itself.
func (b *Budget) SlashCommand() slashcmd.Command {
	return slashcmd.Command{Name: "budget", Who: slashcmd.Anyone,
		Usage: "`/logbook budget` shows today's model spend and budgets here; an admin raises one for today with `/logbook budget raise <amount> [<member ID>]`.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			return b.Command(ctx, c.ChannelID, c.UserID, c.Args)
		}}
}

// Command answers /logbook budget [raise <amount> [<member ID>]] in channel for user: the text
// of its ephemeral answer. A raise is recorded (budget_raises: who, when, which budget, how
// much) and holds for today, UTC.
func (b *Budget) Command(ctx context.Context, channel, user, args string) string {
	f := strings.Fields(args)
	switch {
	case len(f) == 0:
		return b.show(ctx, channel, user)
	case f[0] != "raise" || len(f) < 2 || len(f) > 3:
		return commandUsage
	}
	if !b.Admin(user) {
		return "Only an admin (LOGBOOK_ADMINS) may raise a budget. " + b.whoRaises("`/logbook budget raise <amount>`")
	}
	amount, err := ParseMoney(f[1])
	if err != nil || amount <= 0 {
		return fmt.Sprintf("%q is not an amount to raise by: give a positive number in %s, e.g. `/logbook budget raise 10`.", f[1], b.cfg.Prices.Currency)
	}
	r := session.BudgetRaise{Day: b.cfg.Now(), Scope: "channel", Subject: channel, Channel: channel, Amount: int64(amount), RaisedBy: user}
	if len(f) == 3 {
		m := mention.FindStringSubmatch(f[2])
		if m == nil {
			// The command gets "@ada" as typed (should_escape is off): a name, not the person.
			return fmt.Sprintf("%q is not a person logbook can tell: a slash command gets a name as typed. Give their member ID (%s), "+
				"e.g. `/logbook budget raise %s U0123ABCD`.", f[2], memberIDHow, f[1])
		}
		r.Scope, r.Subject = "person", m[1]+m[2]
	}
	if r.Scope == "person" && !b.cfg.Limits.HasPerson {
		return "People have no budget of their own here (LOGBOOK_BUDGET has no person=…/day): nothing to raise."
	}
	if r.Scope == "channel" {
		if _, ok, err := b.channelLimit(ctx, channel); err != nil {
			b.cfg.Log.Warn().Err(err).Str("channel", channel).Msg("budget raise: the channel's budget cannot be read")
			return "The channel's budget cannot be read just now; nothing was raised. Try again in a moment."
		} else if !ok {
			return "This channel has no budget: nothing to raise."
		}
	}
	if _, err := b.cfg.Store.RaiseBudget(ctx, r); err != nil {
		b.cfg.Log.Warn().Err(err).Str("channel", channel).Msg("budget raise")
		return "The raise could not be recorded just now; nothing was raised. Try again in a moment."
	}
	return fmt.Sprintf("Raised by %s %s for today (UTC), recorded under your name.\n%s", amount, b.cfg.Prices.Currency, b.show(ctx, channel, user))
}

// channelLimit is the channel's own or LOGBOOK_BUDGET's channel budget, before raises.
func (b *Budget) channelLimit(ctx context.Context, channel string) (Money, bool, error) {
	amount, ok, err := b.cfg.Channels.DailyBudget(ctx, channel)
	if err != nil || ok {
		return amount, ok, err
	}
	return b.cfg.Limits.Channel, b.cfg.Limits.HasChannel, nil
}

// show is today's spend of channel and user against their budgets.
func (b *Budget) show(ctx context.Context, channel, user string) string {
	day := session.UTCDay(b.cfg.Now())
	ch, pe, err := b.limits(ctx, channel, user, day)
	var tot session.SpendTotals
	if err == nil {
		tot, err = b.cfg.Store.Spent(ctx, channel, user, day)
	}
	if err != nil {
		b.cfg.Log.Warn().Err(err).Str("channel", channel).Msg("budget: read today's spend")
		return "Today's spend cannot be read just now. Try again in a moment."
	}
	cur := b.cfg.Prices.Currency
	var sb strings.Builder
	fmt.Fprintf(&sb, "Today (%s UTC): this channel spent %s %s", day.Format(time.DateOnly), Money(tot.Channel), cur)
	if ch.ok {
		fmt.Fprintf(&sb, " of its %s (%d%%)", ch.amount, percent(tot.Channel, ch.amount))
	} else {
		sb.WriteString(" (no budget)")
	}
	if pe.ok {
		fmt.Fprintf(&sb, "; you spent %s of your %s (%d%%)", Money(tot.Person), pe.amount, percent(tot.Person, pe.amount))
	} else if user != "" {
		fmt.Fprintf(&sb, "; you spent %s", Money(tot.Person))
	}
	sb.WriteString(".")
	return sb.String()
}
