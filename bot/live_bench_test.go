package bot_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// BenchmarkLiveTurn measures what a person sees of a turn whose model streams a 2,000-word
// answer at a fixed rate (first token after 200 ms, 20 characters every 30 ms — about 20 s):
// the time from the post to the first visible status, from the model's first token to the
// first visible reply text, the Slack calls the reply costs and whether any was rate-limited;
// with LOGBOOK_STREAM=auto against a baseline of LOGBOOK_STREAM=off (the whole reply posted at
// the end), in one run. Run: go test -run '^$' -bench LiveTurn -benchtime 1x ./bot/
func BenchmarkLiveTurn(b *testing.B) {
	words := strings.Fields(strings.Repeat("logbook streams the reply as the model writes it, card by card. ", 200))
	answer := strings.Join(words[:1998], " ") + " THE END."
	for _, mode := range []bot.StreamMode{bot.StreamOff, bot.StreamAuto} {
		b.Run(string(mode), func(b *testing.B) {
			var status, firstText, total []time.Duration
			var calls, limited float64
			for range b.N {
				s, f, tot, c, l := liveTurnOnce(b, mode, answer)
				status, firstText, total = append(status, s), append(firstText, f), append(total, tot)
				calls, limited = calls+c, limited+l
			}
			b.ReportMetric(msOf(median(status)), "status_p50_ms")
			b.ReportMetric(msOf(slices.Max(status)), "status_max_ms")
			b.ReportMetric(msOf(median(firstText)), "first_text_after_first_token_p50_ms")
			b.ReportMetric(msOf(slices.Max(firstText)), "first_text_after_first_token_max_ms")
			b.ReportMetric(msOf(median(total)), "turn_ms")
			b.ReportMetric(calls/float64(b.N), "slack_calls/reply")
			b.ReportMetric(limited/float64(b.N), "rate_limited/reply")
		})
	}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func liveTurnOnce(b *testing.B, mode bot.StreamMode, answer string) (status, firstText, total time.Duration, calls, limited float64) {
	b.Helper()
	emu := slackemu.MustStart(b, slackemu.Options{})
	pool, err := pgxpool.New(context.Background(), pgtest.New(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	model := fakeprovider.NewAnthropic(b, "sk-bench")
	model.Push(fakeprovider.Reply{Text: answer, Stream: fakeprovider.Stream{FirstToken: 200 * time.Millisecond, Chunk: 20, Every: 30 * time.Millisecond}},
		fakeprovider.Reply{Text: "Bench"})
	provider, err := brain.NewProvider("anthropic:claude-bench", brain.ProviderConfig{AnthropicAPIKey: "sk-bench", AnthropicBaseURL: model.URL})
	if err != nil {
		b.Fatal(err)
	}
	agent, err := brain.New(brain.Config{Provider: provider, Logger: zerolog.Nop(), DeferTitle: true})
	if err != nil {
		b.Fatal(err)
	}
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	ctx, cancel := context.WithCancel(context.Background())
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := bot.NewService(bot.ServiceConfig{Runner: bot.RunnerConfig{Live: bot.LiveConfig{Mode: mode},
		Where: brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID}}},
		bot.Deps{Log: zerolog.Nop(), API: api, Socket: socketmode.New(api), Me: me, Store: store, GatewayStore: store,
			Agent: agent, Metrics: bot.NewMetrics(reg), Features: bot.Features{Titler: agent}})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	if err := emu.Wait(wait, func() bool { return len(emu.Connections()) == 1 }); err != nil {
		b.Fatal(err)
	}
	posted := time.Now()
	top, err := emu.Post(slackemu.Post{Channel: "C0000001", Text: "<@" + me.UserID + "> tell me everything"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := emu.WaitForReplies(wait, "C0000001", top.TS, 1); err != nil {
		b.Fatal(err)
	}
	if err := emu.Wait(wait, func() bool {
		msgs := emu.BotReplies("C0000001", top.TS)
		if len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1].Text, words2000end(answer)) {
			return false
		}
		st, ok := emu.StreamState("C0000001", msgs[len(msgs)-1].TS)
		return !ok || !st.Streaming()
	}); err != nil {
		b.Fatal(err)
	}
	total = time.Since(posted)
	first := func(methods ...string) time.Time {
		var t time.Time
		for _, m := range methods {
			for _, r := range emu.Requests(m) {
				if t.IsZero() || r.At.Before(t) {
					t = r.At
				}
			}
		}
		return t
	}
	status = first("agents.sessions.setStatus", "assistant.threads.setStatus", "reactions.add").Sub(posted)
	firstToken := model.Calls()[0].At.Add(200 * time.Millisecond)
	firstText = first("chat.startStream", "chat.postMessage").Sub(firstToken)
	for _, m := range []string{"chat.startStream", "chat.appendStream", "chat.stopStream", "chat.postMessage", "chat.update", "chat.delete"} {
		calls += float64(len(emu.Requests(m)))
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "logbook_delivery_retries_total" {
			limited = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return status, firstText, total, calls, limited
}

func words2000end(string) string { return "THE END." }
