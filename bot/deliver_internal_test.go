package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/session"
)

// fakeSlack is a scripted slackAPI: postErrs[i] is the answer to the i-th chat.postMessage
// (nil: posted); messages keep their metadata for conversations.replies.
type fakeSlack struct {
	slackAPI
	mu       sync.Mutex
	postErrs []error
	posts    int
	msgs     []slack.Message
	replies  int
}

func (f *fakeSlack) PostMessageContext(ctx context.Context, ch string, opts ...slack.MsgOption) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.posts
	f.posts++
	if n < len(f.postErrs) && f.postErrs[n] != nil {
		return "", "", f.postErrs[n]
	}
	_, v, err := slack.UnsafeApplyMsgOptions("x", ch, "http://x/", opts...)
	if err != nil {
		return "", "", err
	}
	var md slack.SlackMetadata
	_ = json.Unmarshal([]byte(v.Get("metadata")), &md)
	ts := fmt.Sprintf("1700000000.%06d", len(f.msgs)+1)
	m := slack.Message{}
	m.Timestamp, m.Text, m.Metadata = ts, v.Get("text"), md
	f.msgs = append(f.msgs, m)
	return ch, ts, nil
}

func (f *fakeSlack) GetConversationRepliesContext(ctx context.Context, p *slack.GetConversationRepliesParameters) ([]slack.Message, bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies++
	return append([]slack.Message(nil), f.msgs...), false, "", nil
}

// newTestDeliverer is the one place these tests build a Deliverer.
func newTestDeliverer(api slackAPI, cfg DeliveryConfig) *Deliverer {
	return NewDeliverer(api, zerolog.Nop(), NewMetrics(prometheus.NewRegistry()), cfg)
}

// A part re-split after msg_too_long shifts the part indices in the metadata; when a later
// part then fails retryably, the turn is resumed with fresh=false and lookup() matches the
// re-split pieces by index against the original split: the last original part counts as
// posted and is never posted.
func TestDeliveryReviewResplitThenRetryableFailureKeepsEveryPart(t *testing.T) {
	t.Parallel()
	para := func(w string) string { return strings.TrimSpace(strings.Repeat(w+" ", 80)) } // ~480 chars
	text := para("alpha") + "\n\n" + para("bravo") + "\n\n" + para("charlie") + "\n\n" + para("delta")
	payload, _ := json.Marshal(session.AssistantMessage{Text: text, Turn: 1})
	reply := session.Event{Seq: 2, ID: uuid.Must(uuid.NewV7()), Type: session.TypeAssistantMessage, Payload: payload}
	sess := session.Session{Key: session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.1"}}

	fs := &fakeSlack{postErrs: []error{
		slack.SlackErrorResponse{Err: "msg_too_long"}, // part 0 of 2: re-split into 2 pieces
		nil, nil, // both pieces posted
		slack.SlackErrorResponse{Err: "internal_error"}, // original part 1 (now index 2): 3 retryable failures
		slack.SlackErrorResponse{Err: "internal_error"},
		slack.SlackErrorResponse{Err: "internal_error"},
	}}
	d := newTestDeliverer(fs, DeliveryConfig{PartLimit: 1000,
		Sleep: func(ctx context.Context, _ time.Duration) error { return nil }})
	_, err := d.Deliver(context.Background(), sess, reply, false, "")
	if err == nil || errors.Is(err, ErrDeliveryFailed) {
		t.Fatalf("first delivery: %v; want a retryable error", err)
	}
	// The cell resumes the open turn: fresh=false.
	if _, err := d.Deliver(context.Background(), sess, reply, true, ""); err != nil {
		t.Fatalf("resumed delivery: %v", err)
	}
	var all strings.Builder
	for _, m := range fs.msgs {
		all.WriteString(m.Text)
	}
	for _, w := range []string{"alpha", "bravo", "charlie", "delta"} {
		if !strings.Contains(all.String(), w) {
			t.Errorf("the words %q of the reply were never posted; posted %d messages", w, len(fs.msgs))
		}
	}
}

// rlSlack answers the first conversations.replies with a rate limit.
type rlSlack struct {
	fakeSlack
	limited bool
}

func (f *rlSlack) GetConversationRepliesContext(ctx context.Context, p *slack.GetConversationRepliesParameters) ([]slack.Message, bool, string, error) {
	f.mu.Lock()
	first := !f.limited
	f.limited = true
	f.mu.Unlock()
	if first {
		return nil, false, "", &slack.RateLimitedError{RetryAfter: 3 * time.Second}
	}
	return f.fakeSlack.GetConversationRepliesContext(ctx, p)
}

// A rate limit on conversations.replies (a resumed delivery's thread search in thread A)
// holds every chat.postMessage of the workspace: a fresh reply in thread B, which calls
// nothing but chat.postMessage, waits out conversations.replies' Retry-After.
func TestDeliveryReviewRepliesRateLimitDoesNotHoldPosts(t *testing.T) {
	t.Parallel()
	fs := &rlSlack{}
	// The first wait is thread A's, for conversations.replies' Retry-After: it says so and
	// holds until the test is done with thread B. Any later wait is real.
	held, release := make(chan struct{}), make(chan struct{})
	var waits atomic.Int32
	d := newTestDeliverer(fs, DeliveryConfig{Sleep: func(ctx context.Context, dur time.Duration) error {
		if waits.Add(1) == 1 {
			close(held)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return wait.Sleep(ctx, dur)
	}})
	payload, _ := json.Marshal(session.AssistantMessage{Text: "hi", Turn: 1})
	mk := func(thread string) (session.Session, session.Event) {
		return session.Session{Key: session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: thread}},
			session.Event{Seq: 2, ID: uuid.Must(uuid.NewV7()), Type: session.TypeAssistantMessage, Payload: payload}
	}
	sa, ra := mk("1.1")
	doneA := make(chan error, 1)
	go func() { _, err := d.Deliver(context.Background(), sa, ra, true, ""); doneA <- err }() // resumed: searches thread A
	defer func() {
		close(release)
		if err := <-doneA; err != nil {
			t.Errorf("thread A, after its wait: %v", err)
		}
	}()
	<-held // thread A saw the rate limit and waits it out
	sb, rb := mk("2.2")
	start := time.Now()
	if _, err := d.Deliver(context.Background(), sb, rb, false, ""); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a fresh reply in another thread took %s: held by conversations.replies' Retry-After", took.Round(100*time.Millisecond))
	}
}

// Slack keeps answering msg_too_long for a part (its measure differs from ours by more than
// 2x, e.g. entity expansion): after the one re-split Deliver returns a plain error, which the
// cell treats as retryable (cell.go:297) — the turn stays open and is resumed forever.
func TestDeliveryReviewPersistentMsgTooLongIsFinal(t *testing.T) {
	t.Parallel()
	errs := make([]error, 20)
	for i := range errs {
		errs[i] = slack.SlackErrorResponse{Err: "msg_too_long"}
	}
	fs := &fakeSlack{postErrs: errs}
	d := newTestDeliverer(fs, DeliveryConfig{
		Sleep: func(ctx context.Context, _ time.Duration) error { return nil }})
	payload, _ := json.Marshal(session.AssistantMessage{Text: "hi", Turn: 1})
	reply := session.Event{Seq: 2, ID: uuid.Must(uuid.NewV7()), Type: session.TypeAssistantMessage, Payload: payload}
	sess := session.Session{Key: session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.1"}}
	for i := range 3 {
		_, err := d.Deliver(context.Background(), sess, reply, i != 0, "")
		if !errors.Is(err, ErrDeliveryFailed) {
			t.Fatalf("attempt %d: %v — not ErrDeliveryFailed, so the turn stays open and is retried forever", i+1, err)
		}
	}
}

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
			posted, err := d.Deliver(context.Background(), sess, reply, false, "")
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
