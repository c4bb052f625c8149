package session_test

import (
	"context"
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

// A webhook delivery is claimed once by its id and once by its body until it expires; a
// released claim is taken again (migration 00095).
func TestClaimDelivery(t *testing.T) {
	t.Parallel()
	st, pool, _ := newStorePool(t, 2)
	ctx := context.Background()
	body := sha256.Sum256([]byte(`{"action":"completed"}`))
	other := sha256.Sum256([]byte(`{"action":"submitted"}`))
	claim := func(id string, hash [32]byte, ttl time.Duration) bool {
		t.Helper()
		ok, err := st.ClaimDelivery(ctx, id, hash[:], ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !claim("d-1", body, time.Hour) {
		t.Fatal("a first delivery is not claimed")
	}
	if claim("d-1", body, time.Hour) || claim("d-2", body, time.Hour) || claim("d-1", other, time.Hour) {
		t.Fatal("the same id, or the same body under a new id, claimed twice")
	}
	if err := st.ReleaseDelivery(ctx, "d-1"); err != nil {
		t.Fatal(err)
	}
	if !claim("d-1", body, time.Hour) {
		t.Fatal("a released delivery is not claimed again")
	}
	// Expired: claimed again, the old row pruned.
	if !claim("d-3", other, -time.Second) || !claim("d-4", other, time.Hour) {
		t.Fatal("an expired claim still holds")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM github_deliveries`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2: the expired one pruned", n, err)
	}
}

// At most one look per pull request per gap: the first is due at once, the next after the
// gap, and one asked for while that is still to start is covered by it.
func TestClaimLook(t *testing.T) {
	t.Parallel()
	st, _ := newStoreTB(t, 2)
	ctx := context.Background()
	gap := time.Hour
	wait, due, err := st.ClaimLook(ctx, "acme/api", 1, gap)
	if err != nil || !due || wait != 0 {
		t.Fatalf("first: wait %v due %v, %v", wait, due, err)
	}
	wait, due, err = st.ClaimLook(ctx, "acme/api", 1, gap)
	if err != nil || !due || wait < 59*time.Minute || wait > gap {
		t.Fatalf("second: wait %v due %v, %v; want about the gap", wait, due, err)
	}
	if _, due, err = st.ClaimLook(ctx, "acme/api", 1, gap); err != nil || due {
		t.Fatalf("third: due %v, %v; want covered by the second", due, err)
	}
	if wait, due, err = st.ClaimLook(ctx, "acme/api", 2, gap); err != nil || !due || wait != 0 {
		t.Fatalf("another pull request: wait %v due %v, %v", wait, due, err)
	}
}

// A due look at a followed pull request is claimed by exactly one of the replicas that race
// for it; its poller claims the next once due, another only once it is overdue by the
// takeover's margin, and then polls it; NextPoll says when each may (migration 00190).
func TestClaimPoll(t *testing.T) {
	t.Parallel()
	st, _ := newStoreTB(t, 8)
	ctx := context.Background()
	t0 := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	const takeover = 30 * time.Second
	pulls := []session.PullRef{{Repo: "acme/api", Number: 1}}
	claim := func(poller string, now time.Time) bool {
		t.Helper()
		ok, err := st.ClaimPoll(ctx, "acme/api", 1, poller, now, now.Add(time.Minute), takeover)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if next, err := st.NextPoll(ctx, "a", t0, takeover, pulls); err != nil || !next.Equal(t0) {
		t.Fatalf("before any poller: next %v, %v; want now", next, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if claim(p, t0) {
				mu.Lock()
				won = append(won, p)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%v claimed the first look, want one", won)
	}
	owner, other := won[0], "z"
	if next, _ := st.NextPoll(ctx, owner, t0, takeover, pulls); !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the poller's next: %v", next)
	}
	if next, _ := st.NextPoll(ctx, other, t0, takeover, pulls); !next.Equal(t0.Add(time.Minute + takeover)) {
		t.Fatalf("another's next: %v", next)
	}
	if claim(owner, t0.Add(59*time.Second)) || claim(other, t0.Add(time.Minute)) {
		t.Fatal("claimed before due, or another's due look before the takeover's margin")
	}
	if !claim(owner, t0.Add(time.Minute)) {
		t.Fatal("the poller could not claim its due look")
	}
	// The poller stops; once overdue by the margin, another takes over and keeps it.
	at := t0.Add(2*time.Minute + takeover)
	if !claim(other, at) || claim(owner, at.Add(time.Minute)) || !claim(other, at.Add(time.Minute)) {
		t.Fatal("no takeover once overdue, or the old poller kept claiming")
	}
	if err := st.PrunePolls(ctx, at.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if next, _ := st.NextPoll(ctx, "y", at, takeover, pulls); !next.Equal(at) {
		t.Fatalf("after pruning: next %v, want now", next)
	}
}

// A pause of GitHub's polling is only lengthened, and says so once.
func TestPauseGitHub(t *testing.T) {
	t.Parallel()
	st, _ := newStoreTB(t, 2)
	ctx := context.Background()
	if until, err := st.GitHubPausedUntil(ctx); err != nil || !until.IsZero() {
		t.Fatalf("never paused: %v, %v", until, err)
	}
	t0 := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		until  time.Time
		longer bool
	}{{t0.Add(time.Hour), true}, {t0.Add(time.Hour), false}, {t0.Add(time.Minute), false}, {t0.Add(2 * time.Hour), true}} {
		if longer, err := st.PauseGitHub(ctx, c.until, "rate limit"); err != nil || longer != c.longer {
			t.Fatalf("pause %d until %v: longer %v, %v", i, c.until, longer, err)
		}
	}
	if until, err := st.GitHubPausedUntil(ctx); err != nil || !until.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("paused until %v, %v", until, err)
	}
}
