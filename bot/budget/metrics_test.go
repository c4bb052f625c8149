package budget_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
)

// TestCostMetricOverOTLP: each charge adds what the call cost, in the prices' currency, to
// logbook.model.cost, by provider and model; a refused call adds nothing.
func TestCostMetricOverOTLP(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t)
	mp := recv.MeterProvider(t)
	p, err := budget.ParsePrices("fake-model=1/10")
	if err != nil {
		t.Fatal(err)
	}
	l, err := budget.ParseLimits("channel=0.05/day")
	if err != nil {
		t.Fatal(err)
	}
	now := today
	b, err := budget.New(budget.Config{Store: newStore(t), Prices: p, Limits: l, Now: func() time.Time { return now },
		Log: zerolog.New(zerolog.NewTestWriter(t)), Metrics: telemetry.NewMetrics(mp)})
	if err != nil {
		t.Fatal(err)
	}
	m := b.For(general, ada, uuid.New(), 1)
	// 1,000 input tokens at 1/Mtok and 1,000 output at 10/Mtok: 0.011, twice.
	for range 2 {
		if err := call(t, m, 1000, 2000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := call(t, m, 1000, 10_000_000, 1000); err == nil {
		t.Fatal("a call over the budget was admitted")
	}
	if err := mp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	cost, ok := recv.Metric(telemetry.MetricCost)
	if !ok || cost.Kind != "sum" || len(cost.Points) != 1 {
		t.Fatalf("%s: %+v (received: %v); want one sum", telemetry.MetricCost, cost, ok)
	}
	pt := cost.Points[0]
	if math.Abs(pt.Value-0.022) > 1e-9 || pt.Attrs["gen_ai.provider.name"] != "anthropic" || pt.Attrs["gen_ai.request.model"] != "fake-model" ||
		pt.Attrs["logbook.currency"] != p.Currency {
		t.Errorf("cost point %+v; want 0.022 of anthropic fake-model in %q", pt, p.Currency)
	}
}
