package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
)

// #53: two `logbook serve` replicas with LOGBOOK_PEER_ADDR record where they take wakes, and
// a follow-up that reaches the replica that does not run its session is posted to the one
// that does (logbook_peer_wakes_total{how="posted"}), never falling back to a NOTIFY, and
// answered; a replica that stops gracefully takes its address back.
func TestE2EFollowUpsArePostedToTheirOwner(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	model := httptest.NewServer(http.HandlerFunc(fastModel))
	t.Cleanup(model.Close)
	e.extra = []string{"ANTHROPIC_BASE_URL=" + model.URL + "/"}
	env := append(slices.Clone(defaults), "LOGBOOK_REPLICAS=2", "LOGBOOK_PEER_ADDR=127.0.0.1")
	procs := []*proc{e.serve(env...), e.serve(env...)}

	ctx := context.Background()
	db, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	peers := func() int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM replica_peers`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.waitFor("both replicas' peer addresses", func() bool { return peers() == 2 })

	wakes := func(how string) float64 {
		t.Helper()
		var sum float64
		for i, p := range procs {
			n, err := scrapeCounter(p.out.String(), `logbook_peer_wakes_total{how="`+how+`"}`)
			if err != nil {
				t.Fatalf("replica %d: %v", i+1, err)
			}
			sum += n
		}
		return sum
	}
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("first")})
	e.replies(top.TS, 1)
	// Each envelope goes to one of the two sockets, picked at random: forty all reaching the
	// owner would be a draw of one in 2^40.
	n := 1
	for wakes("posted") == 0 {
		if n > 40 {
			t.Fatalf("%d follow-ups and none posted to its owner", n)
		}
		e.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: fmt.Sprintf("follow-up %d", n)})
		n++
		e.replies(top.TS, n)
	}
	if f := wakes("notified"); f != 0 {
		t.Fatalf("%v wakes fell back to NOTIFY with both replicas up", f)
	}

	// A graceful stop takes the address back.
	if err := procs[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-procs[1].done
	if got := peers(); got != 1 {
		t.Fatalf("%d peer addresses after one replica stopped, want 1", got)
	}
}
