package directory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/directory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// oneChannel is a Slack API whose conversations.info answers with shared, counting calls.
type oneChannel struct {
	directory.API
	mu     sync.Mutex
	calls  int
	shared bool
}

func (o *oneChannel) GetConversationInfoContext(ctx context.Context, input *slack.GetConversationInfoInput) (*slack.Channel, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	ch := &slack.Channel{}
	ch.ID, ch.Name, ch.IsExtShared = input.ChannelID, "general", o.shared
	return ch, nil
}

// The gateway's channel_type hints go into the shared directory without making its
// conversations.info answer look younger: a channel shared with another organisation after
// the answer is found out once the TTL has passed, however many messages arrived meanwhile.
func TestChannelTypeHintsDoNotKeepAnOldAnswerFresh(t *testing.T) {
	t.Parallel()
	api := &oneChannel{}
	now := time.Unix(1_700_000_000, 0)
	d := directory.NewAt(api, time.Minute, func() time.Time { return now })
	ctx := context.Background()
	if shared, _ := d.ChannelExtShared(ctx, "C1"); shared {
		t.Fatal("shared before it is")
	}
	api.mu.Lock()
	api.shared = true
	api.mu.Unlock()
	for range 4 { // a message every 20 s, for 80 s
		now = now.Add(20 * time.Second)
		d.Remember("C1", true)
	}
	shared, err := d.ChannelExtShared(ctx, "C1")
	if err != nil || !shared || api.calls != 2 {
		t.Fatalf("80 s after the first answer: shared %v (%v) after %d conversations.info calls; want true after 2", shared, err, api.calls)
	}
}

// oneVisibility is a Slack API whose conversations.info says private, counting calls.
type oneVisibility struct {
	directory.API
	mu      sync.Mutex
	calls   int
	private bool
}

func (o *oneVisibility) GetConversationInfoContext(ctx context.Context, input *slack.GetConversationInfoInput) (*slack.Channel, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	ch := &slack.Channel{}
	ch.ID, ch.Name, ch.IsPrivate = input.ChannelID, "general", o.private
	return ch, nil
}

// A surface that shows logged content decides from a conversations.info answer at most
// directory.VisibilityMaxAge old, whatever the directory's TTL: a channel made private while this
// replica got no event (it went to another replica) is hidden within 2 s. The gateway's own
// look-ups keep the TTL.
func TestVisibilityIsDecidedFromAnswersAtMostTwoSecondsOld(t *testing.T) {
	t.Parallel()
	api := &oneVisibility{}
	now := time.Unix(1_700_000_000, 0)
	d := directory.NewAt(api, 5*time.Minute, func() time.Time { return now })
	dir := d
	ctx := context.Background()
	if p, err := dir.ChannelPrivate(ctx, "C1"); p || err != nil {
		t.Fatalf("private before it is: %v %v", p, err)
	}
	api.mu.Lock()
	api.private = true
	api.mu.Unlock()
	now = now.Add(directory.VisibilityMaxAge - time.Millisecond)
	if p, _ := dir.ChannelPrivate(ctx, "C1"); p {
		t.Fatal("an answer younger than directory.VisibilityMaxAge was asked again")
	}
	now = now.Add(time.Millisecond)
	if p, err := dir.ChannelPrivate(ctx, "C1"); !p || err != nil {
		t.Fatalf("%v after the change: private %v (%v) after %d calls; want hidden", directory.VisibilityMaxAge, p, err, api.calls)
	}
	if k, err := d.Channel(ctx, "C1"); err != nil || k.Public {
		t.Fatalf("the gateway's look-up after the refresh: %+v %v", k, err)
	}
	if directory.VisibilityMaxAge > 2*time.Second {
		t.Fatalf("directory.VisibilityMaxAge %v; the issue allows 2 s", directory.VisibilityMaxAge)
	}
}
