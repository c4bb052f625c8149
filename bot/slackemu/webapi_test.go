package slackemu

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func slackErr(t *testing.T, err error) string {
	t.Helper()
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want a slack.SlackErrorResponse", err, err)
	}
	return se.Err
}

func TestRateLimitIsA429WithRetryAfter(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{RateLimits: map[string]RateLimit{
		"chat.postMessage": {Burst: 1, Every: time.Hour, PerChannel: true},
	}})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())

	if _, _, err := api.PostMessage("C0000001", slack.MsgOptionText("one", false)); err != nil {
		t.Fatal(err)
	}
	_, _, err := api.PostMessage("C0000001", slack.MsgOptionText("two", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < time.Second || !rl.Retryable() {
		t.Fatalf("second post: err = %v, want *slack.RateLimitedError with RetryAfter >= 1s", err)
	}
	// The limit is per channel.
	if _, _, err := api.PostMessage("C0000002", slack.MsgOptionText("elsewhere", false)); err != nil {
		t.Fatalf("post in another channel: %v", err)
	}
	if n := len(emu.History("C0000001")); n != 1 {
		t.Errorf("C0000001 holds %d messages, want 1 (the limited post is not stored)", n)
	}

	emu.InjectMethodFault(MethodFault{Method: "users.info", Status: http.StatusTooManyRequests, RetryAfter: 7, Times: 1})
	_, err = api.GetUserInfo("U0000001")
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("users.info: err = %v, want RetryAfter 7s", err)
	}
	if _, err := api.GetUserInfo("U0000001"); err != nil {
		t.Fatalf("users.info after the one-shot fault: %v", err)
	}
	if got := emu.Calls("users.info"); got != 2 {
		t.Errorf("users.info calls = %d, want 2", got)
	}
}

func TestInjectedFaults(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())

	emu.InjectMethodFault(MethodFault{Method: "chat.postMessage", Error: "restricted_action", Times: 1})
	_, _, err := api.PostMessage("C0000001", slack.MsgOptionText("x", false))
	if got := slackErr(t, err); got != "restricted_action" {
		t.Errorf("error = %s", got)
	}

	// An ambiguous failure: the post happens, the client sees a 429.
	emu.InjectMethodFault(MethodFault{Method: "chat.postMessage", Status: 429, RetryAfter: 1, Times: 1, ApplyFirst: true})
	_, _, err = api.PostMessage("C0000001", slack.MsgOptionText("posted anyway", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) {
		t.Fatalf("err = %v, want rate limited", err)
	}
	if h := emu.History("C0000001"); len(h) != 1 || h[0].Text != "posted anyway" {
		t.Errorf("history = %+v, want the post stored", h)
	}

	emu.InjectMethodFault(MethodFault{Method: "conversations.info", Status: 503})
	for range 2 {
		_, err = api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C0000001"})
		var sce slack.StatusCodeError
		if !errors.As(err, &sce) || sce.Code != 503 {
			t.Fatalf("err = %v, want status 503 until cleared", err)
		}
	}
	emu.ClearFaults()
	if _, err := api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C0000001"}); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestTokensAreCheckedByType(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	ctx := waitCtx(t)

	cases := []struct {
		name, bot, app, wantWeb, wantOpen string
	}{
		{"app token on a bot method, bot token on connections.open", emu.AppToken(), emu.BotToken(), "not_allowed_token_type", "not_allowed_token_type"},
		{"unknown tokens", "xoxb-wrong", "xapp-wrong", "invalid_auth", "invalid_auth"},
		{"no tokens", "", "", "not_authed", "not_authed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := newAPI(emu, tc.bot, tc.app)
			_, err := api.AuthTestContext(ctx)
			if got := slackErr(t, err); got != tc.wantWeb {
				t.Errorf("auth.test error = %s, want %s", got, tc.wantWeb)
			}
			_, _, err = api.StartSocketModeContext(ctx)
			if got := slackErr(t, err); got != tc.wantOpen {
				t.Errorf("apps.connections.open error = %s, want %s", got, tc.wantOpen)
			}
		})
	}

	// slack-go treats invalid_auth from apps.connections.open as fatal.
	smc := socketmode.New(newAPI(emu, emu.BotToken(), "xapp-wrong"))
	if err := smc.RunContext(ctx); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("socketmode run with a bad app token: %v, want invalid_auth", err)
	}

	// Tickets are single use.
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	_, wsURL, err := api.StartSocketModeContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(wsURL)
	if u.Scheme != "ws" || u.Path != "/link/" || u.Query().Get("app_id") != "A0000001" || u.Query().Get("ticket") == "" {
		t.Errorf("socket url = %s", wsURL)
	}
	for i, want := range []int{http.StatusBadRequest, http.StatusUnauthorized} {
		// A plain GET with a fresh ticket fails the upgrade (400) but uses the ticket.
		resp, err := http.Get(strings.Replace(wsURL, "ws://", "http://", 1))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("use %d of the ticket: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}

func TestAuthTestAndBearerHeader(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	at, err := api.AuthTest()
	if err != nil {
		t.Fatal(err)
	}
	if at.UserID != "UB000001" || at.BotID != "B0000001" || at.TeamID != "T0000001" {
		t.Errorf("auth.test = %+v", at)
	}
	// chat.getPermalink is sent by slack-go as GET with a Bearer header.
	p, err := emu.Post(Post{Channel: "C0000001", Text: "link me"})
	if err != nil {
		t.Fatal(err)
	}
	link, err := api.GetPermalink(&slack.PermalinkParameters{Channel: "C0000001", Ts: p.TS})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://emu.slack.com/archives/C0000001/p" + strings.Replace(p.TS, ".", "", 1); link != want {
		t.Errorf("permalink = %s, want %s", link, want)
	}
}

func TestPostMessageErrorsAndLimits(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	emu.AddChannel(Channel{ID: "C0000005", Name: "hidden", Private: true, Members: []string{"U0000001"}})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())

	long3001 := strings.Repeat("a", 3001)
	cases := []struct {
		name    string
		channel string
		opts    []slack.MsgOption
		want    string
	}{
		{"unknown channel", "C9999999", []slack.MsgOption{slack.MsgOptionText("x", false)}, "channel_not_found"},
		{"private channel without the bot", "C0000005", []slack.MsgOption{slack.MsgOptionText("x", false)}, "channel_not_found"},
		{"public channel without the bot", "C0000003", []slack.MsgOption{slack.MsgOptionText("x", false)}, "not_in_channel"},
		{"archived", "C0000004", []slack.MsgOption{slack.MsgOptionText("x", false)}, "is_archived"},
		{"no text", "C0000001", nil, "no_text"},
		{"section too long", "C0000001", []slack.MsgOption{slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", long3001, false, false), nil, nil))}, "invalid_blocks"},
	}
	for _, tc := range cases {
		_, _, err := api.PostMessage(tc.channel, tc.opts...)
		if got := slackErr(t, err); got != tc.want {
			t.Errorf("%s: error %s, want %s", tc.name, got, tc.want)
		}
	}

	// Raw form posts, token in the body, as slack-go sends them.
	form := func(v url.Values) map[string]any {
		t.Helper()
		v.Set("token", emu.BotToken())
		resp, err := http.PostForm(emu.APIURL()+"chat.postMessage", v)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := form(url.Values{"channel": {"C0000001"}, "blocks": {"not json"}}); got["error"] != "invalid_blocks_format" {
		t.Errorf("bad blocks JSON: %v", got)
	}
	if got := form(url.Values{"channel": {"C0000001"}, "text": {"x"}, "metadata": {`{"event_payload":{}}`}}); got["error"] != "invalid_metadata_format" {
		t.Errorf("bad metadata: %v", got)
	}
	got := form(url.Values{"channel": {"C0000001"}, "text": {strings.Repeat("é", 40_001)}})
	if got["ok"] != true || got["warning"] != "message_truncated" {
		t.Errorf("long text: %v", got["warning"])
	}
	stored, _ := emu.Message("C0000001", got["ts"].(string))
	if n := utf8.RuneCountInString(stored.Text); n != 40_000 {
		t.Errorf("stored text has %d runes, want 40000", n)
	}

	// thread_ts naming no top-level message: the post is not threaded.
	_, ts, err := api.PostMessage("C0000001", slack.MsgOptionText("orphan", false), slack.MsgOptionTS("1.000001"))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := emu.Message("C0000001", ts); m.ThreadTS != "" {
		t.Errorf("orphan reply threaded under %s", m.ThreadTS)
	}
	if reqs := emu.Requests("chat.postMessage"); reqs[len(reqs)-1].Params.Get("thread_ts") != "1.000001" || reqs[len(reqs)-1].Params.Has("token") {
		t.Errorf("recorded request = %v", reqs[len(reqs)-1].Params)
	}
}

func TestUpdateDeleteAndEvents(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	user, err := emu.Post(Post{Channel: "C0000001", Text: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	_, ts, err := c.api.PostMessage("C0000001", slack.MsgOptionText("draft", false), slack.MsgOptionTS(user.TS))
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = c.api.UpdateMessage("C0000001", user.TS, slack.MsgOptionText("hijack", false))
	if got := slackErr(t, err); got != "cant_update_message" {
		t.Errorf("update of a user's message: %s", got)
	}
	_, _, _, err = c.api.UpdateMessage("C0000001", ts, slack.MsgOptionText(strings.Repeat("x", 4001), false))
	if got := slackErr(t, err); got != "msg_too_long" {
		t.Errorf("update with 4001 chars: %s", got)
	}
	if _, _, _, err := c.api.UpdateMessage("C0000001", ts, slack.MsgOptionText("final", false)); err != nil {
		t.Fatal(err)
	}
	ev := c.waitEvent(t, "message_changed", eventsAPI(func(d delivered) bool {
		me, ok := d.inner.Data.(*slackevents.MessageEvent)
		return ok && me.SubType == "message_changed" && me.Message != nil && me.Message.Timestamp == ts
	}))
	d, _ := asDelivered(ev)
	if me := d.inner.Data.(*slackevents.MessageEvent); me.Message.Text != "final" || me.Message.BotID != "B0000001" ||
		me.PreviousMessage == nil || me.PreviousMessage.Text != "draft" || me.Message.Edited == nil {
		t.Errorf("message_changed = %+v (message %+v)", me, me.Message)
	}
	if m, _ := emu.Message("C0000001", ts); m.Text != "final" || m.Edited == nil {
		t.Errorf("stored = %+v", m)
	}

	if _, _, err := c.api.DeleteMessage("C0000001", ts); err != nil {
		t.Fatal(err)
	}
	c.waitEvent(t, "message_deleted", eventsAPI(func(d delivered) bool {
		return strings.Contains(string(d.req.Payload), `"deleted_ts":"`+ts+`"`)
	}))
	if _, _, err := c.api.DeleteMessage("C0000001", ts); slackErr(t, err) != "message_not_found" {
		t.Errorf("second delete: %v", err)
	}
	if _, _, err := c.api.DeleteMessage("C0000001", user.TS); slackErr(t, err) != "cant_delete_message" {
		t.Errorf("delete of a user's message: %v", err)
	}
}

func TestConversationsRepliesPaginates(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	parent, err := emu.Post(Post{Channel: "C0000001", Text: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{parent.TS}
	for i := range 4 {
		p, err := emu.Post(Post{Channel: "C0000001", User: "U0000002", ThreadTS: parent.TS, Text: "reply " + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, p.TS)
	}
	md := slack.SlackMetadata{EventType: "bot_turn", EventPayload: map[string]any{"turn_id": "t1"}}
	_, botTS, err := api.PostMessage("C0000001", slack.MsgOptionText("answer", false), slack.MsgOptionTS(parent.TS), slack.MsgOptionMetadata(md))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, botTS)

	var got []string
	cursor, pages := "", 0
	for {
		msgs, hasMore, next, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{
			ChannelID: "C0000001", Timestamp: want[3], Cursor: cursor, Limit: 2, IncludeAllMetadata: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, m := range msgs {
			got = append(got, m.Timestamp)
			if m.Timestamp == botTS && m.Metadata.EventPayload["turn_id"] != "t1" {
				t.Errorf("bot reply metadata = %+v", m.Metadata)
			}
			if m.Timestamp == parent.TS && (m.ReplyCount != 5 || m.ThreadTimestamp != parent.TS) {
				t.Errorf("parent = %+v", m.Msg)
			}
		}
		if !hasMore {
			if next != "" {
				t.Errorf("last page has next_cursor %q", next)
			}
			break
		}
		cursor = next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Errorf("pages %d, ts %v, want 3 pages of %v", pages, got, want)
	}

	msgs, _, _, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: parent.TS})
	if err != nil {
		t.Fatal(err)
	}
	if last := msgs[len(msgs)-1]; last.Metadata.EventType != "" {
		t.Errorf("metadata returned without include_all_metadata: %+v", last.Metadata)
	}
	_, _, _, err = api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: "1.000001"})
	if got := slackErr(t, err); got != "thread_not_found" {
		t.Errorf("unknown ts: %s", got)
	}
	_, _, _, err = api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: parent.TS, Cursor: "bogus"})
	if got := slackErr(t, err); got != "invalid_cursor" {
		t.Errorf("bad cursor: %s", got)
	}
	_, _, _, err = api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C0000003", Timestamp: parent.TS})
	if got := slackErr(t, err); got != "not_in_channel" {
		t.Errorf("channel without the bot: %s", got)
	}

	hist, err := api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: "C0000001", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Messages) != 1 || hist.Messages[0].Timestamp != parent.TS || hist.HasMore {
		t.Errorf("history = %+v, want only the parent", hist.Messages)
	}
}

func TestInfoReactionsStatusEphemeral(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())

	priv, err := api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C0000002"})
	if err != nil {
		t.Fatal(err)
	}
	if !priv.IsPrivate || priv.Name != "secret" || !priv.IsMember {
		t.Errorf("private channel = %+v", priv.GroupConversation)
	}
	dm, err := api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "D0000001"})
	if err != nil {
		t.Fatal(err)
	}
	if !dm.IsIM || dm.User != "U0000001" {
		t.Errorf("dm = %+v", dm)
	}
	if _, err := api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C9999999"}); slackErr(t, err) != "channel_not_found" {
		t.Errorf("unknown channel: %v", err)
	}

	u, err := api.GetUserInfo("U0000001")
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "ada" || u.IsBot {
		t.Errorf("user = %+v", u)
	}
	if _, err := api.GetUserInfo("U9999999"); slackErr(t, err) != "user_not_found" {
		t.Errorf("unknown user: %v", err)
	}

	p, err := emu.Post(Post{Channel: "C0000001", Text: "react to me"})
	if err != nil {
		t.Fatal(err)
	}
	item := slack.NewRefToMessage("C0000001", p.TS)
	if err := api.AddReaction("eyes", item); err != nil {
		t.Fatal(err)
	}
	if err := api.AddReaction("eyes", item); slackErr(t, err) != "already_reacted" {
		t.Errorf("second add: %v", err)
	}
	if m, _ := emu.Message("C0000001", p.TS); len(m.Reactions["eyes"]) != 1 {
		t.Errorf("reactions = %v", m.Reactions)
	}
	if err := api.RemoveReaction("eyes", item); err != nil {
		t.Fatal(err)
	}
	if err := api.RemoveReaction("eyes", item); slackErr(t, err) != "no_reaction" {
		t.Errorf("second remove: %v", err)
	}
	if err := api.AddReaction(":eyes:", item); slackErr(t, err) != "invalid_name" {
		t.Errorf("colons: %v", err)
	}

	err = api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ChannelID: "C0000001", ThreadTS: p.TS, Status: "is thinking…"})
	if err != nil {
		t.Fatal(err)
	}
	if st := emu.AssistantStatus("C0000001", p.TS); st != "is thinking…" {
		t.Errorf("status = %q", st)
	}
	if _, _, err := api.PostMessage("C0000001", slack.MsgOptionText("done", false), slack.MsgOptionTS(p.TS)); err != nil {
		t.Fatal(err)
	}
	if st := emu.AssistantStatus("C0000001", p.TS); st != "" {
		t.Errorf("status after the reply = %q, want cleared", st)
	}

	if _, err := api.PostEphemeral("C0000001", "U0000002", slack.MsgOptionText("only you", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := api.PostEphemeral("C0000002", "U0000002", slack.MsgOptionText("x", false)); slackErr(t, err) != "user_not_in_channel" {
		t.Errorf("ephemeral to a non-member: %v", err)
	}
	if e := emu.Ephemerals(); len(e) != 1 || e[0].User != "U0000002" || e[0].Text != "only you" {
		t.Errorf("ephemerals = %+v", e)
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan *Server, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Options{}, func(s *Server) { ready <- s }) }()
	var s *Server
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	if !strings.HasSuffix(s.APIURL(), "/api/") {
		t.Errorf("APIURL = %s", s.APIURL())
	}
	if _, err := newAPI(s, s.BotToken(), s.AppToken()).AuthTest(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := s.Post(Post{Channel: "C0000001", Text: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("post after close: %v", err)
	}
}
