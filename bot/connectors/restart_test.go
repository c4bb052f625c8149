package connectors_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/connectors"
)

// A remote server that restarted (its sessions gone: 404 "session not found") is connected
// to again and the same call made once more, so an approved call needs no second approval;
// the tool runs once for it.
func TestCallAfterTheServerRestartedIsMadeAgainOnce(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	var servers []*mcp.Server
	t.Cleanup(func() { // a restarted server's sessions end with the process; here, with the test
		for _, srv := range servers {
			for ss := range srv.Sessions() {
				_ = ss.Close()
			}
		}
	})
	newHandler := func() http.Handler {
		srv := mcp.NewServer(&mcp.Implementation{Name: "inc", Version: "1"}, nil)
		servers = append(servers, srv)
		srv.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				runs.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "incident INC-9"}}}, nil
			})
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}
	var h atomic.Pointer[http.Handler]
	first := newHandler()
	h.Store(&first)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close() })
	c := connectors.New(parse(t, `{"mcpServers": {"inc": {"url": "`+ts.URL+`", "channels": ["C1"]}}}`, nil), connectors.Options{})
	s := c.Session("C1", "", nil, zerolog.Nop())
	defer s.Close()
	if r := s.Call(context.Background(), "mcp__inc__lookup", json.RawMessage(`{}`)); r.IsError {
		t.Fatalf("first call: %+v", r)
	}
	restarted := newHandler() // the server restarts: every session it knew is gone
	h.Store(&restarted)
	r := s.Call(context.Background(), "mcp__inc__lookup", json.RawMessage(`{}`))
	if r.IsError || r.Content != "incident INC-9" {
		t.Fatalf("the call after the restart: %+v", r)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the tool ran %d times for two calls", n)
	}
}
