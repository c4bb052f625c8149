package slackemu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// views.publish through slack-go: a Home tab view is kept per person with a hash; a stale
// hash is hash_conflict, a view that is not a home view or has more than 100 blocks is
// invalid_arguments, an unknown person user_not_found.
func TestViewsPublish(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := context.Background()
	home := func(n int) slack.HomeTabViewRequest {
		var bs []slack.Block
		for range n {
			bs = append(bs, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "hi", false, false), nil, nil))
		}
		return slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: bs}}
	}
	first, err := api.PublishViewContext(ctx, slack.PublishViewContextRequest{UserID: "U0000001", View: home(2)})
	if err != nil {
		t.Fatal(err)
	}
	if blocks, n, ok := emu.HomeView("U0000001"); !ok || n != 1 || !strings.Contains(string(blocks), `"hi"`) {
		t.Fatalf("HomeView = %s %d %v", blocks, n, ok)
	}
	if _, _, ok := emu.HomeView("U0000002"); ok {
		t.Fatal("grace has a view she was never published")
	}
	hash := first.View.Hash
	if _, err := api.PublishViewContext(ctx, slack.PublishViewContextRequest{UserID: "U0000001", View: home(1), Hash: &hash}); err != nil {
		t.Fatalf("publish with the current hash: %v", err)
	}
	for _, c := range []struct {
		name string
		req  slack.PublishViewContextRequest
		want string
	}{
		{"stale hash", slack.PublishViewContextRequest{UserID: "U0000001", View: home(1), Hash: &hash}, "hash_conflict"},
		{"too many blocks", slack.PublishViewContextRequest{UserID: "U0000001", View: home(101)}, "invalid_arguments"},
		{"not a home view", slack.PublishViewContextRequest{UserID: "U0000001", View: slack.HomeTabViewRequest{Type: slack.VTModal}}, "invalid_arguments"},
		{"unknown person", slack.PublishViewContextRequest{UserID: "U0000404", View: home(1)}, "user_not_found"},
	} {
		_, err := api.PublishViewContext(ctx, c.req)
		var se slack.SlackErrorResponse
		if !errors.As(err, &se) || se.Err != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	if _, n, _ := emu.HomeView("U0000001"); n != 2 {
		t.Fatalf("refused publishes changed the view: %d sets", n)
	}
}

// A context_actions block is checked as Slack documents it: feedback_buttons need both
// buttons with a value; other element types are invalid_blocks.
func TestContextActionsBlocksAreChecked(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	good := slack.NewContextActionsBlock("b1", slack.NewFeedbackButtonsBlockElement("fb",
		slack.NewFeedbackButton(slack.NewTextBlockObject(slack.PlainTextType, "👍", false, false), "positive"),
		slack.NewFeedbackButton(slack.NewTextBlockObject(slack.PlainTextType, "👎", false, false), "negative")))
	if _, _, err := api.PostMessage("C0000001", slack.MsgOptionText("x", false), slack.MsgOptionBlocks(good)); err != nil {
		t.Fatalf("valid feedback buttons refused: %v", err)
	}
	bad := slack.NewContextActionsBlock("b2", slack.NewButtonBlockElement("a", "v", slack.NewTextBlockObject(slack.PlainTextType, "x", false, false)))
	_, _, err := api.PostMessage("C0000001", slack.MsgOptionText("x", false), slack.MsgOptionBlocks(bad))
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) || se.Err != "invalid_blocks" {
		t.Fatalf("a button in context_actions: %v, want invalid_blocks", err)
	}
}
