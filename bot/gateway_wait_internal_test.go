package bot

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/session"
)

// threadLog is a sessionLog whose one thread gets its session once opened is set; it counts
// the looks and keeps the appends.
type threadLog struct {
	sessionLog
	mu      sync.Mutex
	opened  bool
	looks   int
	appends [][]session.NewEvent
	sess    session.Session
}

func (l *threadLog) SessionByThread(ctx context.Context, key session.ThreadKey) (session.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.looks++
	if !l.opened {
		return session.Session{}, session.ErrNotFound
	}
	return l.sess, nil
}

func (l *threadLog) Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.appends = append(l.appends, evs)
	out := make([]session.Event, len(evs))
	for i, ev := range evs {
		out[i] = session.Event{SessionID: id, Seq: int64(i + 2), Type: ev.Type}
	}
	return out, nil
}

// waitClock is a Clock that never sleeps: After records the wait, moves time on and calls
// onWait with the number of waits so far before its channel is ready.
type waitClock struct {
	mu     sync.Mutex
	now    time.Time
	waits  []time.Duration
	onWait func(n int)
}

func (c *waitClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *waitClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	n, now := len(c.waits), c.now
	c.mu.Unlock()
	if c.onWait != nil {
		c.onWait(n)
	}
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

// noUsers is a Slack API whose users.info always fails (a name is then the user's id).
type noUsers struct{ slackAPI }

func (noUsers) GetUserInfoContext(ctx context.Context, user string, options ...slack.GetUserInfoOption) (*slack.User, error) {
	return nil, errors.New("users.info: not in this test")
}

func waitGateway(store sessionLog, clock Clock) *Gateway {
	dir := directory.NewAt(noUsers{}, time.Minute, clock.Now)
	return newGateway(zerolog.Nop(), store, nil, nil, Identity{TeamID: "T1", UserID: "UBOT"}, func(session.ID, bool) {},
		NewMetrics(prometheus.NewRegistry()), nil, nil, dir, GatewayConfig{Clock: clock})
}

// A reply handled while its thread's opening mention is still being stored: the gateway
// looks again on its clock, and stores the reply once the session is there.
func TestReplyWaitsOnTheClockForItsThreadsSession(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	thread := strconv.FormatInt(start.Unix(), 10) + ".000100"
	log := &threadLog{sess: session.Session{ID: session.ID{1}, Key: session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: thread}}}
	clock := &waitClock{now: start.Add(time.Second), onWait: func(n int) {
		if n == 2 { // the mention's append commits during the second wait
			log.mu.Lock()
			log.opened = true
			log.mu.Unlock()
		}
	}}
	g := waitGateway(log, clock)
	in := inbound{Team: "T1", Kind: "message", Channel: "C1", ChannelType: "channel", User: "U1", Text: "and also",
		TS: strconv.FormatInt(start.Unix(), 10) + ".000200", ThreadTS: thread}
	fresh, err := g.process(context.Background(), zerolog.Nop(), in)
	if err != nil || !fresh {
		t.Fatalf("process: fresh %v, %v; want the reply stored", fresh, err)
	}
	if len(log.appends) != 1 || log.appends[0][0].Type != session.TypeUserMessage {
		t.Fatalf("appends %v; want the reply's user_message", log.appends)
	}
	if want := sessionWaits[:2]; len(clock.waits) != 2 || clock.waits[0] != want[0] || clock.waits[1] != want[1] {
		t.Fatalf("waits %v; want %v (found on the third look)", clock.waits, want)
	}
	if log.looks != 3 {
		t.Fatalf("%d looks; want 3", log.looks)
	}
}

// A reply in a thread that never gets a session: the looks are bounded, and the reply is
// ignored (acked, nothing stored) after them.
func TestReplyToAThreadWithoutSessionStopsLooking(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	thread := strconv.FormatInt(start.Unix(), 10) + ".000100"
	log := &threadLog{}
	clock := &waitClock{now: start.Add(time.Second)}
	g := waitGateway(log, clock)
	in := inbound{Team: "T1", Kind: "message", Channel: "C1", ChannelType: "channel", User: "U1", Text: "hello?",
		TS: strconv.FormatInt(start.Unix(), 10) + ".000200", ThreadTS: thread}
	fresh, err := g.process(context.Background(), zerolog.Nop(), in)
	if err != nil || fresh {
		t.Fatalf("process: fresh %v, %v; want it ignored without error", fresh, err)
	}
	if len(log.appends) != 0 {
		t.Fatalf("appended %v to no session", log.appends)
	}
	if len(clock.waits) != len(sessionWaits) || log.looks != len(sessionWaits)+1 {
		t.Fatalf("waits %v, %d looks; want %v and %d", clock.waits, log.looks, sessionWaits, len(sessionWaits)+1)
	}
	// An old thread (not just posted) is not waited for at all.
	old := &waitClock{now: start.Add(time.Hour)}
	if _, err := waitGateway(&threadLog{}, old).process(context.Background(), zerolog.Nop(), in); err != nil {
		t.Fatal(err)
	}
	if len(old.waits) != 0 {
		t.Fatalf("waited %v for a thread an hour old", old.waits)
	}
}

// oneUser is a Slack API that knows one user's name and counts users.info calls.
type oneUser struct {
	slackAPI
	mu    sync.Mutex
	calls int
}

func (o *oneUser) GetUserInfoContext(ctx context.Context, user string, options ...slack.GetUserInfoOption) (*slack.User, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	return &slack.User{ID: user, Profile: slack.UserProfile{DisplayName: "Ada"}}, nil
}

// The gateway looks users up in the directory it is given: a name the service's directory
// learnt is not asked of Slack again, and the gateway's look-up is the service's to reuse.
func TestGatewayUsesTheDirectoryItIsGiven(t *testing.T) {
	t.Parallel()
	api := &oneUser{}
	dir := directory.NewAt(api, time.Hour, time.Now)
	log := &threadLog{opened: true, sess: session.Session{ID: session.ID{2}}}
	g := newGateway(zerolog.Nop(), log, nil, nil, Identity{TeamID: "T1", UserID: "UBOT"}, func(session.ID, bool) {},
		NewMetrics(prometheus.NewRegistry()), nil, nil, dir, GatewayConfig{})
	in := inbound{Team: "T1", Kind: "message", Channel: "C1", ChannelType: "channel", User: "U1", Text: "hi",
		TS: "1700000000.000200", ThreadTS: "1700000000.000100"}
	if _, err := g.process(context.Background(), zerolog.Nop(), in); err != nil {
		t.Fatal(err)
	}
	if name := dir.UserName(context.Background(), "U1"); name != "Ada" || api.calls != 1 {
		t.Fatalf("the directory answers %q after %d users.info calls; want Ada after 1 (the gateway's)", name, api.calls)
	}
	if m, ok := log.appends[0][0].Payload.(session.UserMessage); !ok || m.UserName != "Ada" {
		t.Fatalf("stored %#v; want the user's name from the directory", log.appends[0][0].Payload)
	}
}
