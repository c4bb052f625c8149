package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

var secretPatterns = regexp.MustCompile(`xox[abpr]-|xapp-|Bearer |s3cret|sk-TEST|sk-ant-e2e|web-secret-0000`)

// The configuration, logged every way a careless line might, never shows a secret.
func TestConfigNeverPrintsSecrets(t *testing.T) {
	vars := map[string]string{
		"DATABASE_URL":       "postgres://bot:s3cret@db/x",
		"SLACK_APP_TOKEN":    "xapp-TEST-0000",
		"SLACK_BOT_TOKEN":    "xoxb-TEST-0000",
		"ANTHROPIC_API_KEY":  "sk-TEST-0000",
		"OPENAI_API_KEY":     "sk-TEST-0001",
		"LOGBOOK_WEB_TOKENS": "ops:web-secret-0000-0000:auditor",
		"LOGBOOK_HOOKS":      `{"alerts":{"channel":"C0000001","secret":"${HOOK_SECRET}"}}`,
		"HOOK_SECRET":        "hook-secret-0000-0000",
	}
	cfg, err := loadServeConfig(env{getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	log.Info().Interface("cfg", cfg).Msg("config")
	log.Info().Str("cfg", fmt.Sprintf("%v %+v", cfg, cfg)).Msg("config")
	log.Info().Str("cfg", fmt.Sprintf("%#v", cfg)).Msg("config")
	if m := secretPatterns.FindString(buf.String()); m != "" {
		t.Fatalf("a secret (%q) reached the log:\n%s", m, buf.String())
	}
	if strings.Contains(buf.String(), "hook-secret-0000-0000") || cfg.Started.Hooks["alerts"].Secret != "hook-secret-0000-0000" {
		t.Fatalf("a hook's secret reached the log, or was lost:\n%s", buf.String())
	}
	// The values are still there for the one place that sends them.
	if cfg.BotToken.Reveal() != "xoxb-TEST-0000" || cfg.providers().AnthropicAPIKey != "sk-TEST-0000" {
		t.Fatal("secrets lost")
	}
	if cfg.webAccess().Tokens[0].Secret != "web-secret-0000-0000" || !cfg.webAccess().Tokens[0].Auditor {
		t.Fatal("web token lost")
	}
}

// A connection error on a DSN with a password does not quote the password.
func TestConnectErrorHidesThePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"postgres://bot:s3cret@127.0.0.1:1/x?connect_timeout=2",
		"postgres://bot:s3cret@127.0.0.1:1/x?sslmode=nonsense",
		"host=127.0.0.1 port=1 user=bot password=s3cret dbname=x connect_timeout=2",
		"postgres://bot:s3cret@%zz/x",
	} {
		_, err := session.Connect(ctx, dsn, session.PoolOptions{})
		if err == nil {
			t.Fatalf("connect to %q succeeded", dsn)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the error quotes the password: %v", err)
		}
	}
}

func TestTokenChecks(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://x", "LOGBOOK_MODEL": "offline",
		"SLACK_APP_TOKEN": "xapp-1", "SLACK_BOT_TOKEN": "xoxb-1"}
	for _, tc := range []struct {
		key, value, want string
	}{
		{"SLACK_APP_TOKEN", "xoxb-1", "SLACK_APP_TOKEN must be an app-level token"},
		{"SLACK_BOT_TOKEN", "xapp-1", "SLACK_BOT_TOKEN must be a bot token"},
		{"SLACK_BOT_TOKEN", "", "SLACK_BOT_TOKEN is not set"},
		{"DATABASE_URL", "", "DATABASE_URL is not set"},
		{"LOGBOOK_MODEL", "", "no model configured"},
		{"LOGBOOK_IDLE_TIMEOUT", "soon", "LOGBOOK_IDLE_TIMEOUT"},
	} {
		vars := map[string]string{}
		for k, v := range base {
			vars[k] = v
		}
		vars[tc.key] = tc.value
		_, err := loadServeConfig(env{getenv: func(k string) string { return vars[k] }})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}
