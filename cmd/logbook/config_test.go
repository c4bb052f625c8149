package main

import (
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
		{"LOGBOOK_SANDBOX", "docker"},
		{"LOGBOOK_SANDBOX_NETWORK", "maybe"},
		{"LOGBOOK_PRIVATE_NOTE", "sometimes"},
		{"LOGBOOK_HTTP_ADDR", "8080"},
		{"LOGBOOK_LOG_LEVEL", "loud"},
		{"LOGBOOK_LOG_FORMAT", "xml"},
		{"LOGBOOK_WEB_TOKENS", "ops:short"},
		{"LOGBOOK_AUDIT_SCHEDULE", "every day"},
		{"LOGBOOK_THREAD_REPLIES", "sometimes"},
		{"LOGBOOK_PUBLIC_URL", "logbook.example.com"},
		{"LOGBOOK_REPLY_FOOTER", "usage"}, // without LOGBOOK_PUBLIC_URL
		{"LOGBOOK_REPLY_FOOTER", "loud"},
		{"LOGBOOK_PRICES", "gpt-4o=cheap"},
		{"LOGBOOK_MAX_OUTPUT_TOKENS", "lots"},
		{"LOGBOOK_MAX_CONTINUATIONS", "-1"},
		{"LOGBOOK_REPEAT_LIMIT", "0"},
		{"LOGBOOK_CONTEXT_BUDGET", "1e5"},
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
