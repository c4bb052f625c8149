package connectors_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/connectors"
)

// A server's description of a tool reaches the model bounded: 64 KB of it (tested by the
// issue) would fill the context of every call of every thread in the channel.
func TestToolDescriptionsAreBounded(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "lookup", Description: strings.Repeat("Looks things up. ", 4000), InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	remote := serveRemote(t, srv)
	c := connectors.New(parse(t, `{"mcpServers": {"big": {"url": "`+remote.URL+`", "channels": ["C1"]}}}`, nil), connectors.Options{})
	s := c.Session("C1", "", nil, zerolog.Nop())
	defer s.Close()
	tools := s.Tools(context.Background())
	lookup := find(t, tools, "mcp__big__lookup")
	if n := len(lookup.Description); n > connectors.MaxDescription+8 || !strings.HasPrefix(lookup.Description, "Looks things up.") {
		t.Fatalf("description of %d bytes: %.80q…", n, lookup.Description)
	}
}
