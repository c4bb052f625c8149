package main

import (
	"context"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// Issue 46: a daily budget below one model call's worst case (the context budget's input and
// the output limit, at the model's prices) is said where it is set, with the figure: serve's
// start for LOGBOOK_BUDGET, the reply to /logbook config for a channel's daily_budget. It is
// accepted, not refused.
func TestBudgetBelowOneCallsWorstCaseIsSaid(t *testing.T) {
	t.Parallel()
	vars := baseVars()
	vars["LOGBOOK_MODEL"] = "anthropic:claude-sonnet-4-5" // 3/15 per Mtok: 100000 in + 4096 out = 0.36144
	vars["LOGBOOK_BUDGET"] = "channel=0.20/day,person=0.05/day"
	vars["LOGBOOK_ADMINS"] = "U0ADMIN"
	vars["DATABASE_URL"] = pgtest.New(t)
	cfg, err := load(vars)
	if err != nil {
		t.Fatal(err)
	}
	ws := budgetWarnings(cfg)
	if len(ws) != 2 || !strings.Contains(ws[0], "channel budget of 0.20 USD is below what one model call of anthropic:claude-sonnet-4-5 can cost: 0.36144 USD") ||
		!strings.Contains(ws[0], "a long thread's calls will be refused") ||
		!strings.Contains(ws[1], "person budget of 0.05 USD") || !strings.Contains(ws[1], "every call will be refused") || !strings.Contains(ws[1], "0.06144 USD alone") {
		t.Fatalf("warnings at start:\n%s", strings.Join(ws, "\n"))
	}
	vars["LOGBOOK_BUDGET"] = "channel=1/day"
	if cfg, err := load(vars); err != nil || len(budgetWarnings(cfg)) != 0 {
		t.Fatalf("a budget that covers a call: %v, %v", budgetWarnings(cfg), err)
	}

	pool, err := session.Connect(context.Background(), vars["DATABASE_URL"], session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, s, _ := channelParts(cfg, session.NewStore(pool, session.Options{}), nil)
	run := settings.Command(s).Run
	config := func(args string) string {
		return run(context.Background(), slashcmd.Call{SlashCommand: slack.SlashCommand{ChannelID: "C0000001", UserID: "U0ADMIN"}, Args: args, Team: "T1"})
	}
	if out := config("daily_budget 0.10"); !strings.Contains(out, "is now `0.10`") ||
		!strings.Contains(out, ":warning: This channel's daily budget of 0.10 USD is below what one model call of anthropic:claude-sonnet-4-5 can cost: 0.36144 USD") {
		t.Fatalf("/logbook config daily_budget 0.10:\n%s", out)
	}
	if out := config("daily_budget 5"); !strings.Contains(out, "is now `5`") || strings.Contains(out, ":warning:") {
		t.Fatalf("/logbook config daily_budget 5:\n%s", out)
	}
}
