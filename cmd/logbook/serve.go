package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"github.com/spf13/cobra"
	otelmetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/followup"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/hooks"
	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/bot/repo"
	"github.com/logbook/logbook/bot/review"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
	"github.com/logbook/logbook/session/search"
)

const serveHelp = `Run the Slack bot: Socket Mode gateway, cells, delivery, search indexer, HTTP endpoints.

What logbook handles:
  channels   public channels only. Messages in private channels, group DMs and DMs are
             never stored; a mention there gets one short ephemeral note
             (LOGBOOK_PRIVATE_NOTE=off to disable).
  sessions   a top-level message that mentions the bot starts a session (its thread);
             any later message in that thread continues it, mention or not; a mention in
             a thread without a session starts one for that thread.
  subtypes   none (plain), thread_broadcast and file_share are user messages (files are
             stored as file_ref metadata); message_changed and message_deleted of a
             session's messages become user_message_edited / user_message_deleted.
             Ignored: bot_message, messages by any bot or by logbook itself, channel_join
             and every other subtype.
  commands   /logbook help, /logbook search <words>, /logbook repo [<url> [branch] | off],
             /logbook schedule add "<cron spec>" <prompt> | list | remove <id>
             (answered ephemerally).
  schedules  each tick of a schedule posts one top-level message in its channel (which
             schedule, who set it, the prompt) and runs a session on it, exactly once per
             tick across replicas, also after a crash or a restart during the tick
  hooks      POST /hooks/<name> signed with the hook's secret starts a session in its
             channel on the body (LOGBOOK_HOOKS)
  search     /logbook search, the agent's search tool and the web pages show only channels
             that are public now (conversations.info, cached 5m). In a channel shared with
             another organisation (Slack Connect), and for a person of another team, search
             covers that one channel.
`

func newServeCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the Slack bot (Socket Mode)",
		Long:  serveHelp + "\n\n" + settingsHelp("serve"),
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadServeConfig(e)
			if err != nil {
				return usageError{err}
			}
			log := newLogger(e)
			if a := cfg.AuditSchedule; a != nil {
				cfg.Audit = func(ctx context.Context, log zerolog.Logger) (*audit.Scheduler, func(), error) {
					return a.start(ctx, e, log)
				}
			}
			return serve(c.Context(), cfg, log, nil)
		},
	}
}

// serveConfig is everything serve needs, read from the environment once and validated
// before anything is contacted. A duration left unset is zero: the bot's own default applies
// (the defaults live in bot.NewRunner and friends, and nowhere else).
type serveConfig struct {
	// MCP is the connectors' file, LOGBOOK_MCP_CONFIG (nil: no connectors).
	MCP *connectors.Config
	// Started: schedules and hooks (schedules.go).
	Started startedConfig
	// Streams: outbound webhooks and the audit stream (streams.go).
	Streams streamConfig
	// SecretKey seals the MCP servers' OAuth tokens, LOGBOOK_SECRET_KEY (nil: unset).
	SecretKey   *connectors.SecretKey
	DatabaseURL Secret
	// DirectDatabaseURL reaches PostgreSQL itself, never a pooler: LISTEN, the liveness
	// claim and scheduled audit exports (LOGBOOK_DIRECT_DATABASE_URL; default DatabaseURL).
	DirectDatabaseURL Secret
	// Liveness is LOGBOOK_LIVENESS: how the replica holds its liveness claim, lock (default)
	// or heartbeat.
	Liveness string
	// ReadDatabaseURL is a streaming standby of DatabaseURL's primary (LOGBOOK_READ_DATABASE_URL;
	// "": none): search, transcripts and the web pages read it.
	ReadDatabaseURL Secret
	// ReadMaxWait bounds a read-your-writes read's wait for the standby (LOGBOOK_READ_MAX_WAIT;
	// 0: session.DefaultStandbyMaxWait).
	ReadMaxWait time.Duration
	// DBPooler is what DatabaseURL reaches (LOGBOOK_DB_POOLER): "" or "none" PostgreSQL,
	// "pgbouncer" a transaction-pooling PgBouncer.
	DBPooler string
	// DB is the pools' sizes and the fleet's connection budget (LOGBOOK_DB_POOL, ...).
	DB       dbConfig
	AppToken Secret
	BotToken Secret
	APIURL   string
	Model    string
	// SettingsFromEnv are the channel settings whose default the environment sets, by name.
	SettingsFromEnv map[string]bool
	AnthropicKey    Secret
	AnthropicURL    string
	OpenAIKey       Secret
	OpenAIURL       string
	Sandbox         string
	SandboxDir      string
	SandboxNet      bool
	// Admins may set a channel's repository with /logbook repo (LOGBOOK_ADMINS).
	Admins []string
	// SandboxEgress is what sandboxed commands may reach through logbook's proxy
	// (LOGBOOK_SANDBOX_EGRESS).
	SandboxEgress egress.Allowlist
	SandboxDisk   int64  // bytes of a workspace (LOGBOOK_SANDBOX_DISK); 0: no quota
	SandboxMemory int64  // bytes of memory of a sandbox (LOGBOOK_SANDBOX_MEMORY); 0: 2 GiB
	FileMax       int64  // bytes of a shared file fetched (LOGBOOK_FILE_MAX); 0: files.DefaultMax
	Vision        string // whether the model is sent images (LOGBOOK_MODEL_VISION): auto (""), on, off
	BlobURL       string // where shared files' content lives (LOGBOOK_BLOB_URL); "": the database
	IdleTimeout   time.Duration
	LeaseTTL      time.Duration
	HTTPAddr      string
	DBRole        string
	PrivateNote   bool
	Domain        string
	PollInterval  time.Duration
	DrainTimeout  time.Duration
	// WakeLimit is the most cells the start and the polls wake at once (LOGBOOK_WAKE_LIMIT; 0:
	// bot.DefaultWakeLimit, -1: off); RepliesPerMinute caps one thread's replies
	// (LOGBOOK_THREAD_REPLIES_PER_MINUTE; 0: 10, -1: off).
	WakeLimit        int
	RepliesPerMinute int
	// PeerAddr (LOGBOOK_PEER_ADDR; "" off) is host or host:port where peers reach this
	// replica's HTTP server: they post its wakes there (bot/peerwake).
	PeerAddr string
	// GatewayAppendLanes (LOGBOOK_GATEWAY_APPEND_LANES; 0: off) groups the appends of
	// envelopes that arrive together into one transaction, in at most that many lanes.
	GatewayAppendLanes int
	// ThreadReplies says which messages of a session's thread are answered.
	ThreadReplies bot.ThreadReplies
	// MidTurn: steer (a message written while a turn runs reaches its next model call) or queue.
	MidTurn string
	// Approval: LOGBOOK_TOOL_APPROVAL, LOGBOOK_TOOL_APPROVERS, LOGBOOK_APPROVAL_TIMEOUT.
	Approval bot.ApprovalConfig
	// ApprovalSpec is LOGBOOK_TOOL_APPROVAL as written: the approvals setting's default.
	ApprovalSpec string
	// Repos (LOGBOOK_REPOS), GitHubToken (GITHUB_TOKEN) and GitHubAPI (LOGBOOK_GITHUB_API_URL):
	// create_pull_request.
	Repos       repo.Static
	GitHubToken Secret
	GitHubAPI   string
	// Pull requests followed (issue 32): LOGBOOK_FOLLOWUP_MAX, LOGBOOK_GITHUB_WEBHOOK_SECRET,
	// LOGBOOK_FOLLOWUP_POLL, LOGBOOK_FOLLOWUP_BOTS, LOGBOOK_FOLLOWUP_REVIEWERS.
	FollowupMax   int
	WebhookSecret Secret
	FollowupPoll  time.Duration
	FollowupBots  []string
	// FollowupReviewers is LOGBOOK_FOLLOWUP_REVIEWERS: nil (members), ["all"], or logins.
	FollowupReviewers []string
	// RepoURL is where a channel's repository is cloned from (LOGBOOK_REPO_URL, {repo} for
	// owner/name; default https://github.com/{repo}.git).
	RepoURL string
	// Live is how a turn shows itself while it runs (LOGBOOK_STREAM, LOGBOOK_STREAM_INTERVAL).
	Live bot.LiveConfig
	// Footer is the line under final replies (LOGBOOK_PUBLIC_URL, LOGBOOK_REPLY_FOOTER, LOGBOOK_PRICES).
	Footer bot.Footer
	// Budget is the model calls' prices and daily budgets, and the channels' setup step
	// (LOGBOOK_PRICES, LOGBOOK_BUDGET, LOGBOOK_SETUP_COMMAND, LOGBOOK_SETUP_EGRESS).
	Budget budgetConfig
	// The brain's limits (0: the brain's defaults).
	MaxOutputTokens  int
	MaxContinuations int
	RepeatLimit      int
	ContextBudget    int
	// AuditSchedule is the scheduled audit export's settings (nil: none); Audit starts it.
	AuditSchedule *auditSchedule                                                                  `json:"-"`
	Audit         func(ctx context.Context, log zerolog.Logger) (*audit.Scheduler, func(), error) `json:"-"`
	WebTokens     []webToken
	WebProxy      string
	// WebTrustedProxies are the peers whose WebProxy header is believed (nil: loopback only,
	// web.DefaultTrustedProxies).
	WebTrustedProxies []netip.Prefix
	// WebProxySecret, when set, must come with every WebProxy header, in the
	// X-Logbook-Proxy-Secret header (LOGBOOK_WEB_PROXY_SECRET).
	WebProxySecret Secret
	WebAuditors    []string
	// SignIn, set by dev only, also admits whoever opens one of its one-time links.
	SignIn *web.SignIn `json:"-"`
	// Tracing: OpenTelemetry traces over OTLP (OTEL_*, LOGBOOK_TRACE_CONTENT); see trace.go.
	Tracing tracingConfig
	// OIDC signs people in to the web pages through an OpenID Connect provider
	// (LOGBOOK_OIDC_*; nil: off); see oidc.go.
	OIDC *oidcConfig
}

// webToken is a web page bearer token as configured; its secret never prints.
type webToken struct {
	Name    string
	Secret  Secret
	Auditor bool
}

func (cfg serveConfig) webAccess() web.Access {
	a := web.Access{ProxyHeader: cfg.WebProxy, TrustedProxies: cfg.WebTrustedProxies, Auditors: cfg.WebAuditors,
		ProxySecret: cfg.WebProxySecret.Reveal()}
	for _, t := range cfg.WebTokens {
		a.Tokens = append(a.Tokens, web.Token{Name: t.Name, Secret: t.Secret.Reveal(), Auditor: t.Auditor})
	}
	return a
}

// readModel reads the model settings; Model stays "" when nothing is configured.
func (cfg *serveConfig) readModel(e env) {
	cfg.AnthropicKey = Secret(strings.TrimSpace(e.getenv("ANTHROPIC_API_KEY")))
	cfg.AnthropicURL = strings.TrimSpace(e.getenv("ANTHROPIC_BASE_URL"))
	cfg.OpenAIKey = Secret(strings.TrimSpace(e.getenv("OPENAI_API_KEY")))
	cfg.OpenAIURL = strings.TrimSpace(e.getenv("OPENAI_BASE_URL"))
	cfg.Model = strings.TrimSpace(e.getenv("LOGBOOK_MODEL"))
	// Which channel settings' defaults the environment sets (`logbook config show`'s sources).
	cfg.SettingsFromEnv = map[string]bool{}
	for name, v := range settingsDefaultFrom {
		cfg.SettingsFromEnv[name] = strings.TrimSpace(e.getenv(v)) != ""
	}
	cfg.Vision = strings.ToLower(strings.TrimSpace(e.getenv("LOGBOOK_MODEL_VISION")))
	if cfg.Vision == "auto" {
		cfg.Vision = brain.VisionAuto
	}
	if cfg.Model != "" {
		return
	}
	switch {
	case cfg.AnthropicKey != "":
		cfg.Model = "anthropic:claude-sonnet-4-5"
	case cfg.OpenAIKey != "" || cfg.OpenAIURL != "":
		cfg.Model = "openai:gpt-4o-mini"
	}
}

func (cfg serveConfig) providers() brain.ProviderConfig {
	return brain.ProviderConfig{
		AnthropicAPIKey: cfg.AnthropicKey.Reveal(), AnthropicBaseURL: cfg.AnthropicURL,
		OpenAIAPIKey: cfg.OpenAIKey.Reveal(), OpenAIBaseURL: cfg.OpenAIURL, Vision: cfg.Vision,
	}
}

func newLogger(e env) zerolog.Logger {
	level, err := zerolog.ParseLevel(strings.ToLower(e.getenv("LOGBOOK_LOG_LEVEL")))
	if err != nil || level == zerolog.NoLevel {
		level = zerolog.InfoLevel
	}
	var w io.Writer = e.stderr
	format := e.getenv("LOGBOOK_LOG_FORMAT")
	if format == "console" || (format == "" && isTerminal(e.stderr)) {
		w = zerolog.ConsoleWriter{Out: e.stderr, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).Hook(telemetry.LogHook{}).With().Timestamp().Logger()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// running is what serve started, for `logbook dev` (force eviction, read the log).
type running struct {
	store  *session.Store
	runner *bot.Runner
	search *search.Searcher
	index  *search.Indexer
	me     bot.Identity
	http   string // the HTTP address, "" when off
}

// serve runs the bot until ctx ends. ready, when set, is called once everything is up. Its
// phases: check the model and Slack, open the databases, build the bot's parts, listen for
// HTTP, then run the bot beside the search indexer, the audit scheduler and the HTTP server
// under one errgroup (on SIGTERM every service stops at once; the runner drains its turns for
// LOGBOOK_DRAIN_TIMEOUT before the bot returns).
func serve(ctx context.Context, cfg serveConfig, log zerolog.Logger, ready func(running)) error {
	log.Info().Str("model", cfg.Model).Str("slack_api", cfg.APIURL).Msg("starting logbook serve")
	// The model provider first: a configured provider that fails is an error, never a
	// silent fall back to offline.
	provider, err := brain.NewProvider(cfg.Model, cfg.providers())
	if err != nil {
		return fmt.Errorf("LOGBOOK_MODEL=%q: %w", cfg.Model, err)
	}
	if cfg.Model == "offline" {
		log.Warn().Msg("model: offline — deterministic replies, NOT a language model")
	}
	for _, w := range budgetWarnings(cfg) {
		log.Warn().Msg("budget: " + w)
	}
	tp, stopTracing, err := startTracing(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopTracing(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing: the last spans could not be exported")
		}
	}()
	mp, stopMetrics, err := startMetrics(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopMetrics(ctx); err != nil {
			log.Warn().Err(err).Msg("metrics: the last metrics could not be exported over OTLP")
		}
	}()
	if cfg.Tracing.MetricsEndpoint != "" {
		log.Info().Str("protocol", cmp.Or(cfg.Tracing.MetricsProtocol, "http/protobuf")).
			Msg("metrics: GenAI and turn metrics exported over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	// slack-go's default client has no timeout: a hung Web API call would hold an ack.
	slackHTTP := &http.Client{Timeout: 30 * time.Second}
	if traced := cfg.Tracing.Endpoint != ""; traced {
		slackHTTP.Transport = telemetry.SlackTransport(tp, nil)
		log.Info().Str("protocol", cmp.Or(cfg.Tracing.Protocol, "http/protobuf")).Bool("content", cfg.Tracing.Content).
			Msg("tracing: spans exported over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	api := slack.New(cfg.BotToken.Reveal(), slack.OptionAPIURL(cfg.APIURL), slack.OptionAppLevelToken(cfg.AppToken.Reveal()),
		slack.OptionHTTPClient(slackHTTP))
	me, err := checkSlack(ctx, api)
	if err != nil {
		return err
	}
	log = log.With().Str("team", me.TeamID).Logger()
	log.Info().Str("bot_user", me.UserID).Str("bot_id", me.BotID).Msg("slack tokens checked (auth.test, apps.connections.open)")

	w := &wiring{cfg: cfg, log: log, api: api, me: me, tracer: tp, meter: mp}
	defer w.close()
	// Listen first: while the database does not answer, /readyz says so.
	state := &startState{}
	state.set("starting: opening the database")
	addr, err := w.listenHTTP(state)
	if err != nil {
		return err
	}
	if pa := cfg.peerAddr(addr); pa != "" {
		if w.peer, err = peerwake.NewInbox(pa); err != nil {
			return fmt.Errorf("LOGBOOK_PEER_ADDR: %w", err)
		}
		log.Info().Str("peer_addr", pa).Msg("peers post this replica's wakes to " + peerwake.Path)
	}
	if err := w.openDatabases(ctx, retrier{log: log, state: state}); err != nil {
		if ctx.Err() != nil { // stopped while it waited for the database: a stop, not a failure
			log.Info().Msg("logbook serve stopped before the database answered")
			return nil
		}
		return err
	}
	state.set("starting: the database answered; starting the bot")
	if err := w.buildBot(ctx, provider); err != nil {
		return err
	}
	if cfg.Audit != nil {
		sched, closeAll, err := cfg.Audit(ctx, log.With().Str("part", "audit").Logger())
		if err != nil {
			return err
		}
		w.closers = append(w.closers, closeAll)
		log.Info().Msg("audit: scheduled exports on (LOGBOOK_AUDIT_SCHEDULE)")
		w.services = append(w.services, service{name: "audit", run: sched.Run})
	}
	// Build the pages before anything starts, so a failure here leaves nothing running.
	if err := w.routeHTTP(); err != nil {
		return err
	}
	svc, err := bot.NewService(w.serviceConfig(), w.deps)
	if err != nil {
		return err
	}
	signal := svc.Runner().Signal
	w.signal.Store(&signal)
	if ready != nil {
		ready(running{store: w.deps.Store, runner: svc.Runner(), search: w.search, index: w.indexer, me: me, http: addr})
	}
	err = supervise(ctx, append([]service{{name: "bot", run: svc.Run}}, w.services...)...)
	log.Info().Msg("logbook serve stopped")
	return err
}

// wiring is what serve builds before anything runs: the bot's Deps, the services that run beside
// it, and what to close once they have all returned.
type wiring struct {
	cfg     serveConfig
	log     zerolog.Logger
	api     *slack.Client
	me      bot.Identity
	pool    *pgxpool.Pool
	replica *pgxpool.Pool    // LOGBOOK_READ_DATABASE_URL's (nil: none)
	standby *session.Standby // routes reads to replica (nil: none)
	deps    bot.Deps
	reg     *prometheus.Registry
	dir     *directory.Directory
	search  *search.Searcher
	indexer *search.Indexer
	peer    *peerwake.Inbox // LOGBOOK_PEER_ADDR's (nil: none)
	repos   *repo.Channels
	mcp     *connectors.Connectors // nil: no LOGBOOK_MCP_CONFIG
	// scheduler runs /logbook schedule's ticks; hooks serves POST /hooks/<name> (nil: no
	// LOGBOOK_HOOKS); signal is the runner's Signal once the runner is built (schedules.go:
	// the HTTP server may take a hook before; the runner's first poll finds that session).
	scheduler *schedule.Scheduler
	slash     *slashcmd.Table // /logbook's subcommands (slash.go)
	hooks     *hooks.Handler
	signal    atomic.Pointer[func(session.ID)]
	follow    *followup.Follower // nil: no pull requests opened, none followed
	review    *review.Trigger    // nil: no reviews (review.go)
	starter   *bot.Starter
	services  []service
	http      *httpServer // nil: LOGBOOK_HTTP_ADDR=off
	closers   []func()    // closed last first
	tracer    trace.TracerProvider
	meter     otelmetric.MeterProvider // OTLP metrics (trace.go); a no-op provider when off
}

// pgxTracer traces the pools' statements when tracing is on (nil otherwise: not even a
// no-op tracer on the hot path).
func (w *wiring) pgxTracer() pgx.QueryTracer {
	if w.cfg.Tracing.Endpoint == "" {
		return nil
	}
	return telemetry.PgxTracer(w.tracer)
}

// close closes what the phases opened, the last first.
func (w *wiring) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// openDatabases opens the cells' pool and the gateway's own (so an ack never queues behind the
// cells' work), checks that the fleet's connections fit in the server's (session.ConnBudget) and that
// the schema is migrated. While the database cannot be reached it retries (retry), unready.
func (w *wiring) openDatabases(ctx context.Context, retry retrier) error {
	cfg := w.cfg
	pooled := cfg.DBPooler == poolerPgBouncer
	switch {
	case pooled && cfg.Liveness == livenessHeartbeat:
		w.log.Info().Msg("database: DATABASE_URL is a transaction-pooling PgBouncer (LOGBOOK_DB_POOLER); " +
			"the liveness claim is a heartbeat row renewed through it (LOGBOOK_LIVENESS=heartbeat): no LISTEN")
	case pooled:
		w.log.Info().Msg("database: DATABASE_URL is a transaction-pooling PgBouncer (LOGBOOK_DB_POOLER); " +
			"LISTEN and the liveness claim use LOGBOOK_DIRECT_DATABASE_URL")
	}
	connect := func(into **pgxpool.Pool, name string, size int) func(context.Context) error {
		return func(ctx context.Context) error {
			p, err := session.Connect(ctx, cfg.DatabaseURL.Reveal(), session.PoolOptions{Role: cfg.DBRole, MaxConns: int32(size),
				Name: name, Pooled: pooled, Tracer: w.pgxTracer()})
			*into = p
			return err
		}
	}
	var pool, gwPool *pgxpool.Pool
	err := retry.do(ctx, "database", connect(&pool, "main", cfg.DB.Pool))
	if errors.Is(err, session.ErrStartupRefused) && cfg.DBPooler == poolerAuto {
		return errors.New(pgbouncerDetected)
	}
	if err != nil {
		return err
	}
	w.closers = append(w.closers, pool.Close)
	w.pool, w.deps.Store = pool, session.NewStore(pool, session.Options{})
	if err := retry.do(ctx, "database connection limits", func(ctx context.Context) error { return w.checkBudget(ctx, cfg.budget()) }); err != nil {
		return err
	}
	if err := retry.do(ctx, "database schema", func(ctx context.Context) error { return checkMigrated(ctx, w.deps.Store) }); err != nil {
		return err
	}
	if err := retry.do(ctx, "database (gateway)", connect(&gwPool, "gateway", cfg.DB.GatewayPool)); err != nil {
		return err
	}
	w.closers = append(w.closers, gwPool.Close)
	w.deps.GatewayStore = session.NewStore(gwPool, session.Options{})
	// Both pools' connections are opened before the socket is, so a replica that restarts
	// into a busy day does not make them under its first burst; after the budget check, so a
	// limit too small is refused with its reason, not retried as an outage, and best effort:
	// what cannot be opened now opens when it is needed. Through PgBouncer they would be
	// client connections only: nothing is warmed.
	if !pooled {
		for _, p := range []*pgxpool.Pool{pool, gwPool} {
			if err := session.Warm(ctx, p, p.Config().MaxConns); err != nil && ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("database: could not open the pool's connections ahead; they open as they are needed")
			}
		}
	}
	if cfg.ReadDatabaseURL != "" {
		// Lazy: a standby that is down at start is fallen back from, as one that goes away later.
		// Another server: not in the primary's connection budget.
		readPool, err := session.Connect(ctx, cfg.ReadDatabaseURL.Reveal(), session.PoolOptions{Role: cfg.DBRole, MaxConns: int32(cfg.DB.Pool),
			Name: "standby", Lazy: true, ConnectTimeout: 2 * time.Second, Tracer: w.pgxTracer()})
		if err != nil {
			return fmt.Errorf("LOGBOOK_READ_DATABASE_URL: %w", err)
		}
		w.closers = append(w.closers, readPool.Close)
		w.replica = readPool
		w.log.Info().Msg("database: search, transcripts and the web pages read the standby at LOGBOOK_READ_DATABASE_URL")
	}
	return nil
}

// standbyWatchInterval is how often serve measures the standby's lag for its metrics.
const standbyWatchInterval = 5 * time.Second

// openStandby routes the reads of search, transcripts and the web pages to the standby, when
// there is one, with its metrics on w.reg and a part that keeps measuring its lag.
func (w *wiring) openStandby() {
	if w.replica == nil {
		return
	}
	w.standby = session.NewStandby(w.pool, w.replica, session.StandbyOptions{MaxWait: w.cfg.ReadMaxWait,
		Observer: bot.NewStandbyMetrics(w.reg, w.log.With().Str("part", "standby").Logger())})
	w.services = append(w.services, service{name: "standby", run: func(ctx context.Context) error {
		return watchStandby(ctx, w.standby, standbyWatchInterval)
	}})
}

// transcripts is what the web pages read transcripts from: the standby, read your writes, or
// the log.
func (w *wiring) transcripts() interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	HasFile(ctx context.Context, id session.ID, sha string) (bool, error)
	NotesByID(ctx context.Context, team, channel string, ids []int64) ([]session.Note, error)
	Forks(ctx context.Context, parent session.ID) ([]session.Fork, error)
} {
	if w.standby == nil {
		return w.deps.Store
	}
	return w.standby.Reads()
}

// checkBudget reads the server's connection caps, logs the budget against them in one line,
// and refuses a fleet that cannot fit. Through PgBouncer the caps are PostgreSQL's, read on
// the direct URL: PgBouncer's own settings are not visible to a client.
func (w *wiring) checkBudget(ctx context.Context, b session.ConnBudget) error {
	var q session.RowQuerier = w.pool
	if b.Pooled && b.PerReplica() > 0 && w.cfg.DirectDatabaseURL != "" {
		// Behind PgBouncer the caps are read where the replica's own connections go. A fleet
		// with none (LOGBOOK_LIVENESS=heartbeat) reads them through PgBouncer: fifty replicas
		// starting together must not open fifty connections to PostgreSQL itself to do it.
		// So does one whose only own connections are audit exports on their own URL (no
		// direct URL is set then): it is the same server.
		direct, err := session.Connect(ctx, w.cfg.DirectDatabaseURL.Reveal(), session.PoolOptions{MaxConns: 1, Name: "check"})
		if err != nil {
			return fmt.Errorf("LOGBOOK_DIRECT_DATABASE_URL: %w", err)
		}
		defer direct.Close()
		q = direct
	}
	l, err := session.ServerLimits(ctx, q)
	if err != nil {
		return err
	}
	logBudget(w.log, b, l)
	return b.Check(l)
}

// buildBot builds the bot's Deps, once, and the services that run beside it: the search indexer
// and the repositories' mirrors.
func (w *wiring) buildBot(ctx context.Context, provider brain.Provider) error {
	cfg, log, store := w.cfg, w.log, w.deps.Store
	provs, mirrors, err := sandboxProvider(cfg, log)
	if err != nil {
		return err
	}
	fileStore, err := filestore.Open(ctx, store, cfg.BlobURL)
	if err != nil {
		return err
	}
	w.closers = append(w.closers, func() { fileStore.Close() })
	b, err := brain.New(brain.Config{Provider: provider, Logger: log.With().Str("part", "brain").Logger(), DeferTitle: true,
		MaxTokens: int64(cfg.MaxOutputTokens), MaxContinuations: cfg.MaxContinuations, RepeatLimit: cfg.RepeatLimit,
		ContextBudget: cfg.ContextBudget, Tracer: w.tracer, TraceContent: cfg.Tracing.Content, Meter: w.meter})
	if err != nil {
		return err
	}
	w.search = search.NewSearcher(w.pool, search.Options{WorkspaceDomain: cfg.Domain})
	w.indexer = search.NewIndexer(store, w.pool, log.With().Str("part", "indexer").Logger(), search.IndexerOptions{Fleet: cfg.DB.Replicas})
	w.services = append(w.services, service{name: "indexer", run: w.indexer.Run})
	if mirrors != nil {
		// Repositories' mirrors are fetched in the background: provisioning only clones.
		w.services = append(w.services, service{name: "mirrors", run: mirrors.Run})
	}
	w.reg = prometheus.NewRegistry()
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w.openStandby()
	// Search (the pages, /logbook search, the agent's tool) reads the standby; the indexer
	// writes the projection on the primary.
	w.search = w.search.OnStandby(w.standby, session.ReadAny)
	w.dir = directory.New(w.api, 5*time.Minute)
	w.repos = channelRepos(cfg, store)
	models, chSettings, mem := channelParts(cfg, store, b)
	bgt, err := newBudget(cfg, store, log, chSettings, w.me.TeamID, telemetry.NewMetrics(w.meter)) // budget.go
	if err != nil {
		return err
	}
	if w.follow = newFollower(cfg, store, w.reg, log, w.reviewWebhook); w.follow != nil && cfg.FollowupPoll > 0 {
		// For installations GitHub's webhooks cannot reach: each followed pull request looked
		// at once per LOGBOOK_FOLLOWUP_POLL, by one replica of the fleet.
		w.services = append(w.services, service{name: "followup-poll", run: w.follow.Poll})
	}
	var mcp *connectors.Connectors
	if cfg.MCP != nil {
		mcp = connectors.New(*cfg.MCP, connectors.Options{Logger: log, Tokens: store, Key: cfg.SecretKey, Descriptions: store})
		w.mcp = mcp
	}
	w.buildStarted(store) // schedules.go
	w.buildReview(store)  // review.go
	// The record streamed out: webhooks and the audit stream (streams.go).
	if err := w.buildStreams(store); err != nil {
		return err
	}
	w.slash = slashTable(slashParts{Team: w.me.TeamID, Admins: cfg.Admins, Search: w.search, Dir: w.dir, Repos: w.repos,
		Settings: chSettings, Memory: mem, Budget: bgt, MCP: mcp, Schedules: w.scheduler, Review: w.review, Grants: store, Log: log})
	w.deps = bot.Deps{Log: log, API: w.api, Socket: socketmode.New(w.api), Me: w.me, Store: store, GatewayStore: w.deps.GatewayStore,
		DatabaseURL: cfg.listenURL(), Agent: b, Metrics: bot.NewMetrics(w.reg), Tracer: w.tracer, Meter: w.meter,
		Features: bot.Features{
			Titler: b, Channel: w.dir.ChannelName,
			Hands: hands.NewFactory(provs, hands.Config{Repo: repoCheckout(cfg, w.repos), Work: fileStore, Egress: sandboxEgress(cfg),
				Setup: setupConfig(cfg, store, chSettings, w.me.TeamID)}, log),
			Files:  fileStore,
			Health: bot.NewHealth(), Directory: w.dir, Slash: w.slash.Answer,
			Settings: chSettings, Models: models, Budget: bgt,
		},
		Parts: w.turnParts(fileStore, mem, bgt, mcp), Surfaces: w.surfaces(store)}
	return nil
}

// channelParts are each channel's own agent (issue 31): its model (the brain with another
// provider, built once per spec), its settings as records with the environment's values as
// defaults (/logbook config), and its memory.
func channelParts(cfg serveConfig, store *session.Store, b *brain.Brain) (*bot.Models, *settings.Settings, *memory.Memory) {
	models := &bot.Models{New: func(spec string) (bot.Agent, error) {
		p, err := brain.NewProvider(spec, cfg.providers())
		if err != nil {
			return nil, err
		}
		return b.WithProvider(p), nil
	}}
	return models, settings.New(settingsConfig(cfg, store, models)), memory.New(store, memory.Config{})
}

// settingsDefaultFrom names where each channel setting's default comes from.
var settingsDefaultFrom = map[string]string{settings.Model: "LOGBOOK_MODEL", settings.Approvals: "LOGBOOK_TOOL_APPROVAL",
	settings.ThreadReplies: "LOGBOOK_THREAD_REPLIES", settings.Instructions: "none", settings.Setup: "LOGBOOK_SETUP_COMMAND",
	settings.DailyBudget: "LOGBOOK_BUDGET"}

// settingsConfig is the channels' settings over store with the environment's values as
// defaults and the bot's checks: serve's, and `logbook config show` and `apply`'s.
func settingsConfig(cfg serveConfig, store *session.Store, models *bot.Models) settings.Config {
	return settings.Config{Store: store,
		Defaults: map[string]string{settings.Model: cfg.Model, settings.Approvals: cfg.ApprovalSpec, settings.ThreadReplies: string(cfg.ThreadReplies),
			settings.Setup: cfg.Budget.Setup, settings.DailyBudget: defaultBudget(cfg), settings.CanvasOver: fmt.Sprint(settings.DefaultCanvasOver)},
		DefaultFrom: settingsDefaultFrom, FromEnvironment: cfg.SettingsFromEnv,
		Check: bot.SettingsChecks(models, toolNames()), Admins: cfg.Admins,
		Notes: map[string]func(settings.Channel) string{settings.DailyBudget: dailyBudgetNote(cfg), settings.Model: dailyBudgetNote(cfg)}}
}

// serviceConfig is the bot's configuration from serve's.
func (w *wiring) serviceConfig() bot.ServiceConfig {
	cfg, me := w.cfg, w.me
	return bot.ServiceConfig{
		Runner: bot.RunnerConfig{IdleTimeout: cfg.IdleTimeout, LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval,
			DrainTimeout: cfg.DrainTimeout, WakeLimit: cfg.WakeLimit, MaxReplies: cfg.RepliesPerMinute, WatchPeers: cfg.watchesPeers(), OrphanInterval: cfg.orphanInterval(),
			ThreadReplies: cfg.ThreadReplies, Footer: cfg.Footer, Live: cfg.Live, MidTurn: cfg.MidTurn,
			Approval: cfg.Approval, Peer: w.peer, Heartbeat: cfg.heartbeat(),
			Where: brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID}},
		Gateway:  bot.GatewayConfig{PrivateNote: cfg.PrivateNote, PublicURL: cfg.Footer.PublicURL, AppendLanes: cfg.GatewayAppendLanes},
		Delivery: replyActions(), // parts.go
	}
}

// mcpOAuth is what connects the MCP servers with oauth on the web pages (nil: none).
func (w *wiring) mcpOAuth() web.MCPOAuth {
	if w.mcp == nil || len(w.mcp.OAuthServers()) == 0 {
		return nil
	}
	return w.mcp
}

// listenHTTP listens on LOGBOOK_HTTP_ADDR and serves at once what start-up knows (/healthz
// ok, /readyz 503 with the reason: startingHandler), until routeHTTP routes the real pages;
// it adds the server to the services and returns the address ("" when off).
func (w *wiring) listenHTTP(state *startState) (string, error) {
	cfg, log := w.cfg, w.log
	if cfg.HTTPAddr == "off" {
		return "", nil
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return "", fmt.Errorf("listen on LOGBOOK_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	w.http = startHTTP(ln, startingHandler(state))
	// Stopped last: a later phase that fails first still shuts it down.
	w.closers = append(w.closers, func() { w.http.stop() })
	log.Info().Str("addr", ln.Addr().String()).Msg("http: /healthz /readyz /metrics")
	w.services = append(w.services, service{name: "http", run: w.http.run})
	return ln.Addr().String(), nil
}

// routeHTTP routes /healthz, /readyz, /metrics and the web pages, once everything is built.
func (w *wiring) routeHTTP() error {
	cfg, log := w.cfg, w.log
	if w.http == nil {
		return nil
	}
	ready := readiness(w.deps.GatewayStore, w.deps.Features.Health)
	oidcWeb := cfg.OIDC.web()
	if oidcWeb != nil {
		// Discovered now and until it succeeds: an issuer that cannot be reached is said in
		// the log at start and by /readyz, and sign-in recovers by itself (oidc.go).
		oidcWeb.Discovery = web.NewDiscovery(oidcWeb.Issuer, oidcWeb.HTTPClient)
		ready = signInReadiness(ready, oidcWeb.Discovery)
		olog := log.With().Str("part", "oidc").Logger()
		w.services = append(w.services, service{name: "oidc", run: func(ctx context.Context) error {
			return oidcWeb.Discovery.Run(ctx, olog, web.RetryOptions{})
		}})
	}
	mux := httpHandler(ready, w.standbyStatus(), w.reg)
	if len(cfg.WebTokens) > 0 || cfg.WebProxy != "" || cfg.SignIn != nil || cfg.OIDC != nil {
		access := cfg.webAccess()
		if cfg.SignIn != nil {
			access.Tokens = append(access.Tokens, cfg.SignIn.Token())
		}
		pages, err := web.Handler(web.Config{Sessions: w.transcripts(), Finder: w.search, AccessLog: w.pool, Access: access, Channels: w.dir,
			Visibility: w.dir, Files: w.deps.Features.Files, SignIns: w.deps.Store, PublicURL: cfg.Footer.PublicURL, OIDC: oidcWeb,
			Usage: w.deps.Store, Feedback: w.deps.Store, Currency: cfg.Budget.Prices.Currency, Runs: w.deps.Store,
			Log: log.With().Str("part", "web").Logger(), MCP: w.mcpOAuth(),
			ChannelSettings: settings.Reports{Settings: w.deps.Features.Settings, Store: w.deps.Store}})
		if err != nil {
			return err
		}
		if cfg.SignIn != nil {
			pages = cfg.SignIn.Wrap(pages)
		}
		mux.Handle("/", pages)
	} else {
		log.Info().Msg("web pages are off: set LOGBOOK_WEB_TOKENS, LOGBOOK_WEB_PROXY_HEADER or LOGBOOK_OIDC_ISSUER to serve them")
	}
	if w.hooks != nil {
		mux.Handle("POST /hooks/{name}", w.hooks)
	}
	if w.peer != nil {
		// Peers' wakes, with this replica's token: outside the pages' sign-in.
		mux.Handle("POST "+peerwake.Path, w.peer.Handler())
	}
	if w.follow != nil && cfg.WebhookSecret != "" {
		// GitHub's webhooks, verified by their signature: outside the pages' sign-in.
		mux.Handle("POST "+followup.WebhookPath, w.follow.Webhook())
		log.Info().Str("path", followup.WebhookPath).Msg("http: GitHub webhooks for the pull requests followed")
	}
	if warning := webExposure(cfg.HTTPAddr, cfg.WebProxy, cfg.WebTrustedProxies); warning != "" {
		log.Warn().Msg(warning)
	}
	w.http.route(mux)
	return nil
}

// sandboxProvider is the sandbox that LOGBOOK_SANDBOX asks for (nil: none), and the cache of
// repository mirrors its checkouts come from.
func sandboxProvider(cfg serveConfig, log zerolog.Logger) (sandbox.Provider, *sandbox.Mirrors, error) {
	kind := cfg.Sandbox
	if kind == "" {
		// Only bubblewrap isolates. The plain-process provider runs commands as logbook's
		// own user, who can read logbook's environment: never chosen without being asked.
		if _, err := exec.LookPath("bwrap"); err != nil {
			log.Warn().Msg("bubblewrap is not installed: command tools are OFF (apt-get install -y bubblewrap; " +
				"or LOGBOOK_SANDBOX=process to run commands without isolation)")
			kind = sandbox.KindNone
		} else {
			kind = sandbox.KindBwrap
		}
	}
	if kind == sandbox.KindProcess {
		log.Warn().Msg("LOGBOOK_SANDBOX=process: commands run WITHOUT isolation, as logbook's own user; " +
			"they can read files and processes of that user")
	}
	if kind != sandbox.KindNone {
		dir := cfg.SandboxDir
		if dir == "" {
			dir = defaultSandboxDir()
		}
		slog := log.With().Str("part", "sandbox").Logger()
		mirrors := sandbox.NewMirrors(filepath.Join(dir, "mirrors"), slog)
		provs, err := sandbox.New(kind, sandbox.Config{BaseDir: dir, AllowNetwork: cfg.SandboxNet, DiskQuota: cfg.SandboxDisk,
			Limits: sandbox.Limits{MemoryBytes: cfg.SandboxMemory}, Mirrors: mirrors}, slog)
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox: %w (LOGBOOK_SANDBOX=none turns command tools off)", err)
		}
		log.Info().Str("sandbox", provs.Name()).Msg("sandbox provider ready")
		return provs, mirrors, nil
	}
	return nil, nil, nil

}

// checkSlack checks both tokens before anything starts, naming the wrong one in one line.
func checkSlack(ctx context.Context, api *slack.Client) (bot.Identity, error) {
	me, err := bot.WhoAmI(ctx, api)
	var se slack.SlackErrorResponse
	if err != nil && !errors.As(err, &se) {
		return me, fmt.Errorf("cannot reach the Slack Web API (SLACK_API_URL): %w", errors.Unwrap(err))
	}
	if err != nil {
		return me, fmt.Errorf("SLACK_BOT_TOKEN was refused by auth.test: %s", slackReason(err))
	}
	if _, _, err := api.StartSocketModeContext(ctx); err != nil {
		if !errors.As(err, &se) {
			return me, fmt.Errorf("cannot reach the Slack Web API (SLACK_API_URL): %w", err)
		}
		return me, fmt.Errorf("SLACK_APP_TOKEN was refused by apps.connections.open: %s (it needs the connections:write scope, and Socket Mode must be on)", slackReason(err))
	}
	return me, nil
}

func slackReason(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return err.Error()
}

// readyTimeout bounds /readyz's question to the database: a server that stalls is unready
// within a second, not after a probe's own timeout.
const readyTimeout = time.Second

// readiness is /readyz's check: the log can be written. The gateway's pool must answer, within
// readyTimeout, that the server takes writes (not a standby, not read-only), and the gateway's
// latest append must not have failed (bot.Health: a lock, a full disk or a revoked grant
// fail appends while a plain query still answers).
func readiness(gw *session.Store, health *bot.Health) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		if err := gw.CheckWritable(ctx); err != nil {
			return err
		}
		return health.Err()
	}
}

// standbyStatus is /readyz's line about the standby (nil: none).
func (w *wiring) standbyStatus() func(context.Context) string {
	if w.standby == nil {
		return nil
	}
	return func(ctx context.Context) string {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		return standbyStatus(ctx, w.standby)
	}
}

// httpHandler serves /healthz, /readyz (ready's answer, then standby's line when there is a
// standby: a standby's lag or absence never makes the replica unready) and /metrics.
func httpHandler(ready func(context.Context) error, standby func(context.Context) string, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		switch err := ready(r.Context()); {
		case errors.Is(err, bot.ErrLogUnwritable):
			http.Error(w, "the log cannot be written: the last append failed", http.StatusServiceUnavailable)
		case errors.Is(err, session.ErrReadOnly):
			http.Error(w, "the database is read-only", http.StatusServiceUnavailable)
		case errors.As(err, new(signInError)):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		default:
			io.WriteString(w, "ready\n")
		}
		if standby != nil {
			io.WriteString(w, standby(r.Context()))
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// defaultSandboxDir is where sandbox workspaces live: under the user cache dir, or for root
// (whose home the unprivileged sandbox user cannot reach) under /var/lib/logbook.
func defaultSandboxDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/logbook/sandboxes"
	}
	return filepath.Join(cacheDir(), "logbook", "sandboxes")
}

// readWebAccess reads who may open the web pages.
func (cfg *serveConfig) readWebAccess(e env) error {
	for _, item := range strings.Split(e.getenv("LOGBOOK_WEB_TOKENS"), ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, ":")
		if len(parts) < 2 || parts[0] == "" || len(parts[1]) < 16 || (len(parts) == 3 && parts[2] != "auditor") || len(parts) > 3 {
			return errors.New("LOGBOOK_WEB_TOKENS: each item is name:secret or name:secret:auditor, with a secret of at least 16 characters")
		}
		cfg.WebTokens = append(cfg.WebTokens, webToken{Name: parts[0], Secret: Secret(parts[1]), Auditor: len(parts) == 3})
	}
	cfg.WebProxy = strings.TrimSpace(e.getenv("LOGBOOK_WEB_PROXY_HEADER"))
	proxies, err := web.ParseTrustedProxies(e.getenv("LOGBOOK_WEB_TRUSTED_PROXIES"))
	if err != nil {
		return fmt.Errorf("LOGBOOK_WEB_TRUSTED_PROXIES=%q: want comma-separated CIDRs or addresses (e.g. 127.0.0.0/8,::1/128): %v",
			e.getenv("LOGBOOK_WEB_TRUSTED_PROXIES"), err)
	}
	cfg.WebTrustedProxies = proxies
	cfg.WebProxySecret = Secret(strings.TrimSpace(e.getenv("LOGBOOK_WEB_PROXY_SECRET")))
	if cfg.WebProxySecret != "" && (cfg.WebProxy == "" || len(cfg.WebProxySecret) < 16) {
		return errors.New("LOGBOOK_WEB_PROXY_SECRET: a secret of at least 16 characters, and only with LOGBOOK_WEB_PROXY_HEADER")
	}
	for _, v := range strings.Split(e.getenv("LOGBOOK_WEB_AUDITORS"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.WebAuditors = append(cfg.WebAuditors, v)
		}
	}
	return nil
}

// sandboxEgress is what the sandboxes' proxy lets through (LOGBOOK_SANDBOX_EGRESS); nil without
// an allowlist: a sandbox with a repository still gets a proxy for it, others no way out at
// all (unless LOGBOOK_SANDBOX_NETWORK).
func sandboxEgress(cfg serveConfig) *hands.Egress {
	if cfg.SandboxEgress.Empty() {
		return nil
	}
	return &hands.Egress{Allow: cfg.SandboxEgress}
}

// pullRequests is the forge create_pull_request uses: GitHub, with GITHUB_TOKEN, where a
// channel may have a repository (LOGBOOK_REPOS, or admins who may set one); nil otherwise (no
// such tool; public repositories are still checked out).
func pullRequests(cfg serveConfig) forge.Opener {
	if (len(cfg.Repos) == 0 && len(cfg.Admins) == 0) || cfg.GitHubToken == "" {
		return nil
	}
	return forge.NewGitHub(cfg.GitHubAPI, cfg.GitHubToken.Reveal(), nil)
}

// newFollower follows the pull requests sessions open (issue 32), wherever they can be opened
// (nil otherwise), and adds its poller to the services when LOGBOOK_FOLLOWUP_POLL is on.
// reviews starts the reviews a delivery asks for (followup.Config.Reviews).
func newFollower(cfg serveConfig, store *session.Store, reg prometheus.Registerer, log zerolog.Logger,
	reviews func(ctx context.Context, event string, body []byte) (int, error)) *followup.Follower {
	if pullRequests(cfg) == nil {
		return nil
	}
	return followup.New(store, forge.NewGitHub(cfg.GitHubAPI, cfg.GitHubToken.Reveal(), nil), followup.Config{
		Max: cfg.FollowupMax, Secret: cfg.WebhookSecret.Reveal(), Bots: cfg.FollowupBots, Reviewers: cfg.FollowupReviewers, Poll: cfg.FollowupPoll,
		Owner: replicaOwner(), Log: log.With().Str("part", "followup").Logger(), Registerer: reg, Reviews: reviews})
}

// followupFeature is forge.Pulls.Follow: the subscription recorded with a pull request, nil when
// no pull request is followed.
func followupFeature(f *followup.Follower) func(pr session.PullRequest, requester string) session.NewEvent {
	if f == nil {
		return nil
	}
	return f.Subscription
}

// forgeHost is GitHub's host: github.com, or the Enterprise host of LOGBOOK_GITHUB_API_URL.
func forgeHost(cfg serveConfig) string {
	if u, err := url.Parse(cfg.GitHubAPI); err == nil && cfg.GitHubAPI != "" {
		return u.Hostname()
	}
	return "github.com"
}

// channelRepos is where channels' repositories come from: what an admin set with /logbook
// repo (kept in the database), else LOGBOOK_REPOS cloned from LOGBOOK_REPO_URL.
func channelRepos(cfg serveConfig, store repo.Store) *repo.Channels {
	return &repo.Channels{Static: cfg.Repos, URLTemplate: cfg.RepoURL, ForgeHost: forgeHost(cfg), Store: store,
		PullRequests: pullRequests(cfg) != nil}
}

// repoCheckout is the repository a channel's sandbox checks out (see channelRepos), through a
// mirror on this host, with GITHUB_TOKEN in an HTTP header of the host's git (and of the
// egress proxy's requests to it) only: never in the sandbox, on disk or in the log. The token
// goes only to GitHub (forgeHost), over https: never to whatever other host a URL names.
func repoCheckout(cfg serveConfig, repos *repo.Channels) func(ctx context.Context, team, channel string) (*sandbox.RepoSpec, error) {
	var header string
	if cfg.GitHubToken != "" {
		header = "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+cfg.GitHubToken.Reveal()))
	}
	host := forgeHost(cfg)
	return func(ctx context.Context, team, channel string) (*sandbox.RepoSpec, error) {
		r, ok, err := repos.For(ctx, team, channel)
		if err != nil || !ok {
			return nil, err
		}
		spec := &sandbox.RepoSpec{URL: r.URL, Branch: r.Branch}
		if u, err := url.Parse(spec.URL); err == nil && u.Scheme == "https" && strings.EqualFold(u.Hostname(), host) {
			spec.Header = header
		}
		return spec, nil
	}
}

// standbyLag is what the readiness line and the watch need of a standby (session.Standby).
type standbyLag interface {
	Lag(ctx context.Context) (session.Lag, error)
}

// standbyStatus is /readyz's line about the standby of LOGBOOK_READ_DATABASE_URL: how far it
// lags, or that it does not answer (reads then go to the primary; the replica stays ready).
func standbyStatus(ctx context.Context, sb standbyLag) string {
	l, err := sb.Lag(ctx)
	switch {
	case errors.Is(err, session.ErrStandbyUnavailable):
		return "standby: unreachable (reads go to the primary)\n"
	case err != nil:
		return "standby: lag unknown (the primary did not say its WAL position)\n"
	}
	return fmt.Sprintf("standby: lag_bytes=%d lag_seconds=%.3f replay_paused=%t\n", l.Bytes, l.Seconds, l.Paused)
}

// watchStandby measures the standby's lag every interval until ctx ends (serve's part
// "standby"), so its gauges stay current and a standby that answers again is noticed
// between reads. A failed measurement is the observer's to report; it never ends the watch.
func watchStandby(ctx context.Context, sb standbyLag, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m, cancel := context.WithTimeout(ctx, every)
		sb.Lag(m) //nolint:errcheck // reported through the standby's observer
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
