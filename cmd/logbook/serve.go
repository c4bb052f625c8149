package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
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
  commands   /logbook help, /logbook search <words> (answered ephemerally).

Environment:
  DATABASE_URL            PostgreSQL (run 'logbook migrate up' first)
  SLACK_APP_TOKEN         app-level token, xapp-... (scope connections:write)
  SLACK_BOT_TOKEN         bot token, xoxb-...
  SLACK_API_URL           Web API base URL, default https://slack.com/api/
  LOGBOOK_MODEL           anthropic:<model> | openai:<model> | offline (default: anthropic if
                          ANTHROPIC_API_KEY is set, else openai if OPENAI_API_KEY or
                          OPENAI_BASE_URL is set; serve never falls back to offline silently)
  ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY, OPENAI_BASE_URL
  LOGBOOK_SANDBOX         bwrap | process | none (default: bwrap if installed, else none;
                          process runs commands WITHOUT isolation, as logbook's own user)
  LOGBOOK_SANDBOX_DIR     workspaces directory (default: the user cache dir;
                          /var/lib/logbook/sandboxes as root)
  LOGBOOK_SANDBOX_NETWORK on to let sandboxed commands use the network (default off)
  LOGBOOK_IDLE_TIMEOUT    idle time before a cell exits (default 10m)
  LOGBOOK_LEASE_TTL       session lease length (default 30s)
  LOGBOOK_POLL_INTERVAL   how often to look for sessions with unanswered messages (default 5s)
  LOGBOOK_HTTP_ADDR       /healthz, /readyz, /metrics and the web pages (default :8080;
                          "off" for none)
  LOGBOOK_DB_ROLE         role assumed on every connection (default logbook_app)
  LOGBOOK_PRIVATE_NOTE    on|off (default on)
  LOGBOOK_WORKSPACE_DOMAIN  e.g. acme.slack.com, for permalinks in search hits (search and
                          transcript read it too)
  LOGBOOK_WEB_TOKENS      web pages' bearer tokens: name:secret[:auditor],... (secrets of
                          16+ characters; pages are off unless tokens or a proxy header are set)
  LOGBOOK_WEB_PROXY_HEADER  header a trusted proxy sets to the signed-in person
                          (oauth2-proxy: X-Forwarded-Email); LOGBOOK_WEB_AUDITORS lists
                          the values that are auditors
  LOGBOOK_LOG_FORMAT      json | console (default: console on a terminal, else json)
  LOGBOOK_LOG_LEVEL       debug | info | warn | error (default info)
  LOGBOOK_AUDIT_SCHEDULE  cron spec of scheduled audit exports inside serve
                          (LOGBOOK_AUDIT_* and LOGBOOK_RETENTION: see 'logbook audit --help')`

func newServeCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the Slack bot (Socket Mode)",
		Long:  serveHelp,
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadServeConfig(e)
			if err != nil {
				return usageError{err}
			}
			log := newLogger(e)
			cfg.Audit = func(ctx context.Context, log zerolog.Logger) (*audit.Scheduler, func(), error) {
				return auditSchedulerFromEnv(ctx, e, log)
			}
			return serve(c.Context(), cfg, log, nil)
		},
	}
}

// serveConfig is everything serve needs, read from the environment once and validated.
type serveConfig struct {
	DatabaseURL  Secret
	AppToken     Secret
	BotToken     Secret
	APIURL       string
	Model        string
	AnthropicKey Secret
	AnthropicURL string
	OpenAIKey    Secret
	OpenAIURL    string
	Sandbox      string
	SandboxDir   string
	SandboxNet   bool
	IdleTimeout  time.Duration
	LeaseTTL     time.Duration
	HTTPAddr     string
	DBRole       string
	PrivateNote  bool
	Domain       string
	PollInterval time.Duration
	// Audit builds the scheduled audit exports (nil, or a nil scheduler: none).
	Audit       func(ctx context.Context, log zerolog.Logger) (*audit.Scheduler, func(), error) `json:"-"`
	WebTokens   []webToken
	WebProxy    string
	WebAuditors []string
}

// webToken is a web page bearer token as configured; its secret never prints.
type webToken struct {
	Name    string
	Secret  Secret
	Auditor bool
}

func (cfg serveConfig) webAccess() web.Access {
	a := web.Access{ProxyHeader: cfg.WebProxy, Auditors: cfg.WebAuditors}
	for _, t := range cfg.WebTokens {
		a.Tokens = append(a.Tokens, web.Token{Name: t.Name, Secret: t.Secret.Reveal(), Auditor: t.Auditor})
	}
	return a
}

func envDuration(e env, name string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(e.getenv(name))
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive duration (e.g. 10m, 30s)", name, v)
	}
	return d, nil
}

func envBool(e env, name string, def bool) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(e.getenv(name))) {
	case "":
		return def, nil
	case "1", "on", "true", "yes":
		return true, nil
	case "0", "off", "false", "no":
		return false, nil
	}
	return false, fmt.Errorf("%s=%q: want on or off", name, e.getenv(name))
}

func loadServeConfig(e env) (serveConfig, error) {
	var cfg serveConfig
	dsn, err := databaseURL(e)
	if err != nil {
		return cfg, err
	}
	cfg.DatabaseURL = Secret(dsn)
	cfg.AppToken = Secret(strings.TrimSpace(e.getenv("SLACK_APP_TOKEN")))
	cfg.BotToken = Secret(strings.TrimSpace(e.getenv("SLACK_BOT_TOKEN")))
	switch {
	case cfg.AppToken == "":
		return cfg, errors.New("SLACK_APP_TOKEN is not set (the app-level token, xapp-..., with connections:write)")
	case !strings.HasPrefix(cfg.AppToken.Reveal(), "xapp-"):
		return cfg, errors.New("SLACK_APP_TOKEN must be an app-level token starting with xapp- (is it the bot token?)")
	case cfg.BotToken == "":
		return cfg, errors.New("SLACK_BOT_TOKEN is not set (the bot token, xoxb-...)")
	case !strings.HasPrefix(cfg.BotToken.Reveal(), "xoxb-"):
		return cfg, errors.New("SLACK_BOT_TOKEN must be a bot token starting with xoxb- (is it a user or app token?)")
	}
	cfg.APIURL = strings.TrimSpace(e.getenv("SLACK_API_URL"))
	if cfg.APIURL == "" {
		cfg.APIURL = slack.APIURL
	}
	if !strings.HasSuffix(cfg.APIURL, "/") {
		cfg.APIURL += "/" // slack-go concatenates method names onto it
	}
	cfg.readModel(e)
	if cfg.Model == "" {
		return cfg, errors.New("no model configured: set LOGBOOK_MODEL (anthropic:<model>, openai:<model>, or offline for a demo without a language model)")
	}
	cfg.Sandbox = strings.TrimSpace(e.getenv("LOGBOOK_SANDBOX"))
	cfg.SandboxDir = strings.TrimSpace(e.getenv("LOGBOOK_SANDBOX_DIR"))
	if cfg.SandboxNet, err = envBool(e, "LOGBOOK_SANDBOX_NETWORK", false); err != nil {
		return cfg, err
	}
	if cfg.IdleTimeout, err = envDuration(e, "LOGBOOK_IDLE_TIMEOUT", 10*time.Minute); err != nil {
		return cfg, err
	}
	if cfg.LeaseTTL, err = envDuration(e, "LOGBOOK_LEASE_TTL", 30*time.Second); err != nil {
		return cfg, err
	}
	if cfg.PollInterval, err = envDuration(e, "LOGBOOK_POLL_INTERVAL", 5*time.Second); err != nil {
		return cfg, err
	}
	cfg.HTTPAddr = strings.TrimSpace(e.getenv("LOGBOOK_HTTP_ADDR"))
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = ":8080"
	}
	cfg.DBRole = strings.TrimSpace(e.getenv("LOGBOOK_DB_ROLE"))
	if cfg.DBRole == "" {
		cfg.DBRole = "logbook_app"
	}
	if cfg.PrivateNote, err = envBool(e, "LOGBOOK_PRIVATE_NOTE", true); err != nil {
		return cfg, err
	}
	cfg.Domain = strings.TrimSpace(e.getenv("LOGBOOK_WORKSPACE_DOMAIN"))
	if err := cfg.readWebAccess(e); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// readModel reads the model settings; Model stays "" when nothing is configured.
func (cfg *serveConfig) readModel(e env) {
	cfg.AnthropicKey = Secret(strings.TrimSpace(e.getenv("ANTHROPIC_API_KEY")))
	cfg.AnthropicURL = strings.TrimSpace(e.getenv("ANTHROPIC_BASE_URL"))
	cfg.OpenAIKey = Secret(strings.TrimSpace(e.getenv("OPENAI_API_KEY")))
	cfg.OpenAIURL = strings.TrimSpace(e.getenv("OPENAI_BASE_URL"))
	cfg.Model = strings.TrimSpace(e.getenv("LOGBOOK_MODEL"))
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
		OpenAIAPIKey: cfg.OpenAIKey.Reveal(), OpenAIBaseURL: cfg.OpenAIURL,
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
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
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

// serve runs the bot until ctx ends. ready, when set, is called once everything is up.
func serve(ctx context.Context, cfg serveConfig, log zerolog.Logger, ready func(running)) error {
	log.Info().Str("model", cfg.Model).Str("slack_api", cfg.APIURL).Msg("starting logbook serve")

	// The model provider first: a configured provider that fails is an error, never a
	// silent fall back to offline.
	provider, err := brain.NewProvider(cfg.Model, cfg.providers())
	if err != nil {
		return err
	}
	if cfg.Model == "offline" {
		log.Warn().Msg("model: offline — deterministic replies, NOT a language model")
	}

	// slack-go's default client has no timeout: a hung Web API call would hold an ack.
	api := slack.New(cfg.BotToken.Reveal(), slack.OptionAPIURL(cfg.APIURL), slack.OptionAppLevelToken(cfg.AppToken.Reveal()),
		slack.OptionHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	me, err := checkSlack(ctx, api)
	if err != nil {
		return err
	}
	log = log.With().Str("team", me.TeamID).Logger()
	log.Info().Str("bot_user", me.UserID).Str("bot_id", me.BotID).Msg("slack tokens checked (auth.test, apps.connections.open)")

	pool, err := session.Connect(ctx, cfg.DatabaseURL.Reveal(), session.PoolOptions{Role: cfg.DBRole, MaxConns: 8})
	if err != nil {
		return err
	}
	defer pool.Close()
	store := session.NewStore(pool, session.Options{})
	if err := checkMigrated(ctx, store, pool); err != nil {
		return err
	}
	// The gateway has a pool of its own, so an ack never queues behind the cells' work.
	gwPool, err := session.Connect(ctx, cfg.DatabaseURL.Reveal(), session.PoolOptions{Role: cfg.DBRole, MaxConns: 4})
	if err != nil {
		return err
	}
	defer gwPool.Close()
	gwStore := session.NewStore(gwPool, session.Options{})

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
	var provs sandbox.Provider
	if kind != sandbox.KindNone {
		dir := cfg.SandboxDir
		if dir == "" {
			dir = defaultSandboxDir()
		}
		provs, err = sandbox.New(kind, sandbox.Config{BaseDir: dir, AllowNetwork: cfg.SandboxNet}, log.With().Str("part", "sandbox").Logger())
		if err != nil {
			return fmt.Errorf("sandbox: %w (LOGBOOK_SANDBOX=none turns command tools off)", err)
		}
		log.Info().Str("sandbox", provs.Name()).Msg("sandbox provider ready")
	}

	b, err := brain.New(brain.Config{Provider: provider, Logger: log.With().Str("part", "brain").Logger(), DeferTitle: true})
	if err != nil {
		return err
	}
	searcher := search.NewSearcher(pool, search.Options{WorkspaceDomain: cfg.Domain})
	indexer := search.NewIndexer(store, pool, log.With().Str("part", "indexer").Logger(), search.IndexerOptions{})

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := bot.NewMetrics(reg)
	dir := bot.NewDirectory(api, 5*time.Minute)
	deliver := bot.NewDeliverer(api, log.With().Str("part", "delivery").Logger(), metrics, bot.DeliveryConfig{})
	runner := bot.NewRunner(log.With().Str("part", "cells").Logger(), store, cfg.DatabaseURL.Reveal(), b, deliver,
		bot.NewHandsFactory(provs, sandbox.Recipe{}, log), brainSearcher{searcher}, metrics, bot.RunnerConfig{
			IdleTimeout: cfg.IdleTimeout, LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval,
			Where:   brain.Where{Workspace: me.Team, BotName: me.User, BotUserID: me.UserID},
			Channel: dir.ChannelName,
		})
	sm := socketmode.New(api)
	gw := bot.NewGateway(log.With().Str("part", "gateway").Logger(), gwStore, api, sm, me, runner.Signal, metrics,
		slashHandler(searcher), bot.GatewayConfig{PrivateNote: cfg.PrivateNote})

	var sched *audit.Scheduler
	if cfg.Audit != nil {
		s, closeAll, err := cfg.Audit(ctx, log.With().Str("part", "audit").Logger())
		if err != nil {
			return err
		}
		defer closeAll()
		sched = s
	}

	var srv *http.Server
	var ln net.Listener
	if cfg.HTTPAddr != "off" {
		// Listen and build the pages before anything starts, so a failure here leaves nothing
		// running.
		mux := httpHandler(pool, reg)
		if len(cfg.WebTokens) > 0 || cfg.WebProxy != "" {
			pages, err := web.Handler(web.Config{Sessions: store, Finder: searcher, AccessLog: pool, Access: cfg.webAccess(),
				Visibility: dir, Log: log.With().Str("part", "web").Logger()})
			if err != nil {
				return err
			}
			mux.Handle("/", pages)
		} else {
			log.Info().Msg("web pages are off: set LOGBOOK_WEB_TOKENS or LOGBOOK_WEB_PROXY_HEADER to serve them")
		}
		ln, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listen on LOGBOOK_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}

	g, ctx := errgroup.WithContext(ctx)
	if sched != nil {
		log.Info().Msg("audit: scheduled exports on (LOGBOOK_AUDIT_SCHEDULE)")
		g.Go(func() error { return sched.Run(ctx) })
	}
	g.Go(func() error { return gw.Run(ctx) })
	g.Go(func() error { return runner.Run(ctx) })
	g.Go(func() error { return indexer.Run(ctx) })
	if srv != nil {
		log.Info().Str("addr", ln.Addr().String()).Msg("http: /healthz /readyz /metrics")
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sh, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sh)
		})
	}
	if ready != nil {
		rt := running{store: store, runner: runner, search: searcher, index: indexer, me: me}
		if ln != nil {
			rt.http = ln.Addr().String()
		}
		ready(rt)
	}
	err = g.Wait()
	log.Info().Msg("logbook serve stopped")
	return err
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

func httpHandler(pool interface{ Ping(context.Context) error }, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// brainSearcher renders search hits as text for the model's search tool.
type brainSearcher struct{ s *search.Searcher }

func (b brainSearcher) Search(ctx context.Context, query string, limit int) (string, error) {
	hits, err := b.s.Search(ctx, search.Query{Text: query, Limit: limit})
	if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		return "no past sessions match", nil
	}
	var sb strings.Builder
	for i, h := range hits {
		fmt.Fprintf(&sb, "%d. session %s (#%s, %s, %s): %s\n", i+1, h.SessionID, h.Channel,
			h.CreatedAt.UTC().Format(time.RFC3339), h.ActorName, h.SnippetText("", ""))
	}
	return sb.String(), nil
}

// slashHandler answers /logbook.
func slashHandler(s *search.Searcher) bot.SlashHandler {
	return func(ctx context.Context, cmd slack.SlashCommand) string {
		sub, rest, _ := strings.Cut(strings.TrimSpace(cmd.Text), " ")
		switch sub {
		case "search":
			rest = strings.TrimSpace(rest)
			hits, err := s.Search(ctx, search.Query{Text: rest, Limit: 5})
			if errors.Is(err, search.ErrInvalidQuery) {
				return "That search did not parse: " + err.Error()
			}
			if err != nil {
				return "Search is unavailable right now."
			}
			if len(hits) == 0 {
				return "No past threads match “" + rest + "”."
			}
			var sb strings.Builder
			for _, h := range hits {
				link := h.Permalink
				if link == "" {
					link = "session " + h.SessionID.String()
				}
				fmt.Fprintf(&sb, "• %s — %s\n", h.SnippetText("*", "*"), link)
			}
			return sb.String()
		case "transcript":
			return "Slack does not tell a slash command which thread it was typed in: open the thread's page on logbook's web pages, or run `logbook transcript <thread permalink>`."
		default:
			return "logbook — an agent whose every thread is a searchable record.\n" +
				"• Mention @" + "logbook in a public channel to start a thread; reply in the thread to continue.\n" +
				"• `/logbook search <words>` finds past threads (quotes for phrases, -word to exclude, OR).\n" +
				"• `/logbook transcript` links this thread's transcript.\n" +
				"Private channels and DMs are never stored."
		}
	}
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
	for _, v := range strings.Split(e.getenv("LOGBOOK_WEB_AUDITORS"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.WebAuditors = append(cfg.WebAuditors, v)
		}
	}
	return nil
}

// checkMigrated fails when the database lacks the tables of the newest migrations: the log's
// (asked of the store) and those of search and audit.
func checkMigrated(ctx context.Context, store *session.Store, pool *pgxpool.Pool) error {
	missing, err := store.MissingTables(ctx)
	if err != nil {
		return fmt.Errorf("check the database schema: %w", err)
	}
	var others []string
	err = pool.QueryRow(ctx, `SELECT array_remove(ARRAY[
		CASE WHEN to_regclass('search_docs') IS NULL THEN 'search_docs' END,
		CASE WHEN to_regclass('audit_access') IS NULL THEN 'audit_access' END], NULL)`).Scan(&others)
	if err != nil {
		return fmt.Errorf("check the database schema: %w", err)
	}
	missing = append(missing, others...)
	if len(missing) > 0 {
		return fmt.Errorf("the database is not migrated (no %s): run 'logbook migrate up' with a role that owns the schema", strings.Join(missing, ", "))
	}
	return nil
}
