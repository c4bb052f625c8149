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

// TestSchedulesAndHooksAreInExports: schedules added and removed (with who), their ticks (with
// their post and session), hook deliveries (accepted and refused), and the runs, pauses and
// resumes of both are files of the export, listed in the manifest, for the export's channel
// only.
func TestSchedulesAndHooksAreInExports(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	from := f.dbNow(t).Add(-time.Second)
	var ours session.Schedule
	for _, ch := range []string{"C0000001", "C0000002"} {
		sc, err := f.app.AddSchedule(ctx, session.Schedule{Team: "T1", Channel: ch, Spec: "@every 1h", Prompt: "digest of " + ch, AddedBy: "U00000A1"})
		if err != nil {
			t.Fatal(err)
		}
		if ch == "C0000001" {
			ours = sc
		}
	}
	tick, ok, err := f.app.ClaimTick(ctx, session.Tick{Schedule: ours, At: time.Now().Truncate(time.Second), Late: true, Missed: 3}, "replica-a", time.Now().Add(time.Minute))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	sid := uuid.New()
	if err := f.app.TickRan(ctx, tick, "1700000000.000100", sid, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.RemoveSchedule(ctx, "T1", ours.ID, "U00000B2"); err != nil {
		t.Fatal(err)
	}
	signed := time.Unix(1700000000, 0)
	d, ok, err := f.app.AcceptHook(ctx, session.HookDelivery{Hook: "alerts", DeliveryID: "d-1", BodySHA256: "ab", SignedAt: signed, Channel: "C0000001"}, time.Hour, time.Hour)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := f.app.HookRan(ctx, d.ID, "1700000000.000200", sid); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.RecordHook(ctx, session.HookDelivery{Hook: "alerts", Outcome: session.HookFailed, Of: d.ID, Channel: "C0000001", RemoteAddr: "10.0.0.9"}); err != nil {
		t.Fatal(err)
	}
	stopped, err := f.app.AddSchedule(ctx, session.Schedule{Team: "T1", Channel: "C0000001", Spec: "@every 1h", Prompt: "p", AddedBy: "U00000C3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.app.StopSchedule(ctx, "T1", stopped.ID, "U00000C3 left LOGBOOK_ADMINS"); err != nil {
		t.Fatal(err)
	}
	// Runs, a pause and a resume, in ours and in another channel.
	for _, ch := range []string{"C0000001", "C0000002"} {
		if _, _, err := f.app.RecordRun(ctx, session.AutomationRun{Kind: session.AutomationHook, Name: "alerts-" + ch, Channel: ch, Ref: "d-1", Error: "not_in_channel"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.app.PauseAutomation(ctx, session.Pause{Kind: session.AutomationHook, Name: "alerts-" + ch, Channel: ch, Reason: "3 failures in a row"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := f.app.RecordRun(ctx, session.AutomationRun{Kind: session.AutomationSchedule, Name: "1", Channel: "C0000001", Ref: tick.ID(), OK: true, TS: "1700000000.000100", Session: sid}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.ResumeAutomation(ctx, session.Pause{Kind: session.AutomationHook, Name: "alerts-C0000001", Channel: "C0000001", Actor: "U00000A1"}); err != nil {
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
	if records["schedules.jsonl"] != 4 || records["schedule_ticks.jsonl"] != 1 || records["hook_deliveries.jsonl"] != 2 || records["automations.jsonl"] != 4 {
		t.Fatalf("manifest files %+v", m.Files)
	}
	read := func(name string) string {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "C0000002") {
			t.Errorf("another channel's records in %s:\n%s", name, raw)
		}
		return string(raw)
	}
	s := read("schedules.jsonl")
	for _, want := range []string{`"change":"added"`, `"actor":"U00000A1"`, `"change":"removed"`, `"actor":"U00000B2"`, `"spec":"@every 1h"`,
		`"actor":"system"`, `"reason":"U00000C3 left LOGBOOK_ADMINS"`} {
		if !strings.Contains(s, want) {
			t.Errorf("schedules.jsonl lacks %s:\n%s", want, s)
		}
	}
	s = read("schedule_ticks.jsonl")
	for _, want := range []string{`"late":true`, `"missed":3`, `"attempts":1`, `"claimed_by":"replica-a"`, `"ts":"1700000000.000100"`, `"session_id":"` + sid.String(), `"set_by":"U00000A1"`} {
		if !strings.Contains(s, want) {
			t.Errorf("schedule_ticks.jsonl lacks %s:\n%s", want, s)
		}
	}
	s = read("hook_deliveries.jsonl")
	for _, want := range []string{`"outcome":"accepted"`, `"delivery_id":"d-1"`, `"ts":"1700000000.000200"`, `"outcome":"failed"`, `"remote_addr":"10.0.0.9"`,
		`"signed_at":"2023-11-14T22:13:20.000000Z"`} {
		if !strings.Contains(s, want) {
			t.Errorf("hook_deliveries.jsonl lacks %s:\n%s", want, s)
		}
	}
	s = read("automations.jsonl")
	for _, want := range []string{`"change":"run"`, `"ok":false`, `"error":"not_in_channel"`, `"change":"paused"`, `"actor":"system"`,
		`"reason":"3 failures in a row"`, `"change":"resumed"`, `"actor":"U00000A1"`, `"ok":true`, `"session_id":"` + sid.String()} {
		if !strings.Contains(s, want) {
			t.Errorf("automations.jsonl lacks %s:\n%s", want, s)
		}
	}
}
