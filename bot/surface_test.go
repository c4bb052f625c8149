package bot_test

import (
	"context"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
)

// recordingSurface claims the shortcut and the event type it is given, and reports each it
// answered on a channel (the test's signal).
type recordingSurface struct {
	callbackID, eventType string
	got                   chan string
}

func (r *recordingSurface) Interaction(ctx context.Context, cb slack.InteractionCallback) bool {
	if cb.CallbackID != r.callbackID {
		return false
	}
	r.got <- "shortcut " + cb.CallbackID + " by " + cb.User.ID
	return true
}

func (r *recordingSurface) Event(ctx context.Context, ev slackevents.EventsAPIEvent) bool {
	if ev.InnerEvent.Type != r.eventType {
		return false
	}
	r.got <- "event " + ev.InnerEvent.Type
	return true
}

// A surface listed in Deps.Surfaces answers its own message shortcut and its own event, after
// the gateway acked them; a shortcut it does not claim still reaches the engine's own (the
// transcript shortcut), and the first surface that claims an envelope is the only one asked.
func TestSurfacesAnswerTheirShortcutsAndEvents(t *testing.T) {
	t.Parallel()
	first := &recordingSurface{callbackID: "branch_here", eventType: "app_home_opened", got: make(chan string, 4)}
	second := &recordingSurface{callbackID: "branch_here", eventType: "app_home_opened", got: make(chan string, 4)}
	h := newHarness(t, &echoAgent{}, harnessOptions{surfaces: []bot.Surface{first, second}})

	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	h.replies(general, top.TS, 1)
	sent, err := h.emu.SendMessageShortcut(slackemu.MessageShortcut{CallbackID: "branch_here", Channel: general, TS: top.TS, User: ada})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), sent.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-first.got:
		if got != "shortcut branch_here by "+ada {
			t.Fatalf("first surface got %q", got)
		}
	case <-h.waitCtx().Done():
		t.Fatal("the shortcut never reached its surface")
	}

	id, err := h.emu.PublishEvent([]byte(`{"type":"app_home_opened","user":"` + ada + `","channel":"D0001","tab":"home"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.emu.WaitForAck(h.waitCtx(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-first.got:
		if got != "event app_home_opened" {
			t.Fatalf("first surface got %q", got)
		}
	case <-h.waitCtx().Done():
		t.Fatal("the event never reached its surface")
	}
	// The transcript shortcut is the engine's: no surface claims it, and it is answered.
	sent, err = h.emu.SendMessageShortcut(slackemu.MessageShortcut{CallbackID: bot.TranscriptShortcut, Channel: general, TS: top.TS, User: ada})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.emu.Wait(h.waitCtx(), func() bool { return len(h.emu.Ephemerals()) == 1 }); err != nil {
		t.Fatalf("no answer to the transcript shortcut: %v", err)
	}
	if len(second.got) != 0 {
		t.Fatalf("the second surface was asked after the first claimed: %q", <-second.got)
	}
}
