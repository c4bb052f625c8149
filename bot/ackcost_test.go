package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// statements is a pgx tracer that records every statement sent through its pool.
type statements struct {
	mu   sync.Mutex
	sqls []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	sql := strings.Join(strings.Fields(d.SQL), " ")
	if len(d.Args) > 4 {
		if types, ok := d.Args[4].([]string); ok { // logbook_append's event types
			sql += " " + strings.Join(types, ",")
		}
	}
	if len(d.Args) == 2 && strings.Contains(sql, "FROM sessions WHERE channel_id = $1 AND thread_ts = $2") {
		sql += fmt.Sprintf(" -- thread %v", d.Args[1]) // which thread a session lookup was for
	}
	s.sqls = append(s.sqls, sql)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sqls
	s.sqls = nil
	return out
}

// TestAckCost counts what a reply in a thread the gateway knows costs before its ack, as
// bench/bot.sh's steady phase sends them: one database round trip (the append) and no Slack
// lookup (users.info, conversations.info, conversations.replies: the directory has the user
// and the channel from the thread's first message). It also logs what the cell's turn then
// costs the database per message.
func TestAckCost(t *testing.T) {
	// No redelivery within the test: on a loaded machine a late ack would bring the envelope
	// again, and its second append (a duplicate) is not the cost of a first delivery.
	emu := slackemu.MustStart(t, slackemu.Options{RetrySchedule: []time.Duration{time.Minute}})
	dbURL := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	connect := func(tr pgx.QueryTracer) *session.Store {
		cfg, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.Tracer = tr
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return session.NewStore(pool, session.Options{})
	}
	gwSQL, cellSQL := &statements{}, &statements{}
	gwStore, cellStore := connect(gwSQL), connect(cellSQL)
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api, socketmode.OptionPingInterval(2*time.Second))
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	metrics := bot.NewMetrics(prometheus.NewRegistry())
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	runner := bot.NewRunner(bot.Deps{Log: log, Store: cellStore, Agent: instantAgent{},
		Deliver: bot.NewDeliverer(api, log, metrics, bot.DeliveryConfig{}), Metrics: metrics}, bot.RunnerConfig{
		MaxReplies: -1, IdleTimeout: 10 * time.Minute, PollInterval: time.Hour,
		Where: brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID},
	})
	gw := bot.NewGateway(log, gwStore, api, sm, me, runner.Stored, metrics, nil, bot.GatewayConfig{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = gw.Run(ctx) })
	wg.Go(func() { _ = runner.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := emu.Wait(ctx, func() bool { return emu.ConnectionsOpened() > 0 }); err != nil {
		t.Fatal(err)
	}

	// The thread's opening mention wakes its cell and makes the gateway know the thread. The
	// gateway's append opened the session, so no replica can run it yet: its cell starts here
	// without asking the database who does (no NotifyOwner, whose pg_notify names the owner).
	cellSQL.take()
	root, err := emu.Post(slackemu.Post{Channel: "C0000001", User: "U0000001", Text: "<@" + me.UserID + "> hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emu.WaitForReplies(ctx, "C0000001", root.TS, 1); err != nil {
		t.Fatal(err)
	}
	for _, q := range cellSQL.take() {
		if strings.Contains(q, "pg_notify") {
			t.Errorf("the opening mention's cell was routed through the database first: %.200s", q)
		}
	}
	const replies = 10
	var gwTrips, cellTrips, apiBeforeAck int
	for i := range replies {
		gwSQL.take()
		cellSQL.take()
		before := len(emu.Requests(""))
		p, err := emu.Post(slackemu.Post{Channel: "C0000001", User: "U0000001", ThreadTS: root.TS, Text: "and one more thing"})
		if err != nil {
			t.Fatal(err)
		}
		var ackAt time.Time
		if err := emu.Wait(ctx, func() bool {
			for _, a := range emu.Acks() {
				if len(p.EventIDs) > 0 && a.EventID == p.EventIDs[0] {
					ackAt = a.At
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatal(err)
		}
		for _, r := range emu.Requests("")[before:] {
			// The lookups the gateway may make (its directory's); the cell's own calls for
			// the previous reply can overlap the next envelope.
			if r.At.Before(ackAt) && (r.Method == "users.info" || r.Method == "conversations.info" || r.Method == "conversations.replies") {
				apiBeforeAck++
			}
		}
		// Another envelope handled meanwhile (Slack's echo of the bot's own message, late at
		// load) may look up its own thread: only this thread's statements are this reply's.
		gw := slices.DeleteFunc(gwSQL.take(), func(q string) bool {
			_, thread, ok := strings.Cut(q, " -- thread ")
			return ok && thread != root.TS
		})
		gwTrips += len(gw)
		// The append: a single message is the one-event statement (session/appendone.go).
		if len(gw) != 1 || !strings.Contains(gw[0], "INSERT INTO events AS e") {
			t.Errorf("reply %d: the gateway sent %d statements, want the append alone: %q", i, len(gw), gw)
		}
		if _, err := emu.WaitForReplies(ctx, "C0000001", root.TS, i+2); err != nil {
			t.Fatal(err)
		}
		cell := cellSQL.take()
		cellTrips += len(cell)
		if i == replies-1 {
			for _, q := range cell {
				t.Logf("  the cell: %.150s", q)
			}
		}
	}
	t.Logf("per reply in a known thread: %.1f gateway statements, %.1f Slack lookups before the ack; "+
		"the cell's turn then: %.1f statements", float64(gwTrips)/replies, float64(apiBeforeAck)/replies, float64(cellTrips)/replies)
	if apiBeforeAck > 0 {
		t.Errorf("%d Slack lookups before the acks of %d replies; want none", apiBeforeAck, replies)
	}
}
