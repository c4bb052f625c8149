package connectors_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/connectors"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigLoad(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "mcp.json")
	data := `{"mcpServers": {
	  "sentry": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${SENTRY_TOKEN}"},
	             "channels": ["C0123ABCD", "#ops"], "tools": {"allow": ["search_*"], "deny": ["search_secrets"]}, "approve": ["*_delete"]},
	  "files": {"command": "npx", "args": ["-y", "server", "${ROOT:-/workspace}"], "env": {"API_KEY": "${FILES_KEY}"}, "channels": ["dev"]},
	  "legacy": {"type": "sse", "url": "http://old.example.com/sse"}
	}}`
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := connectors.Load(file, env(map[string]string{"SENTRY_TOKEN": "sntrys_abcdefgh", "FILES_KEY": "key-12345678"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Servers) != 3 {
		t.Fatalf("servers = %+v", cfg.Servers)
	}
	files, legacy, sentry := cfg.Servers[0], cfg.Servers[1], cfg.Servers[2]
	if sentry.Name != "sentry" || sentry.Transport != connectors.TransportHTTP || sentry.Headers["Authorization"] != "Bearer sntrys_abcdefgh" {
		t.Errorf("sentry = %+v", sentry)
	}
	if files.Transport != connectors.TransportStdio || strings.Join(files.Args, " ") != "-y server /workspace" || files.Env["API_KEY"] != "key-12345678" {
		t.Errorf("files = %+v", files)
	}
	if legacy.Transport != connectors.TransportSSE || len(legacy.Channels) != 0 {
		t.Errorf("legacy = %+v", legacy)
	}
	if strings.Join(cfg.Secrets, ",") != "key-12345678,sntrys_abcdefgh" {
		t.Errorf("secrets = %q", cfg.Secrets)
	}
}

// TestConfigRefused: every bad file is refused naming the server and the key.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data, want string
	}{
		{"not json", `{"mcpServers": `, "mcp.json: unexpected EOF"},
		{"no servers", `{}`, "key mcpServers: missing"},
		{"unknown top key", `{"servers": {}}`, `unknown field "servers"`},
		{"unknown key", `{"mcpServers": {"a": {"url": "https://x", "chanels": ["C1"]}}}`, "server a: key chanels: unknown key"},
		{"unset var", `{"mcpServers": {"gh": {"url": "https://x", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}}}}`, "server gh: key headers.Authorization: ${GH_TOKEN} is not set"},
		{"unset var in args", `{"mcpServers": {"gh": {"command": "x", "args": ["${NOPE}"]}}}`, "server gh: key args[0]: ${NOPE} is not set"},
		{"bad name", `{"mcpServers": {"Git Hub": {"url": "https://x"}}}`, "server Git Hub: the server name must match [a-z0-9_-]+"},
		{"neither", `{"mcpServers": {"a": {"channels": ["C1"]}}}`, "server a: a server needs url"},
		{"both", `{"mcpServers": {"a": {"url": "https://x", "command": "y"}}}`, "server a: key url: a server is remote"},
		{"bad pattern", `{"mcpServers": {"a": {"url": "https://x", "approve": ["[a-"]}}}`, "server a: key approve:"},
		{"bad type", `{"mcpServers": {"a": {"url": "https://x", "type": "websocket"}}}`, "server a: key type:"},
		{"headers on local", `{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}`, "server a: key headers:"},
		{"tools key", `{"mcpServers": {"a": {"url": "https://x", "tools": {"only": ["x"]}}}}`, "server a:"},
	} {
		_, err := connectors.Parse("mcp.json", []byte(tc.data), env(nil))
		var ce *connectors.ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
