package budget_test

import (
	"errors"
	"testing"

	"github.com/logbook/logbook/bot/budget"
)

func TestParseMoneyAndString(t *testing.T) {
	for _, c := range []struct {
		in   string
		want budget.Money
		out  string
	}{
		{"20", 20_000_000, "20.00"}, {"4.5", 4_500_000, "4.50"}, {"0.000125", 125, "0.000125"},
		{"$3", 3_000_000, "3.00"}, {".25", 250_000, "0.25"}, {"0", 0, "0.00"},
	} {
		got, err := budget.ParseMoney(c.in)
		if err != nil || got != c.want || got.String() != c.out {
			t.Errorf("ParseMoney(%q) = %d (%s), %v; want %d (%s)", c.in, got, got, err, c.want, c.out)
		}
	}
	for _, bad := range []string{"", "-1", "1.0000001", "abc", "1e3", "+2", "1.-5"} {
		if _, err := budget.ParseMoney(bad); err == nil {
			t.Errorf("ParseMoney(%q): no error", bad)
		}
	}
}

func TestParsePrices(t *testing.T) {
	p, err := budget.ParsePrices("claude-fake=2/10/0.2/2.5, openai:gpt-fake=1/4/0.5")
	if err != nil {
		t.Fatal(err)
	}
	if p.Currency != "USD" || p.Date != budget.PricesDate {
		t.Errorf("currency %q date %q", p.Currency, p.Date)
	}
	for _, c := range []struct {
		provider, model string
		want            budget.Price
		ok              bool
	}{
		{"anthropic", "claude-fake-1", budget.Price{In: 2e6, Out: 10e6, CacheRead: 2e5, CacheWrite: 2_500_000}, true},
		{"openai", "gpt-fake-1", budget.Price{In: 1e6, Out: 4e6, CacheRead: 5e5, CacheWrite: 1e6}, true},
		{"anthropic", "gpt-fake-1", budget.Price{}, false}, // the key names its provider
		{"anthropic", "claude-sonnet-4-5-20250929", budget.Price{In: 3e6, Out: 15e6, CacheRead: 3e5, CacheWrite: 3_750_000}, true},
		{"openai", "gpt-4o-mini-2024-07-18", budget.Price{In: 15e4, Out: 6e5, CacheRead: 75e3}, true}, // longest prefix, not gpt-4o
		{"offline", "offline", budget.Price{}, true},
		{"openai", "llama3", budget.Price{}, false},
	} {
		got, ok := p.For(c.provider, c.model)
		if got != c.want || ok != c.ok {
			t.Errorf("For(%s, %s) = %+v, %v; want %+v, %v", c.provider, c.model, got, ok, c.want, c.ok)
		}
	}
	eur, err := budget.ParsePrices("currency=EUR,llama=0.5/0.5")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := eur.For("anthropic", "claude-sonnet-4-5"); ok || eur.Currency != "EUR" {
		t.Errorf("another currency keeps the USD table: %v %q", ok, eur.Currency)
	}
	for _, bad := range []string{"claude", "claude=3", "claude=3/x", "claude=1/2/3/4/5", "currency=E1", "=1/2"} {
		if _, err := budget.ParsePrices(bad); !errors.Is(err, budget.ErrBadPrices) {
			t.Errorf("ParsePrices(%q) = %v, want ErrBadPrices", bad, err)
		}
	}
}

func TestCost(t *testing.T) {
	p := budget.Price{In: 3e6, Out: 15e6, CacheRead: 3e5, CacheWrite: 3_750_000} // per Mtok
	// 1M input of which 200k read from cache and 100k written: 700k×3 + 200k×0.3 + 100k×3.75, plus 10k out ×15.
	got := p.Cost(budget.Usage{Input: 1_000_000, CacheRead: 200_000, CacheWrite: 100_000, Output: 10_000})
	if want := budget.Money(2_100_000 + 60_000 + 375_000 + 150_000); got != want {
		t.Errorf("cost %s, want %s", got, want)
	}
	if got := p.Cost(budget.Usage{Input: 1}); got != 3 { // 3e-6, exactly one... three micros
		t.Errorf("one token: %d micros", got)
	}
	if got := (budget.Price{In: 1}).Cost(budget.Usage{Input: 1}); got != 1 { // rounded up, never down to free
		t.Errorf("a fraction of a micro: %d", got)
	}
}

func TestParseLimits(t *testing.T) {
	l, err := budget.ParseLimits("channel=20/day, person=5/day")
	if err != nil || l != (budget.Limits{Channel: 20e6, Person: 5e6, HasChannel: true, HasPerson: true}) {
		t.Fatalf("%+v %v", l, err)
	}
	if l, err := budget.ParseLimits(""); err != nil || l.HasChannel || l.HasPerson {
		t.Errorf("empty: %+v %v", l, err)
	}
	for _, bad := range []string{"channel=20", "channel=20/week", "team=2/day", "person=x/day", "channel"} {
		if _, err := budget.ParseLimits(bad); !errors.Is(err, budget.ErrBadBudget) {
			t.Errorf("ParseLimits(%q) = %v", bad, err)
		}
	}
}
