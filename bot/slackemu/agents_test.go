package slackemu

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

// agents.conversations.* through the unmodified slack-go client: a code channel made once per
// session_id, from a message of a channel it inherits privacy from; its context bar (at most
// five items kept), commands and status; and the errors Slack documents.
func TestCodeChannels(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{RateLimits: map[string]RateLimit{
		"agents.conversations.setProperties": {Burst: 3, Every: time.Hour, PerChannel: true},
	}})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := context.Background()
	origin, err := emu.Post(Post{Channel: "C0000001", User: "U0000001", Text: "Help me fix the parser\nplease"})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, opts ...slack.CreateAgentConversationOption) (string, error) {
		r, err := api.CreateAgentConversationContext(ctx, name, opts...)
		if err != nil {
			return "", err
		}
		return r.ChannelID, nil
	}
	from := []slack.CreateAgentConversationOption{slack.CreateAgentConversationOptionSessionID("ses_1"),
		slack.CreateAgentConversationOptionOriginChannelID("C0000001"), slack.CreateAgentConversationOptionOriginMessageTimestamp(origin.TS)}
	id, err := create("", from...)
	if err != nil {
		t.Fatal(err)
	}
	again, err := create("", from...)
	if err != nil || again != id {
		t.Fatalf("the same session_id again: %q, %v; want %q", again, err, id)
	}
	other, err := create("Other work", slack.CreateAgentConversationOptionSessionID("ses_2"))
	if err != nil || other == id {
		t.Fatalf("another session_id: %q, %v", other, err)
	}
	ccs := emu.CodeChannels()
	if len(ccs) != 2 || ccs[0].ID != id || ccs[0].Name != "Help me fix the parser" || ccs[0].Private || ccs[0].OriginTS != origin.TS {
		t.Fatalf("code channels %+v", ccs)
	}
	info, err := api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: id})
	if err != nil || info.IsPrivate || info.Name != "help-me-fix-the-parser" {
		t.Fatalf("conversations.info of the code channel: %+v, %v", info, err)
	}
	// Its people talk there: a message in it is a channel message like any other.
	if _, err := emu.Post(Post{Channel: id, User: "U0000001", Text: "what next?"}); err != nil {
		t.Fatalf("post in the code channel: %v", err)
	}

	items := []slack.AgentContextBarItem{{Key: "repository", Label: "acme/api", URL: "https://github.com/acme/api"},
		{Key: "branch", Label: "fix"}, {Key: "pull_request", Label: "#1"}, {Key: "ci", Label: "CI pending"}, {Key: "spend", Label: "1.2k tokens"},
		{Key: "sixth", Label: "dropped"}}
	r, err := api.SetAgentConversationPropertiesContext(ctx, id, slack.SetAgentConversationPropertiesOptionCodeChannel(
		slack.AgentCodeChannelProperties{ContextBarItems: items}))
	if err != nil || r.Warning != "context_bar_items_truncated" {
		t.Fatalf("six items: %+v, %v; want five kept, with a warning", r, err)
	}
	if cc, _ := emu.CodeChannel(id); len(cc.ContextBar) != 5 || cc.ContextBar[4].Key != "spend" || cc.ContextBarSets != 1 {
		t.Fatalf("context bar %+v", cc.ContextBar)
	}
	if _, err := api.SetAgentConversationCommandsContext(ctx, id, []slack.AgentCommand{{Name: "config", Description: "settings"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{Status: "processing", ChannelID: id}); err != nil {
		t.Fatal(err)
	}
	if cc, _ := emu.CodeChannel(id); len(cc.Commands) != 1 || cc.Commands[0].Name != "config" || cc.Status != "processing" {
		t.Fatalf("code channel %+v", cc)
	}

	code := func(err error) string {
		var se slack.SlackErrorResponse
		if errors.As(err, &se) {
			return se.Err
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"no name and no origin", func() error { _, err := create(""); return err }(), "invalid_arguments"},
		{"origin channel without its ts", func() error {
			_, err := create("x", slack.CreateAgentConversationOptionOriginChannelID("C0000001"))
			return err
		}(), "invalid_arguments"},
		{"origin message missing", func() error {
			_, err := create("x", slack.CreateAgentConversationOptionOriginChannelID("C0000001"), slack.CreateAgentConversationOptionOriginMessageTimestamp("1.000001"))
			return err
		}(), "message_not_found"},
		{"an empty context bar item", func() error {
			_, err := api.SetAgentConversationPropertiesContext(ctx, id, slack.SetAgentConversationPropertiesOptionCodeChannel(
				slack.AgentCodeChannelProperties{ContextBarItems: []slack.AgentContextBarItem{{Key: "k"}}}))
			return err
		}(), "invalid_arguments"},
		{"no property", func() error { _, err := api.SetAgentConversationPropertiesContext(ctx, id); return err }(), "invalid_arguments"},
		{"properties of a channel that is no code channel", func() error {
			_, err := api.SetAgentConversationPropertiesContext(ctx, "C0000001", slack.SetAgentConversationPropertiesOptionCodeChannel(
				slack.AgentCodeChannelProperties{ContextBarItems: []slack.AgentContextBarItem{}}))
			return err
		}(), "not_allowed"},
		{"a command with its slash", func() error {
			_, err := api.SetAgentConversationCommandsContext(ctx, id, []slack.AgentCommand{{Name: "/config"}})
			return err
		}(), "invalid_arguments"},
	} {
		if got := code(c.err); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// The rate limit (three an hour per channel here), in the other code channel.
	for i := range 4 {
		_, err := api.SetAgentConversationPropertiesContext(ctx, other, slack.SetAgentConversationPropertiesOptionCodeChannel(
			slack.AgentCodeChannelProperties{ContextBarItems: items[:1]}))
		var rl *slack.RateLimitedError
		if limited := errors.As(err, &rl); (i < 3 && err != nil) || (i == 3 && !limited) {
			t.Fatalf("set %d of a limit of three: %v", i+1, err)
		}
	}

	// An app Slack does not let make code channels.
	emu.SetCodeChannelsAllowed(false)
	if _, err := create("", slack.CreateAgentConversationOptionSessionID("ses_3"), slack.CreateAgentConversationOptionOriginChannelID("C0000001"),
		slack.CreateAgentConversationOptionOriginMessageTimestamp(origin.TS)); code(err) != "not_allowed" {
		t.Fatalf("refused app: %v", err)
	}
	if err := api.ArchiveAgentConversationContext(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := api.SetAgentConversationCommandsContext(ctx, other, nil); code(err) != "is_archived" {
		t.Fatalf("commands of an archived code channel: %v", err)
	}
}

// A code channel, its context bar, commands and status are kept in Options.StateFile: after a
// restart the same session_id answers the same channel, and the channel takes its calls.
func TestStateFileKeepsCodeChannels(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "workspace.json")
	ctx := context.Background()
	a, err := Start(Options{StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	api := newAPI(a, a.BotToken(), a.AppToken())
	r, err := api.CreateAgentConversationContext(ctx, "Fix the parser", slack.CreateAgentConversationOptionSessionID("ses_1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.SetAgentConversationPropertiesContext(ctx, r.ChannelID, slack.SetAgentConversationPropertiesOptionCodeChannel(
		slack.AgentCodeChannelProperties{ContextBarItems: []slack.AgentContextBarItem{{Key: "ci", Label: "CI passing"}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{Status: "active", ChannelID: r.ChannelID}); err != nil {
		t.Fatal(err)
	}
	a.Close()

	b, err := Start(Options{StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cc, ok := b.CodeChannel(r.ChannelID)
	if !ok || cc.Status != "active" || len(cc.ContextBar) != 1 || cc.ContextBar[0].Label != "CI passing" || cc.SessionID != "ses_1" {
		t.Fatalf("after the restart: %+v, %v", cc, ok)
	}
	api = newAPI(b, b.BotToken(), b.AppToken())
	again, err := api.CreateAgentConversationContext(ctx, "Fix the parser", slack.CreateAgentConversationOptionSessionID("ses_1"))
	if err != nil || again.ChannelID != r.ChannelID {
		t.Fatalf("the same session_id after the restart: %+v, %v", again, err)
	}
	if _, err := api.SetAgentConversationCommandsContext(ctx, r.ChannelID, []slack.AgentCommand{{Name: "config"}}); err != nil {
		t.Fatalf("commands after the restart: %v", err)
	}
}
