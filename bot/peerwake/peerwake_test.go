package peerwake_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/session"
)

type wake struct {
	id     session.ID
	sender string
}

// inbox serves a new Inbox's handler and returns it, its server's address and what it takes.
func inbox(t *testing.T) (*peerwake.Inbox, *httptest.Server, chan wake) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	in, err := peerwake.NewInbox(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+peerwake.Path, in.Handler())
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	got := make(chan wake, 8)
	return in, srv, got
}

// A wake posted with the inbox's token reaches what the inbox is attached to, whole; before
// Attach the inbox refuses it (503), so the sender falls back to NOTIFY and nothing is lost.
func TestAWakeReachesTheInbox(t *testing.T) {
	in, _, got := inbox(t)
	s := peerwake.NewSender(peerwake.SenderOptions{})
	t.Cleanup(s.CloseIdle)
	id := session.ID(uuid.New())
	ctx := context.Background()

	if err := s.Send(ctx, in.Addr(), in.Token(), id, "replica-a"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Send before Attach = %v, want a 503", err)
	}
	if len(in.Token()) != 64 {
		t.Fatalf("token of %d characters, want 64 (32 random bytes)", len(in.Token()))
	}
	in.Attach(func(id session.ID, sender string) { got <- wake{id, sender} })
	s = peerwake.NewSender(peerwake.SenderOptions{}) // the first one rests the failed address
	t.Cleanup(s.CloseIdle)
	if err := s.Send(ctx, in.Addr(), in.Token(), id, "replica-a"); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w.id != id || w.sender != "replica-a" {
		t.Fatalf("inbox got %+v, want %s from replica-a", w, id)
	}
	in.Attach(nil)
	if err := s.Send(ctx, in.Addr(), in.Token(), id, "replica-a"); err == nil {
		t.Fatal("Send after Attach(nil) succeeded")
	}
}

// Anything else that reaches the port is refused and delivers nothing: no token, another
// replica's token, a GET, a body that is not a session id, a body past the bound.
func TestTheInboxRefusesWhatIsNotAPeersWake(t *testing.T) {
	in, srv, got := inbox(t)
	other, err := peerwake.NewInbox("10.0.0.9:8080")
	if err != nil {
		t.Fatal(err)
	}
	if other.Token() == in.Token() {
		t.Fatal("two inboxes have the same token")
	}
	in.Attach(func(id session.ID, sender string) { got <- wake{id, sender} })
	id := uuid.NewString()
	cases := []struct {
		name, method, auth, body string
		want                     int
	}{
		{"no token", "POST", "", id + " a", http.StatusUnauthorized},
		{"another replica's token", "POST", "Bearer " + other.Token(), id + " a", http.StatusUnauthorized},
		{"the token without Bearer", "POST", in.Token(), id + " a", http.StatusUnauthorized},
		{"a prefix of the token", "POST", "Bearer " + in.Token()[:63], id + " a", http.StatusUnauthorized},
		{"GET", "GET", "Bearer " + in.Token(), "", http.StatusMethodNotAllowed},
		{"not a session", "POST", "Bearer " + in.Token(), "../../etc/passwd a", http.StatusBadRequest},
		{"NUL", "POST", "Bearer " + in.Token(), "\x00 a", http.StatusBadRequest},
		{"too long", "POST", "Bearer " + in.Token(), id + " " + strings.Repeat("a", 600), http.StatusBadRequest},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, srv.URL+peerwake.Path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	// The marker: a good wake after them all is the first thing delivered.
	s := peerwake.NewSender(peerwake.SenderOptions{})
	t.Cleanup(s.CloseIdle)
	marker := session.ID(uuid.New())
	if err := s.Send(context.Background(), in.Addr(), in.Token(), marker, "replica-m"); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w.id != marker {
		t.Fatalf("the inbox delivered %+v before the marker", w)
	}
}

// An address that failed is not tried again for Rest (a dead replica costs one timeout now
// and then, not one per wake); each failure in a row doubles the rest; a success ends it.
func TestASenderRestsAnAddressThatFailed(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	calls := 0
	failing := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if failing {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	s := peerwake.NewSender(peerwake.SenderOptions{Rest: 10 * time.Second, Now: clock})
	t.Cleanup(s.CloseIdle)
	ctx, id := context.Background(), session.ID(uuid.New())
	token := strings.Repeat("t", 64)
	posts := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	send := func() error { return s.Send(ctx, addr, token, id, "a") }

	if err := send(); err == nil || errors.Is(err, peerwake.ErrPeerDown) {
		t.Fatalf("first Send = %v, want the 503", err)
	}
	if err := send(); !errors.Is(err, peerwake.ErrPeerDown) || posts() != 1 {
		t.Fatalf("second Send = %v after %d posts, want ErrPeerDown and 1 post", err, posts())
	}
	advance(11 * time.Second) // rested: tried, fails again, rests 20 s
	if err := send(); err == nil || errors.Is(err, peerwake.ErrPeerDown) || posts() != 2 {
		t.Fatalf("Send after the rest = %v after %d posts, want the 503 and 2 posts", err, posts())
	}
	advance(11 * time.Second)
	if err := send(); !errors.Is(err, peerwake.ErrPeerDown) || posts() != 2 {
		t.Fatalf("Send 11 s into a 20 s rest = %v after %d posts, want ErrPeerDown and 2 posts", err, posts())
	}
	advance(10 * time.Second)
	mu.Lock()
	failing = false
	mu.Unlock()
	if err := send(); err != nil || posts() != 3 {
		t.Fatalf("Send after the second rest = %v after %d posts, want nil and 3", err, posts())
	}
	if err := send(); err != nil || posts() != 4 {
		t.Fatalf("Send after a success = %v after %d posts, want nil and 4: the rest is over", err, posts())
	}
}

// An address read from the database that is not a bare host:port is refused before any
// request (the token must not go to another path, port or host).
func TestASenderPostsOnlyToAHostAndPort(t *testing.T) {
	s := peerwake.NewSender(peerwake.SenderOptions{})
	t.Cleanup(s.CloseIdle)
	for _, addr := range []string{"10.0.0.5?x=:8080", "10.0.0.5#:8080", "user@10.0.0.5:8080", "10.0.0.5/x:8080", "10.0.0.5", ":8080"} {
		if err := s.Send(context.Background(), addr, strings.Repeat("t", 64), session.ID(uuid.New()), "a"); err == nil ||
			!strings.Contains(err.Error(), "not a host:port") {
			t.Errorf("Send to %q = %v, want it refused as not a host:port", addr, err)
		}
		if _, err := peerwake.NewInbox(addr); err == nil {
			t.Errorf("NewInbox(%q) took it", addr)
		}
	}
}
