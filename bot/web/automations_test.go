package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
)

// The automations page lists the runs of schedules and hooks, newest first: time, what,
// channel, outcome (a failure with why), a link to the session's transcript and its cost. A run
// in a channel that became private is left out for people who are not auditors; an auditor
// sees the organisation's. The view is in the access log; a bad kind is a 400.
func TestAutomationsPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := uuid.New()
	hold := session.Spend{CallID: uuid.New(), Day: time.Now(), Channel: "C0000001", Person: "U0000001", SessionID: sid, Model: "claude-x", CostMicros: 420_000}
	if _, _, err := f.store.AdmitSpend(f.ctx, hold, session.SpendLimits{Channel: -1, Person: -1}); err != nil {
		t.Fatal(err)
	}
	if err := f.store.ChargeSpend(f.ctx, hold); err != nil {
		t.Fatal(err)
	}
	for _, r := range []session.AutomationRun{
		{Kind: session.AutomationSchedule, Name: "7", Channel: "C0000001", Ref: "7/1", OK: true, TS: "1.1", Session: sid},
		{Kind: session.AutomationHook, Name: "alerts", Channel: "C0000001", Ref: "alerts/d-1", Error: "post: not_in_channel"},
		{Kind: session.AutomationSchedule, Name: "9", Channel: "C0000003", Ref: "9/1", OK: true, TS: "2.2", Session: uuid.New()},
	} {
		if _, _, err := f.store.RecordRun(f.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	status, body, _ := f.get("/automations", asAlice)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{"schedule 7", "#general", `href="/sessions/` + sid.String() + `"`, "0.42", "hook alerts", "failed: post: not_in_channel"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "schedule 9") {
		t.Error("a run in a private channel is shown to someone who is not an auditor")
	}
	if status, body, _ := f.get("/automations", asAuditor); status != 200 || !strings.Contains(body, "schedule 9") {
		t.Errorf("an auditor does not see the organisation's runs: %d", status)
	}
	if status, body, _ := f.get("/automations?kind=hook", asAlice); status != 200 || strings.Contains(body, "schedule 7") || !strings.Contains(body, "hook alerts") {
		t.Errorf("kind=hook: %d", status)
	}
	if status, _, _ := f.get("/automations?kind=cron", asAlice); status != 400 {
		t.Errorf("a bad kind: %d", status)
	}
	var seen bool
	for _, r := range f.accessLog() {
		seen = seen || (r.Action == "automations" && r.Who == "alice@example.com" && r.Results == 2)
	}
	if !seen {
		t.Errorf("the view is not in the access log: %+v", f.accessLog())
	}
}
