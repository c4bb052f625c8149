package bot

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
)

func TestFooterLine(t *testing.T) {
	t.Parallel()
	id := session.ID{1}
	usages := []session.Usage{{Model: "gpt-4o-mini", InputTokens: 1_000_000, OutputTokens: 2_000_000}, {Model: "gpt-4o-mini", InputTokens: 234}}
	prices := priceOf(map[string]Price{"gpt-4o-mini": {Input: 1, Output: 2}, "local-llama": {}})
	link := "<https://x.example/sessions/" + id.String() + "|Transcript>"
	for _, c := range []struct {
		f      Footer
		usages []session.Usage
		want   string
	}{
		{Footer{Mode: FooterOff, PublicURL: "https://x.example"}, usages, ""},
		{Footer{Mode: FooterLink}, usages, ""},
		{Footer{Mode: FooterLink, PublicURL: "https://x.example/"}, usages, link},
		{Footer{Mode: FooterUsage, PublicURL: "https://x.example", Price: prices}, usages, link + " · gpt-4o-mini · 1,000,234 in · 2,000,000 out · $5.0002"},
		{Footer{Mode: FooterUsage, PublicURL: "https://x.example", Price: prices}, []session.Usage{{Model: "mystery", InputTokens: 5}}, link + " · mystery · 5 in · 0 out"},
		{Footer{Mode: FooterUsage, PublicURL: "https://x.example", Price: prices}, nil, link},
		// Prices name model prefixes, as LOGBOOK_PRICES does: a versioned name is priced by the
		// longest prefix that names it (serve's Price is budget.Prices.For).
		{Footer{Mode: FooterUsage, PublicURL: "https://x.example", Price: priceOf(map[string]Price{"claude-sonnet-4": {Input: 3, Output: 15}, "claude-": {Input: 100, Output: 100}})},
			[]session.Usage{{Model: "claude-sonnet-4-5-20250929", InputTokens: 1_000_000, OutputTokens: 100_000}},
			link + " · claude-sonnet-4-5-20250929 · 1,000,000 in · 100,000 out · $4.5000"},
	} {
		if got := c.f.line(id, c.usages); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
	if m, err := ParseFooterMode("", "https://x"); err != nil || m != FooterLink {
		t.Errorf("default with a public URL: %q %v", m, err)
	}
	if m, err := ParseFooterMode("", ""); err != nil || m != FooterOff {
		t.Errorf("default without: %q %v", m, err)
	}
}

// priceOf prices a model by the longest key of m that is a prefix of it, as budget.Prices does.
func priceOf(m map[string]Price) func(model string) (Price, bool) {
	return func(model string) (Price, bool) {
		best, found := "", false
		var price Price
		for k, v := range m {
			if strings.HasPrefix(model, k) && len(k) > len(best) {
				best, price, found = k, v, true
			}
		}
		return price, found
	}
}
