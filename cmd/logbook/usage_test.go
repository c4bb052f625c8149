package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// `logbook usage` prints the spend and tokens per channel, person and day of the range, as
// text and as JSON; a refused call is counted, a running call at its hold.
func TestUsageCLI(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	ctx := context.Background()
	pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := session.NewStore(pool, session.Options{})
	today := session.UTCDay(time.Now())
	spend := func(day time.Time, channel, person string, cost, out int64, charge bool, limit int64) {
		t.Helper()
		hold := session.Spend{CallID: uuid.New(), Day: day, Channel: channel, Person: person, Model: "claude-x", CostMicros: cost * 2, OutputTokens: out * 2}
		if _, _, err := st.AdmitSpend(ctx, hold, session.SpendLimits{Channel: limit, Person: -1}); err != nil {
			t.Fatal(err)
		}
		if charge {
			hold.CostMicros, hold.OutputTokens, hold.InputTokens, hold.Source = cost, out, 100, session.UsageFromProvider
			if out == 10 {
				hold.Source = session.UsageEstimated // a call stopped part way (issue 48)
			}
			if err := st.ChargeSpend(ctx, hold); err != nil {
				t.Fatal(err)
			}
		}
	}
	spend(today, "C0000001", "U0000001", 1_500_000, 1000, true, -1)
	spend(today, "C0000001", "U0000002", 250_000, 10, true, -1)
	spend(today.AddDate(0, 0, -1), "C0000002", "U0000001", 10_000, 5, false, -1) // still running: its hold, 0.02
	spend(today, "C0000001", "U0000002", 10_000_000, 5, false, 1)                // refused
	// Feedback: in C0000001, U0000001 👍 and U0000002 👎 on a reply of claude-x.
	sess, err := st.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := st.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
		Payload: session.AssistantMessage{Text: "answer", Usage: &session.Usage{Model: "claude-x"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"U0000001", session.FeedbackPositive}, {"U0000002", session.FeedbackNegative}} {
		fb := session.Feedback{Reply: reply[0].ID.String(), Rating: c[1], MessageTS: "1700000001.000100", Model: "claude-x", ActionTS: "1"}
		if _, err := st.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeFeedback, Actor: session.Actor{Kind: session.ActorUser, ID: c[0]},
			IdempotencyKey: fb.Key(c[0]), Payload: fb}); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"DATABASE_URL": dbURL}
	err, code, out, stderr := runCLI(t, env, "usage", "--since", "3d")
	if err != nil {
		t.Fatalf("usage: %v (exit %d) %s", err, code, stderr)
	}
	for _, want := range []string{
		"Model spend " + today.AddDate(0, 0, -3).Format(time.DateOnly) + " to " + today.Format(time.DateOnly) + " (UTC days), in USD.",
		"channel  cost  calls  estimated  refused",
		"C0000001  1.75      2          1        1",
		"C0000002  0.02      0          0        0",
		"U0000001  1.52",
		today.Format(time.DateOnly) + "  C0000001  U0000002  0.25",
		"feedback     model  positive  negative  ratio",
		"C0000001  claude-x         1         1    50%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	err, _, out, stderr = runCLI(t, env, "usage", "--channel", "C0000002", "--json")
	if err != nil {
		t.Fatalf("usage --json: %v %s", err, stderr)
	}
	var rep struct {
		All struct {
			Cost int64 `json:"cost_micros"`
		}
		Channels []struct{ Key string }
		Days     []struct{ Key string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.All.Cost != 20_000 || len(rep.Channels) != 1 || len(rep.Days) != 7 {
		t.Fatalf("usage --json: %+v %v\n%s", rep, err, out)
	}
	if err, code, _, _ := runCLI(t, env, "usage", "--since", "tomorrow"); err == nil || code != 2 {
		t.Errorf("a bad --since: %v, exit %d", err, code)
	}
}
