package bot_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/apphome"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// App Home, through the unmodified slack-go client: when ada and grace each open logbook's
// Home tab (app_home_opened), each gets a view published with views.publish that shows their
// own sessions (titled by the model: shown inert), the approval in ada's session that waits
// for her, the schedules of their sessions' channels (not another channel's), and their own
// spend today — never the other's.
func TestAppHomeShowsEachPersonOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{surfaceWith: func(store *session.Store, api *slack.Client) bot.Surface {
		return &apphome.Surface{Store: store, Slack: api, Currency: "USD", Log: zerolog.New(zerolog.NewTestWriter(t))}
	}})
	ctx := context.Background()
	threads := map[string]session.Session{}
	for _, p := range []struct{ user, title string }{{ada, "ada's deploy question <!here>"}, {grace, "grace's reorg plan"}} {
		top := h.post(slackemu.Post{Channel: general, User: p.user, Text: "<@" + botUser + "> hello"})
		h.replies(general, top.TS, 1)
		sess := h.session(general, top.TS)
		h.turns(sess.ID, 1)
		if _, err := h.store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTitle, Actor: session.Actor{Kind: session.ActorBot, ID: botUser},
			Payload: session.Title{Text: p.title}}); err != nil {
			t.Fatal(err)
		}
		threads[p.user] = sess
	}
	// A turn of ada's session waits for an approval (as a suspended turn leaves it).
	if _, err := h.store.Append(ctx, threads[ada].ID,
		session.NewEvent{Type: session.TypeTurnStarted, Actor: session.Actor{Kind: session.ActorSystem, ID: "test"}, Payload: session.TurnStarted{Through: 1}},
		session.NewEvent{Type: session.TypeApprovalRequested, Actor: session.Actor{Kind: session.ActorBot, ID: botUser},
			Payload: session.ApprovalRequested{Turn: 0, CallID: "call-1", Tool: "run_command", Summary: "make deploy", Channel: general,
				ExpiresAt: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []session.Schedule{{Team: h.emu.TeamID(), Channel: general, Spec: "0 9 * * 1", Prompt: "weekly digest", AddedBy: ada},
		{Team: h.emu.TeamID(), Channel: "C0000077", Spec: "0 8 * * *", Prompt: "ops report", AddedBy: ada}} {
		if _, err := h.store.AddSchedule(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for person, cost := range map[string]int64{ada: 1_250_000, grace: 500_000} {
		call := session.Spend{CallID: uuid.New(), Day: time.Now(), Channel: general, Person: person, SessionID: threads[person].ID, Model: "claude-x", CostMicros: cost}
		if _, _, err := h.store.AdmitSpend(ctx, call, session.SpendLimits{Channel: -1, Person: -1}); err != nil {
			t.Fatal(err)
		}
		call.Source = session.UsageFromProvider
		if err := h.store.ChargeSpend(ctx, call); err != nil {
			t.Fatal(err)
		}
	}
	view := func(user string) string {
		t.Helper()
		id, err := h.emu.OpenAppHome(user)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
			t.Fatal(err)
		}
		var blocks []byte
		if err := h.emu.Wait(h.waitCtx(), func() bool {
			b, _, ok := h.emu.HomeView(user)
			blocks = b
			return ok
		}); err != nil {
			t.Fatalf("no App Home view was published for %s: %v", user, err)
		}
		// The view's JSON as text: & < > unescaped, so a test reads what Slack renders from.
		var v any
		if err := json.Unmarshal(blocks, &v); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	adaView, graceView := view(ada), view(grace)
	for _, c := range []struct {
		name, view string
		want, not  []string
	}{
		{"ada", adaView,
			[]string{"ada's deploy question &lt;\u200b!here&gt;", "waiting for your approval: `run_command` — make deploy", "1.25 USD", "weekly digest"},
			[]string{"grace's reorg plan", "0.50 USD", "ops report", "<!here>"}},
		{"grace", graceView,
			[]string{"grace's reorg plan", "Nothing is running or waiting for you.", "0.50 USD", "weekly digest"},
			[]string{"ada's deploy", "make deploy", "1.25 USD", "ops report"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.view, w) {
				t.Errorf("%s's App Home lacks %q:\n%s", c.name, w, c.view)
			}
		}
		for _, n := range c.not {
			if strings.Contains(c.view, n) {
				t.Errorf("%s's App Home shows %q:\n%s", c.name, n, c.view)
			}
		}
	}
}
