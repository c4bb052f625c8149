package budget

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
)

// Limits are LOGBOOK_BUDGET's daily budgets. A zero Limits has none.
type Limits struct {
	Channel, Person       Money
	HasChannel, HasPerson bool
}

// ErrBadBudget is returned by ParseLimits for a value it cannot read.
var ErrBadBudget = errors.New("bad LOGBOOK_BUDGET")

// ParseLimits reads LOGBOOK_BUDGET: comma-separated "channel=<amount>/day" (each channel's
// spend per UTC day, unless the channel's own setting says otherwise) and
// "person=<amount>/day" (each person's, summed over channels), in the prices' currency, e.g.
// "channel=20/day,person=5/day". Either may be left out; "" is no budget.
func ParseLimits(s string) (Limits, error) {
	var l Limits
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		scope, val, ok := strings.Cut(f, "=")
		amount, per, perOK := strings.Cut(strings.TrimSpace(val), "/")
		if !ok || !perOK || strings.TrimSpace(per) != "day" {
			return Limits{}, fmt.Errorf("%w: %q: want channel=<amount>/day or person=<amount>/day", ErrBadBudget, f)
		}
		m, err := ParseMoney(amount)
		if err != nil {
			return Limits{}, fmt.Errorf("%w: %s: %v", ErrBadBudget, f, err)
		}
		switch strings.TrimSpace(scope) {
		case "channel":
			l.Channel, l.HasChannel = m, true
		case "person":
			l.Person, l.HasPerson = m, true
		default:
			return Limits{}, fmt.Errorf("%w: %q: the budget's scope is channel or person", ErrBadBudget, scope)
		}
	}
	return l, nil
}

// ChannelLimits are a channel's own settings that the budget and the setup step read (the
// channel's settings records; EnvLimits without them).
type ChannelLimits interface {
	// DailyBudget is the channel's budget per UTC day; ok false: the channel sets none and
	// LOGBOOK_BUDGET's channel budget applies.
	DailyBudget(ctx context.Context, channel string) (amount Money, ok bool, err error)
	// SetupCommand is the command a new sandbox of the channel runs before the first model
	// call; ok false: none.
	SetupCommand(ctx context.Context, channel string) (cmd string, ok bool, err error)
}

// EnvLimits are the environment's defaults for every channel: LOGBOOK_BUDGET's channel budget
// and LOGBOOK_SETUP_COMMAND.
type EnvLimits struct {
	Limits Limits
	Setup  string
}

// DailyBudget is LOGBOOK_BUDGET's channel budget.
func (e EnvLimits) DailyBudget(context.Context, string) (Money, bool, error) {
	return e.Limits.Channel, e.Limits.HasChannel, nil
}

// SetupCommand is LOGBOOK_SETUP_COMMAND.
func (e EnvLimits) SetupCommand(context.Context, string) (string, bool, error) {
	return e.Setup, strings.TrimSpace(e.Setup) != "", nil
}

// Store is the spend record (a *session.Store).
type Store interface {
	AdmitSpend(ctx context.Context, hold session.Spend, lim session.SpendLimits) (session.SpendTotals, bool, error)
	ChargeSpend(ctx context.Context, charge session.Spend) error
	Spent(ctx context.Context, channel, person string, day time.Time) (session.SpendTotals, error)
	RaiseBudget(ctx context.Context, r session.BudgetRaise) (session.BudgetRaise, error)
	Raised(ctx context.Context, scope, subject string, day time.Time) (int64, error)
}

// Config configures a Budget.
type Config struct {
	Store  Store // required
	Prices Prices
	// Limits are LOGBOOK_BUDGET's; Channels, when set, a channel's own budget (it wins).
	Limits   Limits
	Channels ChannelLimits
	// Admins may raise a budget for the day (LOGBOOK_ADMINS).
	Admins []string
	Now    func() time.Time // default time.Now
	Log    zerolog.Logger
	// Metrics counts each charge's cost (logbook.model.cost); nil: not counted.
	Metrics *telemetry.Metrics
}

// Budget meters the model calls of every turn. It holds no state of its own: the spend is
// in the store, so every replica sees the same.
type Budget struct {
	cfg Config
}

// New returns a Budget.
func New(cfg Config) (*Budget, error) {
	if cfg.Store == nil {
		return nil, errors.New("new budget: no store")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Prices.entries == nil {
		p, err := ParsePrices("")
		if err != nil {
			return nil, err
		}
		cfg.Prices = p
	}
	if cfg.Channels == nil {
		cfg.Channels = EnvLimits{Limits: cfg.Limits}
	}
	return &Budget{cfg: cfg}, nil
}

// Prices are the budget's prices.
func (b *Budget) Prices() Prices { return b.cfg.Prices }

// limit is one budget of a day: its amount (configured plus raised) and whether there is one.
type limit struct {
	amount Money
	ok     bool
}

// limits are the channel's and the person's budgets on day.
func (b *Budget) limits(ctx context.Context, channel, person string, day time.Time) (ch, pe limit, err error) {
	amount, ok, err := b.cfg.Channels.DailyBudget(ctx, channel)
	if err != nil {
		return ch, pe, fmt.Errorf("the budget of %s: %w", channel, err)
	}
	ch = limit{amount: amount, ok: ok}
	if !ok {
		ch = limit{amount: b.cfg.Limits.Channel, ok: b.cfg.Limits.HasChannel}
	}
	if ch.ok {
		raised, err := b.cfg.Store.Raised(ctx, "channel", channel, day)
		if err != nil {
			return ch, pe, err
		}
		ch.amount += Money(raised)
	}
	if person != "" && b.cfg.Limits.HasPerson {
		raised, err := b.cfg.Store.Raised(ctx, "person", person, day)
		if err != nil {
			return ch, pe, err
		}
		pe = limit{amount: b.cfg.Limits.Person + Money(raised), ok: true}
	}
	return ch, pe, nil
}

func (l limit) micros() int64 {
	if !l.ok {
		return -1
	}
	return int64(l.amount)
}

// For is the meter of one turn: its model calls count against channel's budget and person's
// (the user whose message the turn answers; "" for none).
func (b *Budget) For(channel, person string, sess session.ID, turn int64) brain.Meter {
	return &meter{b: b, channel: channel, person: person, sess: sess, turn: turn}
}

type meter struct {
	b       *Budget
	channel string
	person  string
	sess    session.ID
	turn    int64
}

// Admit admits c when it fits in what is left of the channel's and the person's budgets.
func (m *meter) Admit(ctx context.Context, c brain.MeteredCall) (func(context.Context, *session.Usage), error) {
	b := m.b
	day := session.UTCDay(b.cfg.Now())
	ch, pe, err := b.limits(ctx, m.channel, m.person, day)
	if err != nil {
		return nil, err
	}
	price, priced := b.cfg.Prices.For(c.Provider, c.Model)
	if !priced && (ch.ok || pe.ok) {
		return nil, &brain.OverBudgetError{Code: "no_price", Reply: fmt.Sprintf(
			"I did not call the model: this channel has a budget, and no price is known for %s:%s, so what a call costs cannot be counted. "+
				"An operator can give its price in LOGBOOK_PRICES (e.g. `%s=3/15`, %s per million input/output tokens).",
			c.Provider, c.Model, c.Model, b.cfg.Prices.Currency)}
	}
	most := price.Cost(Usage{Input: c.InputTokens, Output: c.MaxOutputTokens})
	hold := session.Spend{CallID: uuid.Must(uuid.NewV7()), Day: day, Channel: m.channel, Person: m.person,
		SessionID: m.sess, Turn: m.turn, Purpose: string(c.Purpose), Provider: c.Provider, Model: c.Model,
		InputTokens: c.InputTokens, OutputTokens: c.MaxOutputTokens, CostMicros: int64(most)}
	tot, admitted, err := b.cfg.Store.AdmitSpend(ctx, hold, session.SpendLimits{Channel: ch.micros(), Person: pe.micros()})
	if err != nil {
		return nil, err
	}
	if !admitted {
		return nil, b.refusal(ch, pe, tot, most, m.person)
	}
	return func(ctx context.Context, u *session.Usage) { m.settle(ctx, hold, price, u) }, nil
}

// settle charges the admitted call hold its cost: u's, at the price of the model that
// answered — for a call that failed part way, what was sent and what streamed (u.Source says
// whether logbook estimated it, and the reason why it ended) — or 0 when u is nil, a call that
// failed before the provider accepted it. A charge that cannot be written leaves the hold,
// which counts at its estimate (spend is never understated).
func (m *meter) settle(ctx context.Context, hold session.Spend, price Price, u *session.Usage) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	charge := hold
	charge.InputTokens, charge.OutputTokens, charge.CostMicros = 0, 0, 0
	charge.Source = session.UsageNone
	if u != nil {
		charge.Source, charge.Reason = cmp.Or(u.Source, session.UsageFromProvider), partialReason(u)
		if p, ok := m.b.cfg.Prices.For(u.Provider, u.Model); ok {
			price = p // the answer names the model exactly (a dated snapshot)
		}
		charge.Model = u.Model
		charge.InputTokens, charge.OutputTokens = u.InputTokens, u.OutputTokens
		charge.CacheReadTokens, charge.CacheWriteTokens = u.CacheReadTokens, u.CacheWriteTokens
		charge.CostMicros = int64(price.Cost(Usage{Input: u.InputTokens, Output: u.OutputTokens,
			CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens}))
	} else {
		charge.Reason = "not charged: the call failed before the provider accepted it (nothing reached the model)"
	}
	m.b.cfg.Metrics.RecordCost(ctx, charge.Provider, charge.Model, m.b.cfg.Prices.Currency, float64(charge.CostMicros)/1e6)
	if err := m.b.cfg.Store.ChargeSpend(ctx, charge); err != nil {
		m.b.cfg.Log.Warn().Err(err).Str("channel", m.channel).Str("call_id", hold.CallID.String()).
			Msg("could not record a model call's cost; its hold counts instead")
	}
}

// partialReason is a charge's reason for a call that failed part way (u.Ended), "" for one
// that answered.
func partialReason(u *session.Usage) string {
	if u.Ended == "" {
		return ""
	}
	why := map[string]string{session.CallStopped: "was stopped", session.CallTimedOut: "timed out",
		session.CallBroken: "broke off"}[u.Ended]
	how := "tokens as the provider's stream counted them"
	if u.Estimated() {
		how = "tokens estimated from the request sent and the output streamed where the provider's count did not come"
	}
	return fmt.Sprintf("charged what was sent and streamed: the call %s part way; %s", cmp.Or(why, u.Ended), how)
}

// refusal is the error of a call that the budget left (ch or pe) cannot cover at its most.
func (b *Budget) refusal(ch, pe limit, tot session.SpendTotals, most Money, person string) error {
	cur := b.cfg.Prices.Currency
	if ch.ok && Money(tot.Channel)+most > ch.amount {
		return &brain.OverBudgetError{Code: "channel_budget", Reply: fmt.Sprintf(
			"I stopped before calling the model: this channel's budget for today (UTC) is %s %s, %s of it is spent, "+
				"and the next call could cost up to %s. %s",
			ch.amount, cur, Money(tot.Channel), most, b.whoRaises("`/logbook budget raise <amount>`"))}
	}
	return &brain.OverBudgetError{Code: "person_budget", Reply: fmt.Sprintf(
		"I stopped before calling the model: <@%s>'s budget for today (UTC) is %s %s, %s of it is spent, "+
			"and the next call could cost up to %s. %s",
		person, pe.amount, cur, Money(tot.Person), most, b.whoRaises(fmt.Sprintf("`/logbook budget raise <amount> <@%s>`", person)))}
}

// whoRaises says who may raise a budget for today, and how.
func (b *Budget) whoRaises(how string) string {
	if len(b.cfg.Admins) == 0 {
		return "Nobody is an admin here (LOGBOOK_ADMINS), so it stays until the day ends (UTC)."
	}
	names := make([]string, len(b.cfg.Admins))
	for i, a := range b.cfg.Admins {
		names[i] = "<@" + a + ">"
	}
	return fmt.Sprintf("An admin (%s) can raise it for today with %s.", strings.Join(names, ", "), how)
}

// NoticeAt is the share of a budget at which the thread gets its notice.
const NoticeAt = 0.8

// Notices are the notices a thread of channel should get now for person's turn: one per
// budget (the channel's, the person's) that is at NoticeAt or more of today's amount. The
// caller records each (budget_notice) under its Key, so a thread gets each at
// most once a day.
func (b *Budget) Notices(ctx context.Context, channel, person string) ([]session.BudgetNotice, error) {
	day := session.UTCDay(b.cfg.Now())
	ch, pe, err := b.limits(ctx, channel, person, day)
	if err != nil || (!ch.ok && !pe.ok) {
		return nil, err
	}
	tot, err := b.cfg.Store.Spent(ctx, channel, person, day)
	if err != nil {
		return nil, err
	}
	var out []session.BudgetNotice
	d := day.Format(time.DateOnly)
	cur := b.cfg.Prices.Currency
	if ch.ok && float64(tot.Channel) >= NoticeAt*float64(ch.amount) {
		out = append(out, session.BudgetNotice{Scope: "channel", Subject: channel, Day: d, SpentMicros: tot.Channel, LimitMicros: int64(ch.amount),
			Text: fmt.Sprintf("Note: this channel has spent %s of its %s %s model budget for today (UTC), %d%%. At 100%% I stop calling the model. %s",
				Money(tot.Channel), ch.amount, cur, percent(tot.Channel, ch.amount), b.whoRaises("`/logbook budget raise <amount>`"))})
	}
	if pe.ok && float64(tot.Person) >= NoticeAt*float64(pe.amount) {
		out = append(out, session.BudgetNotice{Scope: "person", Subject: person, Day: d, SpentMicros: tot.Person, LimitMicros: int64(pe.amount),
			Text: fmt.Sprintf("Note: <@%s> has spent %s of their %s %s model budget for today (UTC), %d%%. At 100%% I stop calling the model for them. %s",
				person, Money(tot.Person), pe.amount, cur, percent(tot.Person, pe.amount), b.whoRaises(fmt.Sprintf("`/logbook budget raise <amount> <@%s>`", person)))})
	}
	return out, nil
}

func percent(spent int64, of Money) int64 {
	if of <= 0 {
		return 100
	}
	return spent * 100 / int64(of)
}

// Admin reports whether user may raise budgets.
func (b *Budget) Admin(user string) bool { return slices.Contains(b.cfg.Admins, user) }
