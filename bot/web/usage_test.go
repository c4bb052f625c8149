package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
)

// The usage page shows the spend and tokens per channel, person and day with a chart drawn
// as SVG on the server (no script); a channel that became private is left out for people who
// are not auditors; the view is in the access log. Calls charged from logbook's estimate (they
// failed part way) are counted apart.
func TestUsagePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seedSpend(t, f)
	status, body, _ := f.get("/usage?days=7", asAlice)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{"<svg", "</svg>", "#general", "1.75", "U0000001", "1.25", "642",
		"1 of them charged from an estimate", ">estimated</th>"} {
		if !strings.Contains(body, want) {
			t.Errorf("usage page lacks %q", want)
		}
	}
	for _, not := range []string{"<script", "U0000009", "9.00"} {
		if strings.Contains(body, not) {
			t.Errorf("usage page has %q", not)
		}
	}
	if status, body, _ := f.get("/usage?days=7", asAuditor); status != 200 || !strings.Contains(body, "U0000009") {
		t.Errorf("an auditor does not see the private channel's spend: %d", status)
	}
	if status, _, _ := f.get("/usage?days=abc", asAlice); status != 400 {
		t.Errorf("a bad days: %d", status)
	}
	var seen bool
	for _, r := range f.accessLog() {
		seen = seen || (r.Action == "usage" && r.Who == "alice@example.com" && r.Results == 2)
	}
	if !seen {
		t.Errorf("the usage view is not in the access log: %+v", f.accessLog())
	}
}

// seedSpend records three model calls of today: two in #general (1.25 and 0.50), one in a
// channel that became private (9.00).
func seedSpend(t *testing.T, f *fixture) {
	t.Helper()
	for _, c := range []struct {
		channel, person string
		cost            int64
	}{{"C0000001", "U0000001", 1_250_000}, {"C0000001", "U0000002", 500_000}, {"C0000003", "U0000009", 9_000_000}} {
		hold := session.Spend{CallID: uuid.New(), Day: time.Now(), Channel: c.channel, Person: c.person, Model: "claude-x", CostMicros: c.cost}
		if _, _, err := f.store.AdmitSpend(f.ctx, hold, session.SpendLimits{Channel: -1, Person: -1}); err != nil {
			t.Fatal(err)
		}
		hold.OutputTokens, hold.Source = 321, session.UsageFromProvider
		if c.person == "U0000002" {
			hold.Source = session.UsageEstimated // a call stopped part way (issue 48)
		}
		if err := f.store.ChargeSpend(f.ctx, hold); err != nil {
			t.Fatal(err)
		}
	}
}

// The usage page shows the 👍/👎 on replies per channel and model, each person's latest click
// on a reply counted once; a channel that became private is left out for non-auditors.
func TestUsagePageShowsFeedback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rate := func(channel, thread, model string, clicks ...[2]string) {
		t.Helper()
		sess, err := f.store.Open(f.ctx, session.ThreadKey{Team: "T0000001", Channel: channel, ThreadTS: thread})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := f.store.Append(f.ctx, sess.ID, session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
			Payload: session.AssistantMessage{Text: "answer", Usage: &session.Usage{Model: model}}})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range clicks {
			fb := session.Feedback{Reply: evs[0].ID.String(), Rating: c[1], MessageTS: "1700000300.000100", Model: model, ActionTS: fmt.Sprint(i)}
			if _, err := f.store.Append(f.ctx, sess.ID, session.NewEvent{Type: session.TypeFeedback,
				Actor: session.Actor{Kind: session.ActorUser, ID: c[0]}, IdempotencyKey: fb.Key(c[0]), Payload: fb}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// In #general: U1 👎 then 👍 (counted 👍), U2 👍, U3 👎 → 2 of 3.
	rate("C0000001", "1700000900.000100", "claude-fb", [2]string{"U0000001", "negative"}, [2]string{"U0000001", "positive"},
		[2]string{"U0000002", "positive"}, [2]string{"U0000003", "negative"})
	rate("C0000003", "1700000900.000200", "secret-model", [2]string{"U0000001", "negative"})
	status, body, _ := f.get("/usage?days=7", asAlice)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{"<h2>Feedback</h2>", "<th scope=\"row\">#general</th><td data-label=\"model\">claude-fb</td><td data-label=\"👍\">2</td><td data-label=\"👎\">1</td><td data-label=\"ratio\">67%</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("usage page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "secret-model") {
		t.Error("usage page shows the feedback of a channel that became private")
	}
	if _, body, _ := f.get("/usage?days=7", asAuditor); !strings.Contains(body, "secret-model") {
		t.Error("an auditor does not see the private channel's feedback")
	}
}
