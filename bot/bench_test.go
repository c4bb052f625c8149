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
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// benchPlan is the load BenchmarkGateway offers to each system.
type benchPlan struct {
	threads int           // sessions (Slack threads), each started by a top-level mention
	light   float64       // offered messages/s in the light phase (service time without queueing), for light seconds
	lightN  int           // messages in the light phase
	rate    float64       // offered messages/s in the fixed-rate phase, spread round robin over the threads
	steady  time.Duration // length of the fixed-rate phase
	closed  time.Duration // length of the closed-loop phase (one message in flight per thread)
	drain   time.Duration // how long a phase may take to get every reply and ack after its last post
}

// BenchmarkGateway measures, in one run, envelope-to-ack and envelope-to-reply latency and
// sustained messages/s across 100 threads for two systems on their own emulator:
//
//   - floor: a bare slack-go socketmode handler that acks each envelope and posts a reply in
//     the thread with chat.postMessage, storing nothing;
//   - logbook: the real Gateway and Runner on a fresh PostgreSQL database, with instantAgent
//     (answers at once, reading the log as the real brain does) as the brain.
//
// Latencies come from the emulator's own records: envelope sent (Delivery.At, first attempt) to
// ack received (Ack.At), and first envelope of a post sent to the chat.postMessage call that
// answers it (Request.At). Phases: one top-level mention per thread (cell wake-up, reported
// apart), a light fixed rate (20 msg/s: the time of one message without queueing), the target
// fixed rate (250 msg/s, open loop), then a closed loop with one message in flight per thread
// (maximum throughput). Run it with bench/bot.sh.
//
// Sub-benchmarks: serve-wiring wires logbook as `logbook serve` does (a pool of 8 for the
// cells and one of 4 of the gateway's own); shared-pool-4 is the earlier wiring (one pool of
// pgxpool's default size shared by gateway and cells), kept to show what queueing for a
// connection costs.
func BenchmarkGateway(b *testing.B) {
	plan := benchPlan{threads: 100, light: 20, lightN: 60, rate: 250, steady: 4 * time.Second, closed: 4 * time.Second, drain: 30 * time.Second}
	for _, w := range []struct {
		name   string
		wiring logbookWiring
	}{
		{"shared-pool-4", logbookWiring{}},
		{"serve-wiring", logbookWiring{maxConns: 8, gatewayConns: 4}},
		{"group-commit", logbookWiring{maxConns: 8, gatewayConns: 4, appendLanes: 3}},
	} {
		b.Run(w.name, func(b *testing.B) {
			for b.Loop() {
				benchGateway(b, plan, w.wiring)
			}
		})
	}
}

// benchGateway runs the floor, then logbook, on the same plan and logs and reports the
// figures side by side (at most ten log lines: the testing package cuts the rest).
func benchGateway(b *testing.B, plan benchPlan, wiring logbookWiring) {
	commit := measureCommit(b)
	floorEmu := startBenchEmulator(b)
	startFloor(b, floorEmu)
	floor := runLoad(b, "floor", floorEmu, plan)

	emu := startBenchEmulator(b)
	pools := startLogbook(b, emu, instantAgent{}, wiring)
	lb := runLoad(b, "logbook", emu, plan)

	var pstats []string
	for i, pool := range pools {
		st := pool.Stat()
		pstats = append(pstats, fmt.Sprintf("%s %d conns, %d acquires, %d waited, %s waiting in all",
			[]string{"pool", "gateway pool"}[i], st.MaxConns(), st.AcquireCount(), st.EmptyAcquireCount(),
			st.AcquireDuration().Round(time.Millisecond)))
	}
	b.Logf("one durable commit (single-row INSERT, idle database) p50 %s p99 %s | bot posts floor %d (%d redundant) logbook %d (%d redundant) | logbook %s",
		ms(commit.p50), ms(commit.p99), floor.botPosts, floor.redundant, lb.botPosts, lb.redundant, strings.Join(pstats, "; "))
	for _, ph := range []string{phaseWake, phaseLight, phaseSteady, phaseClosed} {
		f, l := floor.phases[ph], lb.phases[ph]
		b.Logf("%-6s ack p50/p99 floor %s/%s logbook %s/%s x%.1f | reply p50/p99 floor %s/%s logbook %s/%s x%.1f | msg/s floor %.1f logbook %.1f | %d posts, logbook replies %d, retried envelopes %d/%d",
			ph, ms(f.ack.p50), ms(f.ack.p99), ms(l.ack.p50), ms(l.ack.p99), ratio(l.ack.p99, f.ack.p99),
			ms(f.reply.p50), ms(f.reply.p99), ms(l.reply.p50), ms(l.reply.p99), ratio(l.reply.p99, f.reply.p99),
			f.rate, l.rate, l.posts, l.turns, f.retried, l.retried)
	}
	f, l, c := floor.phases[phaseSteady], lb.phases[phaseSteady], lb.phases[phaseClosed]
	b.Logf("targets at %.0f msg/s offered: ack p99 %s <= floor %s + commit p99 %s: %v | reply p99 %s < 50ms: %v | sustained %.0f msg/s (closed loop %.0f) >= 200: %v",
		plan.rate, ms(l.ack.p99), ms(f.ack.p99), ms(commit.p99), l.ack.p99 <= f.ack.p99+commit.p99,
		ms(l.reply.p99), l.reply.p99 < 50*time.Millisecond, l.rate, c.rate, l.rate >= 200)

	b.ReportMetric(msf(commit.p99), "commit-p99-ms")
	for _, r := range []struct {
		prefix string
		res    map[string]phaseResult
	}{{"floor-", floor.phases}, {"", lb.phases}} {
		s, c := r.res[phaseSteady], r.res[phaseClosed]
		b.ReportMetric(msf(s.ack.p50), r.prefix+"ack-p50-ms")
		b.ReportMetric(msf(s.ack.p99), r.prefix+"ack-p99-ms")
		b.ReportMetric(msf(s.reply.p50), r.prefix+"reply-p50-ms")
		b.ReportMetric(msf(s.reply.p99), r.prefix+"reply-p99-ms")
		b.ReportMetric(s.rate, r.prefix+"steady-msg/s")
		b.ReportMetric(msf(r.res[phaseLight].reply.p50), r.prefix+"light-reply-p50-ms")
		b.ReportMetric(c.rate, r.prefix+"closed-msg/s")
	}
	b.ReportMetric(ratio(l.ack.p99, f.ack.p99), "ack-p99-ratio")
	b.ReportMetric(ratio(l.reply.p99, f.reply.p99), "reply-p99-ratio")
	b.ReportMetric(c.rate/floor.phases[phaseClosed].rate, "closed-msg/s-ratio")
}

// instantAgent is the benchmark's brain: it answers at once, doing the log work of the real
// brain's turn without a model: it reads the turn's turn_started for Through, the user messages
// up to Through (as the brain's history does, so a message that arrived after the turn began is
// left to the next turn), and appends one assistant_message naming them.
type instantAgent struct{}

func (instantAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	started, err := t.Log.Events(ctx, session.Range{From: t.TurnSeq, To: t.TurnSeq})
	if err != nil {
		return brain.Reply{}, err
	}
	var ts session.TurnStarted
	if len(started) != 1 || started[0].Decode(&ts) != nil || ts.Through == 0 {
		return brain.Reply{}, fmt.Errorf("turn %d: no turn_started with a through", t.TurnSeq)
	}
	evs, err := t.Log.Events(ctx, session.Range{To: ts.Through, Types: []session.Type{session.TypeUserMessage}})
	if err != nil {
		return brain.Reply{}, err
	}
	texts := make([]string, 0, len(evs))
	for _, e := range evs {
		var m session.UserMessage
		if err := e.Decode(&m); err != nil {
			return brain.Reply{}, err
		}
		texts = append(texts, m.Text)
	}
	msg := session.AssistantMessage{Text: "seen: " + strings.Join(texts, " | "), Turn: t.TurnSeq}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}, Payload: msg})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: msg, Status: session.StatusOK}, nil
}

const (
	phaseWake   = "wake"   // the top-level mention of each thread: starts a session and its cell
	phaseLight  = "light"  // a low fixed rate: service time without queueing
	phaseSteady = "steady" // fixed offered rate
	phaseClosed = "closed" // one message in flight per thread
)

// startBenchEmulator starts an emulator with Slack's 3-second ack window and its immediate
// first retry; the later retries come after 1s and 2s instead of 1m and 5m, so that a run with
// missed acks still ends (they are counted as retried envelopes).
func startBenchEmulator(b *testing.B) *slackemu.Server {
	return slackemu.MustStart(b, slackemu.Options{PingInterval: 500 * time.Millisecond,
		RetrySchedule: []time.Duration{0, time.Second, 2 * time.Second}})
}

// startFloor runs the floor: a slack-go socketmode client that acks every envelope at once and
// answers each user message with one chat.postMessage in its thread. It stores nothing.
func startFloor(b *testing.B, emu *slackemu.Server) {
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api, socketmode.OptionPingInterval(2*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = sm.RunContext(ctx) })
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case evt := <-sm.Events:
				if evt.Type != socketmode.EventTypeEventsAPI || evt.Request == nil {
					continue
				}
				wg.Go(func() { floorHandle(ctx, b, api, sm, evt) })
			}
		}
	})
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func floorHandle(ctx context.Context, b *testing.B, api *slack.Client, sm *socketmode.Client, evt socketmode.Event) {
	if err := sm.Ack(*evt.Request); err != nil {
		b.Errorf("floor ack: %v", err)
		return
	}
	ev, ok := evt.Data.(slackevents.EventsAPIEvent)
	if !ok {
		return
	}
	m, ok := ev.InnerEvent.Data.(*slackevents.MessageEvent)
	if !ok || m.BotID != "" || m.SubType != "" || m.User == "" {
		return // app_mention twins, the floor's own replies
	}
	thread := cmpOr(m.ThreadTimeStamp, m.TimeStamp)
	_, _, err := api.PostMessageContext(ctx, m.Channel, slack.MsgOptionText("seen: "+m.Text, false), slack.MsgOptionTS(thread))
	if err != nil && ctx.Err() == nil {
		b.Errorf("floor reply in %s: %v", thread, err)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// startLogbook runs logbook's Gateway and Runner as `logbook serve` wires them (default pool,
// lease and poll settings), on a fresh database, with a 10-minute idle timeout so no cell is
// evicted during the run.
// logbookWiring chooses how startLogbook connects logbook to its database.
type logbookWiring struct {
	// maxConns is the cells' pool size; 0 is pgxpool's default (4 on 2 cores).
	maxConns int32
	// gatewayConns, when > 0, gives the gateway its own pool of that size, so acks never
	// queue behind the cells' queries (as `logbook serve` does).
	gatewayConns int32
	// appendLanes is GatewayConfig.AppendLanes (group commit when > 0).
	appendLanes int
	// tracer, when set, traces the gateway's envelopes and its pool's statements
	// (BenchmarkAckBreakdown).
	tracer trace.TracerProvider
}

// startLogbook runs logbook's Gateway and Runner as `logbook serve` wires them (default lease
// and poll settings), on a fresh database, with a 10-minute idle timeout so no cell is evicted
// during the run. It returns the pools it opened, for their statistics.
func startLogbook(b *testing.B, emu *slackemu.Server, agent bot.Agent, w logbookWiring) []*pgxpool.Pool {
	ctx, cancel := context.WithCancel(context.Background())
	dbURL := pgtest.New(b)
	connect := func(size int32, tr pgx.QueryTracer) *pgxpool.Pool {
		pool, err := session.Connect(ctx, dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: size, Tracer: tr})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		return pool
	}
	pools := []*pgxpool.Pool{connect(w.maxConns, nil)}
	store := session.NewStore(pools[0], session.Options{})
	gwStore := store
	if w.gatewayConns > 0 {
		var tr pgx.QueryTracer
		if w.tracer != nil {
			tr = telemetry.PgxTracer(w.tracer)
		}
		pools = append(pools, connect(w.gatewayConns, tr))
		gwStore = session.NewStore(pools[1], session.Options{})
	}
	api := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(emu.AppToken()))
	sm := socketmode.New(api, socketmode.OptionPingInterval(2*time.Second))
	me, err := bot.WhoAmI(ctx, api)
	if err != nil {
		b.Fatal(err)
	}
	metrics := bot.NewMetrics(prometheus.NewRegistry())
	log := zerolog.New(zerolog.NewTestWriter(b)).Level(zerolog.WarnLevel)
	deliver := bot.NewDeliverer(api, log, metrics, bot.DeliveryConfig{})
	runner := bot.NewRunner(bot.Deps{Log: log, Store: store, DatabaseURL: dbURL, Agent: agent, Deliver: deliver, Metrics: metrics}, bot.RunnerConfig{
		MaxReplies:  -1, // the load sends each thread more than the per-thread reply cap allows
		IdleTimeout: 10 * time.Minute,
		Where:       brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID},
	})
	gw := bot.NewGateway(log, gwStore, api, sm, me, runner.Stored, metrics, nil, bot.GatewayConfig{AppendLanes: w.appendLanes})
	if w.tracer != nil {
		bot.SetGatewayTracer(gw, w.tracer)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := gw.Run(ctx); err != nil {
			b.Errorf("gateway: %v", err)
		}
	})
	wg.Go(func() {
		if err := runner.Run(ctx); err != nil {
			b.Errorf("runner: %v", err)
		}
	})
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return pools
}

// measureCommit times 200 sequential autocommitted single-row INSERTs into a logged table of a
// fresh database: the cost of one durable commit on this machine, for the ack target.
func measureCommit(b *testing.B) latencies {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.New(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_commit (id bigserial PRIMARY KEY, body text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for range 200 {
		start := time.Now()
		if _, err := conn.Exec(ctx, `INSERT INTO bench_commit (body) VALUES ($1)`, "a user message"); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	return summarize(ds)
}

// benchPost is one user post the driver made.
type benchPost struct {
	thread int
	marker string   // unique token in the text; every reply that answers the post contains it
	events []string // event_ids of its envelopes (message, and app_mention for a mention)
	phase  string
}

// loadDriver posts as a user into the emulator and keeps what it posted.
type loadDriver struct {
	b       *testing.B
	emu     *slackemu.Server
	parents []string // top-level ts of each thread
	seq     []int
	last    []string // marker of each thread's last post
	posts   []benchPost
}

func (d *loadDriver) post(thread int, phase string) {
	marker := fmt.Sprintf("t%03dm%05d", thread, d.seq[thread])
	d.seq[thread]++
	p := slackemu.Post{Channel: general, User: ada, Text: "how is " + marker + " going?", ThreadTS: d.parents[thread]}
	if p.ThreadTS == "" {
		p.Text = "<@" + botUser + "> " + p.Text
	}
	posted, err := d.emu.Post(p)
	if err != nil {
		d.b.Fatal(err)
	}
	if d.parents[thread] == "" {
		d.parents[thread] = posted.TS
	}
	d.last[thread] = marker
	d.posts = append(d.posts, benchPost{thread: thread, marker: marker, events: posted.EventIDs, phase: phase})
}

// paced posts n messages round robin over the threads at rate messages/s (open loop: it does
// not wait for answers).
func (d *loadDriver) paced(phase string, n int, rate float64) {
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		d.post(i%len(d.parents), phase)
	}
}

// closedLoop keeps one message in flight per thread for dur: a thread posts its next message
// as soon as the bot's reply to the previous one is in the thread. It returns when dur is over;
// replies still due are left to drain.
func (d *loadDriver) closedLoop(ctx context.Context, dur time.Duration) {
	want := make([]int, len(d.parents)) // reply count of the thread once the in-flight post is answered
	for i := range d.parents {
		want[i] = d.replyCount(i) + 2 // the post and the bot's reply
		d.post(i, phaseClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	calls := -1
	for {
		// Every bot reply is a chat.postMessage call: wake up on those only.
		err := d.emu.Wait(ctx, func() bool { return d.emu.Calls("chat.postMessage") != calls })
		if err != nil {
			return
		}
		calls = d.emu.Calls("chat.postMessage")
		for i := range d.parents {
			if n := d.replyCount(i); n >= want[i] {
				want[i] = n + 2
				d.post(i, phaseClosed)
			}
		}
	}
}

func (d *loadDriver) replyCount(thread int) int {
	m, ok := d.emu.Message(general, d.parents[thread])
	if !ok {
		d.b.Fatalf("thread %d parent %s is gone", thread, d.parents[thread])
	}
	return m.ReplyCount
}

// drain waits until the newest reply of every thread is the bot's answer to the thread's last
// post and every post's envelopes are acked. The emulator's records are the measurement, so
// the poll period does not matter.
func (d *loadDriver) drain(phase string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		pending := d.pending()
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			d.b.Fatalf("%s: not answered within %s: %s", phase, timeout, pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pending describes the first thread or envelope still waiting, "" if none.
func (d *loadDriver) pending() string {
	for i, parent := range d.parents {
		p, _ := d.emu.Message(general, parent)
		latest, ok := d.emu.Message(general, p.LatestReply)
		if !ok || latest.BotID == "" || !strings.Contains(latest.Text, d.last[i]) {
			return fmt.Sprintf("thread %d (%s) has no reply to %s yet", i, parent, d.last[i])
		}
	}
	for _, p := range d.posts {
		for _, id := range p.events {
			if st := d.emu.DeliveryState(id); st != slackemu.StateAcked {
				return fmt.Sprintf("event %s of %s is %s", id, p.marker, st)
			}
		}
	}
	return ""
}

type latencies struct {
	p50, p99, max time.Duration
	n             int
}

// phaseResult is what one phase measured on one system.
type phaseResult struct {
	ack, reply latencies
	posts      int
	turns      int     // bot replies that answered them (one reply answers every message its turn saw)
	retried    int     // envelopes of the phase's posts that Slack had to send again
	rate       float64 // messages answered per second (see runLoad)
}

// runLoad drives plan against the system behind emu and returns each phase's figures. The
// fixed-rate phase's rate is its posts over the time from its first envelope to its last
// reply; the closed loop's rate is the posts answered within its window over the window.
func runLoad(b *testing.B, name string, emu *slackemu.Server, plan benchPlan) loadResult {
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := emu.Wait(wctx, func() bool { return len(emu.Connections()) > 0 }); err != nil {
		b.Fatalf("%s: no socket mode connection: %v", name, err)
	}
	d := &loadDriver{b: b, emu: emu, parents: make([]string, plan.threads), seq: make([]int, plan.threads), last: make([]string, plan.threads)}
	d.paced(phaseWake, plan.threads, plan.rate)
	d.drain(name+" "+phaseWake, plan.drain)
	d.paced(phaseLight, plan.lightN, plan.light)
	d.drain(name+" "+phaseLight, plan.drain)
	d.paced(phaseSteady, int(plan.rate*plan.steady.Seconds()), plan.rate)
	d.drain(name+" "+phaseSteady, plan.drain)
	closedStart := time.Now()
	d.closedLoop(ctx, plan.closed)
	closedEnd := time.Now()
	d.drain(name+" "+phaseClosed, plan.drain)

	rec := newRecords(emu)
	out := loadResult{phases: map[string]phaseResult{}, events: map[string][]string{}}
	answering := map[string]bool{} // thread ts + time of every bot post that answered a post first
	for _, ph := range []string{phaseWake, phaseLight, phaseSteady, phaseClosed} {
		var acks, replies []time.Duration
		var first, last time.Time
		res := phaseResult{}
		answeredInWindow := 0
		turns := map[string]bool{}
		for _, p := range d.posts {
			if p.phase != ph {
				continue
			}
			res.posts++
			out.events[ph] = append(out.events[ph], p.events...)
			sent := time.Time{}
			for _, id := range p.events {
				at, ok := rec.sent[id]
				if !ok {
					b.Fatalf("%s: no delivery recorded for event %s", name, id)
				}
				ack, ok := rec.acked[id]
				if !ok {
					b.Fatalf("%s: event %s of %s never acked", name, id, p.marker)
				}
				acks = append(acks, ack.Sub(at))
				if rec.retried[id] {
					res.retried++
				}
				if sent.IsZero() || at.Before(sent) {
					sent = at
				}
			}
			answered, ok := rec.answer(d.parents[p.thread], p.marker)
			if !ok {
				b.Fatalf("%s: no reply contains %s", name, p.marker)
			}
			replies = append(replies, answered.Sub(sent))
			turns[d.parents[p.thread]+answered.String()] = true
			answering[d.parents[p.thread]+answered.String()] = true
			if first.IsZero() || sent.Before(first) {
				first = sent
			}
			if answered.After(last) {
				last = answered
			}
			if answered.Before(closedEnd) {
				answeredInWindow++
			}
		}
		res.ack, res.reply, res.turns = summarize(acks), summarize(replies), len(turns)
		if ph == phaseClosed {
			res.rate = float64(answeredInWindow) / closedEnd.Sub(closedStart).Seconds()
		} else {
			res.rate = float64(res.posts) / last.Sub(first).Seconds()
		}
		out.phases[ph] = res
	}
	for _, parent := range d.parents {
		out.botPosts += len(rec.replies[parent])
	}
	out.redundant = out.botPosts - len(answering)
	return out
}

// loadResult is what runLoad measured.
type loadResult struct {
	phases map[string]phaseResult
	events map[string][]string // phase → event ids of its posts' envelopes
	// botPosts counts the chat.postMessage calls in the threads; redundant those that answered
	// no post first (a reply posted twice, or a turn with nothing new to answer).
	botPosts, redundant int
}

// records indexes the emulator's delivery, ack and chat.postMessage records.
type records struct {
	sent    map[string]time.Time // event_id → first envelope sent
	retried map[string]bool      // event_id → sent more than once
	acked   map[string]time.Time // event_id → ack that settled it
	replies map[string][]reply   // thread ts → bot posts in that thread, in order
}

type reply struct {
	at   time.Time
	text string
}

func newRecords(emu *slackemu.Server) records {
	r := records{sent: map[string]time.Time{}, retried: map[string]bool{}, acked: map[string]time.Time{}, replies: map[string][]reply{}}
	for _, d := range emu.Deliveries() {
		if d.Attempt > 0 {
			r.retried[d.EventID] = true
		}
		if at, ok := r.sent[d.EventID]; !ok || d.At.Before(at) {
			r.sent[d.EventID] = d.At
		}
	}
	for _, a := range emu.Acks() {
		if !a.Stale {
			r.acked[a.EventID] = a.At
		}
	}
	for _, q := range emu.Requests("chat.postMessage") {
		thread := q.Params.Get("thread_ts")
		r.replies[thread] = append(r.replies[thread], reply{at: q.At, text: q.Params.Get("text")})
	}
	return r
}

// answer returns when the first bot post in thread containing marker was made.
func (r records) answer(thread, marker string) (time.Time, bool) {
	for _, q := range r.replies[thread] {
		if strings.Contains(q.text, marker) {
			return q.at, true
		}
	}
	return time.Time{}, false
}

func summarize(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	rank := func(p int) time.Duration { // nearest rank
		i := (len(ds)*p + 99) / 100
		return ds[max(i-1, 0)]
	}
	return latencies{p50: rank(50), p99: rank(99), max: ds[len(ds)-1], n: len(ds)}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", msf(d)) }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
