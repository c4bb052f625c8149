package bot_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/checkout"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/files"
	"github.com/logbook/logbook/bot/followup"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/hands"
	chmemory "github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/bot/recall"
	"github.com/logbook/logbook/bot/repo"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
	"github.com/logbook/logbook/session/search"
)

const (
	general = "C0000001"
	secret  = "C0000002"
	dm      = "D0000001"
	ada     = "U0000001"
	grace   = "U0000002"
	botUser = "UB000001"
)

// echoAgent is a hand-written agent for the bot's tests: it appends one reply that names the
// user messages it saw, so a test can tell the reply used earlier context. reply, when set,
// chooses the text; block, when set, is waited on before answering (a slow model).
type echoAgent struct {
	mu    sync.Mutex
	runs  int
	reply func(texts []string) string
	block chan struct{}
	usage *session.Usage // the usage the reply records, when set
}

func (a *echoAgent) Run(ctx context.Context, t brain.Turn) (brain.Reply, error) {
	a.mu.Lock()
	a.runs++
	block := a.block
	a.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return brain.Reply{}, ctx.Err()
		}
	}
	// Like the real brain, answer only the messages up to the turn's Through: later ones are
	// queued for the next turn.
	started, err := t.Log.Events(ctx, session.Range{From: t.TurnSeq, To: t.TurnSeq})
	if err != nil || len(started) != 1 {
		return brain.Reply{}, fmt.Errorf("read turn_started %d: %v", t.TurnSeq, err)
	}
	var ts session.TurnStarted
	if err := started[0].Decode(&ts); err != nil {
		return brain.Reply{}, err
	}
	evs, err := t.Log.Events(ctx, session.Range{Types: []session.Type{session.TypeUserMessage, session.TypeUserMessageEdited}})
	if err != nil {
		return brain.Reply{}, err
	}
	var texts []string
	for _, e := range evs {
		if e.Type == session.TypeUserMessage && e.Seq > ts.Through {
			continue
		}
		var m struct {
			Text    string `json:"text"`
			NewText string `json:"new_text"`
		}
		if err := e.Decode(&m); err != nil {
			return brain.Reply{}, err
		}
		texts = append(texts, m.Text+m.NewText)
	}
	text := "seen: " + strings.Join(texts, " | ")
	if a.reply != nil {
		text = a.reply(texts)
	}
	msg := session.AssistantMessage{Text: text, Turn: t.TurnSeq, Usage: a.usage}
	stored, err := t.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor: session.Actor{Kind: session.ActorBot, ID: t.Where.BotUserID}, Payload: msg})
	if err != nil {
		return brain.Reply{}, err
	}
	return brain.Reply{Event: stored[0], Message: msg, Status: session.StatusOK}, nil
}

func (a *echoAgent) Runs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs
}

type harness struct {
	t     testing.TB
	emu   *slackemu.Server
	store *session.Store
	pool  *pgxpool.Pool // the store's, which the cells use
	// gateway is the replicas' GatewayStore: store, or one over a pool of its own (gatewayPool).
	gateway *session.Store
	dbURL   string
	agent   bot.Agent
	reps    []*replica
	ctx     context.Context
	cancel  context.CancelFunc
}

type replica struct {
	runner  *bot.Runner
	cancel  context.CancelFunc
	done    chan struct{}
	metrics *bot.Metrics
	reg     *prometheus.Registry
	listen  *pgtest.Proxy    // with harnessOptions.listenProxy
	peer    *httptest.Server // its peer inbox's server (harnessOptions.peers)
}

type harnessOptions struct {
	emu           slackemu.Options
	surfaces      []bot.Surface
	surfaceWith   func(store *session.Store, api *slack.Client) bot.Surface // a surface over the harness's store, after surfaces
	idle          time.Duration
	leaseTTL      time.Duration
	replicas      int
	privateNote   bool
	delivery      bot.DeliveryConfig
	poll          time.Duration
	drain         time.Duration // default 500ms, so a test's cleanup never waits long for a blocked agent
	orphan        time.Duration // the dead-owner poll; default 500ms (the runner's is 5s)
	maxReplies    int
	replyWindow   time.Duration
	wakeLimit     int // RunnerConfig.WakeLimit
	threadReplies bot.ThreadReplies
	footer        bot.Footer
	titler        bot.Titler
	slash         bot.SlashHandler
	probe         *bot.Probe
	clock         bot.Clock // nil: the wall clock
	live          bot.LiveConfig
	midTurn       string
	catchUp       bot.CatchUpConfig
	approval      bot.ApprovalConfig
	// sandbox gives the agent a sandbox (nil: no sandbox tools); repo, a repository checked
	// out into it, with uncommitted work kept in the file store across sandboxes.
	sandbox sandbox.Provider
	repo    *sandbox.RepoSpec
	// egress gives sandboxes a proxy; bwrap makes modelHarness's sandboxes bwrap ones.
	egress *hands.Egress
	bwrap  bool
	// files fetches shared files into a store in the database (and lets the agent attach
	// files); fileMax is the size limit (0: the default).
	files   bool
	fileMax int64
	// forge and repos: create_pull_request.
	forge forge.Opener
	repos repo.Static
	// followup follows the pull requests sessions open (nil: none).
	followup *followup.Follower
	// repoAdmins turns /logbook repo on (the harness's store keeps what it sets), and makes
	// sandboxes check out what it says (with forge host 127.0.0.1) instead of repo.
	repoAdmins []string
	// listenProxy puts a pgtest.Proxy between each replica's LISTEN connection (its liveness
	// claim) and the database (replica.listen); claimCheck is RunnerConfig.ClaimCheck.
	listenProxy bool
	claimCheck  time.Duration
	// peers gives each replica a peer inbox (RunnerConfig.Peer) served on a loopback port of
	// its own (replica.peer), as LOGBOOK_PEER_ADDR does on serve's HTTP server.
	peers bool
	// heartbeat holds each replica's liveness claim as a heartbeat row with this TTL
	// (RunnerConfig.Heartbeat; needs peers). The replicas still get the database URL, which
	// they must not use: no LISTEN connection, no watch.
	heartbeat time.Duration
	// channelAdmins turns channel settings (/logbook config, its admins) and channel memory
	// (/logbook remember, memory, forget; the remember tool) on; models builds a channel's own
	// model (modelHarness sets it); defaults are the settings' environment values.
	channelAdmins []string
	models        *bot.Models
	defaults      map[string]string
	// setup is the channels' setup step of the sandboxes (its Cache, when nil and the
	// sandboxes have a repository, is the harness's store).
	setup hands.SetupConfig
	// budget, when set, meters the turns' model calls (Features.Budget) over the harness's store.
	budget func(*session.Store) *budget.Budget
	// connectors offers MCP servers (nil: none).
	connectors *connectors.Connectors
	// directory, when set, builds the Directory the gateway (and slashWith's handler) share;
	// slashWith, when set, is the slash handler over it.
	directory func(api *slack.Client) *directory.Directory
	slashWith func(dir *directory.Directory) bot.SlashHandler
	// apiProxy, when set, sits between the bot and the emulator's Web API.
	apiProxy func(w http.ResponseWriter, r *http.Request, next http.Handler)
	// tracer traces the bot as serve does (envelopes, turns, Slack calls, the store's
	// statements; modelHarness: model and tool calls, with traceContent their text).
	tracer       trace.TracerProvider
	traceContent bool
	// meter records the bot's and (modelHarness) the brain's metrics.
	meter metric.MeterProvider
	// statements, when set, sees every statement of the replicas' shared pool (it wins over
	// tracer's statement tracing): a test counts what the bot asks the database.
	statements pgx.QueryTracer
	// gatewayPool gives the replicas' GatewayStore a pool of its own, as serve does.
	gatewayPool bool
	// partsWith adds turn parts over the harness's Slack client (before checkout's).
	partsWith func(api *slack.Client) []part.Part
}

func newHarness(t testing.TB, agent bot.Agent, o harnessOptions) *harness {
	t.Helper()
	if o.emu.PingInterval == 0 {
		o.emu.PingInterval = 100 * time.Millisecond
	}
	if o.emu.RetrySchedule == nil {
		o.emu.RetrySchedule = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}
	}
	emu := slackemu.MustStart(t, o.emu)
	dbURL := pgtest.New(t)
	popts := session.PoolOptions{Role: "logbook_app"}
	if o.tracer != nil {
		popts.Tracer = telemetry.PgxTracer(o.tracer)
	}
	if o.statements != nil {
		popts.Tracer = o.statements
	}
	pool, err := session.Connect(context.Background(), dbURL, popts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, emu: emu, store: session.NewStore(pool, session.Options{}), pool: pool, dbURL: dbURL, agent: agent,
		ctx: ctx, cancel: cancel}
	h.gateway = h.store
	if o.gatewayPool {
		gw, err := session.Connect(context.Background(), dbURL, popts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Close)
		h.gateway = session.NewStore(gw, session.Options{})
	}
	for range max(o.replicas, 1) {
		h.startReplica(o)
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) startReplica(o harnessOptions) *replica {
	t := h.t
	apiURL := h.emu.APIURL()
	if o.apiProxy != nil {
		target, _ := url.Parse(h.emu.URL())
		rp := httputil.NewSingleHostReverseProxy(target)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { o.apiProxy(w, r, rp) }))
		t.Cleanup(proxy.Close)
		apiURL = proxy.URL + "/api/"
	}
	slackOpts := []slack.Option{slack.OptionAPIURL(apiURL), slack.OptionAppLevelToken(h.emu.AppToken())}
	if o.tracer != nil {
		slackOpts = append(slackOpts, slack.OptionHTTPClient(&http.Client{Transport: telemetry.SlackTransport(o.tracer, nil)}))
	}
	api := slack.New(h.emu.BotToken(), slackOpts...)
	sm := socketmode.New(api, socketmode.OptionPingInterval(2*time.Second))
	me, err := bot.WhoAmI(h.ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := bot.NewMetrics(reg)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	idle := o.idle
	if idle == 0 {
		idle = time.Minute
	}
	lease := o.leaseTTL
	if lease == 0 {
		lease = 3 * time.Second
	}
	poll := o.poll
	if poll == 0 {
		poll = 200 * time.Millisecond
	}
	orphan := o.orphan
	if orphan == 0 {
		orphan = 500 * time.Millisecond
	}
	drain := o.drain
	if drain == 0 {
		drain = 500 * time.Millisecond
	}
	repos := &repo.Channels{Static: o.repos}
	if o.repoAdmins != nil {
		repos.Store, repos.ForgeHost, repos.PullRequests = h.store, "127.0.0.1", true
		o.slash = slashTable(nil, nil, "", repos, o.repoAdmins).Answer
	}
	var chSettings *settings.Settings
	var mem *chmemory.Memory
	if o.channelAdmins != nil {
		chSettings = settings.New(settings.Config{Store: h.store, Defaults: o.defaults, Check: bot.SettingsChecks(o.models, harnessTools()), Admins: o.channelAdmins})
		mem = chmemory.New(h.store, chmemory.Config{})
		admins := o.channelAdmins
		if o.repoAdmins != nil {
			admins = o.repoAdmins
		}
		o.slash = slashTable(nil, nil, "", repos, admins).Add(settings.Command(chSettings)).Add(chmemory.Commands(mem, nil)...).Answer
	}
	var handsFor hands.Factory
	if o.sandbox != nil {
		hc := hands.Config{Egress: o.egress}
		if o.repo != nil {
			hc.Repo = func(context.Context, string, string) (*sandbox.RepoSpec, error) { return o.repo, nil }
			hc.Work = filestore.NewStore(h.store)
		}
		if o.repoAdmins != nil {
			hc.Repo = func(ctx context.Context, team, channel string) (*sandbox.RepoSpec, error) {
				r, ok, err := repos.For(ctx, team, channel)
				if err != nil || !ok {
					return nil, err
				}
				return &sandbox.RepoSpec{URL: r.URL, Branch: r.Branch}, nil
			}
			hc.Work = filestore.NewStore(h.store)
		}
		hc.Setup = o.setup
		if hc.Setup.Command != nil && hc.Setup.Cache == nil && hc.Work != nil {
			hc.Setup.Cache = h.store
		}
		handsFor = hands.NewFactory(o.sandbox, hc, log)
	}
	var fileStore *filestore.Store
	var fetcher *files.Fetcher
	var parts []part.Part // in serve's order
	if o.files {
		fileStore = filestore.NewStore(h.store)
		fetcher = files.NewFetcher(api, files.FetchConfig{Max: o.fileMax, Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }})
		parts = append(parts, &files.Attach{Slack: api, Store: fileStore, Max: fetcher.Max()})
	}
	if o.forge != nil {
		pulls := &forge.Pulls{Forge: o.forge, Repo: repos.OnForge,
			Transcript: func(id session.ID) string { return bot.TranscriptURL(o.footer.PublicURL, id) }}
		if o.followup != nil {
			pulls.Follow = o.followup.Subscription
		}
		parts = append(parts, pulls)
	}
	if o.files {
		parts = append(parts, &files.Shared{Fetcher: fetcher, Store: fileStore})
	}
	if mem != nil {
		parts = append(parts, mem.Part())
	}
	if o.connectors != nil {
		parts = append(parts, o.connectors.Part(nil))
	}
	if o.partsWith != nil {
		parts = append(parts, o.partsWith(api)...)
	}
	parts = append(parts, checkout.Part())
	if chSettings != nil {
		parts = append(parts, settings.Part())
	}
	var bgt bot.Budget
	if o.budget != nil {
		b := o.budget(h.store)
		bgt = b
		parts = append(parts, b.Part())
	}
	var dir *directory.Directory
	if o.directory != nil {
		dir = o.directory(api)
		if o.slashWith != nil {
			o.slash = o.slashWith(dir)
		}
	}
	listenURL := h.dbURL
	var listenProxy *pgtest.Proxy
	if o.listenProxy {
		listenProxy, listenURL = pgtest.NewProxy(t, h.dbURL)
	}
	if o.approval.Tools == nil {
		o.approval.Tools = harnessTools()
	}
	var inbox *peerwake.Inbox
	var peerSrv *httptest.Server
	if o.peers {
		peerSrv = httptest.NewUnstartedServer(nil)
		if inbox, err = peerwake.NewInbox(peerSrv.Listener.Addr().String()); err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST "+peerwake.Path, inbox.Handler())
		peerSrv.Config.Handler = mux
		peerSrv.Start()
		t.Cleanup(peerSrv.Close)
	}
	surfaces := o.surfaces
	if o.surfaceWith != nil {
		surfaces = append(slices.Clip(surfaces), o.surfaceWith(h.store, api))
	}
	// The same wiring as serve and dev: bot.Service.
	svc, err := bot.NewService(bot.ServiceConfig{
		Runner: bot.RunnerConfig{IdleTimeout: idle, LeaseTTL: lease, PollInterval: poll, DrainTimeout: drain, OrphanInterval: orphan, ClaimCheck: o.claimCheck, MaxReplies: o.maxReplies, WakeLimit: o.wakeLimit,
			ReplyWindow: o.replyWindow, ThreadReplies: o.threadReplies, Footer: o.footer, Live: o.live, MidTurn: o.midTurn, Approval: o.approval, Peer: inbox, Heartbeat: o.heartbeat, Where: brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID}},
		Gateway:  bot.GatewayConfig{PrivateNote: o.privateNote, PublicURL: o.footer.PublicURL, CatchUp: o.catchUp},
		Delivery: o.delivery,
	}, bot.Deps{Log: log, API: api, Socket: sm, Me: me, Store: h.store, GatewayStore: h.gateway, DatabaseURL: listenURL,
		Agent: h.agent, Metrics: metrics, Probe: o.probe, Clock: o.clock, Tracer: o.tracer, Meter: o.meter, Features: bot.Features{Titler: o.titler, Slash: o.slash,
			Hands: handsFor, Files: fileStore, Directory: dir,
			Settings: chSettings, Models: o.models, Budget: bgt}, Parts: parts, Surfaces: surfaces})
	if err != nil {
		t.Fatal(err)
	}
	opened := h.emu.ConnectionsOpened()
	ctx, cancel := context.WithCancel(h.ctx)
	r := &replica{runner: svc.Runner(), cancel: cancel, done: make(chan struct{}), metrics: metrics, reg: reg, listen: listenProxy, peer: peerSrv}
	go func() {
		defer close(r.done)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	h.reps = append(h.reps, r)
	// Slack delivers what is posted while no socket is open only by later retries: wait for
	// this replica's socket before the test posts.
	if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.ConnectionsOpened() > opened }); err != nil {
		t.Fatalf("replica did not connect: %v", err)
	}
	return r
}

// harnessTools are the tools an approvals policy may name in the harness: serve's.
func harnessTools() []string {
	return append(brain.ToolNames(), files.ToolAttach, forge.ToolPullRequest, chmemory.ToolRemember)
}

// slashTable is /logbook's search and repo subcommands as serve registers them (its
// slashTable adds the others, and the help's text around them).
func slashTable(s *search.Searcher, vis recall.Visibility, team string, repos *repo.Channels, admins []string) *slashcmd.Table {
	return slashcmd.New(team, slashcmd.Help{}).Add(recall.Command(s, vis), repo.SlashCommand(repos, admins))
}

func (h *harness) stop() {
	h.cancel()
	for _, r := range h.reps {
		<-r.done
	}
}

// waitCtx bounds one wait for an event. The bound is the harness's patience, never what a
// test checks (no wait here passes by running out): 20 s was outrun on the shared two-core
// machine by work that takes 2 s alone (a turn saving 17 MB of sandbox work).
func (h *harness) waitCtx() context.Context {
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	h.t.Cleanup(cancel)
	return ctx
}

// post posts as a user and fails the test on error.
func (h *harness) post(p slackemu.Post) slackemu.Posted {
	h.t.Helper()
	posted, err := h.emu.Post(p)
	if err != nil {
		h.t.Fatal(err)
	}
	return posted
}

// replies waits for n bot replies in the thread.
func (h *harness) replies(channel, thread string, n int) []slackemu.Message {
	h.t.Helper()
	msgs, err := h.emu.WaitForReplies(h.waitCtx(), channel, thread, n)
	if err != nil {
		h.t.Fatalf("waiting for %d replies in %s/%s: %v (have %d)", n, channel, thread, err, len(h.emu.BotReplies(channel, thread)))
	}
	return msgs
}

// session waits for the thread's session to exist and returns it.
func (h *harness) session(channel, thread string) session.Session {
	h.t.Helper()
	var s session.Session
	var err error
	h.waitFor("session of "+channel+"/"+thread, func() bool {
		s, err = h.store.SessionByThread(context.Background(), session.ThreadKey{Team: h.emu.TeamID(), Channel: channel, ThreadTS: thread})
		return err == nil
	})
	return s
}

// turns waits until the session has n completed turns.
func (h *harness) turns(id session.ID, n int) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%d completed turns", n), func() bool { return len(h.events(id, session.TypeTurnCompleted)) >= n })
}

func (h *harness) events(id session.ID, types ...session.Type) []session.Event {
	h.t.Helper()
	evs, err := h.store.Events(context.Background(), id, session.Range{Types: types})
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// waitFor polls cond (a database or process state the emulator cannot signal) until it holds.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	ctx := h.waitCtx()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			h.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func typesOf(evs []session.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s ", e.Type)
	}
	return strings.TrimSpace(b.String())
}

// payloadsOf names each event with its payload, for a failure that must say why (a
// cell_woken's reason, say).
func payloadsOf(evs []session.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %s; ", e.Type, e.Payload)
	}
	return strings.TrimSpace(b.String())
}

func conversation(evs []session.Event) []session.Event {
	var out []session.Event
	for _, e := range evs {
		switch e.Type {
		case session.TypeCellWoken, session.TypeCellEvicted:
		default:
			out = append(out, e)
		}
	}
	return out
}

// acked waits until every event of p is acked (not stale): the gateway is done with them, so
// whatever they store is in the log.
func (h *harness) acked(p slackemu.Posted) {
	h.t.Helper()
	for _, id := range p.EventIDs {
		if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
			h.t.Fatalf("event %s of %s not acked (state %s): %v", id, p.TS, h.emu.DeliveryState(id), err)
		}
	}
}

// everyEnvelopeAcked waits until the bot has acked every envelope written to a socket so far
// as many times as it was written (an injected duplicate is written twice, a dropped one
// not at all): the gateway is done with everything sent.
func (h *harness) everyEnvelopeAcked() {
	h.t.Helper()
	var pending []string
	err := h.emu.Wait(h.waitCtx(), func() bool {
		written := map[string]int{}
		for _, d := range h.emu.Deliveries() {
			switch {
			case d.ConnID == 0 || d.Fault == string(slackemu.FaultDrop):
			case d.Fault == string(slackemu.FaultDuplicate):
				written[d.EnvelopeID] += 2
			default:
				written[d.EnvelopeID]++
			}
		}
		for _, a := range h.emu.Acks() {
			written[a.EnvelopeID]--
		}
		pending = pending[:0]
		for env, n := range written {
			if n > 0 {
				pending = append(pending, env)
			}
		}
		return len(pending) == 0
	})
	if err != nil {
		h.t.Fatalf("envelopes never acked: %v: %v", pending, err)
	}
}

// failForGood drives Slack's deliveries of ids through all their retries while the log
// refuses writes, then waits for outageHandled: each attempt's ack window is ended
// (ExpireAcks) once the gateway has given up on every attempt written so far, so no attempt
// is raced against a window of real time and the tests' AckTimeout can be long.
func (h *harness) failForGood(ids ...string) {
	h.t.Helper()
	h.waitFor("Slack to give up on "+strings.Join(ids, ", "), func() bool {
		if h.metric("logbook_persist_failures_total") >= float64(h.attemptsWritten(ids)) {
			h.emu.ExpireAcks(ids...)
		}
		return !slices.ContainsFunc(ids, func(id string) bool { return h.emu.DeliveryState(id) != slackemu.StateFailed })
	})
	h.outageHandled(ids...)
}

// attemptsWritten counts the attempts to deliver ids that were written to a socket.
func (h *harness) attemptsWritten(ids []string) int {
	n := 0
	for _, d := range h.emu.Deliveries() {
		if slices.Contains(ids, d.EventID) && d.ConnID != 0 && d.Fault != string(slackemu.FaultDrop) {
			n++
		}
	}
	return n
}

// outageHandled waits, after Slack gave up on ids (StateFailed), until the gateway is done
// with every attempt Slack wrote to a socket for them: each ended as a persist failure.
// Slack giving up does not mean the gateway has: on a loaded machine a handler outlived the
// outage and stored its thread reply after it, before the mention the thread hangs on.
func (h *harness) outageHandled(ids ...string) {
	h.t.Helper()
	attempts := h.attemptsWritten(ids)
	h.waitFor(fmt.Sprintf("the gateway to be done with %d attempts", attempts), func() bool {
		return h.metric("logbook_persist_failures_total") >= float64(attempts)
	})
}

// awaitingRetry waits until Slack counts the first delivery of every event of p as failed
// (not acked in its window), so FireRetries sends them again.
func (h *harness) awaitingRetry(p slackemu.Posted) {
	h.t.Helper()
	for _, id := range p.EventIDs {
		if err := h.emu.Wait(h.waitCtx(), func() bool { return h.emu.DeliveryState(id) == slackemu.StateAwaitingRetry }); err != nil {
			h.t.Fatalf("event %s of %s: state %s, want %s: %v", id, p.TS, h.emu.DeliveryState(id), slackemu.StateAwaitingRetry, err)
		}
	}
}

// answered waits until the session has no work left: no open turn, and the last completed
// turn answers its last user message. With every envelope acked (see acked), nothing more
// happens in the session until a new message arrives, so a negative check made after it
// cannot pass merely because the system had no time.
func (h *harness) answered(id session.ID) {
	h.t.Helper()
	h.waitFor("every user message answered by a completed turn", func() bool {
		latest, err := h.store.Latest(context.Background(), id, session.TypeTurnStarted, session.TypeTurnCompleted, session.TypeUserMessage)
		if err != nil {
			return false
		}
		user, started, completed := latest[session.TypeUserMessage], latest[session.TypeTurnStarted], latest[session.TypeTurnCompleted]
		if user.Seq == 0 || completed.Seq == 0 || completed.Seq < started.Seq {
			return false
		}
		var tc session.TurnCompleted
		return completed.Decode(&tc) == nil && tc.Through >= user.Seq
	})
}

// metric returns the sum over the replicas of the counter or gauge name with the given label
// values (name=value pairs; none: every series).
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	var sum float64
	for _, r := range h.reps {
		sum += r.metric(h.t, name, labels...)
	}
	return sum
}

// metric is harness.metric of this replica alone.
func (r *replica) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// waitMetric waits until metric(name, labels...) reaches at least min.
func (h *harness) waitMetric(min float64, name string, labels ...string) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%s%v >= %v", name, labels, min), func() bool { return h.metric(name, labels...) >= min })
}

// scaledSleep is a DeliveryConfig.Sleep that records every wait asked for and waits a
// twentieth of it: Retry-After is still honoured in order (and checked by the test through
// the record), without the test spending Slack's seconds.
type scaledSleep struct {
	mu    sync.Mutex
	asked []time.Duration
}

func (s *scaledSleep) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.asked = append(s.asked, d)
	s.mu.Unlock()
	return wait.Sleep(ctx, d/20)
}

// longWaits returns how many waits of at least d were asked for.
func (s *scaledSleep) longWaits(d time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.asked {
		if a >= d {
			n++
		}
	}
	return n
}
