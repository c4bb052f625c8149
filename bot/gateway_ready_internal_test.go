package bot

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// The gateway opens its socket only once its runner is ready (the liveness claim is held):
// an envelope delivered before that would wait in its cell for the claim, while Slack gives
// it to a connected replica that can run it now. A gateway started after it, with no wait,
// connecting first is the sign that the waiting one had its chance to connect.
func TestGatewayOpensTheSocketOnceTheRunnerIsReady(t *testing.T) {
	t.Parallel()
	emu := slackemu.MustStart(t, slackemu.Options{})
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	start := func(ready <-chan struct{}) (stop func()) {
		api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
		g := newGateway(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), store, api, socketmode.New(api),
			Identity{TeamID: emu.TeamID(), UserID: "UBOT"}, func(session.ID, bool) {}, NewMetrics(prometheus.NewRegistry()),
			nil, nil, nil, GatewayConfig{MaxInFlight: 2})
		g.ready = ready
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = g.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	opened := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := emu.Wait(ctx, func() bool { return emu.ConnectionsOpened() >= n }); err != nil {
			t.Fatalf("%d sockets opened, want %d: %v", emu.ConnectionsOpened(), n, err)
		}
	}
	ready := make(chan struct{})
	defer start(ready)()
	defer start(nil)()
	opened(1)
	// One envelope's round trip through the gateway that did not wait: time enough for the
	// other to have connected too, had it not waited.
	posted, err := emu.Post(slackemu.Post{Channel: "C0000001", User: "U0000001", Text: "<@UBOT> hello"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range posted.EventIDs {
		if _, err := emu.WaitForAck(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := emu.ConnectionsOpened(); n != 1 {
		t.Fatalf("%d sockets opened before the runner was ready, want the one that did not wait", n)
	}
	close(ready)
	opened(2)
}
