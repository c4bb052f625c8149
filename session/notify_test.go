package session_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/session"
)

type signal struct {
	id     session.ID
	sender string
}

// listenAs runs ListenClaimed for owner and returns its signals, once it listens.
func listenAs(t *testing.T, dbURL, owner string) (<-chan signal, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan signal, 16)
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- session.ListenClaimed(ctx, dbURL, owner, session.ListenOptions{}, func() { close(held) },
			func(id session.ID, sender string) { got <- signal{id, sender} })
	}()
	select {
	case <-held:
	case err := <-done:
		cancel()
		t.Fatalf("ListenClaimed for %s: %v", owner, err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return got, stop
}

// next returns the next signal of ch (failing after a while).
func next(t *testing.T, ch <-chan signal, who string) signal {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("%s got no signal", who)
		return signal{}
	}
}

// markers returns mark, which sends a broadcast marker for session id, and nothingBefore, which
// checks that a listener's next signal is that marker: NOTIFYs arrive in commit order, so a
// listener whose next signal is the marker got nothing before it.
func markers(t *testing.T, st *session.Store, id session.ID) (mark func(), nothingBefore func(ch <-chan signal, who string)) {
	mark = func() {
		t.Helper()
		if err := st.Notify(context.Background(), id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	nothingBefore = func(ch <-chan signal, who string) {
		t.Helper()
		if got := next(t, ch, who); got.id != id {
			t.Fatalf("%s got a signal for %s from %q before the marker", who, got.id, got.sender)
		}
	}
	return mark, nothingBefore
}

// #33: NotifyOwner wakes only the replica that holds the session's live lease, and names it;
// with no other live owner it sends nothing and returns "" (the caller runs the session).
// Each negative check is a broadcast marker sent afterwards: NOTIFYs arrive in commit order,
// so a listener whose next signal is the marker got nothing before it.
func TestNotifyOwnerWakesOnlyTheLeaseOwner(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000000.000100")
	marker := openSession(t, st, "1700000000.000200")
	mustAppend(t, st, s.ID, msg("one"))
	a, _ := listenAs(t, dbURL, "replica-a")
	b, stopB := listenAs(t, dbURL, "replica-b")
	mark, nothingBefore := markers(t, st, marker.ID)

	// No lease: nothing is sent.
	if owner, err := routed(st.NotifyOwner(ctx, s.ID, "replica-c", false)); err != nil || owner != "" {
		t.Fatalf("NotifyOwner without a lease = %q, %v; want \"\"", owner, err)
	}
	mark()
	nothingBefore(a, "replica-a")
	nothingBefore(b, "replica-b")

	// replica-b holds it: only replica-b hears, with the sender's name.
	if _, err := st.AcquireLeaseWith(ctx, s.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
		t.Fatal(err)
	}
	if owner, err := routed(st.NotifyOwner(ctx, s.ID, "replica-c", false)); err != nil || owner != "replica-b" {
		t.Fatalf("NotifyOwner = %q, %v; want replica-b", owner, err)
	}
	if got := next(t, b, "replica-b"); got.id != s.ID || got.sender != "replica-c" {
		t.Fatalf("replica-b got %+v, want %s from replica-c", got, s.ID)
	}
	// Its own lease: the owner is not signalled by itself.
	if owner, err := routed(st.NotifyOwner(ctx, s.ID, "replica-b", false)); err != nil || owner != "" {
		t.Fatalf("NotifyOwner by the owner = %q, %v; want \"\"", owner, err)
	}
	mark()
	nothingBefore(a, "replica-a")
	nothingBefore(b, "replica-b")

	// replica-b dies (its claim is free): its lease is nobody's; nothing is sent.
	stopB()
	if owner, err := routed(st.NotifyOwner(ctx, s.ID, "replica-c", false)); err != nil || owner != "" {
		t.Fatalf("NotifyOwner with a dead owner = %q, %v; want \"\"", owner, err)
	}
	mark()
	nothingBefore(a, "replica-a")
}

// #33: PendingWith lists the oldest pending sessions first (by their last user message, across
// hours), at most Limit of them, none of Skip; OrphanedWith is bounded the same way.
func TestPendingWithIsOldestFirstAndBounded(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	su := superuser(t, dbURL)
	var ids []session.ID // oldest first
	for i := range 5 {
		s := openSession(t, st, "1700000000.00010"+string(rune('0'+i)))
		mustAppend(t, st, s.ID, msg("a question"))
		ids = append(ids, s.ID)
	}
	// The first two are hours old, in two different hours; the rest in order of their append.
	for i, age := range []string{"3 hours", "2 hours"} {
		if _, err := su.Exec(ctx, `UPDATE session_work SET last_message_at = clock_timestamp() - $2::interval,
			last_message_hour = date_trunc('hour', (clock_timestamp() - $2::interval) AT TIME ZONE 'UTC') WHERE session_id = $1`, ids[i], age); err != nil {
			t.Fatal(err)
		}
	}
	const week = 7 * 24 * time.Hour
	got, err := st.PendingWith(ctx, "me", week, session.WakeOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := ids[:3]; !equalIDs(got, want) {
		t.Fatalf("PendingWith(limit 3) = %v, want the three oldest %v", got, want)
	}
	got, err = st.PendingWith(ctx, "me", week, session.WakeOptions{Limit: 2, Skip: []session.ID{ids[0], ids[2]}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []session.ID{ids[1], ids[3]}; !equalIDs(got, want) {
		t.Fatalf("PendingWith(limit 2, skipping 0 and 2) = %v, want %v", got, want)
	}
	if got, err = st.PendingWith(ctx, "me", week, session.WakeOptions{}); err != nil || !equalIDs(got, ids) {
		t.Fatalf("PendingWith(no bound) = %v, %v; want all five oldest first %v", got, err, ids)
	}
	// Dead owners' sessions: the same bound.
	for _, id := range ids {
		stop := holdClaim(t, dbURL, "dead-"+id.String())
		if _, err := st.AcquireLeaseWith(ctx, id, "dead-"+id.String(), time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
			t.Fatal(err)
		}
		stop()
	}
	if got, err = st.OrphanedWith(ctx, "me", week, session.WakeOptions{Limit: 2, Skip: []session.ID{ids[1]}}); err != nil || !equalIDs(got, []session.ID{ids[0], ids[2]}) {
		t.Fatalf("OrphanedWith(limit 2, skipping 1) = %v, %v; want %v", got, err, []session.ID{ids[0], ids[2]})
	}
}

func equalIDs(a, b []session.ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// #33: a graceful stop's hand-over wakes one peer, not every replica. NotifyPeer signals the
// live replica that runs the fewest sessions (among those that run any), never the sender,
// never a dead one (its claim free), and names it; with no live peer it sends nothing.
func TestNotifyPeerWakesOneLivePeer(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000001.000100")
	marker := openSession(t, st, "1700000001.000200")
	busy := []session.Session{openSession(t, st, "1700000001.000300"), openSession(t, st, "1700000001.000400")}
	quiet := openSession(t, st, "1700000001.000500")
	leaver := openSession(t, st, "1700000001.000600")
	a, _ := listenAs(t, dbURL, "replica-a")
	b, stopB := listenAs(t, dbURL, "replica-b")
	c, _ := listenAs(t, dbURL, "replica-c")
	take := func(s session.Session, owner string) {
		t.Helper()
		if _, err := st.AcquireLeaseWith(ctx, s.ID, owner, time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
			t.Fatal(err)
		}
	}
	mark, nothingBefore := markers(t, st, marker.ID)

	// No live peer runs a session: nothing is sent (the caller signals every replica).
	take(leaver, "replica-c")
	if peer, err := routed(st.NotifyPeer(ctx, s.ID, "replica-c", false)); err != nil || peer != "" {
		t.Fatalf("NotifyPeer with no peer running a session = %q, %v; want \"\"", peer, err)
	}
	mark()
	nothingBefore(a, "replica-a")
	nothingBefore(b, "replica-b")
	nothingBefore(c, "replica-c")

	// replica-a runs two sessions, replica-b one: replica-b alone hears, from replica-c.
	take(busy[0], "replica-a")
	take(busy[1], "replica-a")
	take(quiet, "replica-b")
	if peer, err := routed(st.NotifyPeer(ctx, s.ID, "replica-c", false)); err != nil || peer != "replica-b" {
		t.Fatalf("NotifyPeer = %q, %v; want replica-b (the fewest sessions)", peer, err)
	}
	if got := next(t, b, "replica-b"); got.id != s.ID || got.sender != "replica-c" {
		t.Fatalf("replica-b got %+v, want %s from replica-c", got, s.ID)
	}
	mark()
	nothingBefore(a, "replica-a")
	nothingBefore(b, "replica-b")
	nothingBefore(c, "replica-c")

	// replica-b is the sender now: replica-c runs one session, replica-a two.
	if peer, err := routed(st.NotifyPeer(ctx, s.ID, "replica-b", false)); err != nil || peer != "replica-c" {
		t.Fatalf("NotifyPeer from replica-b = %q, %v; want replica-c", peer, err)
	}
	if got := next(t, c, "replica-c"); got.id != s.ID || got.sender != "replica-b" {
		t.Fatalf("replica-c got %+v, want %s from replica-b", got, s.ID)
	}

	// replica-b dies (its claim is free, its lease unexpired): replica-a, busier but alive,
	// is the one.
	stopB()
	if peer, err := routed(st.NotifyPeer(ctx, s.ID, "replica-c", false)); err != nil || peer != "replica-a" {
		t.Fatalf("NotifyPeer with replica-b dead = %q, %v; want replica-a", peer, err)
	}
	if got := next(t, a, "replica-a"); got.id != s.ID || got.sender != "replica-c" {
		t.Fatalf("replica-a got %+v, want %s from replica-c", got, s.ID)
	}
}

// routed is the owner a NOTIFY went to (NotifyOwner, NotifyPeer without direct).
func routed(r session.Route, err error) (string, error) { return r.Owner, err }

// #53: an owner that takes wakes over HTTP (a replica_peers row) is routed without a NOTIFY,
// which would cost every listening replica a transaction: NotifyOwner and NotifyPeer return
// its address and token to a direct sender and NOTIFY nobody; a sender that is not direct
// still NOTIFYs it; NotifyTo NOTIFYs it alone (the fallback when a post fails). A row is
// kept while its replica's claim is held and deleted by the next RecordPeer once it is free.
func TestADirectRouteToAPeerWithAnAddressSendsNoNotify(t *testing.T) {
	t.Parallel()
	st, dbURL := newStore(t)
	ctx := context.Background()
	s := openSession(t, st, "1700000002.000100")
	marker := openSession(t, st, "1700000002.000200")
	mustAppend(t, st, s.ID, msg("one"))
	a, _ := listenAs(t, dbURL, "replica-a")
	b, stopB := listenAs(t, dbURL, "replica-b")
	mark, nothingBefore := markers(t, st, marker.ID)
	tokenA, tokenB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	if err := st.RecordPeer(ctx, "replica-b", "10.0.0.2:8080", tokenB); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLeaseWith(ctx, s.ID, "replica-b", time.Hour, session.LeaseOptions{Claimed: true}); err != nil {
		t.Fatal(err)
	}

	want := session.Route{Owner: "replica-b", Addr: "10.0.0.2:8080", Token: tokenB}
	if got, err := st.NotifyOwner(ctx, s.ID, "replica-c", true); err != nil || got != want {
		t.Fatalf("direct NotifyOwner = %+v, %v; want %+v", got, err, want)
	}
	if got, err := st.NotifyPeer(ctx, s.ID, "replica-c", true); err != nil || got != want {
		t.Fatalf("direct NotifyPeer = %+v, %v; want %+v", got, err, want)
	}
	mark()
	nothingBefore(a, "replica-a")
	nothingBefore(b, "replica-b")

	// Not direct: replica-b is NOTIFYed, and no address comes back.
	if got, err := st.NotifyOwner(ctx, s.ID, "replica-c", false); err != nil || got != (session.Route{Owner: "replica-b"}) {
		t.Fatalf("NotifyOwner = %+v, %v; want replica-b with no address", got, err)
	}
	if got := next(t, b, "replica-b"); got.id != s.ID || got.sender != "replica-c" {
		t.Fatalf("replica-b got %+v, want %s from replica-c", got, s.ID)
	}
	// The fallback: replica-b alone.
	if err := st.NotifyTo(ctx, s.ID, "replica-c", "replica-b"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, b, "replica-b"); got.id != s.ID || got.sender != "replica-c" {
		t.Fatalf("replica-b got %+v, want %s from replica-c", got, s.ID)
	}
	mark()
	nothingBefore(a, "replica-a")
	nothingBefore(b, "replica-b")

	peers := func() []string {
		t.Helper()
		rows, err := superuser(t, dbURL).Query(ctx, `SELECT owner FROM replica_peers ORDER BY owner`)
		if err != nil {
			t.Fatal(err)
		}
		owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return owners
	}
	// replica-a records its own: replica-b, alive, keeps its row.
	if err := st.RecordPeer(ctx, "replica-a", "10.0.0.1:8080", tokenA); err != nil {
		t.Fatal(err)
	}
	if got := peers(); !slices.Equal(got, []string{"replica-a", "replica-b"}) {
		t.Fatalf("peers = %v, want replica-a and replica-b", got)
	}
	// replica-b dies: the next record deletes its row.
	stopB()
	if err := st.RecordPeer(ctx, "replica-a", "10.0.0.1:8081", tokenA); err != nil {
		t.Fatal(err)
	}
	if got := peers(); !slices.Equal(got, []string{"replica-a"}) {
		t.Fatalf("peers after replica-b died = %v, want replica-a", got)
	}
	if err := st.ForgetPeer(ctx, "replica-a"); err != nil {
		t.Fatal(err)
	}
	if got := peers(); len(got) != 0 {
		t.Fatalf("peers after ForgetPeer = %v, want none", got)
	}
	// A token too short to be a secret is refused by the table.
	if err := st.RecordPeer(ctx, "replica-a", "10.0.0.1:8080", "short"); err == nil {
		t.Fatal("RecordPeer took a 5-character token")
	}
}
