package connectors_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session/logtest"
)

const headerSecret = "sk-live-HEADER-SECRET-0042"

func remoteConfig(url string) string {
	return `{"mcpServers": {
	  "incidents": {"url": "` + url + `", "headers": {"Authorization": "Bearer ${INCIDENTS_TOKEN}"},
	                "channels": ["C0OPS", "#dev"], "tools": {"deny": ["broken*"]}, "approve": ["delete_*"]}
	}}`
}

// TestRemoteToolsAndCalls: a remote server built with the SDK over streamable HTTP is listed
// and called with its header added by logbook; names, schemas, read-only marks and approve
// follow the file; results are text with the rest named by size; a tool error is a result.
func TestRemoteToolsAndCalls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	srv := serveRemote(t, testServer(release))
	var logs logtest.Buffer
	c := connectors.New(parse(t, remoteConfig(srv.URL), map[string]string{"INCIDENTS_TOKEN": headerSecret}),
		connectors.Options{Logger: zerolog.New(&logs), CallTimeout: 500 * time.Millisecond})
	ctx := context.Background()

	s := c.Session("C0OPS", "ops", nil, zerolog.New(&logs))
	defer s.Close()
	tools := s.Tools(ctx)
	if got, want := names(tools), "mcp__incidents__delete_item mcp__incidents__lookup mcp__incidents__odd mcp__incidents__slow"; got != want {
		t.Fatalf("tools = %s, want %s", got, want)
	}
	lookup := find(t, tools, "mcp__incidents__lookup")
	if !lookup.ReadOnly || lookup.Approve || lookup.Server != "incidents" || lookup.Tool != "lookup" || lookup.Schema["type"] != "object" {
		t.Errorf("lookup = %+v", lookup)
	}
	if del := find(t, tools, "mcp__incidents__delete_item"); del.ReadOnly || !del.Approve || !s.Approve(del.Name) {
		t.Errorf("delete_item = %+v", del)
	}
	if odd := find(t, tools, "mcp__incidents__odd"); odd.Schema["anyOf"] != nil {
		t.Errorf("odd's schema kept its top-level anyOf: %v", odd.Schema)
	}
	if !strings.Contains(logs.String(), "top-level anyOf removed") {
		t.Errorf("no log line says the schema was simplified:\n%s", logs.String())
	}

	r := s.Call(ctx, "mcp__incidents__lookup", json.RawMessage(`{"query":"INC-7"}`))
	// The image comes back apart, decoded, for the brain to show (or name) to the model.
	if r.IsError || r.Content != "incident INC-7: database failover at 03:12" || len(r.Images) != 1 ||
		r.Images[0].MIMEType != "image/png" || string(r.Images[0].Data) != "PNGDATA" {
		t.Errorf("lookup = %+v", r)
	}
	for _, a := range srv.authorizations() {
		if a != "Bearer "+headerSecret {
			t.Fatalf("a request reached the server with Authorization %q", a)
		}
	}
	if r := s.Call(ctx, "mcp__incidents__broken", nil); !r.IsError || !strings.Contains(r.Content, "not allowed") {
		t.Errorf("denied tool = %+v", r)
	}
	if r := s.Call(ctx, "mcp__incidents__slow", nil); !r.IsError || !strings.Contains(r.Content, "did not answer") {
		t.Errorf("slow = %+v", r)
	}
	if r := s.Call(ctx, "mcp__nowhere__x", nil); !r.IsError {
		t.Errorf("unknown server = %+v", r)
	}
	if strings.Contains(logs.String(), headerSecret) {
		t.Errorf("the header secret is in the log:\n%s", logs.String())
	}
}

// TestRemoteToolError: a tool's own error and an unreachable server are results the model
// reads, and the secret in the URL never reaches the text.
func TestRemoteToolError(t *testing.T) {
	t.Parallel()
	srv := serveRemote(t, testServer(nil))
	cfg := `{"mcpServers": {
	  "a": {"url": "` + srv.URL + `", "channels": ["C0OPS"]},
	  "down": {"url": "http://127.0.0.1:1/mcp?key=${DOWN_KEY}", "channels": ["C0OPS"]}}}`
	var logs logtest.Buffer
	c := connectors.New(parse(t, cfg, map[string]string{"DOWN_KEY": headerSecret}), connectors.Options{Logger: zerolog.New(&logs), ConnectTimeout: 5 * time.Second})
	s := c.Session("C0OPS", "", nil, zerolog.New(&logs))
	defer s.Close()
	if got := names(s.Tools(context.Background())); !strings.Contains(got, "mcp__a__lookup") || strings.Contains(got, "down") {
		t.Errorf("tools = %s", got)
	}
	if r := s.Call(context.Background(), "mcp__a__broken", nil); !r.IsError || r.Content != "backend said no" {
		t.Errorf("broken = %+v", r)
	}
	r := s.Call(context.Background(), "mcp__down__anything", nil)
	if !r.IsError || !strings.Contains(r.Content, "MCP server down is unreachable") || strings.Contains(r.Content, headerSecret) {
		t.Errorf("down = %+v", r)
	}
	if strings.Contains(logs.String(), headerSecret) || !strings.Contains(logs.String(), "[redacted]") {
		t.Errorf("log:\n%s", logs.String())
	}
}

// TestChannelOutsideChannelsOfferedNothing: a server is offered only where its channels name
// the channel, by id or by name; never by default.
func TestChannelOutsideChannelsOfferedNothing(t *testing.T) {
	t.Parallel()
	srv := serveRemote(t, testServer(nil))
	cfg := `{"mcpServers": {"incidents": {"url": "` + srv.URL + `", "channels": ["C0OPS", "#dev"]},
	  "everywhere_not": {"url": "` + srv.URL + `"}}}`
	c := connectors.New(parse(t, cfg, nil), connectors.Options{})
	for _, tc := range []struct {
		id, name string
		offered  bool
	}{{"C0OPS", "", true}, {"C0DEV", "dev", true}, {"C0RANDOM", "random", false}, {"C0RANDOM", "", false}} {
		s := c.Session(tc.id, tc.name, nil, zerolog.Nop())
		tools := s.Tools(context.Background())
		if s.Offers() != tc.offered || (len(tools) > 0) != tc.offered {
			t.Errorf("%s/%s: offers %v, tools %s", tc.id, tc.name, s.Offers(), names(tools))
		}
		if r := s.Call(context.Background(), "mcp__incidents__lookup", nil); r.IsError == tc.offered {
			t.Errorf("%s/%s: call = %+v", tc.id, tc.name, r)
		}
		s.Close()
	}
}

// TestToolListChanged: a tools/list_changed notification refreshes the cached list; without
// one the list is not fetched again.
func TestToolListChanged(t *testing.T) {
	t.Parallel()
	server := testServer(nil)
	srv := serveRemote(t, server)
	c := connectors.New(parse(t, `{"mcpServers": {"a": {"url": "`+srv.URL+`", "channels": ["C1"]}}}`, nil), connectors.Options{})
	s := c.Session("C1", "", nil, zerolog.Nop())
	defer s.Close()
	ctx := context.Background()
	if got := names(s.Tools(ctx)); strings.Contains(got, "fresh") {
		t.Fatalf("tools = %s", got)
	}
	server.AddTool(&mcp.Tool{Name: "fresh", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "new"}}}, nil
		})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(names(s.Tools(ctx)), "mcp__a__fresh") {
		if time.Now().After(deadline) {
			t.Fatal("the new tool never appeared after tools/list_changed")
		}
		time.Sleep(20 * time.Millisecond) // the notification arrives on the server's stream
	}
}

// TestRemoteSSEFallback: a server that offers only the older HTTP+SSE transport is reached
// through it when streamable HTTP fails, and named sse in the file it is reached directly.
func TestRemoteSSEFallback(t *testing.T) {
	t.Parallel()
	server := testServer(nil)
	h := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	for _, typ := range []string{"", `"type": "sse", `} {
		c := connectors.New(parse(t, `{"mcpServers": {"old": {`+typ+`"url": "`+srv.URL+`", "channels": ["C1"]}}}`, nil), connectors.Options{})
		s := c.Session("C1", "", nil, zerolog.Nop())
		if got := names(s.Tools(context.Background())); !strings.Contains(got, "mcp__old__lookup") {
			t.Errorf("%s: tools = %s", typ, got)
		}
		if r := s.Call(context.Background(), "mcp__old__lookup", json.RawMessage(`{"query":"INC-3"}`)); r.IsError || !strings.HasPrefix(r.Content, "incident INC-3") {
			t.Errorf("%s: lookup = %+v", typ, r)
		}
		s.Close()
	}
}

// TestUnreachableServerLeftOutForAWhile: a server that could not be reached is not tried
// again at every listing, only after RetryAfter; a call of its tool still tries.
func TestUnreachableServerLeftOutForAWhile(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	now := time.Unix(1_700_000_000, 0)
	c := connectors.New(parse(t, `{"mcpServers": {"down": {"url": "http://127.0.0.1:1/mcp", "channels": ["C1"]}}}`, nil),
		connectors.Options{Now: func() time.Time { return now }, RetryAfter: time.Minute})
	s := c.Session("C1", "", nil, zerolog.New(&logs))
	defer s.Close()
	tries := func() int { return strings.Count(logs.String(), "MCP server unreachable") }
	s.Tools(context.Background())
	s.Tools(context.Background())
	if n := tries(); n != 1 {
		t.Fatalf("%d attempts within RetryAfter; want 1", n)
	}
	now = now.Add(time.Minute)
	s.Tools(context.Background())
	if n := tries(); n != 2 {
		t.Fatalf("%d attempts after RetryAfter; want 2", n)
	}
}

// TestFailingServerBacksOffAcrossThreads: a server that failed is left out, with why, by every
// new thread of the channel on the replica until its back-off ends, without waiting for it
// again; the back-off doubles with each failure in a row, and a success forgets them. Another
// channel tries on its own.
func TestFailingServerBacksOffAcrossThreads(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	failing := atomic.Bool{}
	failing.Store(true)
	mcpServer := testServer(make(chan struct{}))
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpServer }, nil)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if failing.Load() {
			http.Error(w, "upstream on fire", http.StatusBadGateway)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
	})
	now := time.Unix(1_700_000_000, 0)
	c := connectors.New(parse(t, `{"mcpServers": {"down": {"url": "`+front.URL+`/mcp", "channels": ["C1", "C2"]}}}`, nil),
		connectors.Options{Now: func() time.Time { return now }, RetryAfter: time.Minute})
	thread := func(channel string) *connectors.Session {
		s := c.Session(channel, "", nil, zerolog.Nop())
		t.Cleanup(s.Close)
		s.Tools(context.Background())
		return s
	}
	s1 := thread("C1")
	tried := hits.Load()
	if tried == 0 || len(s1.Unavailable()) != 1 || !strings.Contains(s1.Unavailable()[0].Error, "Bad Gateway") {
		t.Fatalf("after the first try: %d requests, unavailable %+v", tried, s1.Unavailable())
	}
	s2 := thread("C1")
	if n := hits.Load(); n != tried {
		t.Fatalf("a new thread tried the failing server within its back-off (%d requests)", n-tried)
	}
	if d := s2.Unavailable(); len(d) != 1 || d[0].Server != "down" || !strings.Contains(d[0].Error, "Bad Gateway") {
		t.Fatalf("a new thread's unavailable = %+v, want the remembered reason", d)
	}
	thread("C2")
	if hits.Load() == tried {
		t.Fatal("another channel did not try on its own")
	}
	tried = hits.Load()
	now = now.Add(time.Minute)
	thread("C1")
	f, ok := c.LastFailure("down", "C1")
	if hits.Load() == tried || !ok || f.Count != 2 || !f.Until.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("after the back-off: tried %v, last failure %+v; want a second failure backing off 2m", hits.Load() != tried, f)
	}
	failing.Store(false)
	now = now.Add(2 * time.Minute)
	s := thread("C1")
	if got := names(s.Tools(context.Background())); !strings.Contains(got, "mcp__down__lookup") || len(s.Unavailable()) != 0 {
		t.Fatalf("once the server answers: tools %s, unavailable %+v", got, s.Unavailable())
	}
	if _, ok := c.LastFailure("down", "C1"); ok {
		t.Fatal("a success did not forget the failures")
	}
}

// TestLocalStartFailureSaysWhy: a local server that cannot start is left out with why, and an
// npx command's reason says it downloads its package, which the sandbox's network stops;
// /logbook mcp then shows the failure.
func TestLocalStartFailureSaysWhy(t *testing.T) {
	t.Parallel()
	c := connectors.New(parse(t, `{"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"], "channels": ["C1"]}}}`, nil), connectors.Options{})
	s := c.Session("C1", "", nil, zerolog.Nop())
	defer s.Close()
	s.Tools(context.Background())
	d := s.Unavailable()
	if len(d) != 1 || d[0].Remote || !strings.Contains(d[0].Error, "sandbox") || !strings.Contains(d[0].Error, "npx downloads the server's package") {
		t.Fatalf("unavailable = %+v", d)
	}
	st := c.Check(context.Background(), "C1", "", zerolog.Nop())
	if len(st) != 1 || st[0].Failed == nil || st[0].Failed.Error != d[0].Error {
		t.Fatalf("status = %+v, want the start failure", st)
	}
	out := connectors.Command(c, nil, zerolog.Nop()).Run(context.Background(), slashcmd.Call{SlashCommand: slack.SlashCommand{ChannelID: "C1"}})
	if !strings.Contains(out, "*files* (local, stdio): :warning: could not be started") || !strings.Contains(out, "npx downloads") {
		t.Fatalf("/logbook mcp = %s", out)
	}
}
