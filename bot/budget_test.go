package bot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// budgetFor meters the harness's turns: "claude-" models at 1 per Mtok in, 10 out (the
// brain's 4,096-token output limit makes a call cost up to about 0.042), with limits.
func budgetFor(t *testing.T, limits string) func(*session.Store) *budget.Budget {
	return func(st *session.Store) *budget.Budget {
		l, err := budget.ParseLimits(limits)
		if err != nil {
			t.Fatal(err)
		}
		p, err := budget.ParsePrices("claude-=1/10/0.1/1.25")
		if err != nil {
			t.Fatal(err)
		}
		b, err := budget.New(budget.Config{Store: st, Prices: p, Limits: l, Admins: []string{grace}, Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// A turn whose first call spent most of the channel's budget stops before the next one: the
// remaining budget cannot cover it at max_output_tokens, so it never starts. The thread says
// why and who can raise it; the log has the refusal; the spend has the first call's usage as
// the streamed answer reported it, cache tokens included.
func TestBudgetStopsATurnBeforeACallItCannotAfford(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{budget: budgetFor(t, "channel=0.1/day")})
	model.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"echo hi"}`}},
		InputTokens: 3000, CacheReadTokens: 1000, OutputTokens: 6000}, // 0.002 + 0.0001 + 0.06
		fakeprovider.Reply{Text: "never asked for"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> run something"})
	reply := h.final(general, top.TS, 1)
	for _, want := range []string{"I stopped before calling the model", "budget for today (UTC) is 0.10 USD", "0.0621 of it is spent", "<@" + grace + ">", "/logbook budget raise"} {
		if !strings.Contains(reply, want) {
			t.Errorf("reply %q lacks %q", reply, want)
		}
	}
	if n := len(model.Calls()); n != 1 {
		t.Fatalf("%d model calls, want 1: the second could not be afforded", n)
	}
	if !model.Calls()[0].Stream {
		t.Fatal("the call was not streamed: the test means the streamed usage")
	}
	s := h.session(general, top.TS)
	var e session.ErrorEvent
	errs := h.events(s.ID, session.TypeError)
	if len(errs) != 1 || errs[0].Decode(&e) != nil || e.Stage != "budget" || e.Code != "channel_budget" {
		t.Fatalf("error events %+v", errs)
	}
	rows, err := h.store.Usage(context.Background(), time.Now().AddDate(0, 0, -1), time.Now().AddDate(0, 0, 1), general)
	if err != nil || len(rows) != 1 {
		t.Fatalf("usage %+v %v", rows, err)
	}
	if u := rows[0]; u.Calls != 1 || u.Refused != 1 || u.InputTokens != 3000 || u.CacheReadTokens != 1000 || u.OutputTokens != 6000 || u.CostMicros != 62_100 || u.Person != ada {
		t.Fatalf("usage %+v", u)
	}
}

// At 80 % of the channel's budget the thread gets one notice, under the reply that crossed
// it, and not again; a new thread gets its own, once.
func TestBudgetNoticeAtEightyPercentOnce(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{budget: budgetFor(t, "channel=1/day")})
	model.Push(fakeprovider.Reply{Text: "first", InputTokens: 100, OutputTokens: 80_000}, // 0.8001
		fakeprovider.Reply{Text: "second", InputTokens: 100, OutputTokens: 10},
		fakeprovider.Reply{Text: "third", InputTokens: 100, OutputTokens: 10})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> one"})
	first := h.final(general, top.TS, 1)
	const notice = "this channel has spent 0.8001 of its 1.00 USD model budget for today (UTC), 80%"
	if !strings.Contains(first, "first") || !strings.Contains(first, notice) {
		t.Fatalf("first reply %q, want the notice", first)
	}
	s := h.session(general, top.TS)
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "two"})
	second := h.final(general, top.TS, 2)
	if !strings.Contains(second, "second") || strings.Contains(second, "budget") {
		t.Fatalf("second reply %q: the notice again", second)
	}
	if n := len(h.events(s.ID, session.TypeBudgetNotice)); n != 1 {
		t.Fatalf("%d budget_notice events, want 1", n)
	}
	other := h.post(slackemu.Post{Channel: general, User: grace, Text: "<@" + botUser + "> three"})
	if third := h.final(general, other.TS, 1); !strings.Contains(third, "third") || !strings.Contains(third, "model budget for today") {
		t.Fatalf("a new thread's reply %q, want its own notice", third)
	}
}

// final waits until the thread's session has answered every message with n replies, and
// returns the last one as the thread shows it (text and blocks).
func (h *harness) final(channel, thread string, n int) string {
	h.t.Helper()
	h.answered(h.session(channel, thread).ID)
	msgs := h.replies(channel, thread, n)
	return cardText(msgs[len(msgs)-1])
}
