package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// mcpSecret is the remote server's credential: it must reach the server and nothing else.
const mcpSecret = "mcp-header-secret-7f3a9c"

// incidentServer is a remote MCP server (the SDK's, over streamable HTTP) that answers only
// requests carrying the credential.
func incidentServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "incidents", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "lookup", Description: "Look an incident up by id.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}, "required": []any{"id"}}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ ID string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.ID + ": primary database failover at 03:12 UTC, root cause disk full"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+mcpSecret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// The connectors end to end: a thread in a configured channel asks, the model calls the
// remote MCP tool, the answer uses its result; the transcript and the audit export show the
// call with its server and tool; the header's secret is nowhere it must not be (the sandbox,
// logbook's log, the transcript, the export, the model's requests); a channel outside the
// server's channels is offered nothing.
func TestE2EConnectorCall(t *testing.T) {
	t.Parallel()
	srv := incidentServer(t)
	e := newE2E(t, slackemu.Options{})
	file := filepath.Join(t.TempDir(), "mcp.json")
	cfg := `{"mcpServers": {"incidents": {"url": "` + srv.URL + `", "headers": {"Authorization": "Bearer ${INCIDENTS_TOKEN}"}, "channels": ["` + general + `"]},
	  "elsewhere": {"url": "` + srv.URL + `", "headers": {"Authorization": "Bearer ${INCIDENTS_TOKEN}"}, "channels": ["C0000009"]}}}`
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	e.model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
			{ID: "toolu_1", Name: "mcp__incidents__lookup", Input: `{"id":"INC-7"}`},
			{ID: "toolu_2", Name: "run_command", Input: `{"command":"env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo done-looking"}`}}},
		fakeprovider.Reply{Text: "INC-7 was a primary database failover at 03:12 UTC; the disk was full."},
		fakeprovider.Reply{Text: "INC-7"},
	)
	p := e.serve("LOGBOOK_SANDBOX=bwrap", "LOGBOOK_MCP_CONFIG="+file, "INCIDENTS_TOKEN="+mcpSecret)
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("what happened in INC-7?")})
	if r := e.replies(top.TS, 1); !strings.Contains(r[0].Text, "03:12 UTC") {
		t.Fatalf("reply %q", r[0].Text)
	}
	s := e.session(top.TS)
	var call session.ToolCall
	for _, ev := range e.events(s.ID, session.TypeToolCall) {
		var c session.ToolCall
		if ev.Decode(&c) == nil && c.CallID == "toolu_1" {
			call = c
		}
	}
	if call.Server != "incidents" || call.Tool != "lookup" || !call.ReadOnly {
		t.Fatalf("tool_call %+v; want server incidents, tool lookup, read-only", call)
	}
	var lookup, env session.ToolResult
	for _, ev := range e.events(s.ID, session.TypeToolResult) {
		var r session.ToolResult
		if ev.Decode(&r) == nil {
			switch r.CallID {
			case "toolu_1":
				lookup = r
			case "toolu_2":
				env = r
			}
		}
	}
	if lookup.IsError || lookup.Server != "incidents" || !strings.Contains(lookup.Content, "root cause disk full") {
		t.Fatalf("lookup result %+v", lookup)
	}
	if !strings.Contains(env.Content, "done-looking") || strings.Contains(env.Content, mcpSecret) {
		t.Fatalf("the sandbox's environment holds the secret, or the command did not run:\n%s", env.Content)
	}
	calls := e.model.Calls()
	if len(calls) < 2 || !strings.Contains(strings.Join(calls[0].Tools, " "), "mcp__incidents__lookup") ||
		!strings.Contains(string(calls[1].Body), "root cause disk full") {
		t.Fatalf("the model was not offered the tool or did not get its result: %+v", calls)
	}
	for i, c := range calls {
		if strings.Contains(string(c.Body), mcpSecret) {
			t.Fatalf("model request %d holds the secret", i)
		}
	}
	tr := e.run("transcript", s.ID.String())
	if !strings.Contains(tr, "mcp__incidents__lookup") || !strings.Contains(tr, "root cause disk full") || strings.Contains(tr, mcpSecret) {
		t.Fatalf("transcript:\n%s", tr)
	}
	dir := t.TempDir()
	today := time.Now().UTC().Format("2006-01-02")
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
	e.run("audit", "export", "--actor", botUser, "--from", today, "--to", tomorrow, "--out", dir, "--format", "jsonl")
	var export strings.Builder
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(path)
			export.Write(b)
		}
		return nil
	})
	if !regexp.MustCompile(`"name": ?"mcp__incidents__lookup"`).MatchString(export.String()) ||
		!regexp.MustCompile(`"server": ?"incidents"`).MatchString(export.String()) ||
		strings.Contains(export.String(), mcpSecret) {
		t.Fatalf("the export lacks the call, or holds the secret:\n%s", export.String())
	}
	if strings.Contains(p.out.String(), mcpSecret) {
		t.Fatal("logbook's log holds the secret")
	}

	// The other server names another channel: nothing of it is offered here.
	if strings.Contains(strings.Join(calls[0].Tools, " "), "mcp__elsewhere__") {
		t.Fatalf("a server whose channels do not name this one was offered: %v", calls[0].Tools)
	}
}
