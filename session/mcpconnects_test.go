package session_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// A pending MCP connect is taken once, by the admin who began it, before it expires — from
// any store on the database (two replicas racing for one state: one wins); an expired one
// is refused and swept by the next connect.
func TestMCPConnectTakenOnce(t *testing.T) {
	t.Parallel()
	st, pool, _ := newStorePool(t, 4)
	other := session.NewStore(pool, session.Options{}) // a second replica on the same database
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	c := session.MCPConnect{StateHash: []byte("hash-1"), Server: "incidents", Channel: "C1", Who: "alice", Sealed: []byte("sealed"), Expires: now.Add(10 * time.Minute)}
	if err := st.PutMCPConnect(ctx, c, now); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TakeMCPConnect(ctx, []byte("hash-1"), "mallory", now); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("someone else's take: %v, want ErrNotFound", err)
	}
	var wg sync.WaitGroup
	results := make([]error, 2)
	got := make([]session.MCPConnect, 2)
	for i, s := range []*session.Store{st, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], results[i] = s.TakeMCPConnect(ctx, []byte("hash-1"), "alice", now.Add(time.Minute))
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range results {
		switch {
		case err == nil:
			won++
			if g := got[i]; g.Server != "incidents" || g.Channel != "C1" || string(g.Sealed) != "sealed" || !g.Expires.Equal(c.Expires) {
				t.Errorf("taken = %+v", g)
			}
		case !errors.Is(err, session.ErrNotFound):
			t.Errorf("take %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d replicas took the connect, want 1", won)
	}
	// Expired: refused, and gone.
	old := session.MCPConnect{StateHash: []byte("hash-2"), Server: "incidents", Channel: "C1", Who: "alice", Sealed: []byte("s"), Expires: now.Add(time.Minute)}
	if err := st.PutMCPConnect(ctx, old, now); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TakeMCPConnect(ctx, []byte("hash-2"), "alice", now.Add(time.Minute)); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("expired take: %v, want ErrNotFound", err)
	}
	// The next connect sweeps what expired before it.
	stale := session.MCPConnect{StateHash: []byte("hash-3"), Server: "incidents", Channel: "C1", Who: "alice", Sealed: []byte("s"), Expires: now.Add(time.Minute)}
	if err := st.PutMCPConnect(ctx, stale, now); err != nil {
		t.Fatal(err)
	}
	fresh := session.MCPConnect{StateHash: []byte("hash-4"), Server: "incidents", Channel: "C1", Who: "alice", Sealed: []byte("s"), Expires: now.Add(time.Hour)}
	if err := st.PutMCPConnect(ctx, fresh, now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM mcp_connects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d pending connects left, want 1 (the expired one swept)", n)
	}
	if err := st.PutMCPConnect(ctx, session.MCPConnect{Server: "x"}, now); !errors.Is(err, session.ErrInvalidEvent) {
		t.Errorf("an empty connect: %v", err)
	}
}
