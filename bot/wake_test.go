package bot_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/slackemu"
)

// statementCounter counts the statements of a pool whose SQL contains one of its words.
type statementCounter struct {
	words []string
	mu    sync.Mutex
	n     map[string]int
}

func newStatementCounter(words ...string) *statementCounter {
	return &statementCounter{words: words, n: map[string]int{}}
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n["all"]++
	for _, w := range c.words {
		if strings.Contains(d.SQL, w) {
			c.n[w]++
		}
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) count(word string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[word]
}

// #33: a message wakes only the replica that runs its session. Threads whose cells are
// running (their leases live) get follow-ups spread over N replicas' sockets: no follow-up
// costs a lease call or a session read on any replica, however many there are, and a new
// thread costs one lease call (the replica that stored its first message takes it).
func TestLeaseCallsPerMessageFlatInReplicas(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("replicas=%d", n), func(t *testing.T) {
			t.Parallel()
			const threads, followUps = 10, 3
			calls := newStatementCounter("logbook_acquire_lease", "pg_notify", "FROM sessions")
			// No poll: it is the safety net for lost signals, not part of a message's cost (on a
			// loaded machine, with five replicas polling, some poll often finds a new thread's
			// session before its lease is taken, and wakes a cell that finds it held). A longer
			// lease keeps late renewals from losing sessions mid-test, which only a poll finds.
			h := newHarness(t, &echoAgent{}, harnessOptions{replicas: n, statements: calls, poll: time.Hour, leaseTTL: 10 * time.Second})
			var tops []slackemu.Posted
			for i := range threads {
				tops = append(tops, h.post(slackemu.Post{Channel: general, User: ada, Text: fmt.Sprintf("<@%s> question %d", botUser, i)}))
			}
			for _, p := range tops {
				h.replies(general, p.TS, 1)
			}
			h.everyEnvelopeAcked()
			firstLeases := calls.count("logbook_acquire_lease")
			before := map[string]int{}
			for _, w := range []string{"logbook_acquire_lease", "pg_notify", "FROM sessions", "all"} {
				before[w] = calls.count(w)
			}
			for i := range followUps {
				for _, p := range tops {
					h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: p.TS, Text: fmt.Sprintf("<@%s> more %d", botUser, i)})
				}
				for _, p := range tops {
					h.replies(general, p.TS, i+2)
				}
			}
			h.everyEnvelopeAcked()
			msgs := float64(threads * followUps)
			per := func(w string) float64 { return float64(calls.count(w)-before[w]) / msgs }
			t.Logf("replicas=%d: first messages: %.2f lease calls each; follow-ups: %.2f lease calls, %.2f NOTIFY, %.2f session reads, %.1f statements each",
				n, float64(firstLeases)/threads, per("logbook_acquire_lease"), per("pg_notify"), per("FROM sessions"), per("all"))
			if got := per("logbook_acquire_lease"); got > 0.1 {
				t.Errorf("replicas=%d: %.2f lease calls per follow-up to a running session, want 0", n, got)
			}
			if firstLeases > threads*3/2 {
				t.Errorf("replicas=%d: %d lease calls for %d new threads, want about one each", n, firstLeases, threads)
			}
		})
	}
}
