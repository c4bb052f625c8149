package bot_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/recall"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/search"
)

// Privacy changes, at once: a public channel made private, one deleted, and one shared with
// another organisation. The directory's clock stands still, so its cached conversations.info
// answers never age: only following the events changes what /logbook search and the agent's
// search tool show, and they change as soon as the gateway has acked each event.
func TestPrivacyChangesHideChannelsAtOnce(t *testing.T) {
	t.Parallel()
	frozen := time.Now()
	var dir atomic.Pointer[directory.Directory]
	var searcher atomic.Pointer[search.Searcher]
	const made, gone, shared = "C0000011", "C0000012", "C0000013"
	o := harnessOptions{
		emu: slackemu.Options{Channels: []slackemu.Channel{
			{ID: made, Name: "made-private", Members: []string{ada, botUser}},
			{ID: gone, Name: "deleted", Members: []string{ada, botUser}},
			{ID: shared, Name: "to-share", Members: []string{ada, botUser}},
		}},
		directory: func(api *slack.Client) *directory.Directory {
			d := directory.NewAt(api, 5*time.Minute, func() time.Time { return frozen })
			dir.Store(d)
			return d
		},
		slashWith: func(d *directory.Directory) bot.SlashHandler {
			return func(ctx context.Context, cmd slack.SlashCommand) string {
				return slashTable(searcher.Load(), d, "T0000001", nil, nil).Answer(ctx, cmd)
			}
		},
	}
	h := newHarness(t, &echoAgent{}, o)
	ctx := context.Background()
	sessions := map[string]session.ID{}
	for _, ch := range []string{made, gone, shared} {
		top := h.post(slackemu.Post{Channel: ch, User: ada, Text: "<@" + botUser + "> the quasar rollout in " + ch})
		s := h.session(ch, top.TS)
		h.answered(s.ID)
		sessions[ch] = s.ID
	}
	pool, err := session.Connect(ctx, h.dbURL, session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := search.NewIndexer(h.store, pool, zerolog.Nop(), search.IndexerOptions{}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	searcher.Store(search.NewSearcher(pool, search.Options{}))
	slash := func(channel, text string) string {
		t.Helper()
		before := len(h.emu.Ephemerals())
		if _, err := h.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: text, User: ada, Channel: channel}); err != nil {
			t.Fatal(err)
		}
		if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) > before }); err != nil {
			t.Fatalf("no answer to %q: %v", text, err)
		}
		return h.emu.Ephemerals()[before].Text
	}
	tool := func(channel string) string {
		t.Helper()
		got, err := recall.New(searcher.Load(), dir.Load()).For(channel).Search(ctx, "quasar", 10)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := slash(shared, "search quasar")
	for _, ch := range []string{made, gone, shared} {
		if !strings.Contains(before, sessions[ch].String()) || !strings.Contains(tool(shared), sessions[ch].String()) {
			t.Fatalf("before any change, search lacks %s: %s", ch, before)
		}
	}

	acked := func(p slackemu.Posted, err error) {
		t.Helper()
		if err != nil || len(p.EventIDs) != 1 {
			t.Fatalf("driver: %+v %v", p, err)
		}
		if _, err := h.emu.WaitForAck(h.waitCtx(), p.EventIDs[0]); err != nil {
			t.Fatal(err)
		}
	}
	acked(h.emu.ConvertToPrivate(made, ada))
	acked(h.emu.DeleteChannel(gone))
	acked(h.emu.ShareChannel(shared, "T0000002"))

	after, fromTool := slash(shared, "search quasar"), tool(shared)
	for _, ch := range []string{made, gone} {
		if strings.Contains(after, sessions[ch].String()) || strings.Contains(fromTool, sessions[ch].String()) {
			t.Fatalf("after the event, %s is still shown:\n/logbook search: %s\nsearch tool: %s", ch, after, fromTool)
		}
	}
	if !strings.Contains(after, "Only this channel's threads") || !strings.Contains(after, sessions[shared].String()) ||
		!strings.Contains(fromTool, "shared with another organisation") {
		t.Fatalf("search from a channel just shared with another organisation is not scoped to it:\n%s\n%s", after, fromTool)
	}
}
