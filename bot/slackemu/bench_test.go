package slackemu

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// Benchmarks come in pairs: the emulator path and a baseline doing the same
// transport work with no emulator logic, so results read as a ratio.

func BenchmarkChatPostMessage(b *testing.B) {
	emu := MustStart(b, Options{PingInterval: 50 * time.Millisecond})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := api.PostMessage("C0000001", slack.MsgOptionText("benchmark", false)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineFormPost is slack-go's PostMessage against a handler that
// only answers {"ok":true,...}.
func BenchmarkBaselineFormPost(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"channel":"C0000001","ts":"1700000000.000100"}`))
	}))
	defer srv.Close()
	api := slack.New("xoxb-x", slack.OptionAPIURL(srv.URL+"/api/"))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := api.PostMessage("C0000001", slack.MsgOptionText("benchmark", false)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEventRoundTrip: a driver post, its `message` envelope to the slack-go
// socketmode client, the client's ack, the emulator settling the delivery.
func BenchmarkEventRoundTrip(b *testing.B) {
	emu := MustStart(b, Options{PingInterval: 50 * time.Millisecond, RecordLimit: 1000})
	smc := socketmode.New(newAPI(emu, emu.BotToken(), emu.AppToken()), socketmode.OptionPingInterval(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = smc.RunContext(ctx) })
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-smc.Events:
				if ev.Type == socketmode.EventTypeEventsAPI {
					_ = smc.AckCtx(ctx, ev.Request.EnvelopeID, nil)
				}
			}
		}
	})
	defer func() {
		cancel()
		wg.Wait()
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	if err := emu.Wait(wctx, func() bool { return len(emu.Connections()) == 1 }); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := emu.Post(Post{Channel: "C0000001", Text: "benchmark"})
		if err != nil {
			b.Fatal(err)
		}
		if err := emu.Wait(wctx, func() bool { return emu.DeliveryState(p.EventIDs[0]) == StateAcked }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineWebSocketRoundTrip: one JSON frame out and one small frame
// back over a loopback gorilla WebSocket.
func BenchmarkBaselineWebSocketRoundTrip(b *testing.B) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
			if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"envelope_id":"e"}`)); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial(strings.Replace(srv.URL, "http", "ws", 1), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	frame := []byte(`{"envelope_id":"e","type":"events_api","payload":{"event":{"type":"message","text":"benchmark"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := ws.WriteMessage(websocket.TextMessage, frame); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ws.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
}
