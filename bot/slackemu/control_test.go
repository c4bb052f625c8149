package slackemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// controlCall sends a JSON request to the control surface and decodes the answer.
func controlCall(t *testing.T, emu *Server, method, path string, body any, wantStatus int) map[string]any {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(waitCtx(t), method, emu.URL()+"/_emu/"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: decode: %v", method, path, err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: status %d (%v), want %d", method, path, resp.StatusCode, out, wantStatus)
	}
	return out
}

func TestControlSurfaceDrivesTheWorkspace(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{AckTimeout: 200 * time.Millisecond, RetrySchedule: []time.Duration{time.Hour}})
	c := connect(t, emu)
	waitConnected(t, emu, 1)

	posted := controlCall(t, emu, "POST", "post", map[string]any{"channel": "C0000001", "user": "U0000002", "text": "<@UB000001> hi"}, 200)
	ts, _ := posted["ts"].(string)
	if ids, _ := posted["event_ids"].([]any); ts == "" || len(ids) != 2 {
		t.Fatalf("post answer = %v", posted)
	}
	c.waitEvent(t, "mention", eventsAPI(func(d delivered) bool { return d.inner.Type == "app_mention" }))

	if _, _, err := c.api.PostMessage("C0000001", slack.MsgOptionText("hello from the bot", false), slack.MsgOptionTS(ts)); err != nil {
		t.Fatal(err)
	}
	q := url.Values{"channel": {"C0000001"}, "ts": {ts}, "n": {"1"}, "timeout_ms": {"5000"}}
	replies := controlCall(t, emu, "GET", "wait_replies?"+q.Encode(), nil, 200)
	if msgs, _ := replies["messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["text"] != "hello from the bot" {
		t.Errorf("wait_replies = %v", replies)
	}
	thread := controlCall(t, emu, "GET", "thread?"+url.Values{"channel": {"C0000001"}, "ts": {ts}}.Encode(), nil, 200)
	if msgs, _ := thread["messages"].([]any); len(msgs) != 2 {
		t.Errorf("thread = %v", thread)
	}
	q.Set("n", "2")
	q.Set("timeout_ms", "50")
	controlCall(t, emu, "GET", "wait_replies?"+q.Encode(), nil, http.StatusRequestTimeout)
	controlCall(t, emu, "GET", "thread?channel=C0000001&ts=1.000001", nil, http.StatusNotFound)

	controlCall(t, emu, "POST", "method_fault", map[string]any{"method": "chat.postMessage", "error": "is_archived", "times": 1}, 200)
	_, _, err := c.api.PostMessage("C0000001", slack.MsgOptionText("x", false))
	if got := slackErr(t, err); got != "is_archived" {
		t.Errorf("after method_fault: %s", got)
	}
	calls := controlCall(t, emu, "GET", "calls?method=chat.postMessage", nil, 200)
	if calls["count"] != float64(2) {
		t.Errorf("calls = %v", calls["count"])
	}

	controlCall(t, emu, "POST", "delivery_fault", map[string]any{"kind": "explode"}, http.StatusBadRequest)
	controlCall(t, emu, "POST", "disconnect", map[string]any{"reason": "sideways"}, http.StatusConflict)
	controlCall(t, emu, "POST", "disconnect", map[string]any{"conn_id": 0, "reason": "refresh_requested"}, 200)
	waitConnected(t, emu, 2)
	conns := controlCall(t, emu, "GET", "connections", nil, 200)
	if conns["opened"] != float64(2) {
		t.Errorf("connections = %v", conns)
	}
	acks := controlCall(t, emu, "GET", "acks", nil, 200)
	if _, ok := acks["acks"]; !ok {
		t.Errorf("acks = %v", acks)
	}
	controlCall(t, emu, "POST", "post", map[string]any{"channel": "C9999999", "text": "x"}, http.StatusNotFound)

	controlCall(t, emu, "POST", "rate_limit", map[string]any{"method": "users.info", "burst": 1, "every_ms": 3600000}, 200)
	if _, err := c.api.GetUserInfo("U0000001"); err != nil {
		t.Fatal(err)
	}
	var rl *slack.RateLimitedError
	if _, err := c.api.GetUserInfo("U0000001"); !errors.As(err, &rl) {
		t.Errorf("users.info over the limit: %v", err)
	}

	controlCall(t, emu, "POST", "delivery_fault", map[string]any{"kind": "drop", "event_type": "message"}, 200)
	dropped := controlCall(t, emu, "POST", "post", map[string]any{"channel": "C0000001", "text": "lost once"}, 200)
	id := dropped["event_ids"].([]any)[0].(string)
	if err := emu.Wait(waitCtx(t), func() bool { return emu.DeliveryState(id) == StateAwaitingRetry }); err != nil {
		t.Fatalf("dropped delivery state %s: %v", emu.DeliveryState(id), err)
	}
	if fired := controlCall(t, emu, "POST", "fire_retries", nil, 200); fired["fired"].(float64) < 1 {
		t.Errorf("fire_retries = %v", fired)
	}
	c.waitEvent(t, "retried event", eventsAPI(ofEvent(id, 1)))

	controlCall(t, emu, "POST", "raw", map[string]any{"frame": `{"type":"hello","num_connections":7}`}, 200)
	c.waitEvent(t, "raw hello", func(ev socketmode.Event) bool {
		return ev.Type == socketmode.EventTypeHello && ev.Request != nil && ev.Request.NumConnections == 7
	})
	opened := emu.ConnectionsOpened()
	controlCall(t, emu, "POST", "drop_connection", map[string]any{}, 200)
	waitConnected(t, emu, opened+1)
	controlCall(t, emu, "POST", "clear_faults", nil, 200)
}
