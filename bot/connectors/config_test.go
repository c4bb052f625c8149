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
	  "files": {"command": "npx", "args": ["-y", "server", "/workspace"], "env": {"NODE_OPTIONS": "--max-old-space-size=256"}, "channels": ["dev"]},
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
	if files.Transport != connectors.TransportStdio || strings.Join(files.Args, " ") != "-y server /workspace" || files.Env["NODE_OPTIONS"] != "--max-old-space-size=256" {
		t.Errorf("files = %+v", files)
	}
	if legacy.Transport != connectors.TransportSSE || len(legacy.Channels) != 0 {
		t.Errorf("legacy = %+v", legacy)
	}
	if strings.Join(cfg.Secrets, ",") != "sntrys_abcdefgh" {
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
		{"unset var in args", `{"mcpServers": {"gh": {"url": "https://x", "headers": {"X": "${NOPE}"}}}}`, "server gh: key headers.X: ${NOPE} is not set"},
		// A local server runs in the sandbox, where its command line and env are readable by the
		// agent's commands: logbook's environment (its secrets) never goes there.
		{"secret in a local env", `{"mcpServers": {"files": {"command": "x", "env": {"API_KEY": "${FILES_KEY}"}}}}`, "server files: key env.API_KEY: a local server runs in the sandbox"},
		{"secret in local args", `{"mcpServers": {"files": {"command": "x", "args": ["--key=${FILES_KEY}"]}}}`, "server files: key args[0]: a local server runs in the sandbox"},
		{"default in local args", `{"mcpServers": {"files": {"command": "x", "args": ["${ROOT:-/workspace}"]}}}`, "server files: key args[0]: a local server runs in the sandbox"},
		{"secret in a local command", `{"mcpServers": {"files": {"command": "${BIN}"}}}`, "server files: key command: a local server runs in the sandbox"},
		{"bad name", `{"mcpServers": {"Git Hub": {"url": "https://x"}}}`, "server Git Hub: the server name must match [a-z0-9_-]+"},
		{"neither", `{"mcpServers": {"a": {"channels": ["C1"]}}}`, "server a: a server needs url"},
		{"both", `{"mcpServers": {"a": {"url": "https://x", "command": "y"}}}`, "server a: key url: a server is remote"},
		{"bad pattern", `{"mcpServers": {"a": {"url": "https://x", "approve": ["[a-"]}}}`, "server a: key approve:"},
		{"bad type", `{"mcpServers": {"a": {"url": "https://x", "type": "websocket"}}}`, "server a: key type:"},
		{"headers on local", `{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}`, "server a: key headers:"},
		{"tools key", `{"mcpServers": {"a": {"url": "https://x", "tools": {"only": ["x"]}}}}`, "server a:"},
		{"oauth on local", `{"mcpServers": {"a": {"command": "x", "oauth": {"client_id": "c", "authorization_url": "https://a", "token_url": "https://a"}}}}`, "server a: key oauth: oauth is for remote servers"},
		{"oauth without client", `{"mcpServers": {"a": {"url": "https://x", "oauth": {"authorization_url": "https://a", "token_url": "https://a"}}}}`, "server a: key oauth.client_id: missing"},
		{"oauth bad url", `{"mcpServers": {"a": {"url": "https://x", "oauth": {"client_id": "c", "authorization_url": "https://a", "token_url": "a/token"}}}}`, "server a: key oauth.token_url: want an http"},
		{"oauth unset secret", `{"mcpServers": {"a": {"url": "https://x", "oauth": {"client_id": "c", "client_secret": "${CS}", "authorization_url": "https://a", "token_url": "https://a"}}}}`, "server a: key oauth.client_secret: ${CS} is not set"},
		{"oauth and authorization header", `{"mcpServers": {"a": {"url": "https://x", "headers": {"Authorization": "x"}, "oauth": {"client_id": "c", "authorization_url": "https://a", "token_url": "https://a"}}}}`, "server a: key headers.Authorization:"},
	} {
		_, err := connectors.Parse("mcp.json", []byte(tc.data), env(nil))
		var ce *connectors.ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
