package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func baseVars() map[string]string {
	return map[string]string{
		"DATABASE_URL":    "postgres://bot@db/x",
		"SLACK_APP_TOKEN": "xapp-TEST-0000",
		"SLACK_BOT_TOKEN": "xoxb-TEST-0000",
		"LOGBOOK_MODEL":   "offline",
	}
}

func load(vars map[string]string) (serveConfig, error) {
	return loadServeConfig(env{getenv: func(k string) string { return vars[k] }})
}

// Every bad value is refused by the loader — before anything is contacted, since the loader
// is given nothing to contact — with an error that names the variable.
func TestConfigRefusesEveryBadValueByName(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, value string }{
		{"DATABASE_URL", ""},
		{"SLACK_APP_TOKEN", ""},
		{"SLACK_APP_TOKEN", "xoxb-TEST-0000"},
		{"SLACK_BOT_TOKEN", ""},
		{"SLACK_BOT_TOKEN", "xapp-TEST-0000"},
		{"LOGBOOK_IDLE_TIMEOUT", "ten minutes"},
		{"LOGBOOK_LEASE_TTL", "-5s"},
		{"LOGBOOK_POLL_INTERVAL", "0"},
		{"LOGBOOK_DRAIN_TIMEOUT", "soon"},
		{"LOGBOOK_DRAIN_TIMEOUT", "0s"},
		{"LOGBOOK_DRAIN_TIMEOUT", "1h"},
		{"LOGBOOK_READ_MAX_WAIT", "soon"},
		{"LOGBOOK_READ_MAX_WAIT", "2m"},
		{"LOGBOOK_SANDBOX", "docker"},
		{"LOGBOOK_SANDBOX_NETWORK", "maybe"},
		{"LOGBOOK_PRIVATE_NOTE", "sometimes"},
		{"LOGBOOK_HTTP_ADDR", "8080"},
		{"LOGBOOK_LOG_LEVEL", "loud"},
		{"LOGBOOK_LOG_FORMAT", "xml"},
		{"LOGBOOK_WEB_TOKENS", "ops:short"},
		{"LOGBOOK_WEB_TRUSTED_PROXIES", "10.0.0.0/33"},
		{"LOGBOOK_WEB_TRUSTED_PROXIES", "127.0.0.1/8,proxy.internal"},
		{"LOGBOOK_AUDIT_SCHEDULE", "every day"},
		{"LOGBOOK_SCHEDULE_MIN_INTERVAL", "500ms"},
		{"LOGBOOK_SCHEDULE_GRACE", "soon"},
		{"LOGBOOK_AUTOMATION_MAX_FAILURES", "many"},
		{"LOGBOOK_AUTOMATION_MAX_FAILURES", "0"},
		{"LOGBOOK_AUTOMATION_MAX_FAILURES", "-2"},
		{"LOGBOOK_HOOKS", `{"alerts":{"channel":"C0000001","secret":"short"}}`},
		{"LOGBOOK_HOOKS", "/no/such/hooks.json"},
		{"LOGBOOK_HOOK_REPLAY_WINDOW", "forever"},
		{"LOGBOOK_HOOK_MAX_BODY", "big"},
		{"LOGBOOK_THREAD_REPLIES", "sometimes"},
		{"LOGBOOK_PUBLIC_URL", "logbook.example.com"},
		{"LOGBOOK_REPLY_FOOTER", "usage"}, // without LOGBOOK_PUBLIC_URL
		{"LOGBOOK_REPLY_FOOTER", "loud"},
		{"LOGBOOK_PRICES", "gpt-4o=cheap"},
		{"LOGBOOK_SANDBOX_DISK", "lots"},
		{"LOGBOOK_SANDBOX_MEMORY", "lots"},
		{"LOGBOOK_STREAM", "sometimes"},
		{"LOGBOOK_MIDTURN", "interrupt"},
		{"LOGBOOK_FOLLOWUP_MAX", "0"},
		{"LOGBOOK_FOLLOWUP_MAX", "21"},
		{"LOGBOOK_GITHUB_WEBHOOK_SECRET", "short"},
		{"LOGBOOK_FOLLOWUP_POLL", "5s"},
		{"LOGBOOK_FOLLOWUP_POLL", "often"},
		{"LOGBOOK_TOOL_APPROVAL", "run_command=maybe"},
		{"LOGBOOK_TOOL_APPROVAL", "rm_rf=ask"},
		{"LOGBOOK_TOOL_APPROVAL", "general/run_command=ask"},
		{"LOGBOOK_TOOL_APPROVAL", "run_command"},
		{"LOGBOOK_TOOL_APPROVERS", "ada,grace"},
		{"LOGBOOK_APPROVAL_TIMEOUT", "forever"},
		{"LOGBOOK_APPROVAL_TIMEOUT", "72h"},
		{"LOGBOOK_MODEL_VISION", "sometimes"},
		{"LOGBOOK_REPOS", "general=acme/api"},
		{"LOGBOOK_REPOS", "C0123ABCD=acme"},
		{"LOGBOOK_GITHUB_API_URL", "ftp://github"},
		{"LOGBOOK_FILE_MAX", "2G"},
		{"LOGBOOK_BLOB_URL", "not a url"},
		{"LOGBOOK_STREAM_INTERVAL", "fast"},
		{"LOGBOOK_SANDBOX_DISK", "-1G"},
		{"LOGBOOK_MAX_OUTPUT_TOKENS", "lots"},
		{"LOGBOOK_MAX_CONTINUATIONS", "-1"},
		{"LOGBOOK_REPEAT_LIMIT", "0"},
		{"LOGBOOK_CONTEXT_BUDGET", "1e5"},
		{"LOGBOOK_SANDBOX_EGRESS", "example.com"},
		{"LOGBOOK_SANDBOX_EGRESS", "example.com:http"},
		{"LOGBOOK_SANDBOX_EGRESS", "*:443"},
		{"LOGBOOK_ADMINS", "ada"},
		{"LOGBOOK_REPO_URL", "https://tok:en@github.com/{repo}.git"},
		{"LOGBOOK_REPO_URL", "https://github.com/acme/api.git"},
		{"LOGBOOK_DB_POOL", "0"},
		{"LOGBOOK_DB_GATEWAY_POOL", "many"},
		{"LOGBOOK_REPLICAS", "-2"},
		{"LOGBOOK_REPLICAS", "100000"},
		{"LOGBOOK_DB_RESERVE", "-1"},
		{"LOGBOOK_WAKE_LIMIT", "0"},
		{"LOGBOOK_WAKE_LIMIT", "many"},
		{"LOGBOOK_THREAD_REPLIES_PER_MINUTE", "-3"},
		{"LOGBOOK_THREAD_REPLIES_PER_MINUTE", "ten"},
		{"LOGBOOK_GATEWAY_APPEND_LANES", "0"},
		{"LOGBOOK_GATEWAY_APPEND_LANES", "many"},
		{"LOGBOOK_GATEWAY_APPEND_LANES", "1000"},
	}
	for _, c := range cases {
		vars := baseVars()
		vars[c.name] = c.value
		_, err := load(vars)
		if err == nil {
			t.Errorf("%s=%q was accepted", c.name, c.value)
			continue
		}
		if !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%q: the error does not name the variable: %v", c.name, c.value, err)
		}
	}
}

// LOGBOOK_SANDBOX_NETWORK=on shares the host's whole network: an egress allowlist beside it
// would restrict nothing, so the two together are refused, naming both.
func TestConfigEgressAndNetworkExclusive(t *testing.T) {
	t.Parallel()
	vars := baseVars()
	vars["LOGBOOK_SANDBOX_NETWORK"], vars["LOGBOOK_SANDBOX_EGRESS"] = "on", "registry.npmjs.org:443"
	if _, err := load(vars); err == nil || !strings.Contains(err.Error(), "LOGBOOK_SANDBOX_NETWORK") || !strings.Contains(err.Error(), "LOGBOOK_SANDBOX_EGRESS") {
		t.Fatalf("network and egress together: %v", err)
	}
	vars["LOGBOOK_SANDBOX_NETWORK"] = "off"
	cfg, err := load(vars)
	if err != nil || cfg.SandboxEgress.String() != "registry.npmjs.org:443" {
		t.Fatalf("egress alone: %v %v", cfg.SandboxEgress, err)
	}
}

// The scheduled audit export's settings are checked with the rest, not after Slack and the
// database have been contacted; a bad LOGBOOK_AUDIT_PER_ACTOR is an error, not dropped.
func TestConfigChecksAuditScheduleUpFront(t *testing.T) {
	t.Parallel()
	schedule := func(k, v string) map[string]string {
		vars := baseVars()
		vars["LOGBOOK_AUDIT_SCHEDULE"] = "CRON_TZ=UTC 0 2 * * *"
		vars["LOGBOOK_AUDIT_DEST"] = t.TempDir()
		if k != "" {
			vars[k] = v
		}
		return vars
	}
	cfg, err := load(schedule("", ""))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuditSchedule == nil || cfg.AuditSchedule.perActor {
		t.Fatalf("audit schedule %+v: want one, not per actor", cfg.AuditSchedule)
	}
	if cfg, err = load(schedule("LOGBOOK_AUDIT_PER_ACTOR", "on")); err != nil || !cfg.AuditSchedule.perActor {
		t.Fatalf("LOGBOOK_AUDIT_PER_ACTOR=on: %v, %+v", err, cfg.AuditSchedule)
	}
	for _, c := range []struct{ name, value string }{
		{"LOGBOOK_AUDIT_PER_ACTOR", "yes please"},
		{"LOGBOOK_AUDIT_DEST", ""},
		{"LOGBOOK_AUDIT_FORMAT", "xml"},
		{"LOGBOOK_RETENTION", "forever"},
		{"LOGBOOK_AUDIT_TZ", "Mars/Olympus"},
		{"LOGBOOK_AUDIT_SIGNING_KEY", "/nonexistent/key.pem"},
	} {
		_, err := load(schedule(c.name, c.value))
		if err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%q: %v; want an error naming it", c.name, c.value, err)
		}
	}
}

// Unset durations stay zero in the config: the bot's defaults, in one place, apply.
func TestConfigLeavesDefaultsToTheBot(t *testing.T) {
	t.Parallel()
	cfg, err := load(baseVars())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.IdleTimeout != 0 || cfg.LeaseTTL != 0 || cfg.PollInterval != 0 {
		t.Fatalf("durations %v %v %v: want zero (bot defaults)", cfg.IdleTimeout, cfg.LeaseTTL, cfg.PollInterval)
	}
	vars := baseVars()
	vars["LOGBOOK_LEASE_TTL"] = "5s"
	if cfg, err = load(vars); err != nil || cfg.LeaseTTL != 5*time.Second {
		t.Fatalf("LOGBOOK_LEASE_TTL=5s: %v %v", cfg.LeaseTTL, err)
	}
}

// The web pages listen on loopback unless told otherwise, believe the proxy header from
// loopback unless told otherwise, and serve warns when the header is on beyond loopback
// (issue 17: the default was :8080 with the header trusted from anywhere).
func TestConfigWebDefaultsStayOnLoopback(t *testing.T) {
	t.Parallel()
	cfg, err := load(baseVars())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != "127.0.0.1:8080" || cfg.WebTrustedProxies != nil {
		t.Errorf("defaults: LOGBOOK_HTTP_ADDR %q, trusted proxies %v; want 127.0.0.1:8080 and none set (loopback)", cfg.HTTPAddr, cfg.WebTrustedProxies)
	}
	vars := baseVars()
	vars["LOGBOOK_HTTP_ADDR"] = "off"
	if cfg, err := load(vars); err != nil || cfg.HTTPAddr != "off" {
		t.Errorf("LOGBOOK_HTTP_ADDR=off: %q, %v", cfg.HTTPAddr, err)
	}
	vars = baseVars()
	vars["LOGBOOK_WEB_PROXY_HEADER"] = "X-Forwarded-Email"
	vars["LOGBOOK_WEB_TRUSTED_PROXIES"] = "10.0.0.0/8, 192.0.2.7"
	cfg, err = load(vars)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}
	if len(cfg.WebTrustedProxies) != 2 || cfg.WebTrustedProxies[0] != want[0] || cfg.WebTrustedProxies[1] != want[1] ||
		len(cfg.webAccess().TrustedProxies) != 2 {
		t.Errorf("LOGBOOK_WEB_TRUSTED_PROXIES: %v, want %v", cfg.WebTrustedProxies, want)
	}
	for _, c := range []struct {
		addr, header string
		warn         bool
	}{
		{"127.0.0.1:8080", "X-Forwarded-Email", false},
		{"[::1]:8080", "X-Forwarded-Email", false},
		{"localhost:8080", "X-Forwarded-Email", false},
		{":8080", "X-Forwarded-Email", true},
		{"0.0.0.0:8080", "X-Forwarded-Email", true},
		{"10.0.0.2:8080", "X-Forwarded-Email", true},
		{":8080", "", false},
		{"off", "X-Forwarded-Email", false},
	} {
		got := webExposure(c.addr, c.header, nil)
		if (got != "") != c.warn || (c.warn && !strings.Contains(got, "LOGBOOK_WEB_TRUSTED_PROXIES")) {
			t.Errorf("webExposure(%q, %q) = %q, want a warning: %v", c.addr, c.header, got, c.warn)
		}
	}
}

func TestConfigSandboxDisk(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"": 0, "1048576": 1 << 20, "512M": 512 << 20, "2GiB": 2 << 30, "1g": 1 << 30, "3KB": 3 << 10} {
		vars := baseVars()
		vars["LOGBOOK_SANDBOX_DISK"] = in
		cfg, err := load(vars)
		if err != nil || cfg.SandboxDisk != want {
			t.Errorf("%q: %d %v, want %d", in, cfg.SandboxDisk, err, want)
		}
	}
}

// LOGBOOK_DB_POOLER=pgbouncer needs a direct URL other than DATABASE_URL; without a pooler
// the direct URL defaults to DATABASE_URL.
func TestConfigPooler(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pooler, direct string
		wantErr        string
		wantDirect     string
	}{
		{pooler: "", direct: "", wantDirect: "postgres://bot@db/x"},
		{pooler: "none", direct: "postgres://bot@pg/x", wantDirect: "postgres://bot@pg/x"},
		{pooler: "pgbouncer", direct: "postgres://bot@pg:5432/x", wantDirect: "postgres://bot@pg:5432/x"},
		{pooler: "pgbouncer", direct: "", wantErr: "LOGBOOK_DIRECT_DATABASE_URL"},
		{pooler: "pgbouncer", direct: "postgres://bot@db/x", wantErr: "LOGBOOK_DIRECT_DATABASE_URL"},
		{pooler: "pgpool", wantErr: "LOGBOOK_DB_POOLER"},
	}
	for _, c := range cases {
		vars := baseVars()
		vars["LOGBOOK_DB_POOLER"], vars["LOGBOOK_DIRECT_DATABASE_URL"] = c.pooler, c.direct
		cfg, err := load(vars)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("pooler %q direct %q: err %v, want one naming %s", c.pooler, c.direct, err, c.wantErr)
		case c.wantErr == "" && err != nil:
			t.Errorf("pooler %q direct %q: %v", c.pooler, c.direct, err)
		case c.wantErr == "" && cfg.DirectDatabaseURL.Reveal() != c.wantDirect:
			t.Errorf("pooler %q direct %q: direct URL %q, want %q", c.pooler, c.direct, cfg.DirectDatabaseURL.Reveal(), c.wantDirect)
		}
	}
}

// Where sandboxed commands share the host's network, a command is a loopback caller like the
// proxy and could send the identity header as an auditor (issue 27): the header is then
// refused at start unless LOGBOOK_WEB_PROXY_SECRET is set, and the error names the settings.
func TestConfigWebProxyHeaderNeedsASecretWhereSandboxesShareTheNetwork(t *testing.T) {
	t.Parallel()
	const secret = "proxy-secret-0123456789"
	cases := []struct {
		name    string
		vars    map[string]string
		refused string // the sandbox setting the error names; "" when accepted
	}{
		{"process", map[string]string{"LOGBOOK_SANDBOX": "process"}, "LOGBOOK_SANDBOX"},
		{"network on", map[string]string{"LOGBOOK_SANDBOX_NETWORK": "on"}, "LOGBOOK_SANDBOX_NETWORK"},
		{"bwrap network on", map[string]string{"LOGBOOK_SANDBOX": "bwrap", "LOGBOOK_SANDBOX_NETWORK": "on"}, "LOGBOOK_SANDBOX_NETWORK"},
		{"egress to loopback", map[string]string{"LOGBOOK_SANDBOX_EGRESS": "github.com:443,127.0.0.1:8080"}, "LOGBOOK_SANDBOX_EGRESS"},
		{"egress to ::1", map[string]string{"LOGBOOK_SANDBOX_EGRESS": "[::1]:*"}, "LOGBOOK_SANDBOX_EGRESS"},
		{"bwrap isolated", map[string]string{"LOGBOOK_SANDBOX": "bwrap"}, ""},
		{"default isolated", map[string]string{"LOGBOOK_SANDBOX_EGRESS": "github.com:443"}, ""},
		{"no commands", map[string]string{"LOGBOOK_SANDBOX": "none", "LOGBOOK_SANDBOX_NETWORK": "on"}, ""},
	}
	for _, c := range cases {
		for _, withSecret := range []bool{false, true} {
			vars := baseVars()
			vars["LOGBOOK_WEB_PROXY_HEADER"] = "X-Forwarded-Email"
			for k, v := range c.vars {
				vars[k] = v
			}
			if withSecret {
				vars["LOGBOOK_WEB_PROXY_SECRET"] = secret
			}
			cfg, err := load(vars)
			switch {
			case c.refused != "" && !withSecret:
				if err == nil {
					t.Errorf("%s: the header without a secret was accepted", c.name)
					continue
				}
				for _, name := range []string{"LOGBOOK_WEB_PROXY_HEADER", c.refused, "LOGBOOK_WEB_PROXY_SECRET"} {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("%s: the error does not name %s: %v", c.name, name, err)
					}
				}
			case err != nil:
				t.Errorf("%s (secret %v): %v", c.name, withSecret, err)
			case withSecret && cfg.webAccess().ProxySecret != secret:
				t.Errorf("%s: the secret does not reach the pages' access (%q)", c.name, cfg.webAccess().ProxySecret)
			}
		}
		// Without the header nothing is asked.
		vars := baseVars()
		for k, v := range c.vars {
			vars[k] = v
		}
		if _, err := load(vars); err != nil {
			t.Errorf("%s without the header: %v", c.name, err)
		}
	}
	// The secret never prints, and a bad one is refused by name.
	vars := baseVars()
	vars["LOGBOOK_WEB_PROXY_HEADER"], vars["LOGBOOK_WEB_PROXY_SECRET"] = "X-Forwarded-Email", secret
	cfg, err := load(vars)
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprintf("%v %+v", cfg, cfg); strings.Contains(s, secret) {
		t.Error("the config prints the proxy secret")
	}
	for _, bad := range []map[string]string{
		{"LOGBOOK_WEB_PROXY_HEADER": "X-Forwarded-Email", "LOGBOOK_WEB_PROXY_SECRET": "short"},
		{"LOGBOOK_WEB_PROXY_SECRET": secret}, // without the header
	} {
		vars := baseVars()
		for k, v := range bad {
			vars[k] = v
		}
		if _, err := load(vars); err == nil || !strings.Contains(err.Error(), "LOGBOOK_WEB_PROXY_SECRET") {
			t.Errorf("%v: %v, want an error naming LOGBOOK_WEB_PROXY_SECRET", bad, err)
		}
	}
}

// LOGBOOK_MCP_CONFIG is read and checked at start: a missing file, an unset ${NAME}, an
// unknown key are refused naming the variable, the server and the key.
func TestConfigMCPFileRefusedAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ file, want string }{
		{dir + "/missing.json", "LOGBOOK_MCP_CONFIG: " + dir + "/missing.json: open"},
		{write("unset.json", `{"mcpServers": {"sentry": {"url": "https://x", "headers": {"Authorization": "${SENTRY_TOKEN}"}}}}`),
			"server sentry: key headers.Authorization: ${SENTRY_TOKEN} is not set"},
		{write("unknown.json", `{"mcpServers": {"sentry": {"url": "https://x", "channel": "C1"}}}`), "server sentry: key channel: unknown key"},
	} {
		vars := baseVars()
		vars["LOGBOOK_MCP_CONFIG"] = tc.file
		if _, err := load(vars); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.file, err, tc.want)
		}
	}
	vars := baseVars()
	vars["LOGBOOK_MCP_CONFIG"] = write("good.json", `{"mcpServers": {"sentry": {"url": "https://x", "channels": ["C1"]}}}`)
	cfg, err := load(vars)
	if err != nil || cfg.MCP == nil || len(cfg.MCP.Servers) != 1 {
		t.Fatalf("cfg.MCP = %+v, %v", cfg.MCP, err)
	}
}

// A server with oauth needs LOGBOOK_SECRET_KEY, which must be 32 bytes: start is refused
// without it, or with a bad one (never quoted), and goes on with a good one.
func TestConfigMCPOAuthNeedsSecretKey(t *testing.T) {
	t.Parallel()
	file := t.TempDir() + "/mcp.json"
	if err := os.WriteFile(file, []byte(`{"mcpServers": {"sentry": {"url": "https://x", "channels": ["C1"],
	  "oauth": {"client_id": "c", "authorization_url": "https://a/authorize", "token_url": "https://a/token"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"": "set LOGBOOK_SECRET_KEY", "too-short-secret-value": "LOGBOOK_SECRET_KEY: want 32 random bytes"} {
		vars := baseVars()
		vars["LOGBOOK_MCP_CONFIG"], vars["LOGBOOK_SECRET_KEY"] = file, key
		_, err := load(vars)
		if err == nil || !strings.Contains(err.Error(), want) || (key != "" && strings.Contains(err.Error(), key)) {
			t.Errorf("key %q: err = %v, want %q", key, err, want)
		}
	}
	vars := baseVars()
	vars["LOGBOOK_MCP_CONFIG"], vars["LOGBOOK_SECRET_KEY"] = file, strings.Repeat("ab", 32)
	if cfg, err := load(vars); err != nil || cfg.SecretKey == nil {
		t.Fatalf("cfg.SecretKey = %v, %v", cfg.SecretKey, err)
	}
}

// #33: LOGBOOK_WAKE_LIMIT and LOGBOOK_THREAD_REPLIES_PER_MINUTE reach the bot as written; unset
// leaves the bot's defaults (0), and "off" turns each off (-1).
func TestConfigWakeLimitAndReplyCap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		wake, replies string
		want          [2]int
	}{{"", "", [2]int{0, 0}}, {"8", "30", [2]int{8, 30}}, {"off", "OFF", [2]int{-1, -1}}} {
		vars := baseVars()
		vars["LOGBOOK_WAKE_LIMIT"], vars["LOGBOOK_THREAD_REPLIES_PER_MINUTE"] = c.wake, c.replies
		cfg, err := load(vars)
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]int{cfg.WakeLimit, cfg.RepliesPerMinute}; got != c.want {
			t.Errorf("LOGBOOK_WAKE_LIMIT=%q LOGBOOK_THREAD_REPLIES_PER_MINUTE=%q: %v, want %v", c.wake, c.replies, got, c.want)
		}
	}
}

// Pull requests followed: the poller is on (60s) unless a webhook secret is set, and either
// way as LOGBOOK_FOLLOWUP_POLL says; the attempts default to the follower's.
func TestConfigFollowupPollDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		secret, poll string
		want         time.Duration
	}{
		{"", "", time.Minute},
		{"0123456789abcdef", "", 0},
		{"0123456789abcdef", "2m", 2 * time.Minute},
		{"", "off", 0},
	} {
		vars := baseVars()
		vars["LOGBOOK_GITHUB_WEBHOOK_SECRET"], vars["LOGBOOK_FOLLOWUP_POLL"], vars["LOGBOOK_FOLLOWUP_BOTS"] = c.secret, c.poll, "renovate[bot], *"
		cfg, err := load(vars)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.FollowupPoll != c.want || cfg.FollowupMax != 0 || len(cfg.FollowupBots) != 2 || cfg.FollowupBots[0] != "renovate[bot]" {
			t.Errorf("secret %q poll %q: poll %v max %d bots %q", c.secret, c.poll, cfg.FollowupPoll, cfg.FollowupMax, cfg.FollowupBots)
		}
	}
}

// LOGBOOK_FOLLOWUP_REVIEWERS: members by default, all, or logins besides the members; nothing
// else.
func TestConfigFollowupReviewers(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"": "", "members": "", "ALL": "all", "ada, grace-h": "ada grace-h"} {
		vars := baseVars()
		vars["LOGBOOK_FOLLOWUP_REVIEWERS"] = v
		cfg, err := load(vars)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if got := strings.Join(cfg.FollowupReviewers, " "); got != want {
			t.Errorf("%q: reviewers %q, want %q", v, got, want)
		}
	}
	vars := baseVars()
	vars["LOGBOOK_FOLLOWUP_REVIEWERS"] = "ada,<!here>"
	if _, err := load(vars); err == nil || !strings.Contains(err.Error(), "LOGBOOK_FOLLOWUP_REVIEWERS") {
		t.Fatalf("a bad login: %v", err)
	}
}

// LOGBOOK_GATEWAY_APPEND_LANES reaches the gateway as written; unset leaves group commit off.
func TestConfigGatewayAppendLanes(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]int{"": 0, "4": 4, "64": 64} {
		vars := baseVars()
		vars["LOGBOOK_GATEWAY_APPEND_LANES"] = value
		cfg, err := load(vars)
		if err != nil {
			t.Fatalf("LOGBOOK_GATEWAY_APPEND_LANES=%q: %v", value, err)
		}
		if cfg.GatewayAppendLanes != want {
			t.Errorf("LOGBOOK_GATEWAY_APPEND_LANES=%q: %d lanes, want %d", value, cfg.GatewayAppendLanes, want)
		}
	}
}

// #53: LOGBOOK_PEER_ADDR is a host (the port is the HTTP server's) or host:port; it needs the
// HTTP server, and a host beyond this machine needs a server that listens beyond loopback.
func TestConfigPeerAddr(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		peer, http, listening string
		want, err             string
	}{
		{"", ":8080", "[::]:8080", "", ""},
		{"off", ":8080", "[::]:8080", "", ""},
		{"10.0.0.5", ":8080", "[::]:8080", "10.0.0.5:8080", ""},
		{"10.0.0.5:9000", ":8080", "[::]:8080", "10.0.0.5:9000", ""},
		{"logbook-3.logbook", "0.0.0.0:0", "0.0.0.0:41234", "logbook-3.logbook:41234", ""},
		{"fd00::5", ":8080", "[::]:8080", "[fd00::5]:8080", ""},
		{"127.0.0.1", "127.0.0.1:0", "127.0.0.1:38000", "127.0.0.1:38000", ""},
		{"127.0.0.1", "", "127.0.0.1:8080", "127.0.0.1:8080", ""},
		{"10.0.0.5", "", "", "", "loopback only"},
		{"10.0.0.5", "127.0.0.1:8080", "", "", "loopback only"},
		{"10.0.0.5", "off", "", "", "LOGBOOK_HTTP_ADDR is off"},
		{"http://10.0.0.5", ":8080", "", "", "no scheme"},
		{"10.0.0.5:0", ":8080", "", "", "a port from 1"},
		{"10.0.0.5/wake", ":8080", "", "", "no scheme"},
		{"a@10.0.0.5:80", ":8080", "", "", "no scheme"},
		{"10.0.0.5?x=", ":8080", "", "", "no scheme"},
		{"10.0.0.5#", ":8080", "", "", "no scheme"},
		{"10.0.0.5:", ":8080", "", "", "no scheme"},
		{"10.0.0.5:80:80", ":8080", "", "", "no scheme"},
		{"0.0.0.0", ":8080", "", "", "not the unspecified address"},
		{"::", ":8080", "", "", "not the unspecified address"},
		{"127.0.0.1", "10.0.0.5:8080", "", "", "does not listen there"},
		{"localhost", "[::]:8080", "[::]:8080", "localhost:8080", ""},
	} {
		vars := baseVars()
		vars["LOGBOOK_PEER_ADDR"], vars["LOGBOOK_HTTP_ADDR"] = c.peer, c.http
		cfg, err := load(vars)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("LOGBOOK_PEER_ADDR=%q LOGBOOK_HTTP_ADDR=%q: %v, want an error saying %q", c.peer, c.http, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("LOGBOOK_PEER_ADDR=%q LOGBOOK_HTTP_ADDR=%q: %v", c.peer, c.http, err)
			continue
		}
		if got := cfg.peerAddr(c.listening); got != c.want {
			t.Errorf("LOGBOOK_PEER_ADDR=%q listening on %s: %q, want %q", c.peer, c.listening, got, c.want)
		}
	}
}

// LOGBOOK_LIVENESS: lock (the default) or heartbeat. heartbeat needs LOGBOOK_PEER_ADDR (it
// LISTENs for nothing), gives the runner a heartbeat TTL and no LISTEN URL, and lets a fleet
// behind PgBouncer leave LOGBOOK_DIRECT_DATABASE_URL unset unless it schedules audit exports.
func TestConfigLiveness(t *testing.T) {
	t.Parallel()
	behind := map[string]string{"LOGBOOK_DB_POOLER": "pgbouncer", "LOGBOOK_REPLICAS": "50"}
	peer := map[string]string{"LOGBOOK_PEER_ADDR": "10.0.0.5", "LOGBOOK_HTTP_ADDR": ":8080"}
	audit := map[string]string{"LOGBOOK_AUDIT_SCHEDULE": "@daily", "LOGBOOK_AUDIT_DEST": "/tmp/x"}
	for _, c := range []struct {
		name      string
		liveness  string
		with      []map[string]string
		heartbeat bool
		err       string
	}{
		{name: "default", liveness: "", heartbeat: false},
		{name: "lock", liveness: "lock", heartbeat: false},
		{name: "heartbeat", liveness: "Heartbeat", with: []map[string]string{peer}, heartbeat: true},
		{name: "heartbeat without a peer address", liveness: "heartbeat", err: "needs LOGBOOK_PEER_ADDR"},
		{name: "a typo", liveness: "heartbeats", with: []map[string]string{peer}, err: `LOGBOOK_LIVENESS="heartbeats": want lock`},
		{name: "heartbeat behind PgBouncer, no direct URL", liveness: "heartbeat", with: []map[string]string{peer, behind}, heartbeat: true},
		{name: "lock behind PgBouncer, no direct URL", liveness: "lock", with: []map[string]string{peer, behind}, err: "needs LOGBOOK_DIRECT_DATABASE_URL"},
		{name: "heartbeat behind PgBouncer with audit exports, no direct URL", liveness: "heartbeat", with: []map[string]string{peer, behind, audit},
			err: "needs LOGBOOK_DIRECT_DATABASE_URL"},
		{name: "heartbeat behind PgBouncer with audit exports on their own URL", liveness: "heartbeat",
			with: []map[string]string{peer, behind, audit, {"LOGBOOK_AUDIT_DATABASE_URL": "postgres://auditor@db:5432/x"}}, heartbeat: true},
	} {
		vars := baseVars()
		for _, m := range c.with {
			for k, v := range m {
				vars[k] = v
			}
		}
		vars["LOGBOOK_LIVENESS"] = c.liveness
		cfg, err := load(vars)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := cfg.heartbeat() > 0; got != c.heartbeat {
			t.Errorf("%s: heartbeat %v, want %v", c.name, got, c.heartbeat)
		}
		if got := cfg.listenURL() != ""; got == c.heartbeat {
			t.Errorf("%s: a LISTEN URL %v with heartbeat %v", c.name, got, c.heartbeat)
		}
		for _, r := range cfg.budget().Roles {
			if c.heartbeat && (r.Name == "listen" || r.Name == "watch") {
				t.Errorf("%s: a heartbeat replica's budget has a %s connection", c.name, r.Name)
			}
		}
	}
	// Behind PgBouncer a heartbeat fleet is PgBouncer's pool and the reserve, whatever its size.
	vars := baseVars()
	for _, m := range []map[string]string{peer, behind} {
		for k, v := range m {
			vars[k] = v
		}
	}
	vars["LOGBOOK_LIVENESS"], vars["LOGBOOK_REPLICAS"] = "heartbeat", "500"
	cfg, err := load(vars)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.budget()
	if err := b.Check(defaultServer); err != nil || b.Need() != 26 ||
		b.Formula() != "LOGBOOK_REPLICAS 500 × (none of their own) + LOGBOOK_PGBOUNCER_POOL 20 + LOGBOOK_DB_RESERVE 6 = 26" {
		t.Errorf("500 heartbeat replicas behind PgBouncer: need %d, %q, %v", b.Need(), b.Formula(), err)
	}
}
