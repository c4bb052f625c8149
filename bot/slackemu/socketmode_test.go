package slackemu

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func TestClientConnectsGetsHelloAndAnswersPings(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)

	ev := c.waitEvent(t, "hello", func(ev socketmode.Event) bool { return ev.Type == socketmode.EventTypeHello })
	if ev.Request == nil || ev.Request.NumConnections != 1 || ev.Request.ConnectionInfo.AppID != "A0000001" {
		t.Fatalf("hello = %+v, want num_connections 1 and app_id A0000001", ev.Request)
	}
	err := emu.Wait(waitCtx(t), func() bool {
		conns := emu.Connections()
		return len(conns) == 1 && conns[0].Pongs >= 2
	})
	if err != nil {
		t.Fatalf("wait for PONGs to the emulator's PINGs: %v (connections %+v)", err, emu.Connections())
	}
	if got := emu.Calls("apps.connections.open"); got != 1 {
		t.Errorf("apps.connections.open calls = %d, want 1", got)
	}
}

func TestMentionFiresMessageAndAppMentionWithSameTS(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	posted, err := emu.Post(Post{Channel: "C0000001", User: "U0000001", Text: "<@UB000001> summarize this"})
	if err != nil {
		t.Fatal(err)
	}
	if len(posted.EventIDs) != 2 {
		t.Fatalf("event ids = %v, want message + app_mention", posted.EventIDs)
	}
	msg := c.waitEvent(t, "message", eventsAPI(func(d delivered) bool { return d.inner.Type == "message" }))
	mention := c.waitEvent(t, "app_mention", eventsAPI(func(d delivered) bool { return d.inner.Type == "app_mention" }))

	m, _ := asDelivered(msg)
	me, ok := m.inner.Data.(*slackevents.MessageEvent)
	if !ok {
		t.Fatalf("message inner data is %T", m.inner.Data)
	}
	a, _ := asDelivered(mention)
	am, ok := a.inner.Data.(*slackevents.AppMentionEvent)
	if !ok {
		t.Fatalf("app_mention inner data is %T", a.inner.Data)
	}
	if me.TimeStamp != posted.TS || am.TimeStamp != posted.TS {
		t.Errorf("ts: message %q, app_mention %q, posted %q", me.TimeStamp, am.TimeStamp, posted.TS)
	}
	if me.ChannelType != "channel" || me.Channel != "C0000001" || me.User != "U0000001" || me.SubType != "" {
		t.Errorf("message event = %+v", me)
	}
	if am.Channel != "C0000001" || am.User != "U0000001" || am.ThreadTimeStamp != "" {
		t.Errorf("app_mention event = %+v", am)
	}
	if m.outer.EventID == a.outer.EventID {
		t.Errorf("both events share event_id %s", m.outer.EventID)
	}
	if m.req.RetryAttempt != 0 || m.req.EnvelopeID == "" || m.req.AcceptsResponsePayload {
		t.Errorf("envelope = %+v", m.req)
	}

	ack(t, c, m.req)
	ack(t, c, a.req)
	for _, id := range posted.EventIDs {
		got, err := emu.WaitForAck(waitCtx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Stale {
			t.Errorf("ack of %s is stale", id)
		}
		if st := emu.DeliveryState(id); st != StateAcked {
			t.Errorf("state of %s = %s, want acked", id, st)
		}
	}
}

func TestUnackedEnvelopeIsRedeliveredWithRetryAttempt(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{AckTimeout: 100 * time.Millisecond, RetrySchedule: []time.Duration{0}})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	posted, err := emu.Post(Post{Channel: "C0000001", Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	id := posted.EventIDs[0]
	first, _ := asDelivered(c.waitEvent(t, "attempt 0", eventsAPI(ofEvent(id, 0))))
	retry, _ := asDelivered(c.waitEvent(t, "attempt 1", eventsAPI(ofEvent(id, 1))))
	if retry.req.RetryReason != "timeout" {
		t.Errorf("retry_reason = %q, want timeout", retry.req.RetryReason)
	}
	if retry.req.EnvelopeID == first.req.EnvelopeID {
		t.Errorf("retry reused envelope_id %s", first.req.EnvelopeID)
	}
	// A late ack of the first envelope settles nothing; the retry's ack does.
	ack(t, c, first.req)
	ack(t, c, retry.req)
	got, err := emu.WaitForAck(waitCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.EnvelopeID != retry.req.EnvelopeID {
		t.Errorf("settling ack envelope = %s, want the retry's %s", got.EnvelopeID, retry.req.EnvelopeID)
	}
	acks := emu.Acks()
	if len(acks) != 2 || !acks[0].Stale || acks[1].Stale {
		t.Errorf("acks = %+v, want a stale ack then a settling one", acks)
	}
}

func TestRetriesExhaustAfterSchedule(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{AckTimeout: 20 * time.Millisecond, RetrySchedule: []time.Duration{0, 0}})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	posted, err := emu.Post(Post{Channel: "C0000001", Text: "nobody acks me"})
	if err != nil {
		t.Fatal(err)
	}
	id := posted.EventIDs[0]
	c.waitEvent(t, "attempt 2", eventsAPI(ofEvent(id, 2)))
	if err := emu.Wait(waitCtx(t), func() bool { return emu.DeliveryState(id) == StateFailed }); err != nil {
		t.Fatalf("state = %s: %v", emu.DeliveryState(id), err)
	}
	var attempts []int
	for _, d := range emu.Deliveries() {
		if d.EventID == id {
			attempts = append(attempts, d.Attempt)
		}
	}
	if !slices.Equal(attempts, []int{0, 1, 2}) {
		t.Errorf("attempts = %v, want [0 1 2]", attempts)
	}
}

func TestEventsPublishedWithoutSocketArriveByRetryOnceConnected(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{RetrySchedule: []time.Duration{0, time.Hour}})
	posted, err := emu.Post(Post{Channel: "C0000001", Text: "while nobody listens"})
	if err != nil {
		t.Fatal(err)
	}
	id := posted.EventIDs[0]
	if st := emu.DeliveryState(id); st != StateAwaitingRetry {
		t.Fatalf("state = %s, want awaiting_retry", st)
	}

	c := connect(t, emu)
	waitConnected(t, emu, 1)
	if n := emu.FireRetries(); n != 1 {
		t.Fatalf("FireRetries = %d, want 1", n)
	}
	d, _ := asDelivered(c.waitEvent(t, "retry after connect", eventsAPI(func(d delivered) bool { return d.outer.EventID == id })))
	if d.req.RetryAttempt != 2 || d.req.RetryReason != "timeout" {
		t.Errorf("envelope = %+v, want retry_attempt 2 (attempts 0 and 1 found no socket)", d.req)
	}
	me := d.inner.Data.(*slackevents.MessageEvent)
	if me.TimeStamp != posted.TS || me.Text != "while nobody listens" {
		t.Errorf("event = %+v", me)
	}
}

func TestReconnectsAfterRefreshRequestedAndGetsLaterEvents(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	if err := emu.Disconnect(0, "refresh_requested"); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, emu, 2)
	if got := emu.Calls("apps.connections.open"); got != 2 {
		t.Errorf("apps.connections.open calls = %d, want 2", got)
	}
	c.waitEvent(t, "second Connected", func(ev socketmode.Event) bool {
		ce, ok := ev.Data.(*socketmode.ConnectedEvent)
		return ev.Type == socketmode.EventTypeConnected && ok && ce.ConnectionCount == 1
	})

	posted, err := emu.Post(Post{Channel: "C0000001", Text: "after the refresh"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := asDelivered(c.waitEvent(t, "event on new socket", eventsAPI(ofEvent(posted.EventIDs[0], 0))))
	ack(t, c, d.req)
	got, err := emu.WaitForAck(waitCtx(t), posted.EventIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.ConnID != 2 {
		t.Errorf("acked on socket %d, want the new socket 2", got.ConnID)
	}
}

func TestSeveralSocketsShareEvents(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	a := connect(t, emu)
	waitConnected(t, emu, 1)
	b := connect(t, emu)
	waitConnected(t, emu, 2)

	var ids []string
	for range 16 { // sockets are picked at random: 16 envelopes reach both
		p, err := emu.Post(Post{Channel: "C0000001", Text: "spread me"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.EventIDs...)
	}
	conns := map[int]bool{}
	for _, id := range ids {
		// Exactly one of the two sockets gets each event.
		waitCount(t, id, 1, eventsAPI(func(d delivered) bool { return d.outer.EventID == id }), a, b)
	}
	for _, d := range emu.Deliveries() {
		conns[d.ConnID] = true
	}
	if !conns[1] || !conns[2] || len(conns) != 2 {
		t.Errorf("deliveries went to sockets %v, want both 1 and 2", conns)
	}
}

func TestStalledSocketMakesClientReconnect(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	if err := emu.Stall(0); err != nil {
		t.Fatal(err)
	}
	// slack-go's watchdog (1s here) sees no PING and reconnects.
	waitConnected(t, emu, 2)
	posted, err := emu.Post(Post{Channel: "C0000001", Text: "after the black hole"})
	if err != nil {
		t.Fatal(err)
	}
	c.waitEvent(t, "event after reconnect", eventsAPI(ofEvent(posted.EventIDs[0], 0)))
}

func TestDeliveryFaults(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{AckTimeout: 500 * time.Millisecond, RetrySchedule: []time.Duration{0}})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	t.Run("drop", func(t *testing.T) {
		emu.InjectDeliveryFault(DeliveryFault{Kind: FaultDrop})
		p, err := emu.Post(Post{Channel: "C0000001", Text: "dropped first"})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := asDelivered(c.waitEvent(t, "retry of dropped", eventsAPI(func(d delivered) bool { return d.outer.EventID == p.EventIDs[0] })))
		if d.req.RetryAttempt != 1 {
			t.Errorf("first envelope seen has retry_attempt %d, want 1 (attempt 0 dropped)", d.req.RetryAttempt)
		}
		ack(t, c, d.req)
	})
	t.Run("duplicate", func(t *testing.T) {
		emu.InjectDeliveryFault(DeliveryFault{Kind: FaultDuplicate, EventType: "message"})
		p, err := emu.Post(Post{Channel: "C0000001", Text: "twice"})
		if err != nil {
			t.Fatal(err)
		}
		id := p.EventIDs[0]
		d, _ := asDelivered(c.waitEvent(t, "first copy", eventsAPI(ofEvent(id, 0))))
		waitCount(t, "copies of attempt 0", 2, eventsAPI(ofEvent(id, 0)), c)
		if ds := emu.Deliveries(); ds[len(ds)-1].Fault != "duplicate" {
			t.Errorf("last delivery = %+v, want fault duplicate", ds[len(ds)-1])
		}
		ack(t, c, d.req)
		if _, err := emu.WaitForAck(waitCtx(t), id); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("delay beyond ack window", func(t *testing.T) {
		emu.InjectDeliveryFault(DeliveryFault{Kind: FaultDelay, Delay: time.Second})
		p, err := emu.Post(Post{Channel: "C0000001", Text: "late"})
		if err != nil {
			t.Fatal(err)
		}
		id := p.EventIDs[0]
		late, _ := asDelivered(c.waitEvent(t, "delayed attempt 0", eventsAPI(ofEvent(id, 0))))
		c.waitEvent(t, "retry", eventsAPI(ofEvent(id, 1)))
		ack(t, c, late.req)
		err = emu.Wait(waitCtx(t), func() bool {
			return slices.ContainsFunc(emu.Acks(), func(a Ack) bool { return a.EnvelopeID == late.req.EnvelopeID })
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range emu.Acks() {
			if a.EnvelopeID == late.req.EnvelopeID && !a.Stale {
				t.Errorf("ack of the delayed envelope settled the delivery after its window")
			}
		}
	})
}

func TestRawFrameReachesClientAsError(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	if err := emu.SendRaw(0, []byte(`{"type":"events_api","envelope_id":"e-bad","payload":{"type":"event_callback","event":{"type":"no_such_event"}}}`)); err != nil {
		t.Fatal(err)
	}
	ev := c.waitEvent(t, "bad message", func(ev socketmode.Event) bool { return ev.Type == socketmode.EventTypeErrorBadMessage })
	if bad, ok := ev.Data.(*socketmode.ErrorBadMessage); !ok || len(bad.Message) == 0 {
		t.Errorf("bad message data = %#v", ev.Data)
	}
	// The socket survives a malformed envelope.
	posted, err := emu.Post(Post{Channel: "C0000001", Text: "still here"})
	if err != nil {
		t.Fatal(err)
	}
	c.waitEvent(t, "later event", eventsAPI(ofEvent(posted.EventIDs[0], 0)))
	if got := emu.ConnectionsOpened(); got != 1 {
		t.Errorf("sockets opened = %d, want 1", got)
	}
}

func TestBotPostEchoesAsMessageWithBotID(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	parent, err := emu.Post(Post{Channel: "C0000001", Text: "question"})
	if err != nil {
		t.Fatal(err)
	}
	_, ts, err := c.api.PostMessage("C0000001", slack.MsgOptionText("answer", false), slack.MsgOptionTS(parent.TS))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := asDelivered(c.waitEvent(t, "echo", eventsAPI(func(d delivered) bool {
		me, ok := d.inner.Data.(*slackevents.MessageEvent)
		return ok && me.TimeStamp == ts
	})))
	me := d.inner.Data.(*slackevents.MessageEvent)
	if me.BotID != "B0000001" || me.User != "UB000001" || me.SubType != "" || me.ThreadTimeStamp != parent.TS {
		t.Errorf("echo = %+v", me)
	}
	var raw struct {
		Event struct {
			AppID string `json:"app_id"`
		} `json:"event"`
	}
	if err := json.Unmarshal(d.req.Payload, &raw); err != nil || raw.Event.AppID != "A0000001" {
		t.Errorf("echo app_id = %q (%v)", raw.Event.AppID, err)
	}
	if me.Message == nil || me.Message.BotProfile == nil || me.Message.BotProfile.AppID != "A0000001" {
		t.Errorf("echo bot_profile = %+v", me.Message)
	}
	reply, err := emu.WaitForReply(waitCtx(t), "C0000001", parent.TS)
	if err != nil {
		t.Fatal(err)
	}
	if reply.TS != ts || reply.Text != "answer" || reply.ParentUserID != "U0000001" {
		t.Errorf("stored reply = %+v", reply)
	}
}

func TestPrivateChannelMessageHasChannelTypeGroup(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	// Default subscriptions (app_mention, message.channels): no message event from a private channel.
	p, err := emu.Post(Post{Channel: "C0000002", Text: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.EventIDs) != 0 {
		t.Errorf("private post fired %v without message.groups", p.EventIDs)
	}

	emu.SetSubscriptions(SubAppMention, SubMessageChannels, SubMessageGroups)
	p, err = emu.Post(Post{Channel: "C0000002", Text: "secret again"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := asDelivered(c.waitEvent(t, "group message", eventsAPI(ofEvent(p.EventIDs[0], 0))))
	if me := d.inner.Data.(*slackevents.MessageEvent); me.ChannelType != "group" || me.Channel != "C0000002" {
		t.Errorf("event = %+v, want channel_type group", me)
	}
}

func TestMessageSubtypesParseInSlackGo(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	msgEvent := func(t *testing.T, id string) *slackevents.MessageEvent {
		t.Helper()
		d, _ := asDelivered(c.waitEvent(t, id, eventsAPI(ofEvent(id, 0))))
		me, ok := d.inner.Data.(*slackevents.MessageEvent)
		if !ok {
			t.Fatalf("inner data %T", d.inner.Data)
		}
		return me
	}

	parent, err := emu.Post(Post{Channel: "C0000001", Text: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := emu.Post(Post{Channel: "C0000001", User: "U0000002", ThreadTS: parent.TS, Text: "<@UB000001> reply"})
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, reply.EventIDs[0]); me.ThreadTimeStamp != parent.TS || me.TimeStamp != reply.TS {
		t.Errorf("reply = %+v", me)
	}
	d, _ := asDelivered(c.waitEvent(t, "threaded mention", eventsAPI(ofEvent(reply.EventIDs[1], 0))))
	if am := d.inner.Data.(*slackevents.AppMentionEvent); am.ThreadTimeStamp != parent.TS {
		t.Errorf("threaded app_mention = %+v", am)
	}

	bc, err := emu.Post(Post{Channel: "C0000001", ThreadTS: parent.TS, Broadcast: true, Text: "also to channel"})
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, bc.EventIDs[0]); me.SubType != "thread_broadcast" || me.Root == nil || me.Root.Timestamp != parent.TS {
		t.Errorf("broadcast = %+v", me)
	}

	ed, err := emu.Edit("C0000001", parent.TS, "parent, edited")
	if err != nil {
		t.Fatal(err)
	}
	me := msgEvent(t, ed.EventIDs[0])
	if me.SubType != "message_changed" || me.Message.Text != "parent, edited" || me.Message.Edited == nil ||
		me.PreviousMessage == nil || me.PreviousMessage.Text != "parent" || me.Message.Timestamp != parent.TS {
		t.Errorf("message_changed = %+v (message %+v)", me, me.Message)
	}

	del, err := emu.Delete("C0000001", bc.TS)
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, del.EventIDs[0]); me.SubType != "message_deleted" || me.DeletedTimeStamp != bc.TS || me.PreviousMessage == nil {
		t.Errorf("message_deleted = %+v", me)
	}

	fs, err := emu.ShareFile("C0000001", "U0000001", "", "log attached", File{Name: "build.log", Title: "build.log", Mimetype: "text/plain", Filetype: "text", Size: 12})
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, fs.EventIDs[0]); me.SubType != "file_share" || len(me.Message.Files) != 1 || me.Message.Files[0].Name != "build.log" {
		t.Errorf("file_share = %+v (message %+v)", me, me.Message)
	}

	jn, err := emu.Join("C0000001", "U0000009")
	if err == nil {
		t.Fatalf("join of a member succeeded: %+v", jn)
	}
	emu.AddUser(User{ID: "U0000003", Name: "linus"})
	jn, err = emu.Join("C0000001", "U0000003")
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, jn.EventIDs[0]); me.SubType != "channel_join" || me.User != "U0000003" {
		t.Errorf("channel_join = %+v", me)
	}

	// Another app's bot: modern (user + bot_id) and legacy (bot_message).
	ob, err := emu.Post(Post{Channel: "C0000001", User: "U0000009", Text: "<@UB000001> status?"})
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, ob.EventIDs[0]); me.BotID != "B0000009" || me.User != "U0000009" || me.SubType != "" {
		t.Errorf("other bot = %+v", me)
	}
	lb, err := emu.Post(Post{Channel: "C0000001", User: "U0000009", BotMessage: true, Text: "deploy done"})
	if err != nil {
		t.Fatal(err)
	}
	if me := msgEvent(t, lb.EventIDs[0]); me.SubType != "bot_message" || me.BotID != "B0000009" || me.User != "" {
		t.Errorf("bot_message = %+v", me)
	}
}

func TestSlashCommandAckPayloadAndResponseURL(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	var results []SlashResult
	for i := range 3 { // is_enterprise_install varies: "false", false, absent
		res, err := emu.SlashCommand(SlashCommand{Command: "/logbook", Text: "status", User: "U0000001", Channel: "C0000001"})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
		ev := c.waitEvent(t, "slash command", func(ev socketmode.Event) bool {
			cmd, ok := ev.Data.(slack.SlashCommand)
			return ev.Type == socketmode.EventTypeSlashCommand && ok && cmd.ResponseURL == res.ResponseURL
		})
		cmd := ev.Data.(slack.SlashCommand)
		if cmd.Command != "/logbook" || cmd.Text != "status" || cmd.UserID != "U0000001" || cmd.ChannelID != "C0000001" {
			t.Errorf("command %d = %+v", i, cmd)
		}
		if !ev.Request.AcceptsResponsePayload {
			t.Errorf("accepts_response_payload false")
		}
		if err := c.smc.AckCtx(waitCtx(t), ev.Request.EnvelopeID, map[string]any{"text": "working on it"}); err != nil {
			t.Fatal(err)
		}
		if _, err := emu.WaitForAck(waitCtx(t), res.ID); err != nil {
			t.Fatal(err)
		}
	}
	eph := emu.Ephemerals()
	if len(eph) != 3 || eph[0].Text != "working on it" || eph[0].User != "U0000001" || eph[0].Source != "ack" {
		t.Errorf("ephemerals = %+v", eph)
	}

	_, ts, err := c.api.PostMessage("", slack.MsgOptionResponseURL(results[0].ResponseURL, slack.ResponseTypeInChannel), slack.MsgOptionText("all green", false))
	if err != nil {
		t.Fatalf("post to response_url: %v", err)
	}
	_ = ts
	hist := emu.History("C0000001")
	if len(hist) != 1 || hist[0].Text != "all green" || hist[0].BotID != "B0000001" {
		t.Errorf("channel history = %+v", hist)
	}
	for range 4 { // five uses in all
		if _, _, err := c.api.PostMessage("", slack.MsgOptionResponseURL(results[0].ResponseURL, slack.ResponseTypeEphemeral), slack.MsgOptionText("more", false)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = c.api.PostMessage("", slack.MsgOptionResponseURL(results[0].ResponseURL, slack.ResponseTypeEphemeral), slack.MsgOptionText("sixth", false))
	var sce slack.StatusCodeError
	if !errors.As(err, &sce) || sce.Code != 404 {
		t.Errorf("sixth use of response_url: err = %v, want 404", err)
	}
}

func TestSlashCommandWithoutSocketFails(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	res, err := emu.SlashCommand(SlashCommand{Command: "/logbook"})
	if !errors.Is(err, ErrNoConnection) {
		t.Fatalf("err = %v, want ErrNoConnection", err)
	}
	if st := emu.DeliveryState(res.ID); st != StateFailed {
		t.Errorf("state = %s, want failed (slash commands are not retried)", st)
	}
}

func TestPublishEventDeliversCustomInnerEvent(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	p, err := emu.Post(Post{Channel: "C0000001", Text: "react"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := emu.PublishEvent([]byte(`{"type":"reaction_added","user":"U0000002","reaction":"eyes","item":{"type":"message","channel":"C0000001","ts":"` + p.TS + `"},"item_user":"U0000001","event_ts":"` + p.TS + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := asDelivered(c.waitEvent(t, "reaction_added", eventsAPI(ofEvent(id, 0))))
	ra, ok := d.inner.Data.(*slackevents.ReactionAddedEvent)
	if !ok || ra.Reaction != "eyes" || ra.Item.Timestamp != p.TS {
		t.Errorf("reaction_added = %#v", d.inner.Data)
	}
	if _, err := emu.PublishEvent([]byte(`{"user":"U0000002"}`)); err == nil {
		t.Error("event without type accepted")
	}
}
