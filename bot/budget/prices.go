// Package budget prices model calls and keeps them within daily budgets per channel and per
// person (LOGBOOK_PRICES, LOGBOOK_BUDGET). Before each model call the brain asks a Meter,
// which admits the call only when what is left of every budget it counts against covers the
// call at its most — its estimated input at the input price plus its max_output_tokens at the
// output price —, writing a hold; the call's charge, from the usage the provider reported,
// follows. Holds, charges, refusals and admins' raises are rows of model_spend and
// budget_raises (session owns the SQL); the thread's notice at 80 % is a budget_notice event.
// Days are UTC days.
package budget

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Money is an amount in millionths of the prices' currency.
type Money int64

// String is m with two decimals, more when it needs them ("0.0042").
func (m Money) String() string {
	neg := m < 0
	if neg {
		m = -m
	}
	s := fmt.Sprintf("%d.%06d", m/1e6, m%1e6)
	s = strings.TrimRight(s, "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	if neg {
		return "-" + s
	}
	return s
}

// ParseMoney reads a non-negative decimal amount ("20", "4.5", "0.000125"), at most six
// decimals.
func ParseMoney(s string) (Money, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 6 || strings.HasPrefix(whole, "-") || strings.HasPrefix(whole, "+") {
		return 0, fmt.Errorf("%q is not an amount (want e.g. 20, 4.5 or 0.25; at most 6 decimals)", s)
	}
	w := int64(0)
	if whole != "" {
		var err error
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > math.MaxInt64/1_000_000-1 {
			return 0, fmt.Errorf("%q is not an amount (want e.g. 20, 4.5 or 0.25)", s)
		}
	}
	f := int64(0)
	if frac != "" {
		n, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil || strings.ContainsAny(frac, "+-") {
			return 0, fmt.Errorf("%q is not an amount (want e.g. 20, 4.5 or 0.25)", s)
		}
		f = n
	}
	return Money(w*1e6 + f), nil
}

// Price is a model's price per million tokens (Money per Mtok): uncached input, output, and
// input read from and written to the prompt cache.
type Price struct {
	In, Out, CacheRead, CacheWrite Money
}

// Usage is what a call used, as the provider reports it: Input counts every input token,
// the cached ones included.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Cost is what u costs at p, rounded up to the millionth.
func (p Price) Cost(u Usage) Money {
	plain := max(u.Input-u.CacheRead-u.CacheWrite, 0)
	return perMtok(plain, p.In) + perMtok(u.Output, p.Out) + perMtok(u.CacheRead, p.CacheRead) + perMtok(u.CacheWrite, p.CacheWrite)
}

// perMtok is n tokens at price (per million), rounded up.
func perMtok(n int64, price Money) Money {
	if n <= 0 || price <= 0 {
		return 0
	}
	hi, lo := n/1e6, n%1e6
	return Money(hi)*price + (Money(lo)*price+999_999)/1e6
}

// Prices are the models' prices: LOGBOOK_PRICES over the built-in table.
type Prices struct {
	Currency string // "USD" for the built-in table
	Date     string // the day the built-in prices were read from the providers' pages; "" for configured ones only
	entries  map[string]Price
}

// PricesDate is when the built-in prices were copied from the providers' price lists
// (anthropic.com/pricing, openai.com/api/pricing), in USD per million tokens.
const PricesDate = "2025-11-01"

// builtin are the providers' listed prices on PricesDate. Keys are model-name prefixes (the
// longest match wins), so a dated snapshot ("claude-sonnet-4-5-20250929") takes its family's
// price. Anthropic's cache writes are the 5-minute ones (1.25 × input), reads 0.1 × input;
// OpenAI reads cached input at its listed cached price and has no cache writes.
var builtin = map[string]Price{
	"claude-opus-4-5":   {In: 5e6, Out: 25e6, CacheRead: 5e5, CacheWrite: 6_250_000},
	"claude-opus-4":     {In: 15e6, Out: 75e6, CacheRead: 1_500_000, CacheWrite: 18_750_000},
	"claude-sonnet-4":   {In: 3e6, Out: 15e6, CacheRead: 3e5, CacheWrite: 3_750_000},
	"claude-3-7-sonnet": {In: 3e6, Out: 15e6, CacheRead: 3e5, CacheWrite: 3_750_000},
	"claude-haiku-4-5":  {In: 1e6, Out: 5e6, CacheRead: 1e5, CacheWrite: 1_250_000},
	"claude-3-5-haiku":  {In: 8e5, Out: 4e6, CacheRead: 8e4, CacheWrite: 1e6},
	"gpt-5-nano":        {In: 5e4, Out: 4e5, CacheRead: 5e3},
	"gpt-5-mini":        {In: 25e4, Out: 2e6, CacheRead: 25e3},
	"gpt-5":             {In: 1_250_000, Out: 10e6, CacheRead: 125e3},
	"gpt-4.1-nano":      {In: 1e5, Out: 4e5, CacheRead: 25e3},
	"gpt-4.1-mini":      {In: 4e5, Out: 1_600_000, CacheRead: 1e5},
	"gpt-4.1":           {In: 2e6, Out: 8e6, CacheRead: 5e5},
	"gpt-4o-mini":       {In: 15e4, Out: 6e5, CacheRead: 75e3},
	"gpt-4o":            {In: 2_500_000, Out: 10e6, CacheRead: 1_250_000},
	"o4-mini":           {In: 1_100_000, Out: 4_400_000, CacheRead: 275e3},
	"o3-mini":           {In: 1_100_000, Out: 4_400_000, CacheRead: 550e3},
	"o3":                {In: 2e6, Out: 8e6, CacheRead: 5e5},
}

// ErrBadPrices is returned by ParsePrices for a value it cannot read.
var ErrBadPrices = errors.New("bad LOGBOOK_PRICES")

// ParsePrices reads LOGBOOK_PRICES over the built-in table: comma-separated entries
// "model=in/out[/cache_read[/cache_write]]", in the currency's units per million tokens, the
// model as the provider names it or with its provider ("anthropic:claude-sonnet-4-5"), a
// prefix of the names it prices (the longest match wins); and optionally "currency=EUR",
// which drops the built-in (USD) table. A cache price left out is the input price. Examples:
//
//	claude-sonnet-4-5=3/15/0.30/3.75,gpt-4o=2.5/10/1.25
//	currency=EUR,openai:llama-3.1-70b=0.5/0.5
func ParsePrices(s string) (Prices, error) {
	p := Prices{Currency: "USD", Date: PricesDate, entries: map[string]Price{}}
	for k, v := range builtin {
		p.entries[k] = v
	}
	// The key=value,… loop of every list setting (LOGBOOK_BUDGET, LOGBOOK_OIDC_ROLES, …): each checks its own values.
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		key, val, ok := strings.Cut(f, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" || val == "" {
			return Prices{}, fmt.Errorf("%w: %q: want model=in/out[/cache_read[/cache_write]] per million tokens", ErrBadPrices, f)
		}
		if key == "currency" {
			if !currencyName(val) {
				return Prices{}, fmt.Errorf("%w: currency %q: want letters, e.g. EUR", ErrBadPrices, val)
			}
			if val != "USD" {
				p.Currency, p.Date = val, ""
				clear(p.entries) // the built-in prices are in USD
			}
			continue
		}
		price, err := parsePrice(val)
		if err != nil {
			return Prices{}, fmt.Errorf("%w: %s: %v", ErrBadPrices, key, err)
		}
		p.entries[strings.ToLower(key)] = price
	}
	return p, nil
}

func currencyName(s string) bool {
	if len(s) < 1 || len(s) > 8 {
		return false
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return true
}

func parsePrice(s string) (Price, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 4 {
		return Price{}, fmt.Errorf("%q: want in/out[/cache_read[/cache_write]]", s)
	}
	var ms [4]Money
	for i, part := range parts {
		m, err := ParseMoney(part)
		if err != nil {
			return Price{}, err
		}
		ms[i] = m
	}
	p := Price{In: ms[0], Out: ms[1], CacheRead: ms[0], CacheWrite: ms[0]}
	if len(parts) > 2 {
		p.CacheRead = ms[2]
	}
	if len(parts) > 3 {
		p.CacheWrite = ms[3]
	}
	return p, nil
}

// For is the price of model served by provider: the longest key that prefixes
// "provider:model", else model. The offline provider is free. ok false: no price is known.
func (p Prices) For(provider, model string) (Price, bool) {
	if provider == "offline" {
		return Price{}, true
	}
	full, bare := strings.ToLower(provider+":"+model), strings.ToLower(model)
	best, found := "", false
	var price Price
	for k, v := range p.entries {
		if (strings.HasPrefix(full, k) || strings.HasPrefix(bare, k)) && len(k) > len(best) {
			best, price, found = k, v, true
		}
	}
	return price, found
}

// Models lists the priced model prefixes, sorted (for --help and the usage page).
func (p Prices) Models() []string {
	out := make([]string, 0, len(p.entries))
	for k := range p.entries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
