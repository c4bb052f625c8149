package bot_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// stalledLog is the gateway's log with appends held until release is closed: a database
// that has stopped answering.
type stalledLog struct {
	*session.Store
	release chan struct{}
	once    sync.Once
}

func (l *stalledLog) Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error) {
	select {
	case <-l.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Store.Append(ctx, id, evs...)
}

func (l *stalledLog) open() { l.once.Do(func() { close(l.release) }) }

// While the database stalls, the gateway keeps reading the socket (so pings are answered and
// Slack keeps the connection), leaves what it cannot store unacked, and once the database is
// back every message is stored exactly once from Slack's redeliveries — more envelopes arrive
// than the handlers, the backlog and slack-go's own buffer hold together.
func TestGatewayKeepsReadingWhileTheDatabaseStalls(t *testing.T) {
	t.Parallel()
	const posts = 120
	emu := slackemu.MustStart(t, slackemu.Options{PingInterval: 50 * time.Millisecond, AckTimeout: 500 * time.Millisecond,
		RetrySchedule: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}})
	pool, err := pgxpool.New(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	stalled := &stalledLog{Store: store, release: make(chan struct{})}
	t.Cleanup(stalled.open)

	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw := bot.NewGateway(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), stalled, api, sm, me,
		func(session.ID) {}, bot.NewMetrics(reg), nil, bot.GatewayConfig{MaxInFlight: 2, Backlog: 64, HandleTimeout: 20 * time.Second})
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		stalled.open()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := emu.Wait(wait, func() bool { return len(emu.Connections()) == 1 }); err != nil {
		t.Fatal(err)
	}

	for i := range posts {
		if _, err := emu.Post(slackemu.Post{Channel: "C0000001", Text: fmt.Sprintf("<@%s> question %d", me.UserID, i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Every envelope reached the gateway and the socket still answers pings, though nothing
	// could be stored: the read loop did not wait for the handlers.
	first := emu.Connections()[0]
	if err := emu.Wait(wait, func() bool {
		c := emu.Connections()
		return len(c) == 1 && c[0].ID == first.ID && c[0].Pongs >= first.Pongs+5 && deferred(t, reg) > 0
	}); err != nil {
		t.Fatalf("the socket stopped being read while the database stalled (pongs %d → %d, deferred %v): %v",
			first.Pongs, emu.Connections()[0].Pongs, deferred(t, reg), err)
	}
	if n := len(emu.Acks()); n != 0 {
		t.Fatalf("%d envelopes acked while nothing could be stored", n)
	}

	stalled.open()
	if err := emu.Wait(wait, func() bool { return countUserMessages(t, pool) == posts }); err != nil {
		t.Fatalf("%d of %d messages stored after the database came back: %v", countUserMessages(t, pool), posts, err)
	}
	if opened := emu.ConnectionsOpened(); opened != 1 {
		t.Fatalf("%d sockets opened: the connection was dropped", opened)
	}
}

func deferred(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "logbook_envelopes_deferred_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func countUserMessages(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = 'user_message'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
