package bot

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/directory"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// me is logbook in the workspace of /work/shared/cases/cases.md.
var me = identity{Team: "T0000001", UserID: "UB000001", BotID: "B0000001", AppID: "A0000001"}

// classifyJSON parses an inner event as the gateway receives it (inside an event_callback)
// and classifies it.
func classifyJSON(t *testing.T, inner string) decision {
	t.Helper()
	in := parseInbound(t, inner, 0)
	return Classify(in, me)
}

func parseInbound(t *testing.T, inner string, retry int) inbound {
	t.Helper()
	body := `{"type":"event_callback","team_id":"T0000001","api_app_id":"A0000001","event_id":"Ev01","event_time":1700000000,"event":` + inner + `}`
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		t.Fatalf("parse %s: %v", inner, err)
	}
	in, ok := inboundFromEvent(ev, retry)
	if !ok {
		t.Fatalf("not a message-like event: %s", inner)
	}
	return in
}

// Classify, fed the inner events of the cases (and their variants) as Slack sends them.
func TestClassifyEvents(t *testing.T) {
	t.Parallel()
	ignore := func(reason string) decision { return decision{Reason: reason} }
	msg := func(thread, ts string, mentioned bool) decision {
		return decision{Action: actMessage, Mentioned: mentioned, Start: mentioned, ThreadTS: thread, TS: ts}
	}
	const richMention = `[{"type":"rich_text","block_id":"b1","elements":[{"type":"rich_text_section","elements":[{"type":"user","user_id":"UB000001"},{"type":"text","text":" status?"}]}]}]`
	const richOther = `[{"type":"rich_text","block_id":"b1","elements":[{"type":"rich_text_section","elements":[{"type":"user","user_id":"U0000002"},{"type":"text","text":" status?"}]}]}]`
	cases := []struct {
		name  string
		inner string
		want  decision
	}{
		// Messages that start or continue a session.
		{"app_mention starts a session", `{"type":"app_mention","user":"U0000001","text":"<@UB000001> summarize","ts":"1700000000.000100","channel":"C0000001","event_ts":"1700000000.000100"}`,
			msg("1700000000.000100", "1700000000.000100", true)},
		{"message copy of a mention", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"<@UB000001> hi","ts":"1700000000.000400","event_ts":"1700000000.000400"}`,
			msg("1700000000.000400", "1700000000.000400", true)},
		{"mention with a label", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"<@UB000001|logbook> hi","ts":"1700000000.000401"}`,
			msg("1700000000.000401", "1700000000.000401", true)},
		{"mention only in blocks", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"status?","blocks":` + richMention + `,"ts":"1700000000.000402"}`,
			msg("1700000000.000402", "1700000000.000402", true)},
		{"blocks mention someone else", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"status?","blocks":` + richOther + `,"ts":"1700000000.000403"}`,
			msg("1700000000.000403", "1700000000.000403", false)},
		{"top-level message without mention continues nothing", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"lunch? <@U0000002>","ts":"1700000000.000404"}`,
			msg("1700000000.000404", "1700000000.000404", false)},
		{"C06a top-level mention is its own thread", `{"type":"app_mention","user":"U0000001","text":"<@UB000001> revenue?","ts":"1700000000.001200","channel":"C0000001"}`,
			msg("1700000000.001200", "1700000000.001200", true)},
		{"C06b mention in a thread maps to the parent", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000002","text":"<@UB000001> and for Q3?","ts":"1700000000.001300","thread_ts":"1700000000.001200","event_ts":"1700000000.001300"}`,
			msg("1700000000.001200", "1700000000.001300", true)},
		{"thread reply without mention continues", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"and how?","ts":"1700000000.001301","thread_ts":"1700000000.001200"}`,
			msg("1700000000.001200", "1700000000.001301", false)},
		{"C09a content only in blocks", `{"type":"message","user":"U0000001","text":"","blocks":[{"type":"rich_text","block_id":"b1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"rollback failed on "},{"type":"link","url":"https://ci.example/1"}]}]}],"ts":"1700000000.001700","thread_ts":"1700000000.001200","channel":"C0000001","channel_type":"channel"}`,
			msg("1700000000.001200", "1700000000.001700", false)},
		{"C09b bare mention", `{"type":"app_mention","user":"U0000001","text":"<@UB000001>","ts":"1700000000.001800","channel":"C0000001"}`,
			msg("1700000000.001800", "1700000000.001800", true)},
		{"thread_broadcast", `{"type":"message","subtype":"thread_broadcast","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"fyi","ts":"1700000000.001302","thread_ts":"1700000000.001200"}`,
			msg("1700000000.001200", "1700000000.001302", false)},
		{"file_share", `{"type":"message","subtype":"file_share","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"<@UB000001> see log","files":[{"id":"F1","name":"log.txt"}],"ts":"1700000000.001303","thread_ts":"1700000000.001200"}`,
			msg("1700000000.001200", "1700000000.001303", true)},
		// Classify does not decide privacy (the gateway asks Gateway.public): a DM, a private
		// channel and a group DM classify like any message.
		{"DM (privacy is the gateway's)", `{"type":"message","channel":"D0000001","channel_type":"im","user":"U0000001","text":"my salary is 123","ts":"1700000002.000100","event_ts":"1700000002.000100"}`,
			msg("1700000002.000100", "1700000002.000100", false)},
		{"private channel (privacy is the gateway's)", `{"type":"message","channel":"C0000002","channel_type":"group","user":"U0000001","text":"<@UB000001> salary","ts":"1700000002.000200"}`,
			msg("1700000002.000200", "1700000002.000200", true)},
		{"group DM (privacy is the gateway's)", `{"type":"message","channel":"G0000001","channel_type":"mpim","user":"U0000001","text":"<@UB000001> hi","ts":"1700000002.000300"}`,
			msg("1700000002.000300", "1700000002.000300", true)},

		// Bots, ourselves first.
		{"own post: user, bot_id and app_id", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"UB000001","bot_id":"B0000001","app_id":"A0000001","text":"See <https://tracker.example/t/45>","ts":"1700000000.000800","thread_ts":"1700000000.000700","event_ts":"1700000000.000800"}`,
			ignore("own_message")},
		{"own post by user id alone", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"UB000001","text":"<@UB000001> echo","ts":"1700000000.000801"}`,
			ignore("own_message")},
		{"own post by bot_id alone", `{"type":"message","channel":"C0000001","channel_type":"channel","bot_id":"B0000001","text":"<@UB000001> echo","ts":"1700000000.000802"}`,
			ignore("bot_message")},
		{"own app_mention", `{"type":"app_mention","user":"UB000001","text":"<@UB000001>","ts":"1700000000.000803","channel":"C0000001"}`,
			ignore("own_message")},
		{"C05a legacy bot_message", `{"type":"message","subtype":"bot_message","bot_id":"B0000009","username":"deploybot","text":"<@UB000001> status?","ts":"1700000001.000100","channel":"C0000001","channel_type":"channel"}`,
			ignore("bot_message")},
		{"C05a bot_message without bot_id", `{"type":"message","subtype":"bot_message","username":"hook","text":"<@UB000001> status?","ts":"1700000001.000101","channel":"C0000001","channel_type":"channel"}`,
			ignore("bot_message")},
		{"C05b modern app: user and bot_id, no subtype", `{"type":"message","user":"U0000009","bot_id":"B0000009","text":"<@UB000001> status?","ts":"1700000001.000102","channel":"C0000001","channel_type":"channel"}`,
			ignore("bot_message")},
		{"another bot's app_mention", `{"type":"app_mention","user":"U0000009","bot_id":"B0000009","text":"<@UB000001> status?","ts":"1700000001.000103","channel":"C0000001"}`,
			ignore("bot_message")},

		// Edits.
		{"edit in a thread", `{"type":"message","subtype":"message_changed","hidden":true,"channel":"C0000001","channel_type":"channel","ts":"1700000100.000000","event_ts":"1700000100.000000","message":{"type":"message","user":"U0000001","text":"deploy to prod","ts":"1700000000.001500","thread_ts":"1700000000.001200","edited":{"user":"U0000001","ts":"1700000100.000000"}},"previous_message":{"type":"message","user":"U0000001","text":"deploy to staging","ts":"1700000000.001500"}}`,
			decision{Action: actEdit, ThreadTS: "1700000000.001200", TS: "1700000000.001500"}},
		{"edit of a top-level message", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000001","message":{"type":"message","user":"U0000001","text":"<@UB000001> new","ts":"1700000000.001200"},"previous_message":{"type":"message","user":"U0000001","text":"<@UB000001> old","ts":"1700000000.001200"}}`,
			decision{Action: actEdit, ThreadTS: "1700000000.001200", TS: "1700000000.001200"}},
		{"edit without previous_message", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000002","message":{"type":"message","user":"U0000001","text":"new","ts":"1700000000.001500","thread_ts":"1700000000.001200"}}`,
			decision{Action: actEdit, ThreadTS: "1700000000.001200", TS: "1700000000.001500"}},
		{"edit with the same text (unfurl)", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000003","message":{"type":"message","user":"U0000001","text":"see https://x","ts":"1700000000.001500","thread_ts":"1700000000.001200"},"previous_message":{"type":"message","user":"U0000001","text":"see https://x","ts":"1700000000.001500"}}`,
			ignore("edit_without_text_change")},
		{"edit by a bot", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000004","message":{"type":"message","user":"U0000009","bot_id":"B0000009","text":"new","ts":"1700000000.001500"},"previous_message":{"type":"message","user":"U0000009","text":"old","ts":"1700000000.001500"}}`,
			ignore("bot_or_empty_edit")},
		{"edit of our own reply", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000005","message":{"type":"message","user":"UB000001","text":"new","ts":"1700000000.001500"},"previous_message":{"type":"message","user":"UB000001","text":"old","ts":"1700000000.001500"}}`,
			ignore("bot_or_empty_edit")},
		{"edit of a legacy bot_message", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000006","message":{"type":"message","subtype":"bot_message","user":"U0000009","text":"new","ts":"1700000000.001500"}}`,
			ignore("bot_or_empty_edit")},
		{"edit without user (it once crashed the gateway)", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000007","message":{"type":"message","text":"new","ts":"1700000000.001500"}}`,
			ignore("bot_or_empty_edit")},
		{"edit without message", `{"type":"message","subtype":"message_changed","channel":"C0000001","channel_type":"channel","ts":"1700000100.000008"}`,
			ignore("bot_or_empty_edit")},

		// Deletions.
		{"deletion in a thread", `{"type":"message","subtype":"message_deleted","hidden":true,"channel":"C0000001","channel_type":"channel","ts":"1700000200.000000","deleted_ts":"1700000000.001500","event_ts":"1700000200.000000","previous_message":{"type":"message","user":"U0000001","text":"token is sk-XXXX","ts":"1700000000.001500","thread_ts":"1700000000.001200"}}`,
			decision{Action: actDelete, ThreadTS: "1700000000.001200", TS: "1700000000.001500"}},
		{"deletion of a top-level message", `{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1700000200.000001","deleted_ts":"1700000000.001200","previous_message":{"type":"message","user":"U0000001","text":"x","ts":"1700000000.001200"}}`,
			decision{Action: actDelete, ThreadTS: "1700000000.001200", TS: "1700000000.001200"}},
		{"deletion without previous_message: thread unknown, the ts stands in", `{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1700000200.000002","deleted_ts":"1700000000.001500"}`,
			decision{Action: actDelete, ThreadTS: "1700000000.001500", TS: "1700000000.001500"}},
		{"deletion of a bot's message", `{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1700000200.000003","deleted_ts":"1700000000.001500","previous_message":{"type":"message","user":"U0000009","bot_id":"B0000009","text":"x","ts":"1700000000.001500"}}`,
			ignore("bot_message_deleted")},
		{"deletion of our own reply", `{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1700000200.000004","deleted_ts":"1700000000.001500","previous_message":{"type":"message","user":"UB000001","text":"x","ts":"1700000000.001500","thread_ts":"1700000000.001200"}}`,
			ignore("bot_message_deleted")},
		{"deletion without deleted_ts", `{"type":"message","subtype":"message_deleted","channel":"C0000001","channel_type":"channel","ts":"1700000200.000005","previous_message":{"type":"message","user":"U0000001","text":"x","ts":"1700000000.001500"}}`,
			ignore("delete_without_ts")},

		// Other subtypes and malformed events.
		{"channel_join", `{"type":"message","subtype":"channel_join","channel":"C0000001","channel_type":"channel","user":"U0000002","text":"<@U0000002> has joined the channel","ts":"1700000300.000000"}`,
			ignore("subtype_channel_join")},
		{"channel_topic", `{"type":"message","subtype":"channel_topic","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"set the topic","ts":"1700000300.000001"}`,
			ignore("subtype_channel_topic")},
		{"no user", `{"type":"message","channel":"C0000001","channel_type":"channel","text":"<@UB000001> who am I","ts":"1700000300.000002"}`,
			ignore("no_user")},
		{"NUL in the user id", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U000\u00001","text":"<@UB000001> hi","ts":"1700000000.000900"}`,
			ignore("malformed_ids")},
		{"space in the ts", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"<@UB000001> hi","ts":"1700000000 000901"}`,
			ignore("malformed_ids")},
		{"malformed thread_ts", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"hi","ts":"1700000000.000902","thread_ts":"17\n00"}`,
			ignore("malformed_ids")},
		{"channel id too long", `{"type":"message","channel":"C` + strings.Repeat("0", 64) + `","channel_type":"channel","user":"U0000001","text":"<@UB000001> hi","ts":"1700000000.000903"}`,
			ignore("malformed_ids")},
		// An empty ts or channel is caught as malformed: the later no_ts_or_channel branch of
		// Classify cannot be reached.
		{"no ts", `{"type":"message","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"<@UB000001> hi"}`,
			ignore("malformed_ids")},
		{"no channel", `{"type":"message","channel_type":"channel","user":"U0000001","text":"<@UB000001> hi","ts":"1700000000.000904"}`,
			ignore("malformed_ids")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := classifyJSON(t, c.inner); got != c.want {
				t.Errorf("Classify:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

// Classify on inputs JSON cannot express, and with an identity that lacks ids.
func TestClassifyIdentity(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   inbound
		me   identity
		want decision
	}{
		{"no user and no bot user id is not our own message", inbound{Kind: "message", Channel: "C1", TS: "1.1"}, identity{},
			decision{Reason: "no_user"}},
		{"without our user id a mention cannot be recognised", inbound{Kind: "message", Channel: "C1", User: "U1", Text: "<@> hi", TS: "1.1"}, identity{},
			decision{Action: actMessage, ThreadTS: "1.1", TS: "1.1"}},
		{"app_mention counts as a mention whatever its text", inbound{Kind: "app_mention", Channel: "C1", User: "U1", Text: "hi", TS: "1.1"}, me,
			decision{Action: actMessage, Mentioned: true, Start: true, ThreadTS: "1.1", TS: "1.1"}},
		{"id of 64 printable characters", inbound{Kind: "message", Channel: "C1", User: strings.Repeat("~", 64), TS: "1.1"}, me,
			decision{Action: actMessage, ThreadTS: "1.1", TS: "1.1"}},
		{"DEL in an id", inbound{Kind: "message", Channel: "C1", User: "U\x7f", TS: "1.1"}, me,
			decision{Reason: "malformed_ids"}},
		{"non-ASCII in an id", inbound{Kind: "message", Channel: "C1", User: "Ü1", TS: "1.1"}, me,
			decision{Reason: "malformed_ids"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := Classify(c.in, c.me); got != c.want {
				t.Errorf("Classify:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

func TestInboundFromEvent(t *testing.T) {
	t.Parallel()
	in := parseInbound(t, `{"type":"message","subtype":"file_share","channel":"C0000001","channel_type":"channel","user":"U0000001","text":"log","files":[{"id":"F1","name":"log.txt"}],"ts":"1700000000.001303","thread_ts":"1700000000.001200"}`, 2)
	if in.Team != "T0000001" || in.EventID != "Ev01" || in.RetryAttempt != 2 || in.Kind != "message" || in.Subtype != "file_share" ||
		in.ChannelType != "channel" || in.ThreadTS != "1700000000.001200" || len(in.Files) != 1 || in.Files[0].ID != "F1" {
		t.Errorf("file_share: %+v", in)
	}
	in = parseInbound(t, `{"type":"app_mention","user":"U0000001","text":"<@UB000001> x","ts":"1.2","channel":"C0000001","thread_ts":"1.1"}`, 0)
	if in.Kind != "app_mention" || in.ChannelType != "" || in.ThreadTS != "1.1" {
		t.Errorf("app_mention: %+v", in)
	}
	in = parseInbound(t, `{"type":"message","subtype":"message_changed","channel":"C0000001","ts":"9.9","message":{"type":"message","user":"U0000001","text":"new","ts":"1.5"},"previous_message":{"type":"message","user":"U0000001","text":"old","ts":"1.5"}}`, 0)
	if in.Changed == nil || in.Changed.Text != "new" || in.Previous == nil || in.Previous.Text != "old" {
		t.Errorf("message_changed: %+v", in)
	}
	in = parseInbound(t, `{"type":"message","subtype":"message_deleted","channel":"C0000001","ts":"9.9","deleted_ts":"1.5","previous_message":{"type":"message","user":"U0000001","text":"x","ts":"1.5"}}`, 0)
	if in.DeletedTS != "1.5" || in.Previous == nil || in.Changed != nil {
		t.Errorf("message_deleted: %+v", in)
	}
	body := `{"type":"event_callback","team_id":"T0000001","event_id":"Ev02","event":{"type":"reaction_added","user":"U0000001","reaction":"eyes","item":{"type":"message","channel":"C0000001","ts":"1.1"},"event_ts":"1.2"}}`
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inboundFromEvent(ev, 0); ok {
		t.Error("reaction_added taken for a message")
	}
}

func TestThreadOfAndMentions(t *testing.T) {
	t.Parallel()
	if threadOf("", "1.2") != "1.2" || threadOf("1.1", "1.2") != "1.1" {
		t.Error("threadOf")
	}
	for text, want := range map[string]bool{
		"<@UB000001>": true, "hi <@UB000001|logbook>": true, "<@UB0000011>": false, "@UB000001": false, "<@ub000001>": false, "": false,
	} {
		if got := mentions(text, "UB000001"); got != want {
			t.Errorf("mentions(%q) = %v", text, got)
		}
	}
	if mentions("<@>", "") {
		t.Error("an empty user id is mentioned by <@>")
	}
	var blocks slack.Blocks
	if err := json.Unmarshal([]byte(`[{"type":"section","text":{"type":"mrkdwn","text":"<@UB000001>"}},{"type":"rich_text","elements":[{"type":"rich_text_quote","elements":[{"type":"user","user_id":"UB000001"}]}]}]`), &blocks); err != nil {
		t.Fatal(err)
	}
	if blocksMention(blocks, "UB000001") {
		t.Error("a user element outside a rich_text_section (or mrkdwn in a section) counted as a mention")
	}
}

// fakeChannels answers conversations.info from a table and counts the calls.
type fakeChannels struct {
	slackAPI
	mu    sync.Mutex
	calls int
	info  map[string]slack.Channel
}

func (f *fakeChannels) GetConversationInfoContext(ctx context.Context, in *slack.GetConversationInfoInput) (*slack.Channel, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	ch, ok := f.info[in.ChannelID]
	if !ok {
		return nil, slack.SlackErrorResponse{Err: "channel_not_found"}
	}
	return &ch, nil
}

func channelInfo(id, name string, private, im, mpim bool) slack.Channel {
	var ch slack.Channel
	ch.ID, ch.Name, ch.IsPrivate, ch.IsIM, ch.IsMpIM = id, name, private, im, mpim
	return ch
}

// The privacy rule: only public channels are stored, decided by the event's
// channel_type or, for app_mention (which has none), by conversations.info's properties —
// never by the id's prefix.
func TestGatewayPublic(t *testing.T) {
	t.Parallel()
	api := &fakeChannels{info: map[string]slack.Channel{
		"C0000001": channelInfo("C0000001", "general", false, false, false),
		"C0000002": channelInfo("C0000002", "secret", true, false, false), // private, though its id starts with C
		"D0000001": channelInfo("D0000001", "", false, true, false),
		"G0000001": channelInfo("G0000001", "mpdm-ada--grace", false, false, true),
	}}
	g := &Gateway{dir: directory.NewAt(api, time.Minute, time.Now)}
	cases := []struct {
		name        string
		channel     string
		channelType string
		want        bool
		calls       int // at most this many conversations.info calls (the answer may be cached)
	}{
		{"message in a public channel", "C0000001", "channel", true, 0},
		{"message in a private channel", "C0000002", "group", false, 0},
		{"message in a DM", "D0000001", "im", false, 0},
		{"message in a group DM", "G0000001", "mpim", false, 0},
		{"unknown channel_type", "C0000001", "something_new", false, 0},
		{"app_mention in a public channel", "C0000001", "", true, 1},
		{"app_mention in a private C channel", "C0000002", "", false, 1},
		{"app_mention in a DM", "D0000001", "", false, 1},
		{"app_mention in a group DM", "G0000001", "", false, 1},
	}
	for _, c := range cases {
		api.mu.Lock()
		before := api.calls
		api.mu.Unlock()
		got, err := g.public(context.Background(), inbound{Channel: c.channel, ChannelType: c.channelType})
		if err != nil || got != c.want {
			t.Errorf("%s: public = %v, %v; want %v", c.name, got, err, c.want)
		}
		api.mu.Lock()
		calls := api.calls - before
		api.mu.Unlock()
		if calls > c.calls {
			t.Errorf("%s: %d conversations.info calls, want at most %d", c.name, calls, c.calls)
		}
	}
	// A channel conversations.info does not know is an error (the envelope is not acked or,
	// for channel_not_found, acked as unstorable), never "public".
	pub, err := g.public(context.Background(), inbound{Channel: "C_NOPE"})
	var se slack.SlackErrorResponse
	if pub || !errors.As(err, &se) || !unstorable(err) {
		t.Errorf("unknown channel: public = %v, %v; want an unstorable error", pub, err)
	}
}
