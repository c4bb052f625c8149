package bot_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// blockingProvider is a model whose first reply call waits for release; every reply names the
// text of the last message it was sent, and lasts records that text per call.
type blockingProvider struct {
	mu      sync.Mutex
	calls   int
	started chan struct{} // closed when the first reply call begins
	release chan struct{} // closed by the test to let it answer
	lasts   []string
}

func (p *blockingProvider) Name() string  { return "anthropic" }
func (p *blockingProvider) Model() string { return "test" }

func (p *blockingProvider) Complete(ctx context.Context, req brain.Request) (brain.Response, error) {
	if req.Purpose != brain.PurposeReply {
		return brain.Response{Text: "title", StopReason: "end_turn"}, nil
	}
	last := ""
	if n := len(req.Messages); n > 0 {
		for _, b := range req.Messages[n-1].Blocks {
			last += b.Text
		}
	}
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.lasts = append(p.lasts, last)
	p.mu.Unlock()
	if n == 1 {
		close(p.started)
		select {
		case <-p.release:
		case <-ctx.Done():
			return brain.Response{}, ctx.Err()
		}
	}
	return brain.Response{Text: "answer to: " + last, StopReason: "end_turn"}, nil
}

// D1: a message posted while the brain is answering the first one gets a queued marker and is
// answered by the next turn with its own model call, whose request ends with that message.
func TestQueuedMessageIsAnsweredByTheBrain(t *testing.T) {
	t.Parallel()
	p := &blockingProvider{started: make(chan struct{}), release: make(chan struct{})}
	b, err := brain.New(brain.Config{Provider: p, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, b, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> first question"})
	<-p.started
	s := h.session(general, top.TS)
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "second question"})
	h.waitFor("queued marker", func() bool { return len(h.events(s.ID, session.TypeQueued)) == 1 })
	close(p.release)
	h.turns(s.ID, 2)
	replies := h.replies(general, top.TS, 2)

	p.mu.Lock()
	lasts := append([]string(nil), p.lasts...)
	p.mu.Unlock()
	if len(lasts) != 2 || !strings.Contains(lasts[0], "first question") || strings.Contains(lasts[0], "second question") ||
		!strings.Contains(lasts[1], "second question") {
		t.Fatalf("model calls with last user text %q; replies %q / %q", lasts, replies[0].Text, replies[1].Text)
	}
	if !strings.Contains(replies[0].Text, "first question") || !strings.Contains(replies[1].Text, "second question") {
		t.Errorf("replies %q / %q, want the first then the second question answered", replies[0].Text, replies[1].Text)
	}
	// Each turn delivered its own reply: two replies from the model, each delivered once.
	var turnsOf []int64
	for _, e := range h.events(s.ID, session.TypeAssistantMessage) {
		var m session.AssistantMessage
		if err := e.Decode(&m); err != nil {
			t.Fatal(err)
		}
		turnsOf = append(turnsOf, m.Turn)
	}
	var starts []int64
	for _, e := range h.events(s.ID, session.TypeTurnStarted) {
		starts = append(starts, e.Seq)
	}
	if len(starts) != 2 || len(turnsOf) != 2 || turnsOf[0] != starts[0] || turnsOf[1] != starts[1] {
		t.Errorf("assistant messages of turns %v; turns started at %v", turnsOf, starts)
	}
}
