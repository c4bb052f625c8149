package session_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// A replica watching its peers learns of a peer's death the moment PostgreSQL ends that
// peer's LISTEN connection — not on its next orphan scan — and then watches the next live one.
// While a peer lives the watcher is blocked on its claim (seen in pg_locks), and the claim
// still reads as held (logbook_claim_free is false); a wait that times out is neither a death
// nor an error.
func TestWatchPeersSeesAPeerDieAtOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.New(t)
	admin, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	until := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	// Two peers hold their claims; which one "me" watches first is the next key after its own.
	peers := []string{"replica-b", "replica-c"}
	listening := make(chan error, len(peers))
	for _, p := range peers {
		held := make(chan struct{})
		go func() {
			listening <- session.ListenClaimed(ctx, dbURL, p, session.ListenOptions{}, func() { close(held) }, func(session.ID, string) {})
		}()
		select {
		case <-held:
		case err := <-listening:
			t.Fatalf("ListenClaimed %s: %v", p, err)
		}
	}
	pidOf := func(owner string) int {
		var pid int
		if err := admin.QueryRow(ctx, `SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
			AND l.mode = 'ExclusiveLock' AND (l.classid::bigint << 32) | l.objid::bigint = hashtextextended($1, $2)`,
			owner, session.LockLivenessSeed).Scan(&pid); err != nil {
			t.Fatalf("pid of %s's claim: %v", owner, err)
		}
		return pid
	}
	pid := map[string]int{}
	for _, p := range peers {
		pid[p] = pidOf(p)
	}
	var keyB, keyC, keyMe int64
	if err := admin.QueryRow(ctx, `SELECT hashtextextended('replica-b', $1), hashtextextended('replica-c', $1), hashtextextended('replica-a', $1)`,
		session.LockLivenessSeed).Scan(&keyB, &keyC, &keyMe); err != nil {
		t.Fatal(err)
	}
	// The successor of replica-a's key in the ring of the three keys.
	next := func(from int64, keys map[int64]string) string {
		best, wrap := "", ""
		var bk, wk int64
		for k, o := range keys {
			if k > from && (best == "" || k < bk) {
				best, bk = o, k
			}
			if wrap == "" || k < wk {
				wrap, wk = o, k
			}
		}
		if best != "" {
			return best
		}
		return wrap
	}
	firstPeer := next(keyMe, map[int64]string{keyB: "replica-b", keyC: "replica-c"})
	secondPeer := "replica-b"
	if firstPeer == "replica-b" {
		secondPeer = "replica-c"
	}

	died := make(chan int, 4)
	watching := make(chan error, 1)
	go func() {
		watching <- session.WatchPeers(ctx, dbURL, "replica-a", session.WatchOptions{Repick: time.Minute}, func(pid int) { died <- pid })
	}()
	waitingOn := func(owner string) bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.application_name = 'logbook-watch' AND l.locktype = 'advisory' AND NOT l.granted AND l.mode = 'ShareLock'
			  AND (l.classid::bigint << 32) | l.objid::bigint = hashtextextended($1, $2)`, owner, session.LockLivenessSeed).Scan(&n)
		return err == nil && n == 1
	}
	until("the watcher waits on "+firstPeer+"'s claim", func() bool { return waitingOn(firstPeer) })
	// A wait times out (below deadlock_timeout) while the peer lives and the watcher waits again:
	// no death, no error.
	waitStart := func() time.Time {
		var at time.Time
		_ = admin.QueryRow(ctx, `SELECT query_start FROM pg_stat_activity WHERE application_name = 'logbook-watch'`).Scan(&at)
		return at
	}
	first := waitStart()
	until("a second wait on "+firstPeer+"'s claim", func() bool { return waitStart().After(first) && waitingOn(firstPeer) })
	select {
	case p := <-died:
		t.Fatalf("died(%d) while both peers live", p)
	case err := <-watching:
		t.Fatalf("WatchPeers: %v", err)
	default:
	}
	var free bool
	if err := admin.QueryRow(ctx, `SELECT logbook_claim_free($1)`, firstPeer).Scan(&free); err != nil || free {
		t.Fatalf("logbook_claim_free(%s) = %v, %v while it lives and is watched; want false", firstPeer, free, err)
	}

	// The first peer's connection ends as a crash ends it (the server terminates its backend).
	for i, owner := range []string{firstPeer, secondPeer} {
		if i == 1 {
			until("the watcher moves on to "+owner, func() bool { return waitingOn(owner) })
		}
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid[owner]); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-died:
			if p != pid[owner] {
				t.Fatalf("died(%d), want %s's pid %d", p, owner, pid[owner])
			}
		case err := <-watching:
			t.Fatalf("WatchPeers: %v", err)
		case <-ctx.Done():
			t.Fatalf("%s's death was not reported", owner)
		}
		if err := <-listening; err == nil {
			t.Fatalf("%s's ListenClaimed returned no error after its backend was terminated", owner)
		}
	}
	until("the watcher waits for a peer again", func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'logbook-watch' AND state = 'idle'`).Scan(&n)
		return err == nil && n == 1
	})
	cancel()
	if err := <-watching; !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchPeers after cancel = %v, want context.Canceled", err)
	}
}
