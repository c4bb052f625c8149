package session_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// An MCP server's sealed token is kept per (server, channel): a connect replaces it, a
// refresh updates it, and a server never connected there is ErrNotFound; the application
// role may do all of it.
func TestMCPTokensPerServerAndChannel(t *testing.T) {
	t.Parallel()
	st, _, _ := newStorePool(t, 2)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := st.MCPTokenOf(ctx, "incidents", "C1"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("before a connect: %v, want ErrNotFound", err)
	}
	if err := st.ConnectMCP(ctx, session.MCPToken{Server: "incidents", Channel: "C1", Sealed: []byte("one"), ConnectedBy: "alice", ConnectedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.ConnectMCP(ctx, session.MCPToken{Server: "incidents", Channel: "C2", Sealed: []byte("two"), ConnectedBy: "bob", ConnectedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.RefreshMCP(ctx, "incidents", "C1", []byte("one-b"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := st.MCPTokenOf(ctx, "incidents", "C1")
	if err != nil || string(got.Sealed) != "one-b" || got.ConnectedBy != "alice" || !got.ConnectedAt.Equal(now) {
		t.Errorf("C1 = %+v, %v", got, err)
	}
	if got, err := st.MCPTokenOf(ctx, "incidents", "C2"); err != nil || string(got.Sealed) != "two" {
		t.Errorf("C2 = %+v, %v", got, err)
	}
	if err := st.RefreshMCP(ctx, "incidents", "C9", []byte("x"), now); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("refresh of a server never connected: %v, want ErrNotFound", err)
	}
	if err := st.ConnectMCP(ctx, session.MCPToken{Server: "incidents", Channel: "C1"}); !errors.Is(err, session.ErrInvalidEvent) {
		t.Errorf("an empty connect: %v, want ErrInvalidEvent", err)
	}
}
