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

// RefreshMCPLocked runs one refresh per (server, channel) at a time: a second waits for the
// first's row lock and is handed the token the first stored; a refresh that keeps the stored
// token or fails changes nothing; a server never connected is ErrNotFound.
func TestRefreshMCPLockedOneAtATime(t *testing.T) {
	t.Parallel()
	st, _, dbURL := newStorePool(t, 4)
	su := superuser(t, dbURL)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := st.RefreshMCPLocked(ctx, "incidents", "C1", now, func(context.Context, []byte) ([]byte, error) {
		t.Error("refresh ran for a server never connected")
		return nil, nil
	}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("never connected: %v, want ErrNotFound", err)
	}
	if err := st.ConnectMCP(ctx, session.MCPToken{Server: "incidents", Channel: "C1", Sealed: []byte("one"), ConnectedBy: "alice", ConnectedAt: now}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the token endpoint refused")
	if _, err := st.RefreshMCPLocked(ctx, "incidents", "C1", now, func(context.Context, []byte) ([]byte, error) { return []byte("lost"), boom }); !errors.Is(err, boom) {
		t.Errorf("a failed refresh: %v, want its error", err)
	}
	if got, err := st.RefreshMCPLocked(ctx, "incidents", "C1", now, func(context.Context, []byte) ([]byte, error) { return nil, nil }); err != nil || string(got) != "one" {
		t.Errorf("a refresh that keeps the token = %q, %v; want one", got, err)
	}

	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := st.RefreshMCPLocked(ctx, "incidents", "C1", now, func(_ context.Context, sealed []byte) ([]byte, error) {
			close(inside)
			<-release
			return []byte("one-b"), nil
		})
		first <- err
	}()
	<-inside
	var seen string
	second := make(chan error, 1)
	go func() {
		_, err := st.RefreshMCPLocked(ctx, "incidents", "C1", now, func(_ context.Context, sealed []byte) ([]byte, error) {
			seen = string(sealed)
			return nil, nil
		})
		second <- err
	}()
	// Release the first once the second waits for its lock.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waiting := 0; waiting == 0; {
		<-tick.C
		if err := su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if seen != "one-b" {
		t.Errorf("the second refresh read %q, want the first's one-b", seen)
	}
	if got, err := st.MCPTokenOf(ctx, "incidents", "C1"); err != nil || string(got.Sealed) != "one-b" {
		t.Errorf("stored = %q, %v; want one-b", got.Sealed, err)
	}
}
