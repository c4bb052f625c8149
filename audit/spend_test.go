package audit_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/session"
)

// TestSpendIsInExports: the model spend and budget raises of the window are files of the
// export (spend.*, budget_raises.*), listed in the manifest, for the export's channel only; a
// charge says whether its tokens were the provider's or logbook's estimate (issue 48).
func TestSpendIsInExports(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	from := f.dbNow(t).Add(-time.Second)
	for _, ch := range []string{"C0000001", "C0000002"} {
		hold := session.Spend{CallID: uuid.New(), Day: time.Now(), Channel: ch, Person: "U00000A1", Model: "claude-x", CostMicros: 5000, OutputTokens: 100}
		if _, ok, err := f.app.AdmitSpend(ctx, hold, session.SpendLimits{Channel: -1, Person: -1}); err != nil || !ok {
			t.Fatal(ok, err)
		}
		hold.CostMicros, hold.OutputTokens, hold.CacheReadTokens, hold.Source = 1234, 42, 7, session.UsageEstimated
		if err := f.app.ChargeSpend(ctx, hold); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.app.RaiseBudget(ctx, session.BudgetRaise{Day: time.Now(), Scope: "channel", Subject: "C0000001", Channel: "C0000001", Amount: 10e6, RaisedBy: "U00000B2"}); err != nil {
		t.Fatal(err)
	}
	bucket, dir := newBucket(t)
	m, err := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{Settle: time.Millisecond}).Export(ctx,
		audit.Query{From: from, To: f.dbNow(t).Add(time.Second), Channel: "C0000001", Format: audit.JSONL}, bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]int64{}
	for _, file := range m.Files {
		records[file.Name] = file.Records
	}
	if records["spend.jsonl"] != 2 || records["budget_raises.jsonl"] != 1 {
		t.Fatalf("manifest files %+v", m.Files)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "spend.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind":"hold"`, `"kind":"charge"`, `"cost_micros":1234`, `"cache_read_tokens":7`, `"channel":"C0000001"`,
		`"source":"estimate"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("spend.jsonl lacks %s:\n%s", want, raw)
		}
	}
	if strings.Contains(string(raw), "C0000002") {
		t.Errorf("another channel's spend in a channel's export:\n%s", raw)
	}
	raw, _ = os.ReadFile(filepath.Join(dir, "budget_raises.jsonl"))
	if !strings.Contains(string(raw), `"raised_by":"U00000B2"`) || !strings.Contains(string(raw), `"amount_micros":10000000`) {
		t.Errorf("budget_raises.jsonl:\n%s", raw)
	}
}
