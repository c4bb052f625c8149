package main

import (
	"testing"

	"github.com/logbook/logbook/bot/budget"
)

// The footer prices a versioned model name by LOGBOOK_PRICES' longest prefix, as the budget
// does (issue 46: it looked the exact name up, and claude-sonnet-4-5-20250929 showed no cost).
func TestFooterPriceTakesThePrefix(t *testing.T) {
	t.Parallel()
	p, err := budget.ParsePrices("claude-sonnet-4=3/15,claude-=100/100")
	if err != nil {
		t.Fatal(err)
	}
	price := footerPrice(p)
	got, ok := price("claude-sonnet-4-5-20250929")
	if !ok || got.Input != 3 || got.Output != 15 {
		t.Errorf("claude-sonnet-4-5-20250929: %+v %v, want 3/15 a million", got, ok)
	}
	if _, ok := price("mystery-model-7"); ok {
		t.Error("a model no prefix names has a price")
	}
}
