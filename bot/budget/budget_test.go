package budget_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

const (
	general = "C0000001"
	other   = "C0000002"
	ada     = "U0000001"
	grace   = "U0000002"
	admin   = "U0000009"
)

var today = time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)

func newStore(t *testing.T) *session.Store {
	t.Helper()
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return session.NewStore(pool, session.Options{})
}

// newBudget prices "fake-model" at 1 per Mtok in and 10 out: 1,000 output tokens cost 0.01.
func newBudget(t *testing.T, st *session.Store, limits string, now *time.Time) *budget.Budget {
	t.Helper()
	l, err := budget.ParseLimits(limits)
	if err != nil {
		t.Fatal(err)
	}
	p, err := budget.ParsePrices("fake-model=1/10")
	if err != nil {
		t.Fatal(err)
	}
	b, err := budget.New(budget.Config{Store: st, Prices: p, Limits: l, Admins: []string{admin},
		Now: func() time.Time { return *now }, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// call admits a call of in input and out max output tokens and, when admitted, settles it
// with used output tokens.
func call(t *testing.T, m brain.Meter, in, out, used int64) error {
	t.Helper()
	ctx := context.Background()
	settle, err := m.Admit(ctx, brain.MeteredCall{Purpose: brain.PurposeReply, Provider: "anthropic", Model: "fake-model", InputTokens: in, MaxOutputTokens: out})
	if err != nil {
		return err
	}
	settle(ctx, &session.Usage{Provider: "anthropic", Model: "fake-model", InputTokens: in, OutputTokens: used})
	return nil
}

func overBudget(t *testing.T, err error, code string) *brain.OverBudgetError {
	t.Helper()
	var ob *brain.OverBudgetError
	if !errors.As(err, &ob) || ob.Code != code {
		t.Fatalf("err = %v, want an OverBudgetError %s", err, code)
	}
	return ob
}

// TestChannelBudgetRefusesACallItCannotCover: a call is admitted only when what is left
// covers it at its max_output_tokens (input estimated too); what it really cost is charged.
func TestChannelBudgetRefusesACallItCannotCover(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := today
	b := newBudget(t, st, "channel=0.05/day", &now)
	m := b.For(general, ada, uuid.New(), 3)
	// At most 0.001 in + 0.04 out = 0.041; it used 1,000 output tokens: 0.001 + 0.01.
	if err := call(t, m, 1000, 4000, 1000); err != nil {
		t.Fatal(err)
	}
	tot, _ := st.Spent(context.Background(), general, ada, today)
	if tot.Channel != 11_000 {
		t.Fatalf("spent %d micros, want the charge 11000 (not the hold)", tot.Channel)
	}
	// 0.039 left: a call that could cost 0.041 does not start, though it might cost less.
	ob := overBudget(t, call(t, m, 1000, 4000, 10), "channel_budget")
	for _, want := range []string{"0.05 USD", "0.011 of it is spent", "up to 0.041", "<@" + admin + ">", "/logbook budget raise"} {
		if !strings.Contains(ob.Reply, want) {
			t.Errorf("reply %q lacks %q", ob.Reply, want)
		}
	}
	// One it can cover does.
	if err := call(t, m, 1000, 3000, 10); err != nil {
		t.Fatal(err)
	}
	// Another channel has its own budget.
	if err := call(t, b.For(other, ada, uuid.New(), 1), 1000, 4000, 10); err != nil {
		t.Fatal(err)
	}
	// Tomorrow (UTC) starts afresh.
	now = today.Add(12 * time.Hour)
	if err := call(t, m, 1000, 4000, 10); err != nil {
		t.Fatalf("the next day: %v", err)
	}
	rows, err := st.Usage(context.Background(), today, today.AddDate(0, 0, 2), general)
	if err != nil || len(rows) != 2 || rows[0].Refused != 1 || rows[0].Calls != 2 || rows[1].Calls != 1 {
		t.Fatalf("usage %+v, %v", rows, err)
	}
}

// TestAdmissionIsStrictUnderConcurrency: calls admitted at once never add up past the budget:
// each holds its most until its charge.
func TestAdmissionIsStrictUnderConcurrency(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := today
	b := newBudget(t, st, "channel=0.1/day", &now)
	var mu sync.Mutex
	var settles []func(context.Context, *session.Usage)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			settle, err := b.For(general, ada, uuid.New(), 1).Admit(context.Background(),
				brain.MeteredCall{Provider: "anthropic", Model: "fake-model", MaxOutputTokens: 1000}) // 0.01 each
			if err == nil {
				mu.Lock()
				settles = append(settles, settle)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(settles) != 10 {
		t.Fatalf("%d calls admitted at once, want 10", len(settles))
	}
	for _, s := range settles {
		s(context.Background(), nil) // failed calls cost nothing
	}
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000); err != nil {
		t.Fatalf("after the failed calls' charges: %v", err)
	}
}

// TestPersonBudget: a person's budget counts their calls in every channel; another person
// still has theirs, and the channel's.
func TestPersonBudget(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := today
	b := newBudget(t, st, "channel=1/day,person=0.02/day", &now)
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000); err != nil { // 0.01
		t.Fatal(err)
	}
	if err := call(t, b.For(other, ada, uuid.New(), 1), 0, 1000, 1000); err != nil { // 0.02, in another channel
		t.Fatal(err)
	}
	ob := overBudget(t, call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000), "person_budget")
	if !strings.Contains(ob.Reply, "<@"+ada+">'s budget") || !strings.Contains(ob.Reply, "raise <amount> <@"+ada+">") {
		t.Errorf("reply %q", ob.Reply)
	}
	if err := call(t, b.For(general, grace, uuid.New(), 1), 0, 1000, 1000); err != nil {
		t.Fatalf("grace: %v", err)
	}
}

// TestAdminRaisesForTheDay: only an admin may raise; a raise is recorded and holds for
// today only.
func TestAdminRaisesForTheDay(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := today
	b := newBudget(t, st, "channel=0.01/day,person=0.01/day", &now)
	ctx := context.Background()
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	overBudget(t, call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000), "channel_budget")
	if got := b.Command(ctx, general, ada, "raise 5"); !strings.Contains(got, "Only an admin") {
		t.Errorf("a non-admin's raise: %q", got)
	}
	if got := b.Command(ctx, general, admin, "raise 0.05"); !strings.Contains(got, "Raised by 0.05 USD") {
		t.Fatalf("admin's raise: %q", got)
	}
	// The channel's is raised; ada's own is not yet.
	overBudget(t, call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000), "person_budget")
	if got := b.Command(ctx, general, admin, "raise 1 <@"+ada+"|ada>"); !strings.Contains(got, "Raised") {
		t.Fatalf("person raise: %q", got)
	}
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000); err != nil {
		t.Fatalf("after both raises: %v", err)
	}
	if got := b.Command(ctx, general, ada, ""); !strings.Contains(got, "this channel spent 0.02 USD of its 0.06 (33%)") {
		t.Errorf("show: %q", got)
	}
	// A name as typed (what Slack sends: should_escape is off) is refused, and what the
	// refusal suggests is taken.
	got := b.Command(ctx, general, admin, "raise 1 @ada")
	_, example, _ := strings.Cut(got, "e.g. `/logbook budget ")
	example, _, _ = strings.Cut(example, "`")
	if !strings.Contains(got, `"@ada" is not a person`) || example == "" {
		t.Fatalf("raise for @ada: %q", got)
	}
	if again := b.Command(ctx, general, admin, example); !strings.Contains(again, "Raised") {
		t.Errorf("the suggested %q is refused: %q", example, again)
	}
	for _, bad := range []string{"raise", "raise -1", "raise x", "raise 1 bob", "lower 1"} {
		if got := b.Command(ctx, general, admin, bad); strings.Contains(got, "Raised") {
			t.Errorf("%q raised: %q", bad, got)
		}
	}
	now = today.AddDate(0, 0, 1)
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	overBudget(t, call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000), "channel_budget") // the raise was for yesterday
}

// TestNoticesAtEightyPercent: a budget at 80 % or more gives a notice, with a key that is
// the same all day.
func TestNoticesAtEightyPercent(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := today
	b := newBudget(t, st, "channel=0.1/day", &now)
	ctx := context.Background()
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 7000, 7000); err != nil { // 0.07
		t.Fatal(err)
	}
	if ns, err := b.Notices(ctx, general, ada); err != nil || len(ns) != 0 {
		t.Fatalf("at 70%%: %+v %v", ns, err)
	}
	if err := call(t, b.For(general, ada, uuid.New(), 1), 0, 1000, 1000); err != nil { // 0.08
		t.Fatal(err)
	}
	ns, err := b.Notices(ctx, general, ada)
	if err != nil || len(ns) != 1 || ns[0].Scope != "channel" || !strings.Contains(ns[0].Text, "80%") {
		t.Fatalf("at 80%%: %+v %v", ns, err)
	}
	if k := ns[0].Key(); k != "budget_notice:channel:"+general+":2026-12-01" {
		t.Errorf("key %q", k)
	}
}

// TestNoPriceWithABudget: a model without a price cannot be metered: refused, saying how to
// price it.
func TestNoPriceWithABudget(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := today
	b := newBudget(t, st, "channel=1/day", &now)
	_, err := b.For(general, ada, uuid.New(), 1).Admit(context.Background(), brain.MeteredCall{Provider: "openai", Model: "llama3", MaxOutputTokens: 10})
	if ob := overBudget(t, err, "no_price"); !strings.Contains(ob.Reply, "LOGBOOK_PRICES") {
		t.Errorf("reply %q", ob.Reply)
	}
}
