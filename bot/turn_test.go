package bot_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// queryCounter is a pgx tracer that counts the statements sent for one session: every
// statement whose arguments name the session is one database round trip of its cell.
// Appends name it as a pgtype.UUID: before they were counted too, the count missed the
// turn's four appends and took in the cell's exit instead (its tail read and lease release).
type queryCounter struct {
	mu      sync.Mutex
	id      session.ID
	trips   int
	evicted bool
	full    int // reads of the session's events with no lower seq bound and no limit
	sqls    []string
}

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.id == (session.ID{}) {
		return ctx
	}
	mine := false
	for _, a := range d.Args {
		switch id := a.(type) {
		case session.ID:
			mine = mine || id == q.id
		case pgtype.UUID: // the appends' (logbook_append) argument
			mine = mine || (id.Valid && id.Bytes == q.id)
		}
	}
	if !mine || q.evicted {
		return ctx
	}
	for _, a := range d.Args {
		if ts, ok := a.([]string); ok && len(ts) > 0 && ts[0] == string(session.TypeCellEvicted) {
			q.evicted = true // the cell's exit is not part of the turn
			return ctx
		}
	}
	q.trips++
	sql := strings.Join(strings.Fields(d.SQL), " ")
	q.sqls = append(q.sqls, fmt.Sprintf("%s %v", sql, d.Args[1:]))
	if strings.Contains(sql, "FROM events WHERE session_id = $1") && !strings.Contains(sql, "LIMIT") &&
		(!strings.Contains(sql, "seq >=") || (len(d.Args) > 1 && d.Args[1] == int64(1))) {
		q.full++
	}
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (q *queryCounter) watch(id session.ID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.id, q.trips, q.full, q.sqls, q.evicted = id, 0, 0, nil, false
}

func (q *queryCounter) counts() (int, int, []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.trips, q.full, append([]string(nil), q.sqls...)
}

// TestFirstTurnCost counts the database round trips and full reads of the log that a first
// turn without tools costs its cell — from the signal to the idle wait after the title — with
// the real brain (offline provider, title deferred as in serve).
func TestFirstTurnCost(t *testing.T) {
	emu := slackemu.MustStart(t, slackemu.Options{})
	dbURL := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	counter := &queryCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	// The test's own reads and writes go through a pool of their own, not counted.
	plain, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	own := session.NewStore(plain, session.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()))
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	metrics := bot.NewMetrics(prometheus.NewRegistry())
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	agent, err := brain.New(brain.Config{Provider: brain.Offline{}, Logger: log, DeferTitle: true})
	if err != nil {
		t.Fatal(err)
	}
	deliver := bot.NewDeliverer(api, log, metrics, bot.DeliveryConfig{Reaction: "-"})
	runner := bot.NewRunner(bot.Deps{Log: log, Store: store, Agent: agent, Deliver: deliver, Metrics: metrics, Features: bot.Features{Titler: agent}}, bot.RunnerConfig{
		PollInterval: time.Hour, LeaseTTL: time.Minute,
		// The core of a turn; a live view adds one append (stream_started) and Slack calls.
		Live:  bot.LiveConfig{Mode: bot.StreamOff},
		Where: brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID},
	})
	posted, err := emu.Post(slackemu.Post{Channel: "C0000001", User: "U0000001", Text: "<@" + me.UserID + "> hello there"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := own.Open(ctx, session.ThreadKey{Team: emu.TeamID(), Channel: "C0000001", ThreadTS: posted.TS})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor:   session.Actor{Kind: session.ActorUser, ID: "U0000001"},
		Payload: session.UserMessage{TS: posted.TS, Text: "<@" + me.UserID + "> hello there"}}); err != nil {
		t.Fatal(err)
	}
	// The runner finds the session by its first poll, as after a restart: one wake, and no
	// second signal whose poke would make the cell read the log once more.
	counter.watch(sess.ID)
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := emu.WaitForReplies(ctx, "C0000001", posted.TS, 1); err != nil {
		t.Fatal(err)
	}
	// The turn is done when the title is in the log and the cell has looked for more work:
	// the cell's last statement before it waits is that read, so wait for the count to settle
	// on a title.
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := own.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeTitle}})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no title")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	trips, full, sqls := counter.counts()
	t.Logf("first turn without tools: %d round trips, %d full reads of the log", trips, full)
	if trips > 8 || full > 1 {
		for _, s := range sqls {
			t.Logf("  %.60s ... %.200s", s, s[max(0, len(s)-200):])
		}
		t.Errorf("a first turn costs %d round trips and %d full reads; want at most 8 and 1 (before the turn had one home: 19 and 3)", trips, full)
	}
}

// fixedTitler names every session the same, once, as brain.Title does.
type fixedTitler struct{ text string }

func (f fixedTitler) Title(ctx context.Context, t brain.Turn, reply session.Event) {
	_, _ = t.Log.Append(ctx, session.NewEvent{Type: session.TypeTitle, Actor: session.Actor{Kind: session.ActorBot, ID: botUser},
		IdempotencyKey: "title", Payload: session.Title{Text: f.text}})
}

// The session's title appears in Slack: the thread has no agent session (logbook does not
// open one yet), so agents.sessions.rename is refused and assistant.threads.setTitle sets it.
func TestTurnTitleShownInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{titler: fixedTitler{"Why the build is red"}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why is the build red?"})
	h.replies(general, top.TS, 1)
	if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.ThreadTitle(general, top.TS) != "" }); err != nil {
		t.Fatalf("no title in Slack: %v", err)
	}
	if got := h.emu.ThreadTitle(general, top.TS); got != "Why the build is red" {
		t.Fatalf("title %q", got)
	}
	if n := h.emu.Calls("agents.sessions.rename"); n != 1 {
		t.Fatalf("agents.sessions.rename called %d times, want 1 (tried first)", n)
	}
}

// blockedTitler is fixedTitler whose title call waits until release is closed (a slow model),
// saying on started when it began.
type blockedTitler struct {
	fixedTitler
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockedTitler) Title(ctx context.Context, t brain.Turn, reply session.Event) {
	b.once.Do(func() { close(b.started) })
	select {
	case <-b.release:
	case <-ctx.Done():
		return
	}
	b.fixedTitler.Title(ctx, t, reply)
}

// The title's model call holds up no reply (issue 33): the thread's second message is
// answered while the first reply's title is still being written, and the title lands after.
// Before, the cell wrote the title inside the first turn and the second waited for it.
func TestTitleDoesNotHoldUpTheNextTurn(t *testing.T) {
	t.Parallel()
	titler := &blockedTitler{fixedTitler: fixedTitler{"Why the build is red"}, started: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, &echoAgent{}, harnessOptions{titler: titler})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why is the build red?"})
	h.replies(general, top.TS, 1)
	select {
	case <-titler.started:
	case <-h.waitCtx().Done():
		t.Fatal("the title was never asked for")
	}
	h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> and the deploy?", ThreadTS: top.TS})
	h.replies(general, top.TS, 2) // fails (times out) while a title holds the turn up
	sess := h.session(general, top.TS)
	if n := len(h.events(sess.ID, session.TypeTitle)); n != 0 {
		t.Fatalf("%d titles while the title call waits", n)
	}
	close(titler.release)
	h.waitFor("the title", func() bool { return len(h.events(sess.ID, session.TypeTitle)) == 1 })
	if got := h.emu.ThreadTitle(general, top.TS); got != "" && got != "Why the build is red" {
		t.Fatalf("title in Slack %q", got)
	}
}
