package slackemu

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func TestAckQueuedDuringReconnectSettlesOnNewSocket(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{AckTimeout: time.Minute})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	p, err := emu.Post(Post{Channel: "C0000001", Text: "ack me later"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := asDelivered(c.waitEvent(t, "event", eventsAPI(ofEvent(p.EventIDs[0], 0))))
	if err := emu.Disconnect(0, "warning"); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, emu, 2)
	ack(t, c, d.req)
	got, err := emu.WaitForAck(waitCtx(t), p.EventIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.ConnID != 2 {
		t.Errorf("ack arrived on socket %d, want 2 (the envelope went out on 1)", got.ConnID)
	}
}

func TestEveryDisconnectReasonMakesSlackGoReconnect(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	connect(t, emu)
	waitConnected(t, emu, 1)
	for i, reason := range []string{"warning", "refresh_requested", "link_disabled"} {
		if err := emu.Disconnect(0, reason); err != nil {
			t.Fatal(err)
		}
		waitConnected(t, emu, i+2)
	}
	if got := emu.Calls("apps.connections.open"); got != 4 {
		t.Errorf("apps.connections.open calls = %d, want 4", got)
	}
}

func TestRawSocketOriginHelloDisconnectAndGrace(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{DisconnectGrace: 50 * time.Millisecond})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)

	_, wsURL, err := api.StartSocketModeContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL, http.Header{"Origin": {"https://evil.example"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: err %v, resp %v, want 403", err, resp)
	}

	_, wsURL, err = api.StartSocketModeContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, wsURL, http.Header{"Origin": {"https://api.slack.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var hello map[string]any
	if err := ws.ReadJSON(&hello); err != nil || hello["type"] != "hello" {
		t.Fatalf("first frame = %v (%v), want hello", hello, err)
	}
	// A client PING gets a PONG.
	gotPong := make(chan struct{}, 1)
	ws.SetPongHandler(func(string) error {
		select {
		case gotPong <- struct{}{}:
		default:
		}
		return nil
	})
	if err := ws.WriteControl(websocket.PingMessage, []byte("hi"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Malformed and oversized (>= 20 KB) acks are recorded as bad frames, not acks.
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"envelope_id":`)); err != nil {
		t.Fatal(err)
	}
	big := `{"envelope_id":"e1","payload":{"text":"` + strings.Repeat("x", 20*1024) + `"}}`
	if err := ws.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := emu.Wait(ctx, func() bool { return len(emu.BadFrames()) == 2 }); err != nil {
		t.Fatalf("bad frames = %d: %v", len(emu.BadFrames()), err)
	}
	if n := len(emu.Acks()); n != 0 {
		t.Errorf("acks = %d, want 0", n)
	}
	if err := emu.Disconnect(0, "link_disabled"); err != nil {
		t.Fatal(err)
	}
	var disc map[string]any
	if err := ws.ReadJSON(&disc); err != nil || disc["type"] != "disconnect" || disc["reason"] != "link_disabled" {
		t.Fatalf("frame = %v (%v), want disconnect link_disabled", disc, err)
	}
	// The server closes the socket after the grace period; reads (which also
	// run the pong handler) then fail.
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			break
		}
	}
	select {
	case <-gotPong:
	default:
		t.Error("no PONG for the client's PING")
	}
	if err := emu.Wait(ctx, func() bool { return len(emu.Connections()) == 0 }); err != nil {
		t.Fatal(err)
	}
}

func TestSlashCommandNotAckedIsNotRetried(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{AckTimeout: 50 * time.Millisecond, RetrySchedule: []time.Duration{0, 0, 0}})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	res, err := emu.SlashCommand(SlashCommand{Command: "/logbook", Text: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	c.waitEvent(t, "slash", func(ev socketmode.Event) bool { return ev.Type == socketmode.EventTypeSlashCommand })
	if err := emu.Wait(waitCtx(t), func() bool { return emu.DeliveryState(res.ID) == StateFailed }); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range emu.Deliveries() {
		if d.EventID == res.ID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("slash command sent %d times, want 1", n)
	}
}

func TestWhichPostsFireWhichEvents(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{Subscriptions: []string{SubAppMention, SubMessageChannels, SubMessageIM}})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	p, err := emu.Post(Post{Channel: "C0000003", Text: "<@UB000001> are you here?"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.EventIDs) != 0 {
		t.Errorf("post in a channel without the bot fired %v", p.EventIDs)
	}

	p, err = emu.Post(Post{Channel: "D0000001", Text: "<@UB000001> in a DM"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.EventIDs) != 1 {
		t.Fatalf("DM mention fired %v, want only message", p.EventIDs)
	}
	d, _ := asDelivered(c.waitEvent(t, "im message", eventsAPI(ofEvent(p.EventIDs[0], 0))))
	if me := d.inner.Data.(*slackevents.MessageEvent); d.inner.Type != "message" || me.ChannelType != "im" {
		t.Errorf("DM event = %s %+v", d.inner.Type, me)
	}

	// An edit that adds a mention fires message_changed and app_mention with edited.
	plain, err := emu.Post(Post{Channel: "C0000001", Text: "no mention yet"})
	if err != nil {
		t.Fatal(err)
	}
	ed, err := emu.Edit("C0000001", plain.TS, "now <@UB000001>")
	if err != nil {
		t.Fatal(err)
	}
	if len(ed.EventIDs) != 2 {
		t.Fatalf("edit fired %v, want message_changed + app_mention", ed.EventIDs)
	}
	d, _ = asDelivered(c.waitEvent(t, "edited mention", eventsAPI(ofEvent(ed.EventIDs[1], 0))))
	am, ok := d.inner.Data.(*slackevents.AppMentionEvent)
	if !ok || am.TimeStamp != plain.TS || am.Edited == nil || am.Edited.TimeStamp != ed.TS {
		t.Errorf("app_mention after edit = %#v", d.inner.Data)
	}
}

func TestDeletedParentWithRepliesBecomesTombstone(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	parent, err := emu.Post(Post{Channel: "C0000001", Text: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := emu.Post(Post{Channel: "C0000001", ThreadTS: parent.TS, Text: "reply"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emu.Delete("C0000001", parent.TS); err != nil {
		t.Fatal(err)
	}
	thread, err := emu.Thread("C0000001", reply.TS)
	if err != nil {
		t.Fatal(err)
	}
	if len(thread) != 2 || thread[0].Subtype != "tombstone" || thread[0].Text == "parent" {
		t.Errorf("thread = %+v", thread)
	}
	if _, err := emu.Delete("C0000001", reply.TS); err != nil {
		t.Fatal(err)
	}
	if _, err := emu.Thread("C0000001", parent.TS); err == nil {
		t.Error("thread survives once its last reply under a tombstone is deleted")
	}
}

func TestJSONBodyBlocksLimitAndHistoryOrder(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	post := func(body string) map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(waitCtx(t), "POST", emu.APIURL()+"chat.postMessage", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Authorization", "Bearer "+emu.BotToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	parent := post(`{"channel":"C0000001","text":"json body"}`)
	if parent["ok"] != true {
		t.Fatalf("JSON post = %v", parent)
	}
	blocks := make([]string, 51)
	for i := range blocks {
		blocks[i] = `{"type":"divider"}`
	}
	if got := post(`{"channel":"C0000001","text":"x","blocks":[` + strings.Join(blocks, ",") + `]}`); got["error"] != "invalid_blocks" {
		t.Errorf("51 blocks = %v", got)
	}
	bc := post(`{"channel":"C0000001","text":"broadcast","thread_ts":"` + parent["ts"].(string) + `","reply_broadcast":true}`)
	if msg, _ := bc["message"].(map[string]any); msg["subtype"] != "thread_broadcast" {
		t.Errorf("broadcast = %v", bc)
	}
	post(`{"channel":"C0000001","text":"quiet reply","thread_ts":"` + parent["ts"].(string) + `"}`)

	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	hist, err := api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: "C0000001", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Messages) != 1 || hist.Messages[0].Text != "broadcast" || !hist.HasMore {
		t.Fatalf("history page 1 = %+v", hist.Messages)
	}
	hist, err = api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: "C0000001", Limit: 1, Cursor: hist.ResponseMetaData.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Messages) != 1 || hist.Messages[0].Text != "json body" || hist.HasMore {
		t.Errorf("history page 2 = %+v", hist.Messages)
	}
}

func TestRecordLimitBoundsMemory(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{RecordLimit: 3, NoRetries: true})
	var ids []string
	for range 10 {
		p, err := emu.Post(Post{Channel: "C0000001", Text: "into the void"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.EventIDs...)
	}
	if n := len(emu.Deliveries()); n != 3 {
		t.Errorf("deliveries kept = %d, want 3", n)
	}
	if st := emu.DeliveryState(ids[0]); st != "" {
		t.Errorf("oldest settled delivery state = %q, want forgotten", st)
	}
	if st := emu.DeliveryState(ids[9]); st != StateFailed {
		t.Errorf("newest delivery state = %q, want failed", st)
	}
	if n := len(emu.Requests("")); n != 0 {
		t.Errorf("requests = %d, want 0", n)
	}
}

func TestRepliesLimitAndForbiddenOptions(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{RepliesMaxLimit: 2})
	parent, err := emu.Post(Post{Channel: "C0000001", Text: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := emu.Post(Post{Channel: "C0000001", ThreadTS: parent.TS, Text: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	msgs, hasMore, _, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: parent.TS, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || !hasMore {
		t.Errorf("got %d messages (has_more %v), want the cap of 2", len(msgs), hasMore)
	}

	forbidden := startEmu(t, Options{RepliesForbidden: true})
	p, err := forbidden.Post(Post{Channel: "C0000001", Text: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = newAPI(forbidden, forbidden.BotToken(), forbidden.AppToken()).GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: p.TS})
	if got := slackErr(t, err); got != "missing_scope" {
		t.Errorf("error = %s, want missing_scope", got)
	}
}
