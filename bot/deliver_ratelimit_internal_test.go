package bot

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/session"
)

// fakeClock is a Clock whose time moves only when the deliverer sleeps on it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.advance(d)
	return ch
}

func (c *fakeClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return c.now
}

// A rate limit that names no Retry-After (an HTTP 429 without the header, or ok:false
// "ratelimited") waits at least a second, growing, and is not taken for an ambiguous failure
// (which would search the thread and retry after 200 ms).
func TestDeliverRateLimitWithoutRetryAfterBacksOff(t *testing.T) {
	t.Parallel()
	for name, limit := range map[string]error{
		"http 429":          slack.StatusCodeError{Code: http.StatusTooManyRequests, Status: "429 Too Many Requests"},
		"ok:false":          slack.SlackErrorResponse{Err: "ratelimited"},
		"retry-after 300ms": &slack.RateLimitedError{RetryAfter: 300 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fs := &fakeSlack{postErrs: []error{limit, limit, limit}}
			clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			d := NewDeliverer(fs, zerolog.Nop(), NewMetrics(prometheus.NewRegistry()), DeliveryConfig{Clock: clock,
				Sleep: func(ctx context.Context, d time.Duration) error { clock.advance(d); return nil }})
			payload, _ := json.Marshal(session.AssistantMessage{Text: "hi", Turn: 1})
			reply := session.Event{Seq: 2, ID: uuid.Must(uuid.NewV7()), Type: session.TypeAssistantMessage, Payload: payload}
			sess := session.Session{Key: session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.1"}}
			posted, err := d.Deliver(context.Background(), sess, reply, false)
			if err != nil || len(posted) != 1 || posted[0] == "" {
				t.Fatalf("deliver: %v %v", posted, err)
			}
			if fs.posts != 4 {
				t.Fatalf("%d posts; want 3 rate-limited and 1 that landed", fs.posts)
			}
			if fs.replies != 0 {
				t.Fatalf("the thread was searched %d times: a rate limit was taken for an ambiguous failure", fs.replies)
			}
			if len(clock.slept) != 3 {
				t.Fatalf("waits %v; want 3", clock.slept)
			}
			for i, w := range clock.slept {
				if w < time.Second {
					t.Errorf("wait %d was %v; want at least a second", i, w)
				}
				if _, isHeader := limit.(*slack.RateLimitedError); !isHeader && i > 0 && w <= clock.slept[i-1] {
					t.Errorf("waits %v do not grow", clock.slept)
				}
			}
		})
	}
}
