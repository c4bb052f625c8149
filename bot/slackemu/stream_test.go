package slackemu

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// userThread posts ada's question in #general and returns its ts.
func userThread(t *testing.T, emu *Server) string {
	t.Helper()
	p, err := emu.Post(Post{Channel: "C0000001", Text: "<@UB000001> how?"})
	if err != nil {
		t.Fatal(err)
	}
	return p.TS
}

// startStream starts a stream in thread ts of #general for ada, with opts.
func startStream(t *testing.T, api *slack.Client, thread string, opts ...slack.MsgOption) string {
	t.Helper()
	opts = append([]slack.MsgOption{
		slack.MsgOptionTS(thread), slack.MsgOptionRecipientUserID("U0000001"), slack.MsgOptionRecipientTeamID("T0000001"),
	}, opts...)
	_, ts, err := api.StartStreamContext(t.Context(), "C0000001", opts...)
	if err != nil {
		t.Fatalf("start stream: %v", err)
	}
	return ts
}

func TestStreamStartAppendStopWithTextAndTaskCards(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	api := c.api
	thread := userThread(t, emu)
	if err := api.SetAssistantThreadsStatusContext(t.Context(), slack.AssistantThreadsSetStatusParameters{
		ChannelID: "C0000001", ThreadTS: thread, Status: "is thinking…", LoadingMessages: []string{"Reading", "Writing"},
	}); err != nil {
		t.Fatal(err)
	}
	if got := emu.AssistantLoadingMessages("C0000001", thread); strings.Join(got, "|") != "Reading|Writing" {
		t.Errorf("loading messages = %q", got)
	}

	search := slack.NewTaskUpdateChunk("t1", "Search the log")
	search.Status = slack.TaskCardStatusInProgress
	ts := startStream(t, api, thread, slack.MsgOptionMarkdownText("Hel"), slack.MsgOptionChunks(search))

	// The stream is a real reply from the start, and starting it cleared the status.
	m, ok := emu.Message("C0000001", ts)
	if !ok || !m.Streaming || m.ThreadTS != thread || m.Text != "Hel" || m.BotID != emu.BotID() {
		t.Fatalf("streamed message = %+v (found %v)", m, ok)
	}
	if st := emu.AssistantStatus("C0000001", thread); st != "" {
		t.Errorf("assistant status after the stream started = %q", st)
	}
	msgs, _, _, err := api.GetConversationRepliesContext(t.Context(), &slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: thread})
	if err != nil || len(msgs) != 2 || msgs[1].Timestamp != ts || msgs[1].Text != "Hel" {
		t.Fatalf("replies while streaming = %+v, %v", msgs, err)
	}
	if len(msgs[1].Blocks.BlockSet) != 1 || msgs[1].Blocks.BlockSet[0].BlockType() != slack.MBTTaskCard {
		t.Errorf("blocks while streaming = %+v, want one task_card", msgs[1].Blocks.BlockSet)
	}

	done := slack.NewTaskUpdateChunk("t1", "Search the log")
	done.Status, done.Output = slack.TaskCardStatusComplete, "3 entries"
	if _, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText("lo"), slack.MsgOptionChunks(done)); err != nil {
		t.Fatalf("append: %v", err)
	}
	st, _ := emu.StreamState("C0000001", ts)
	if st.Text != "Hello" || len(st.Tasks) != 1 || st.Tasks[0].Status != "complete" || st.Tasks[0].Output != "3 entries" || st.Appends != 1 {
		t.Fatalf("stream after append = %+v", st)
	}
	if lines := st.TaskLines(); len(lines) != 1 || lines[0] != "[x] Search the log → 3 entries" {
		t.Errorf("task lines = %q", lines)
	}

	md := slack.SlackMetadata{EventType: "logbook_turn", EventPayload: map[string]any{"turn": "1"}}
	footer := slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, "done", false, false))
	if _, _, err := api.StopStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(" world"),
		slack.MsgOptionBlocks(footer), slack.MsgOptionMetadata(md)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	st, _ = emu.StreamState("C0000001", ts)
	m, _ = emu.Message("C0000001", ts)
	if st.State != StreamStopped || st.Streaming() || m.Streaming || m.Text != "Hello world" {
		t.Fatalf("after stop: stream %+v, message %+v", st, m)
	}
	msgs, _, _, err = api.GetConversationRepliesContext(t.Context(), &slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: thread})
	if err != nil || msgs[1].Metadata.EventType != "" {
		t.Fatalf("replies without include_all_metadata: metadata %+v, %v", msgs[1].Metadata, err)
	}
	if bs := msgs[1].Blocks.BlockSet; len(bs) != 2 || bs[1].BlockType() != slack.MBTContext {
		t.Errorf("final blocks = %+v, want the task card then the stop's context block at the bottom", bs)
	}
	msgs, _, _, err = api.GetConversationRepliesContext(t.Context(), &slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: thread, IncludeAllMetadata: true})
	if err != nil || msgs[1].Metadata.EventType != "logbook_turn" || msgs[1].Metadata.EventPayload["turn"] != "1" {
		t.Fatalf("replies with include_all_metadata: metadata %+v, %v", msgs[1].Metadata, err)
	}

	// A stopped stream takes no more text, and echoed once, when it started.
	_, _, err = api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText("!"))
	if got := slackErr(t, err); got != "message_not_in_streaming_state" {
		t.Errorf("append after stop: %s", got)
	}
	_, _, err = api.StopStreamContext(t.Context(), "C0000001", ts)
	if got := slackErr(t, err); got != "message_not_in_streaming_state" {
		t.Errorf("second stop: %s", got)
	}
	echo := func(ev socketmode.Event) bool {
		d, ok := asDelivered(ev)
		if !ok {
			return false
		}
		msg, ok := d.inner.Data.(*slackevents.MessageEvent)
		return ok && msg.TimeStamp == ts
	}
	ev := c.waitEvent(t, "the stream's echo", echo)
	if msg := ev.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent); msg.BotID != emu.BotID() || msg.ThreadTimeStamp != thread || msg.SubType != "" {
		t.Errorf("echo = %+v", msg)
	}
	if _, _, err := api.PostMessageContext(t.Context(), "C0000001", slack.MsgOptionText("sync", false)); err != nil {
		t.Fatal(err)
	}
	c.waitEvent(t, "a later post's echo", func(ev socketmode.Event) bool {
		d, ok := asDelivered(ev)
		if !ok {
			return false
		}
		msg, ok := d.inner.Data.(*slackevents.MessageEvent)
		return ok && msg.Text == "sync"
	})
	waitCount(t, "echoes of the stream", 1, echo, c)
}

func TestStreamArguments(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	thread := userThread(t, emu)

	for _, tc := range []struct {
		name string
		opts []slack.MsgOption
		want string
	}{
		{"no recipient", []slack.MsgOption{slack.MsgOptionTS(thread)}, "missing_recipient_user_id"},
		{"no team", []slack.MsgOption{slack.MsgOptionTS(thread), slack.MsgOptionRecipientUserID("U0000001")}, "missing_recipient_team_id"},
		{"unknown user", []slack.MsgOption{slack.MsgOptionTS(thread), slack.MsgOptionRecipientUserID("U404"), slack.MsgOptionRecipientTeamID("T0000001")}, "user_not_found"},
		{"bad thread", []slack.MsgOption{slack.MsgOptionTS("1.000001"), slack.MsgOptionRecipientUserID("U0000001"), slack.MsgOptionRecipientTeamID("T0000001")}, "invalid_thread_ts"},
		{"bad mode", []slack.MsgOption{slack.MsgOptionTS(thread), slack.MsgOptionRecipientUserID("U0000001"), slack.MsgOptionRecipientTeamID("T0000001"), slack.MsgOptionTaskDisplayMode("list")}, "invalid_arguments"},
		{"bad chunk", []slack.MsgOption{slack.MsgOptionTS(thread), slack.MsgOptionRecipientUserID("U0000001"), slack.MsgOptionRecipientTeamID("T0000001"), slack.MsgOptionChunks(slack.NewTaskUpdateChunk("", "no id"))}, "invalid_chunks"},
	} {
		_, _, err := api.StartStreamContext(t.Context(), "C0000001", tc.opts...)
		if got := slackErr(t, err); got != tc.want {
			t.Errorf("%s: error = %s, want %s", tc.name, got, tc.want)
		}
	}
	if n := len(emu.Streams()); n != 0 {
		t.Errorf("%d streams after failed starts", n)
	}

	// In a DM the recipient is implied.
	dm, err := emu.Post(Post{Channel: "D0000001", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.StartStreamContext(t.Context(), "D0000001", slack.MsgOptionTS(dm.TS), slack.MsgOptionMarkdownText("hello")); err != nil {
		t.Errorf("DM stream without recipients: %v", err)
	}

	// Plan mode groups the task cards under the plan's title.
	ts := startStream(t, api, thread, slack.MsgOptionTaskDisplayMode(slack.TaskDisplayModePlan),
		slack.MsgOptionChunks(slack.NewPlanUpdateChunk("Answering"), slack.NewTaskUpdateChunk("a", "Read"), slack.NewTaskUpdateChunk("b", "Write")))
	m, _ := emu.Message("C0000001", ts)
	msgs, _, _, err := api.GetConversationRepliesContext(t.Context(), &slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: thread})
	if err != nil {
		t.Fatal(err)
	}
	last := msgs[len(msgs)-1]
	plan, ok := last.Blocks.BlockSet[0].(*slack.PlanBlock)
	if !ok || plan.Title != "Answering" || len(plan.Tasks) != 2 || !m.Streaming {
		t.Errorf("plan-mode blocks = %+v", last.Blocks.BlockSet)
	}
	st, _ := emu.StreamState("C0000001", ts)
	if lines := st.TaskLines(); strings.Join(lines, "|") != "Answering|[ ] Read|[ ] Write" {
		t.Errorf("task lines = %q", lines)
	}

	// Details append (as Slack renders them); status replaces.
	step := slack.NewTaskUpdateChunk("a", "Read")
	step.Status, step.Details = slack.TaskCardStatusInProgress, "page 1"
	more := slack.NewTaskUpdateChunk("a", "Read")
	more.Details = ", page 2"
	if _, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionChunks(step, more)); err != nil {
		t.Fatal(err)
	}
	st, _ = emu.StreamState("C0000001", ts)
	if a := st.Tasks[0]; a.Status != "in_progress" || a.Details != "page 1, page 2" {
		t.Errorf("task a = %+v", a)
	}
	_, _, err = api.AppendStreamContext(t.Context(), "C0000001", ts)
	if got := slackErr(t, err); got != "no_text" {
		t.Errorf("empty append: %s", got)
	}
	_, _, err = api.AppendStreamContext(t.Context(), "C0000001", thread, slack.MsgOptionMarkdownText("x"))
	if got := slackErr(t, err); got != "message_not_owned_by_app" {
		t.Errorf("append to the user's message: %s", got)
	}
}

func TestStreamExpiresWithAgeAppendsOrOnDemand(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{StreamMaxAge: 20 * time.Millisecond})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	thread := userThread(t, emu)

	ts := startStream(t, api, thread, slack.MsgOptionMarkdownText("part one"))
	if _, err := emu.WaitStream(waitCtx(t), "C0000001", ts, 1); err != nil {
		t.Fatal(err) // the expiry itself is a change a waiter sees
	}
	_, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(" two"))
	if got := slackErr(t, err); got != "message_not_in_streaming_state" {
		t.Fatalf("append after StreamMaxAge: %s", got)
	}
	st, _ := emu.StreamState("C0000001", ts)
	m, _ := emu.Message("C0000001", ts)
	if st.State != StreamExpired || m.Streaming || m.Text != "part one" {
		t.Errorf("expired stream = %+v, message %+v", st, m)
	}
	// An expired stream's message is an ordinary one: chat.update rewrites it (the recovery).
	if _, _, _, err := api.UpdateMessageContext(t.Context(), "C0000001", ts, slack.MsgOptionText("part one (continued below)", false)); err != nil {
		t.Errorf("update of an expired stream: %v", err)
	}

	emu2 := startEmu(t, Options{StreamMaxAppends: 2})
	api2 := newAPI(emu2, emu2.BotToken(), emu2.AppToken())
	thread2 := userThread(t, emu2)
	ts2 := startStream(t, api2, thread2)
	for i, want := range []string{"", "", "message_not_in_streaming_state"} {
		_, _, err := api2.AppendStreamContext(t.Context(), "C0000001", ts2, slack.MsgOptionMarkdownText("x"))
		if got := errCode(t, err); got != want {
			t.Errorf("append %d: %q, want %q", i+1, got, want)
		}
	}

	// A one-off refusal (the stream lives on), then Slack ending it for real.
	ts3 := startStream(t, api2, thread2)
	emu2.InjectMethodFault(MethodFault{Method: "chat.appendStream", Error: "message_not_in_streaming_state", Times: 1})
	_, _, err = api2.AppendStreamContext(t.Context(), "C0000001", ts3, slack.MsgOptionMarkdownText("x"))
	if got := errCode(t, err); got != "message_not_in_streaming_state" {
		t.Errorf("faulted append: %q", got)
	}
	if _, _, err := api2.AppendStreamContext(t.Context(), "C0000001", ts3, slack.MsgOptionMarkdownText("y")); err != nil {
		t.Errorf("append after the one-off fault: %v", err)
	}
	if err := emu2.ExpireStream("C0000001", ts3); err != nil {
		t.Fatal(err)
	}
	_, _, err = api2.StopStreamContext(t.Context(), "C0000001", ts3)
	if got := errCode(t, err); got != "message_not_in_streaming_state" {
		t.Errorf("stop after ExpireStream: %q", got)
	}
}

// errCode is the Slack error code of err, "" for nil.
func errCode(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	return slackErr(t, err)
}

func TestStreamSizeLimits(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{StreamMaxChars: 30_000})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	thread := userThread(t, emu)
	ts := startStream(t, api, thread)

	_, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(strings.Repeat("a", 12_001)))
	if got := slackErr(t, err); got != "msg_too_long" {
		t.Errorf("a 12,001-character append: %s", got)
	}
	for i := range 2 {
		if _, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(strings.Repeat("b", 12_000))); err != nil {
			t.Fatalf("append %d of 12,000: %v", i+1, err)
		}
	}
	_, _, err = api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(strings.Repeat("c", 6_001)))
	if got := slackErr(t, err); got != "msg_too_long" {
		t.Errorf("append past the message's 30,000: %s", got)
	}
	st, _ := emu.StreamState("C0000001", ts)
	if len(st.Text) != 24_000 || !st.Streaming() {
		t.Errorf("after the refused append: %d characters, streaming %v (a refusal changes nothing)", len(st.Text), st.Streaming())
	}
	// The stop's own blocks are limited to 50.
	var blocks []slack.Block
	for range 51 {
		blocks = append(blocks, slack.NewDividerBlock())
	}
	_, _, err = api.StopStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionBlocks(blocks...))
	if got := slackErr(t, err); got != "msg_blocks_too_many" {
		t.Errorf("stop with 51 blocks: %s", got)
	}
}

func TestStreamRateLimits(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{RateLimits: SlackRateLimits()})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	thread := userThread(t, emu)
	ts := startStream(t, api, thread)
	var rl *slack.RateLimitedError
	for i := range 11 {
		_, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText("x"))
		if i < 10 && err != nil {
			t.Fatalf("append %d within the burst: %v", i+1, err)
		}
		if i == 10 && (!errors.As(err, &rl) || rl.RetryAfter < time.Second) {
			t.Fatalf("append 11: err = %v, want *slack.RateLimitedError with Retry-After", err)
		}
	}
	// Appends are limited per channel: a stream elsewhere is not affected.
	dm, err := emu.Post(Post{Channel: "D0000001", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	_, dts, err := api.StartStreamContext(t.Context(), "D0000001", slack.MsgOptionTS(dm.TS))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.AppendStreamContext(t.Context(), "D0000001", dts, slack.MsgOptionMarkdownText("x")); err != nil {
		t.Errorf("append in another channel: %v", err)
	}
	if st, _ := emu.StreamState("C0000001", ts); st.Appends != 10 {
		t.Errorf("appends = %d, want 10 (the limited one is not applied)", st.Appends)
	}
}

func TestChatUpdateOfAStream(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	thread := userThread(t, emu)
	ts := startStream(t, api, thread, slack.MsgOptionMarkdownText("draft"))

	_, _, _, err := api.UpdateMessageContext(t.Context(), "C0000001", ts, slack.MsgOptionText("replaced", false))
	if got := slackErr(t, err); got != "streaming_state_conflict" {
		t.Errorf("update while streaming: %s", got)
	}
	_, _, err = api.DeleteMessageContext(t.Context(), "C0000001", ts)
	if got := slackErr(t, err); got != "cant_delete_message" {
		t.Errorf("delete while streaming: %s", got)
	}
	md := slack.SlackMetadata{EventType: "logbook_turn", EventPayload: map[string]any{"turn": "1"}}
	if _, _, err := api.StopStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMetadata(md)); err != nil {
		t.Fatal(err)
	}
	md2 := slack.SlackMetadata{EventType: "logbook_turn", EventPayload: map[string]any{"turn": "2"}}
	section := slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "final", false, false), nil, nil)
	if _, _, _, err := api.UpdateMessageContext(t.Context(), "C0000001", ts, slack.MsgOptionText("final", false),
		slack.MsgOptionBlocks(section), slack.MsgOptionMetadata(md2)); err != nil {
		t.Fatalf("update after stop: %v", err)
	}
	m, _ := emu.Message("C0000001", ts)
	if m.Text != "final" || !strings.Contains(string(m.Blocks), `"section"`) || !strings.Contains(string(m.Metadata), `"2"`) || m.Edited == nil {
		t.Errorf("updated stream message = %+v", m)
	}
}

func TestAgentSessionStatusesAndStopButton(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	thread := userThread(t, emu)
	for _, st := range []string{slack.AgentSessionStatusProcessing} {
		if _, err := c.api.SetAgentSessionStatusContext(t.Context(), slack.AgentSessionSetStatusParameters{
			ChannelID: "C0000001", ThreadTS: thread, Status: st, Title: "How?",
		}); err != nil {
			t.Fatal(err)
		}
	}
	ts := startStream(t, c.api, thread, slack.MsgOptionMarkdownText("working"))
	other := startStream(t, c.api, thread)
	if _, _, err := c.api.StopStreamContext(t.Context(), "C0000001", other); err != nil {
		t.Fatal(err)
	}
	// chat.stopStream's session_status defaults to active.
	if got := emu.AgentSessionStatuses("C0000001", thread); strings.Join(got, ",") != "processing,active" {
		t.Errorf("statuses = %q, want processing then active", got)
	}
	if _, err := c.api.SetAgentSessionStatusContext(t.Context(), slack.AgentSessionSetStatusParameters{
		ChannelID: "C0000001", ThreadTS: thread, Status: slack.AgentSessionStatusProcessing,
	}); err != nil {
		t.Fatal(err)
	}

	posted, err := emu.StopAgentSession("C0000001", thread, "U0000001")
	if err != nil || len(posted.EventIDs) != 1 {
		t.Fatalf("stop button: %+v, %v", posted, err)
	}
	ev := c.waitEvent(t, "agent_session_stopped", eventsAPI(func(d delivered) bool { return d.outer.EventID == posted.EventIDs[0] }))
	d, _ := asDelivered(ev)
	stopped, ok := d.inner.Data.(*slackevents.AgentSessionStoppedEvent)
	if !ok {
		t.Fatalf("inner event = %T, want *slackevents.AgentSessionStoppedEvent", d.inner.Data)
	}
	if stopped.Channel != "C0000001" || stopped.ThreadTimestamp != thread || stopped.User != "U0000001" ||
		len(stopped.StreamingMessageTimestamps) != 1 || stopped.StreamingMessageTimestamps[0] != ts {
		t.Errorf("event = %+v, want the one stream still streaming", stopped)
	}
	ack(t, c, d.req)

	_, _, err = c.api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText("more"))
	if got := slackErr(t, err); got != "stopped_by_user" {
		t.Errorf("append after the stop button: %s", got)
	}
	_, _, err = c.api.StopStreamContext(t.Context(), "C0000001", ts)
	if got := slackErr(t, err); got != "stopped_by_user" {
		t.Errorf("stop after the stop button: %s", got)
	}
	// The app moves the status itself.
	if got := emu.AgentSessionStatus("C0000001", thread); got != "processing" {
		t.Errorf("status after the stop button = %q, want it unchanged", got)
	}
	if _, err := c.api.SetAgentSessionStatusContext(t.Context(), slack.AgentSessionSetStatusParameters{
		ChannelID: "C0000001", ThreadTS: thread, Status: slack.AgentSessionStatusActive,
	}); err != nil {
		t.Fatal(err)
	}
	if got := emu.AgentSessionStatuses("C0000001", thread); strings.Join(got, ",") != "processing,active,processing,active" {
		t.Errorf("statuses = %q", got)
	}
}

func TestWaitStreamFollowsAGrowingReply(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	thread := userThread(t, emu)
	ts := startStream(t, api, thread, slack.MsgOptionMarkdownText("a"))
	errc := make(chan error, 1)
	go func() {
		for _, part := range []string{"b", "c"} {
			if _, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(part)); err != nil {
				errc <- err
				return
			}
		}
		_, _, err := api.StopStreamContext(t.Context(), "C0000001", ts)
		errc <- err
	}()
	var seen []string
	version := 0
	for {
		st, err := emu.WaitStream(waitCtx(t), "C0000001", ts, version)
		if err != nil {
			t.Fatal(err)
		}
		version = st.Version
		if len(seen) == 0 || seen[len(seen)-1] != st.Text {
			seen = append(seen, st.Text)
		}
		if !st.Streaming() {
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if seen[len(seen)-1] != "abc" || !strings.HasPrefix("abc", seen[0]) {
		t.Errorf("texts seen = %q", seen)
	}
}
