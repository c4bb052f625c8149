package slackemu

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// testTimeout bounds every wait in these tests; no test asserts on elapsed time.
const testTimeout = 15 * time.Second

// startEmu starts an emulator with fast pings (so slack-go's watchdog, set to 1s
// by connect, never fires) and registers its Close.
func startEmu(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.PingInterval == 0 {
		opts.PingInterval = 50 * time.Millisecond
	}
	return MustStart(t, opts)
}

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// client is the unmodified slack-go Web API + socketmode client, with every
// socketmode.Event it emits recorded so tests can wait for one.
type client struct {
	api *slack.Client
	smc *socketmode.Client

	mu      sync.Mutex
	events  []socketmode.Event
	changed chan struct{}
}

func newAPI(emu *Server, botToken, appToken string) *slack.Client {
	return slack.New(botToken, slack.OptionAPIURL(emu.APIURL()), slack.OptionAppLevelToken(appToken))
}

// connect runs a socketmode client against emu until the test ends.
func connect(t *testing.T, emu *Server) *client {
	t.Helper()
	c := &client{
		api:     newAPI(emu, emu.BotToken(), emu.AppToken()),
		changed: make(chan struct{}),
	}
	c.smc = socketmode.New(c.api, socketmode.OptionPingInterval(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.smc.RunContext(ctx) })
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-c.smc.Events:
				c.mu.Lock()
				c.events = append(c.events, ev)
				close(c.changed)
				c.changed = make(chan struct{})
				c.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return c
}

// waitEvent returns the first recorded event that match accepts, waiting for it.
func (c *client) waitEvent(t *testing.T, what string, match func(socketmode.Event) bool) socketmode.Event {
	t.Helper()
	ctx := waitCtx(t)
	for {
		c.mu.Lock()
		events, ch := c.events, c.changed
		c.mu.Unlock()
		for _, ev := range events {
			if match(ev) {
				return ev
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (got %d events)", what, ctx.Err(), len(events))
		}
	}
}

// waitCount waits until at least n recorded events of each client together match.
func waitCount(t *testing.T, what string, n int, match func(socketmode.Event) bool, clients ...*client) {
	t.Helper()
	ctx := waitCtx(t)
	for {
		got := 0
		var changed []chan struct{}
		for _, c := range clients {
			c.mu.Lock()
			for _, ev := range c.events {
				if match(ev) {
					got++
				}
			}
			changed = append(changed, c.changed)
			c.mu.Unlock()
		}
		if got >= n {
			if got > n {
				t.Fatalf("%s: %d events match, want %d", what, got, n)
			}
			return
		}
		cases := make([]reflect.SelectCase, 0, len(changed)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		for _, ch := range changed {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("waiting for %d %s: %v (have %d)", n, what, ctx.Err(), got)
		}
	}
}

// delivered is one events_api envelope as the slack-go client parsed it.
type delivered struct {
	req   *socketmode.Request
	outer *slackevents.EventsAPICallbackEvent
	inner slackevents.EventsAPIInnerEvent
}

// eventsAPI matches events_api envelopes whose inner event satisfies match.
func eventsAPI(match func(d delivered) bool) func(socketmode.Event) bool {
	return func(ev socketmode.Event) bool {
		d, ok := asDelivered(ev)
		return ok && match(d)
	}
}

func asDelivered(ev socketmode.Event) (delivered, bool) {
	if ev.Type != socketmode.EventTypeEventsAPI {
		return delivered{}, false
	}
	api, ok := ev.Data.(slackevents.EventsAPIEvent)
	if !ok {
		return delivered{}, false
	}
	outer, ok := api.Data.(*slackevents.EventsAPICallbackEvent)
	if !ok {
		return delivered{}, false
	}
	return delivered{req: ev.Request, outer: outer, inner: api.InnerEvent}, true
}

// ofEvent matches the delivery of eventID with the given retry attempt.
func ofEvent(eventID string, attempt int) func(d delivered) bool {
	return func(d delivered) bool { return d.outer.EventID == eventID && d.req.RetryAttempt == attempt }
}

func ack(t *testing.T, c *client, req *socketmode.Request) {
	t.Helper()
	if err := c.smc.AckCtx(waitCtx(t), req.EnvelopeID, nil); err != nil {
		t.Fatalf("ack %s: %v", req.EnvelopeID, err)
	}
}

func waitConnected(t *testing.T, emu *Server, opened int) {
	t.Helper()
	err := emu.Wait(waitCtx(t), func() bool {
		if emu.ConnectionsOpened() < opened {
			return false
		}
		for _, c := range emu.Connections() {
			if !c.Draining {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("wait for socket #%d: %v", opened, err)
	}
}
