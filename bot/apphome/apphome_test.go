package apphome_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/logbook/logbook/bot/apphome"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// publisher is a hand-written Publisher: it keeps what was published, per person.
type publisher struct {
	mu    sync.Mutex
	views map[string]string
}

func (p *publisher) PublishViewContext(_ context.Context, req slack.PublishViewContextRequest) (*slack.ViewResponse, error) {
	b, err := json.Marshal(req.View.Blocks)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.views[req.UserID] = string(b)
	return &slack.ViewResponse{}, nil
}

func opened(user, tab string) slackevents.EventsAPIEvent {
	return slackevents.EventsAPIEvent{InnerEvent: slackevents.EventsAPIInnerEvent{Type: "app_home_opened",
		Data: &slackevents.AppHomeOpenedEvent{Type: "app_home_opened", User: user, Tab: tab}}}
}

// The Home tab publishes a view for the person who opened it (someone who never talked to
// logbook gets the empty view, not an error); the Messages tab publishes nothing; a log that
// cannot be read publishes a note saying so; other events are not the surface's.
func TestHomeTab(t *testing.T) {
	t.Parallel()
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pub := &publisher{views: map[string]string{}}
	s := &apphome.Surface{Store: session.NewStore(pool, session.Options{}), Slack: pub, Log: zerolog.Nop()}
	ctx := context.Background()
	if !s.Event(ctx, opened("U0000001", "home")) || !s.Event(ctx, opened("U0000002", "messages")) {
		t.Fatal("the surface did not claim app_home_opened")
	}
	if s.Event(ctx, slackevents.EventsAPIEvent{InnerEvent: slackevents.EventsAPIInnerEvent{Type: "reaction_added", Data: &slackevents.ReactionAddedEvent{}}}) {
		t.Fatal("the surface claimed reaction_added")
	}
	if v := pub.views["U0000001"]; !strings.Contains(v, "You have not talked to logbook in the last 14 days.") || !strings.Contains(v, "0.00 USD") {
		t.Fatalf("ada's empty view: %s", v)
	}
	if _, ok := pub.views["U0000002"]; ok {
		t.Fatal("the Messages tab published a view")
	}
	pool.Close() // the log cannot be read now
	s.Event(ctx, opened("U0000001", "home"))
	if v := pub.views["U0000001"]; !strings.Contains(v, "I could not read your sessions right now") {
		t.Fatalf("ada's view with the log down: %s", v)
	}
}
