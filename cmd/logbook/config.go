package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/repo"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
)

// Secret is a value that must never be shown: tokens, keys, passwords. It prints, marshals
// and logs as a fixed mask.
type Secret string

const mask = "[redacted]"

func (s Secret) String() string               { return mask }
func (s Secret) GoString() string             { return mask }
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + mask + `"`), nil }
func (s Secret) MarshalText() ([]byte, error) { return []byte(mask), nil }

// Reveal returns the secret's value, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }

// databaseURL returns DATABASE_URL or a clear error naming it.
func databaseURL(e env) (string, error) {
	u := strings.TrimSpace(e.getenv("DATABASE_URL"))
	if u == "" {
		return "", fmt.Errorf("DATABASE_URL is not set (e.g. postgres://logbook_serve:PASSWORD@db.internal:5432/logbook, see docs/deploy.md; a running logbook dev prints its own)")
	}
	return u, nil
}

// envPositive reads name with parse: unset is 0 (the default of whoever takes it); a value
// parse refuses, or one not above 0, is an error saying it should be want.
func envPositive[T int | int64 | time.Duration](e env, name, want string, parse func(string) (T, error)) (T, error) {
	v := strings.TrimSpace(e.getenv(name))
	if v == "" {
		return 0, nil
	}
	n, err := parse(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q is not %s", name, v, want)
	}
	return n, nil
}

// envDuration reads a positive duration; unset is 0.
func envDuration(e env, name string) (time.Duration, error) {
	return envPositive(e, name, "a positive duration (e.g. 10m, 30s)", time.ParseDuration)
}

// envInt reads a positive whole number; unset is 0.
func envInt(e env, name string) (int, error) {
	return envPositive(e, name, "a positive whole number", strconv.Atoi)
}

// envIntOrOff reads a positive whole number or "off" (returned as -1); unset is 0.
func envIntOrOff(e env, name string) (int, error) {
	if strings.EqualFold(strings.TrimSpace(e.getenv(name)), "off") {
		return -1, nil
	}
	return envPositive(e, name, `a positive whole number or "off"`, strconv.Atoi)
}

// envBytes reads a size in bytes, with an optional K, M, G or T suffix (powers of 1024, an
// optional "iB" or "B" after it): "512M", "2GiB", "1048576". Unset is 0.
func envBytes(e env, name string) (int64, error) {
	return envPositive(e, name, "a size (e.g. 512M, 2GiB, or bytes)", parseBytes)
}

// parseBytes reads "512M", "2GiB" or "1048576" as bytes.
func parseBytes(v string) (int64, error) {
	num := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(v), "B"), "I")
	mult := int64(1)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K':
			mult, num = 1<<10, num[:n-1]
		case 'M':
			mult, num = 1<<20, num[:n-1]
		case 'G':
			mult, num = 1<<30, num[:n-1]
		case 'T':
			mult, num = 1<<40, num[:n-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size: %q", v)
	}
	return n * mult, nil
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

// envReader reads settings in a row and keeps the first error ("errors are values"), so that a
// block of them reads as one assignment a line, checked once after the block: a read after an
// error reads nothing and returns the zero value. The blocks look alike wherever settings are
// read; what each reads and checks after is its own.
type envReader struct {
	e   env
	err error
}

// envRead is r's read of name with read, unless r already holds an error.
func envRead[T any](r *envReader, read func(env, string) (T, error), name string) T {
	var v T
	if r.err == nil {
		v, r.err = read(r.e, name)
	}
	return v
}

func (r *envReader) duration(name string) time.Duration { return envRead(r, envDuration, name) }
func (r *envReader) int(name string) int                { return envRead(r, envInt, name) }
func (r *envReader) intOrOff(name string) int           { return envRead(r, envIntOrOff, name) }
func (r *envReader) bytes(name string) int64            { return envRead(r, envBytes, name) }

func loadServeConfig(e env) (serveConfig, error) {
	var cfg serveConfig
	dsn, err := databaseURL(e)
	if err != nil {
		return cfg, err
	}
	cfg.DatabaseURL = Secret(dsn)
	if err := cfg.readStandby(e); err != nil {
		return cfg, err
	}
	if err := cfg.readPooler(e); err != nil {
		return cfg, err
	}
	if err := cfg.readDB(e); err != nil {
		return cfg, err
	}
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
	if err := cfg.readSettings(e); err != nil {
		return cfg, err
	}
	if cfg.Model == "" {
		return cfg, errors.New("no model configured: set LOGBOOK_MODEL (anthropic:<model>, openai:<model>, or offline for a demo without a language model)")
	}
	if cfg.HTTPAddr == "" {
		// Loopback: the pages' trusted proxy header and /metrics are not for the network
		// unless the operator says so.
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if err := cfg.readLiveness(e); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// webExposure returns a warning when the web pages believe a proxy header and listen on a
// non-loopback address (anyone who reaches the port from a trusted address can name
// themselves), or "" when there is nothing to warn about.
func webExposure(addr, proxyHeader string, trusted []netip.Prefix) string {
	if proxyHeader == "" || addr == "off" {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
		return ""
	}
	if host == "localhost" {
		return ""
	}
	proxies := "loopback only"
	if len(trusted) > 0 {
		proxies = fmt.Sprint(trusted)
	}
	return fmt.Sprintf("LOGBOOK_HTTP_ADDR=%s listens beyond loopback while LOGBOOK_WEB_PROXY_HEADER=%s is on: "+
		"the header is believed from LOGBOOK_WEB_TRUSTED_PROXIES (%s); make sure only your proxy can reach the port from there",
		addr, proxyHeader, proxies)
}

// checkWebIdentity refuses a proxy header believed by address alone where sandboxed commands
// share the host's network: there a command is a loopback caller like the proxy, and could
// name itself an auditor. LOGBOOK_WEB_PROXY_SECRET is what tells the proxy apart.
func (cfg *serveConfig) checkWebIdentity() error {
	if cfg.WebProxy == "" || cfg.WebProxySecret != "" {
		return nil
	}
	var shared string
	switch {
	case cfg.Sandbox == sandbox.KindNone:
		return nil // no commands
	case cfg.Sandbox == sandbox.KindProcess:
		shared = "LOGBOOK_SANDBOX=process runs commands on the host's network"
	case cfg.SandboxNet:
		shared = "LOGBOOK_SANDBOX_NETWORK=on gives sandboxed commands the host's network"
	case cfg.SandboxEgress.NamesLoopback():
		shared = "LOGBOOK_SANDBOX_EGRESS lets sandboxed commands reach a loopback address"
	default:
		return nil
	}
	return fmt.Errorf("LOGBOOK_WEB_PROXY_HEADER=%s is believed from LOGBOOK_WEB_TRUSTED_PROXIES by address alone, and %s: "+
		"any command could send the header and pass for an auditor. Set LOGBOOK_WEB_PROXY_SECRET (16+ characters) "+
		"and have the proxy send it in %s on every request", cfg.WebProxy, shared, web.ProxySecretHeader)
}

// readSettings reads the settings serve and dev share (the model, LOGBOOK_*), checking each:
// a bad value is an error naming its variable. Unset durations stay zero (the bot's defaults
// apply); an unset HTTP address stays "" (serve and dev default it differently). Each group
// below reads its settings top to bottom.
func (cfg *serveConfig) readSettings(e env) error {
	cfg.readModel(e)
	for _, read := range []func(env) error{cfg.readSandbox, cfg.readRuntime, cfg.readReplies, cfg.readRepos, cfg.readConnectors, cfg.readStarted, cfg.readStreams} {
		if err := read(e); err != nil {
			return err
		}
	}
	var err error
	if cfg.ThreadReplies, err = bot.ParseThreadReplies(e.getenv("LOGBOOK_THREAD_REPLIES")); err != nil {
		return fmt.Errorf("LOGBOOK_THREAD_REPLIES=%w", err)
	}
	for _, n := range []struct {
		name string
		v    *int
	}{{"LOGBOOK_MAX_OUTPUT_TOKENS", &cfg.MaxOutputTokens}, {"LOGBOOK_MAX_CONTINUATIONS", &cfg.MaxContinuations},
		{"LOGBOOK_REPEAT_LIMIT", &cfg.RepeatLimit}, {"LOGBOOK_CONTEXT_BUDGET", &cfg.ContextBudget}} {
		if *n.v, err = envInt(e, n.name); err != nil {
			return err
		}
	}
	if err := cfg.readWebAccess(e); err != nil {
		return err
	}
	if err := cfg.readTracing(e); err != nil {
		return err
	}
	if err := cfg.readOIDC(e); err != nil {
		return err
	}
	if err := cfg.checkWebIdentity(); err != nil {
		return err
	}
	if cfg.AuditSchedule, err = loadAuditSchedule(e); err != nil {
		return err
	}
	return nil
}

// readSandbox reads the sandbox, its way out, and the files the model is given.
func (cfg *serveConfig) readSandbox(e env) error {
	var err error
	cfg.Sandbox = strings.TrimSpace(e.getenv("LOGBOOK_SANDBOX"))
	switch cfg.Sandbox {
	case "", sandbox.KindBwrap, sandbox.KindProcess, sandbox.KindNone:
	default:
		return fmt.Errorf("LOGBOOK_SANDBOX=%q: want bwrap, process or none", cfg.Sandbox)
	}
	cfg.SandboxDir = strings.TrimSpace(e.getenv("LOGBOOK_SANDBOX_DIR"))
	r := envReader{e: e}
	cfg.SandboxDisk = r.bytes("LOGBOOK_SANDBOX_DISK")
	cfg.SandboxMemory = r.bytes("LOGBOOK_SANDBOX_MEMORY")
	cfg.FileMax = r.bytes("LOGBOOK_FILE_MAX")
	if r.err != nil {
		return r.err
	}
	if cfg.FileMax > 512<<20 {
		return fmt.Errorf("LOGBOOK_FILE_MAX=%d: at most 512M (a file is held in memory and stored whole)", cfg.FileMax)
	}
	switch cfg.Vision {
	case brain.VisionAuto, brain.VisionOn, brain.VisionOff:
	default:
		return fmt.Errorf("LOGBOOK_MODEL_VISION=%q: want auto, on or off", cfg.Vision)
	}
	if cfg.BlobURL = strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL")); cfg.BlobURL != "" {
		if u, err := url.Parse(cfg.BlobURL); err != nil || len(u.Scheme) < 2 {
			return fmt.Errorf("LOGBOOK_BLOB_URL: want a file:// URL of a directory, such as file:///var/lib/logbook/files")
		}
	}
	if cfg.SandboxNet, err = envBool(e, "LOGBOOK_SANDBOX_NETWORK", false); err != nil {
		return err
	}
	if cfg.SandboxEgress, err = egress.ParseAllowlist(e.getenv("LOGBOOK_SANDBOX_EGRESS")); err != nil {
		return fmt.Errorf("LOGBOOK_SANDBOX_EGRESS: %w", err)
	}
	if cfg.SandboxNet && !cfg.SandboxEgress.Empty() {
		return errors.New("LOGBOOK_SANDBOX_NETWORK=on shares the host's whole network, so LOGBOOK_SANDBOX_EGRESS would restrict nothing: set one of them")
	}
	return nil
}

// readRuntime reads how serve runs: cells, leases, polling, draining, its HTTP address, logs,
// its database role and Slack workspace.
func (cfg *serveConfig) readRuntime(e env) error {
	r := envReader{e: e}
	cfg.IdleTimeout = r.duration("LOGBOOK_IDLE_TIMEOUT")
	cfg.LeaseTTL = r.duration("LOGBOOK_LEASE_TTL")
	cfg.PollInterval = r.duration("LOGBOOK_POLL_INTERVAL")
	cfg.DrainTimeout = r.duration("LOGBOOK_DRAIN_TIMEOUT")
	cfg.WakeLimit = r.intOrOff("LOGBOOK_WAKE_LIMIT")
	cfg.RepliesPerMinute = r.intOrOff("LOGBOOK_THREAD_REPLIES_PER_MINUTE")
	cfg.GatewayAppendLanes = r.int("LOGBOOK_GATEWAY_APPEND_LANES")
	if r.err != nil {
		return r.err
	}
	if cfg.GatewayAppendLanes > 64 {
		return fmt.Errorf("LOGBOOK_GATEWAY_APPEND_LANES=%d: at most 64 (each lane holds one of the gateway pool's connections while it commits)", cfg.GatewayAppendLanes)
	}
	if cfg.DrainTimeout > 10*time.Minute {
		return fmt.Errorf("LOGBOOK_DRAIN_TIMEOUT=%s: at most 10m (a deploy waits that long for the running turns)", cfg.DrainTimeout)
	}
	cfg.HTTPAddr = strings.TrimSpace(e.getenv("LOGBOOK_HTTP_ADDR"))
	if cfg.HTTPAddr != "" && cfg.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
			return fmt.Errorf("LOGBOOK_HTTP_ADDR=%q: want host:port, :port or off", cfg.HTTPAddr)
		}
	}
	if err := cfg.readPeerAddr(e); err != nil {
		return err
	}
	if v := strings.TrimSpace(e.getenv("LOGBOOK_LOG_LEVEL")); v != "" {
		if l, err := zerolog.ParseLevel(strings.ToLower(v)); err != nil || l == zerolog.NoLevel {
			return fmt.Errorf("LOGBOOK_LOG_LEVEL=%q: want debug, info, warn or error", v)
		}
	}
	switch v := strings.TrimSpace(e.getenv("LOGBOOK_LOG_FORMAT")); v {
	case "", "json", "console":
	default:
		return fmt.Errorf("LOGBOOK_LOG_FORMAT=%q: want json or console", v)
	}
	cfg.DBRole = strings.TrimSpace(e.getenv("LOGBOOK_DB_ROLE"))
	if cfg.DBRole == "" {
		cfg.DBRole = "logbook_app"
	}
	var err error
	if cfg.PrivateNote, err = envBool(e, "LOGBOOK_PRIVATE_NOTE", true); err != nil {
		return err
	}
	cfg.Domain = strings.TrimSpace(e.getenv("LOGBOOK_WORKSPACE_DOMAIN"))
	return nil
}

// readReplies reads how a turn shows itself and asks: the footer, streaming, messages
// written mid-turn, tool approvals.
func (cfg *serveConfig) readReplies(e env) error {
	var err error
	if pub := strings.TrimSpace(e.getenv("LOGBOOK_PUBLIC_URL")); pub != "" {
		u, err := url.Parse(pub)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("LOGBOOK_PUBLIC_URL=%q: want the web pages' external address, e.g. https://logbook.example.com", pub)
		}
		cfg.Footer.PublicURL = pub
	}
	if cfg.Footer.Mode, err = bot.ParseFooterMode(e.getenv("LOGBOOK_REPLY_FOOTER"), cfg.Footer.PublicURL); err != nil {
		return fmt.Errorf("LOGBOOK_REPLY_FOOTER=%w", err)
	}
	if err := cfg.readBudget(e); err != nil { // budget.go
		return err
	}
	if cfg.Live.Mode, err = bot.ParseStreamMode(e.getenv("LOGBOOK_STREAM")); err != nil {
		return fmt.Errorf("LOGBOOK_STREAM=%w", err)
	}
	if cfg.Live.Interval, err = envDuration(e, "LOGBOOK_STREAM_INTERVAL"); err != nil {
		return err
	}
	switch cfg.MidTurn = strings.ToLower(strings.TrimSpace(e.getenv("LOGBOOK_MIDTURN"))); cfg.MidTurn {
	case "", bot.MidTurnSteer, bot.MidTurnQueue:
	default:
		return fmt.Errorf("LOGBOOK_MIDTURN=%q: want steer or queue", cfg.MidTurn)
	}
	cfg.Approval.Tools = toolNames()
	if cfg.Approval.Policy, err = bot.ParseToolApproval(e.getenv("LOGBOOK_TOOL_APPROVAL"), cfg.Approval.Tools); err != nil {
		return fmt.Errorf("LOGBOOK_TOOL_APPROVAL: %w", err)
	}
	cfg.ApprovalSpec = strings.TrimSpace(e.getenv("LOGBOOK_TOOL_APPROVAL"))
	// LOGBOOK_APPROVERS is the same setting under the name issue 28 gives it.
	approvers, alias := e.getenv("LOGBOOK_TOOL_APPROVERS"), e.getenv("LOGBOOK_APPROVERS")
	if approvers != "" && alias != "" && strings.TrimSpace(approvers) != strings.TrimSpace(alias) {
		return errors.New("LOGBOOK_TOOL_APPROVERS and LOGBOOK_APPROVERS are one setting and disagree: set one of them")
	}
	if cfg.Approval.Approvers, err = bot.ParseApprovers(cmp.Or(approvers, alias)); err != nil {
		return fmt.Errorf("LOGBOOK_TOOL_APPROVERS: %w", err)
	}
	if cfg.Approval.Timeout, err = envDuration(e, "LOGBOOK_APPROVAL_TIMEOUT"); err != nil {
		return err
	}
	if cfg.Approval.Timeout > 24*time.Hour {
		// A waiting turn is found again by the wake window (7 days); a day is plenty.
		return fmt.Errorf("LOGBOOK_APPROVAL_TIMEOUT=%s: at most 24h", cfg.Approval.Timeout)
	}
	return nil
}

// readRepos reads the channels' repositories, who may set them, and GitHub.
func (cfg *serveConfig) readRepos(e env) error {
	var err error
	if cfg.Repos, err = repo.ParseStatic(e.getenv("LOGBOOK_REPOS")); err != nil {
		return fmt.Errorf("LOGBOOK_REPOS: %w", err)
	}
	if cfg.Admins, err = slashcmd.ParseAdmins(e.getenv("LOGBOOK_ADMINS")); err != nil {
		return fmt.Errorf("LOGBOOK_ADMINS: %w", err)
	}
	cfg.GitHubToken = Secret(strings.TrimSpace(e.getenv("GITHUB_TOKEN")))
	if cfg.GitHubAPI = strings.TrimSpace(e.getenv("LOGBOOK_GITHUB_API_URL")); cfg.GitHubAPI != "" {
		if u, err := url.Parse(cfg.GitHubAPI); err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Host))) {
			return fmt.Errorf("LOGBOOK_GITHUB_API_URL=%q: want https://api.github.com or https://HOST/api/v3 (http only on loopback)", cfg.GitHubAPI)
		}
	}
	if err := cfg.readFollowup(e); err != nil {
		return err
	}
	if cfg.RepoURL = strings.TrimSpace(e.getenv("LOGBOOK_REPO_URL")); cfg.RepoURL != "" {
		if u, err := url.Parse(strings.ReplaceAll(cfg.RepoURL, "{repo}", "o/r")); err != nil || u.Host == "" || u.User != nil || !strings.Contains(cfg.RepoURL, "{repo}") {
			return fmt.Errorf("LOGBOOK_REPO_URL=%q: want a URL with {repo} and no credentials, e.g. https://git.example.com/{repo}.git", cfg.RepoURL)
		}
	}
	return nil
}

// readFollowup reads how the pull requests sessions open are followed (issue 32): the attempts
// per pull request, the webhook's secret, the poller's interval (default 60s without a
// secret, off with one; "off" turns it off), and the bots whose reviews are followed.
func (cfg *serveConfig) readFollowup(e env) error {
	var err error
	if cfg.FollowupMax, err = envInt(e, "LOGBOOK_FOLLOWUP_MAX"); err != nil {
		return err
	}
	if cfg.FollowupMax > 20 {
		return fmt.Errorf("LOGBOOK_FOLLOWUP_MAX=%d: at most 20", cfg.FollowupMax)
	}
	cfg.WebhookSecret = Secret(strings.TrimSpace(e.getenv("LOGBOOK_GITHUB_WEBHOOK_SECRET")))
	if cfg.WebhookSecret != "" && len(cfg.WebhookSecret) < 16 {
		return errors.New("LOGBOOK_GITHUB_WEBHOOK_SECRET is shorter than 16 characters: use a random one (openssl rand -hex 24)")
	}
	switch v := strings.ToLower(strings.TrimSpace(e.getenv("LOGBOOK_FOLLOWUP_POLL"))); v {
	case "":
		if cfg.WebhookSecret == "" {
			cfg.FollowupPoll = time.Minute
		}
	case "off", "0":
		cfg.FollowupPoll = 0
	default:
		if cfg.FollowupPoll, err = envDuration(e, "LOGBOOK_FOLLOWUP_POLL"); err != nil {
			return err
		}
		if cfg.FollowupPoll < 10*time.Second {
			return fmt.Errorf("LOGBOOK_FOLLOWUP_POLL=%s: at least 10s (or off)", cfg.FollowupPoll)
		}
	}
	for _, b := range strings.Split(e.getenv("LOGBOOK_FOLLOWUP_BOTS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.FollowupBots = append(cfg.FollowupBots, b)
		}
	}
	// Whose reviews wake a session: the repository's people (members, the default), anyone's
	// (all), or theirs and these logins'.
	switch v := strings.TrimSpace(e.getenv("LOGBOOK_FOLLOWUP_REVIEWERS")); strings.ToLower(v) {
	case "", "members":
	case "all":
		cfg.FollowupReviewers = []string{"all"}
	default:
		for _, l := range strings.Split(v, ",") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			if !githubLogin.MatchString(l) {
				return fmt.Errorf("LOGBOOK_FOLLOWUP_REVIEWERS: %q is not a GitHub login (members, all, or comma-separated logins)", l)
			}
			cfg.FollowupReviewers = append(cfg.FollowupReviewers, l)
		}
	}
	return nil
}

// githubLogin is what a GitHub user's login may be: letters, digits and single hyphens.
var githubLogin = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,38}$`)

// Values of LOGBOOK_DB_POOLER.
const (
	poolerAuto      = ""          // unset: PostgreSQL itself; a PgBouncer is detected and refused
	poolerNone      = "none"      // PostgreSQL itself (or a session-pooling proxy)
	poolerPgBouncer = "pgbouncer" // a transaction-pooling PgBouncer
)

// readPooler reads LOGBOOK_DB_POOLER and LOGBOOK_DIRECT_DATABASE_URL: what DATABASE_URL
// reaches, and the direct connection for what needs a session of its own (LISTEN, the
// liveness claim, scheduled audit exports).
func (cfg *serveConfig) readPooler(e env) error {
	cfg.DBPooler = strings.ToLower(strings.TrimSpace(e.getenv("LOGBOOK_DB_POOLER")))
	switch cfg.DBPooler {
	case poolerAuto, poolerNone, poolerPgBouncer:
	default:
		return fmt.Errorf("LOGBOOK_DB_POOLER=%q: want pgbouncer (DATABASE_URL is a transaction-pooling PgBouncer) or none", cfg.DBPooler)
	}
	cfg.DirectDatabaseURL = Secret(strings.TrimSpace(e.getenv("LOGBOOK_DIRECT_DATABASE_URL")))
	if cfg.DirectDatabaseURL == "" && cfg.DBPooler != poolerPgBouncer {
		cfg.DirectDatabaseURL = cfg.DatabaseURL
	} // behind PgBouncer it may be left unset with LOGBOOK_LIVENESS=heartbeat (readLiveness)
	if cfg.DBPooler == poolerPgBouncer && cfg.DirectDatabaseURL == cfg.DatabaseURL {
		return errors.New(needDirect)
	}
	return nil
}

const needDirect = "LOGBOOK_DB_POOLER=pgbouncer needs LOGBOOK_DIRECT_DATABASE_URL: a URL of PostgreSQL itself " +
	"(not the PgBouncer; e.g. postgres://logbook_serve:PASSWORD@db.internal:5432/logbook), " +
	"for LISTEN, the liveness claim and audit exports, which need a session of their own " +
	"(with LOGBOOK_LIVENESS=heartbeat only scheduled audit exports do, and LOGBOOK_AUDIT_DATABASE_URL serves them too)"

// The liveness claim's forms (LOGBOOK_LIVENESS; bot.RunnerConfig.Heartbeat).
const (
	livenessLock      = "lock"      // a lock held on the replica's LISTEN connection to PostgreSQL itself
	livenessHeartbeat = "heartbeat" // a row renewed through the pool; no connection of the replica's own
)

// readLiveness reads LOGBOOK_LIVENESS and checks what it needs: heartbeat takes wakes over
// HTTP only (LOGBOOK_PEER_ADDR), since it LISTENs for nothing; behind PgBouncer the lock needs
// LOGBOOK_DIRECT_DATABASE_URL, and so do scheduled audit exports whatever the claim.
func (cfg *serveConfig) readLiveness(e env) error {
	cfg.Liveness = strings.ToLower(strings.TrimSpace(e.getenv("LOGBOOK_LIVENESS")))
	switch cfg.Liveness {
	case "":
		cfg.Liveness = livenessLock
	case livenessLock:
	case livenessHeartbeat:
		if cfg.PeerAddr == "" {
			return errors.New("LOGBOOK_LIVENESS=heartbeat needs LOGBOOK_PEER_ADDR: a replica with a heartbeat claim " +
				"LISTENs for nothing, so its wakes must be posted to it (docs/replicas.md)")
		}
	default:
		return fmt.Errorf("LOGBOOK_LIVENESS=%q: want lock (a lock on a connection of the replica's own) or heartbeat "+
			"(a row renewed through the pool)", cfg.Liveness)
	}
	if cfg.DBPooler == poolerPgBouncer && cfg.DirectDatabaseURL == "" &&
		(cfg.Liveness == livenessLock || (cfg.AuditSchedule != nil && cfg.DB.AuditURL == "")) {
		return errors.New(needDirect)
	}
	return nil
}

// listenURL is bot.Deps.DatabaseURL, the replica's own connection for LISTEN and the lock:
// none with a heartbeat claim.
func (cfg serveConfig) listenURL() string {
	if cfg.Liveness == livenessHeartbeat {
		return ""
	}
	return cfg.DirectDatabaseURL.Reveal()
}

// heartbeat is bot.RunnerConfig.Heartbeat: the claim's TTL with LOGBOOK_LIVENESS=heartbeat,
// else 0 (the lock).
func (cfg serveConfig) heartbeat() time.Duration {
	if cfg.Liveness == livenessHeartbeat {
		return session.DefaultHeartbeatTTL
	}
	return 0
}

// pgbouncerDetected is serve's answer to a DATABASE_URL that refuses logbook's startup
// parameters, as a transaction-pooling PgBouncer does.
const pgbouncerDetected = "DATABASE_URL looks like a PgBouncer (it refused the startup parameter " +
	"idle_in_transaction_session_timeout): logbook needs session state that transaction pooling " +
	"does not keep. Set LOGBOOK_DB_POOLER=pgbouncer and LOGBOOK_DIRECT_DATABASE_URL to PostgreSQL " +
	"itself (LISTEN, the liveness claim and audit exports go there), and make the DATABASE_URL login " +
	"a member of LOGBOOK_DB_ROLE (no SET ROLE through the pooler: GRANT logbook_app TO <login>); " +
	"or point DATABASE_URL at PostgreSQL"

// readStandby reads LOGBOOK_READ_DATABASE_URL, a streaming standby that search, transcripts
// and the web pages read, and LOGBOOK_READ_MAX_WAIT, how long a read that must show the
// newest writes waits for it before it reads the primary.
func (cfg *serveConfig) readStandby(e env) error {
	cfg.ReadDatabaseURL = Secret(strings.TrimSpace(e.getenv("LOGBOOK_READ_DATABASE_URL")))
	var err error
	if cfg.ReadMaxWait, err = envDuration(e, "LOGBOOK_READ_MAX_WAIT"); err != nil {
		return err
	}
	if cfg.ReadMaxWait > time.Minute {
		return fmt.Errorf("LOGBOOK_READ_MAX_WAIT=%s: at most 1m (a page waits that long before it reads the primary)", cfg.ReadMaxWait)
	}
	return nil
}

// readConnectors reads LOGBOOK_MCP_CONFIG, the MCP servers' file (unset: no connectors).
func (cfg *serveConfig) readConnectors(e env) error {
	file := strings.TrimSpace(e.getenv("LOGBOOK_MCP_CONFIG"))
	if file == "" {
		return nil
	}
	c, err := connectors.Load(file, e.getenv)
	if err != nil {
		return fmt.Errorf("LOGBOOK_MCP_CONFIG: %w", err)
	}
	cfg.MCP = &c
	key := e.getenv("LOGBOOK_SECRET_KEY")
	switch {
	case key == "" && c.NeedsSecretKey():
		return errors.New("LOGBOOK_MCP_CONFIG: a server has oauth, and its tokens are stored sealed: set LOGBOOK_SECRET_KEY (openssl rand -base64 32)")
	case key != "":
		if cfg.SecretKey, err = connectors.ParseSecretKey(key); err != nil {
			return fmt.Errorf("LOGBOOK_SECRET_KEY: %w", err)
		}
	}
	return nil
}

// readPeerAddr reads LOGBOOK_PEER_ADDR: a host, or host:port, that peers can dial and where
// the HTTP server takes posts: not the unspecified address (each peer would dial itself), not
// with LOGBOOK_HTTP_ADDR off, not a host beyond this machine while the server listens on
// loopback only, nor loopback while it listens on another address alone (no peer could reach
// it; every post would fail over to NOTIFY).
func (cfg *serveConfig) readPeerAddr(e env) error {
	v := strings.TrimSpace(e.getenv("LOGBOOK_PEER_ADDR"))
	if v == "" || v == "off" {
		return nil
	}
	bad := fmt.Errorf("LOGBOOK_PEER_ADDR=%q: want host or host:port (no scheme, no path; a port from 1 to 65535)", v)
	host := v
	if net.ParseIP(v) == nil { // a bare IPv6 address has colons of its own
		u, err := url.Parse("http://" + v)
		if err != nil || u.Host != v || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" ||
			u.Hostname() == "" || strings.HasSuffix(v, ":") || strings.ContainsAny(v, "%/?#@ ") {
			return bad
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
				return bad
			}
		}
		host = u.Hostname()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("LOGBOOK_PEER_ADDR=%s: the address peers dial to reach this replica (e.g. its pod IP), not the unspecified address", v)
	}
	if cfg.HTTPAddr == "off" {
		return fmt.Errorf("LOGBOOK_PEER_ADDR=%s needs the HTTP server: LOGBOOK_HTTP_ADDR is off", v)
	}
	httpAddr := cmp.Or(cfg.HTTPAddr, "127.0.0.1:8080")
	httpHost, _, _ := net.SplitHostPort(httpAddr)
	httpIP := net.ParseIP(httpHost)
	listensEverywhere := httpHost == "" || (httpIP != nil && httpIP.IsUnspecified())
	switch peerLoopback := isLoopback(net.JoinHostPort(host, "0")); {
	case !peerLoopback && isLoopback(httpAddr):
		return fmt.Errorf("LOGBOOK_PEER_ADDR=%s is beyond this machine, but LOGBOOK_HTTP_ADDR=%s listens on loopback only: "+
			"peers could not reach it (listen on the address peers use, e.g. LOGBOOK_HTTP_ADDR=:8080)", v, httpAddr)
	case peerLoopback && !isLoopback(httpAddr) && !listensEverywhere:
		return fmt.Errorf("LOGBOOK_PEER_ADDR=%s is loopback, but LOGBOOK_HTTP_ADDR=%s does not listen there", v, httpAddr)
	}
	cfg.PeerAddr = v
	return nil
}

// peerAddr is LOGBOOK_PEER_ADDR with its port: the one the HTTP server listens on (listening,
// host:port) when it names none.
func (cfg serveConfig) peerAddr(listening string) string {
	if cfg.PeerAddr == "" {
		return ""
	}
	if _, _, err := net.SplitHostPort(cfg.PeerAddr); err == nil {
		return cfg.PeerAddr
	}
	_, port, _ := net.SplitHostPort(listening)
	return net.JoinHostPort(cfg.PeerAddr, port)
}
