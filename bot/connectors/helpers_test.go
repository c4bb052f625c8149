package connectors_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/logbook/logbook/bot/connectors"
)

// testServer is an MCP server built with the SDK, with the tools the tests call: lookup
// (read-only, echoes its query), delete_item (destructive), broken (a tool error), slow
// (answers when release is closed or the call's ctx ends).
func testServer(release <-chan struct{}) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	str := map[string]any{"type": "string"}
	s.AddTool(&mcp.Tool{Name: "lookup", Description: "Look an incident up.", InputSchema: obj(map[string]any{"query": str}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Query string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "incident " + in.Query + ": database failover at 03:12"},
				&mcp.ImageContent{MIMEType: "image/png", Data: []byte("PNGDATA")}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "delete_item", Description: "Delete an item.", InputSchema: obj(map[string]any{"id": str})},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "broken", Description: "Always fails.", InputSchema: obj(nil)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "backend said no"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "slow", Description: "Waits.", InputSchema: obj(nil)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "odd", Description: "A schema with a top-level anyOf.",
		InputSchema: map[string]any{"type": "object", "anyOf": []any{map[string]any{"required": []any{"a"}}, map[string]any{"required": []any{"b"}}}}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "odd"}}}, nil
		})
	return s
}

// remote serves srv over streamable HTTP and records the Authorization header of every
// request.
type remote struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func serveRemote(t *testing.T, srv *mcp.Server) *remote {
	t.Helper()
	r := &remote{}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auths = append(r.auths, req.Header.Get("Authorization"))
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		r.CloseClientConnections()
		r.Close()
	})
	return r
}

func (r *remote) authorizations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auths...)
}

func parse(t *testing.T, data string, vars map[string]string) connectors.Config {
	t.Helper()
	cfg, err := connectors.Parse("mcp.json", []byte(data), env(vars))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func names(tools []connectors.Tool) string {
	var n []string
	for _, t := range tools {
		n = append(n, t.Name)
	}
	return strings.Join(n, " ")
}

func find(t *testing.T, tools []connectors.Tool, name string) connectors.Tool {
	t.Helper()
	for _, tool := range tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s in %s", name, names(tools))
	return connectors.Tool{}
}

// stdioServerEnv makes the test binary an MCP server over stdio (see TestMain).
const stdioServerEnv = "LOGBOOK_TEST_MCP_STDIO_SERVER"

// maybeServeStdio runs testServer over stdin and stdout when the binary was started as one.
func maybeServeStdio() {
	if os.Getenv(stdioServerEnv) != "1" {
		return
	}
	err := testServer(make(chan struct{})).Run(context.Background(), &mcp.StdioTransport{})
	if err != nil && !errors.Is(err, io.EOF) {
		os.Exit(1)
	}
	os.Exit(0)
}
