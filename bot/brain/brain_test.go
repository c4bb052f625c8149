package brain_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/rs/zerolog"
)

func TestAnthropicMultiRoundToolConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{Text: "Let me look.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"ls"}`}},
			InputTokens: 120, OutputTokens: 20},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_2", Name: "read_file", Input: `{"path":"notes.txt"}`}},
			InputTokens: 160, OutputTokens: 15},
		fakeprovider.Reply{Text: "notes.txt says hello.", InputTokens: 200, OutputTokens: 8},
		fakeprovider.Reply{Text: "Reading the notes"}, // title
	)
	hands := &fakeHands{files: map[string]string{"notes.txt": "hello"}, exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{Stdout: "notes.txt\n", Duration: 3 * time.Millisecond}, nil
	}}
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)

	msgSeq, _ := e.user("@logbook what's in the workspace?")
	turnSeq := e.startTurn(msgSeq)
	r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
	if err != nil {
		t.Fatal(err)
	}

	evs := e.after(turnSeq)
	wantTypes(t, evs,
		session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult,
		session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult,
		session.TypeAssistantMessage, session.TypeTitle)

	m1 := decode[session.AssistantMessage](t, evs[0])
	if m1.Text != "Let me look." || !slices.Equal(m1.ToolCallIDs, []string{"toolu_1"}) || m1.Turn != turnSeq || m1.Reply() {
		t.Errorf("first assistant message = %+v", m1)
	}
	if u := m1.Usage; u == nil || u.Provider != "anthropic" || u.Model != "claude-fake-1" || u.InputTokens != 120 ||
		u.OutputTokens != 20 || u.StopReason != "tool_use" {
		t.Errorf("first usage = %+v", m1.Usage)
	}
	if evs[0].Actor != (session.Actor{Kind: session.ActorBot, ID: "UB000001"}) {
		t.Errorf("assistant actor = %v", evs[0].Actor)
	}
	c1 := decode[session.ToolCall](t, evs[1])
	if c1.CallID != "toolu_1" || c1.Name != "run_command" || string(c1.Input) != `{"command": "ls"}` && string(c1.Input) != `{"command":"ls"}` {
		t.Errorf("first tool call = %+v (input %s)", c1, c1.Input)
	}
	r1 := decode[session.ToolResult](t, evs[2])
	if r1.CallID != "toolu_1" || r1.IsError || r1.ExitCode == nil || *r1.ExitCode != 0 || !strings.Contains(r1.Content, "notes.txt") ||
		r1.DurationMS != 3 || evs[2].Actor.Kind != session.ActorSandbox {
		t.Errorf("first tool result = %+v by %v", r1, evs[2].Actor)
	}
	if c2 := decode[session.ToolCall](t, evs[4]); c2.CallID != "toolu_2" || c2.Name != "read_file" {
		t.Errorf("second tool call = %+v", c2)
	}
	if r2 := decode[session.ToolResult](t, evs[5]); r2.CallID != "toolu_2" || r2.Content != "hello" || r2.IsError {
		t.Errorf("second tool result = %+v", r2)
	}
	final := decode[session.AssistantMessage](t, evs[6])
	if !final.Reply() || final.Text != "notes.txt says hello." || final.Usage == nil || final.Usage.StopReason != "end_turn" {
		t.Errorf("reply = %+v", final)
	}
	if r.Event.Seq != evs[6].Seq || r.Status != session.StatusOK || r.Message.Text != final.Text {
		t.Errorf("Run returned %+v, want the reply event %d", r, evs[6].Seq)
	}
	if title := decode[session.Title](t, evs[7]); title.Text != "Reading the notes" {
		t.Errorf("title = %q", title.Text)
	}
	if got := hands.ran(); !slices.Equal(got, []string{"ls"}) {
		t.Errorf("commands run = %q", got)
	}

	calls := mustAllValid(t, fake, 4)
	if !strings.Contains(calls[0].System, "#general") || !strings.Contains(calls[0].System, "Acme") || !strings.Contains(calls[0].System, "run_command") {
		t.Errorf("system prompt lacks where and tools:\n%s", calls[0].System)
	}
	if !slices.Equal(calls[0].Tools, []string{"run_command", "read_file", "write_file"}) {
		t.Errorf("tools offered = %v", calls[0].Tools)
	}
	if got := blockTexts(calls[0].Messages[0]); !slices.Equal(got, []string{"text:Alice: what's in the workspace?"}) {
		t.Errorf("first user message = %q (mention stripped, speaker named)", got)
	}
	if roles(calls[2].Messages) != "user,assistant,user,assistant,user" {
		t.Fatalf("third request roles = %s", roles(calls[2].Messages))
	}
	if got := blockTexts(calls[2].Messages[1]); !slices.Equal(got, []string{"text:Let me look.", "tool_use:toolu_1"}) {
		t.Errorf("third request message 1 = %q", got)
	}
	if got := blockTexts(calls[2].Messages[4]); !slices.Equal(got, []string{"tool_result:toolu_2"}) {
		t.Errorf("third request message 4 = %q", got)
	}
}

func TestOpenAIParallelToolCallsAndSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
			{ID: "call_a", Name: "write_file", Input: `{"path":"a.txt","content":"alpha"}`},
			{ID: "call_b", Name: "search_sessions", Input: `{"query":"deploy key"}`},
		}, InputTokens: 50, OutputTokens: 30},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_c", Name: "run_command", Input: `{"command":"cat a.txt"}`}}},
		fakeprovider.Reply{Text: "Wrote a.txt; the deploy key rotated on Monday.", InputTokens: 90, OutputTokens: 12},
	)
	hands := &fakeHands{}
	searcher := &fakeSearcher{}
	b, _ := newBrain(t, openAIProvider(t, fake, openAIKey), nil)

	msgSeq, _ := e.user("write alpha to a.txt and tell me about the deploy key")
	turnSeq := e.startTurn(msgSeq)
	tr := e.turn(hands, turnSeq)
	tr.Tools = append(tr.Tools, brain.SearchTool(searcher, zerolog.Nop()))
	r, err := b.Run(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs,
		session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolCall, session.TypeToolResult, session.TypeToolResult,
		session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult,
		session.TypeAssistantMessage)
	if m := decode[session.AssistantMessage](t, evs[0]); !slices.Equal(m.ToolCallIDs, []string{"call_a", "call_b"}) ||
		m.Usage.Provider != "openai" || m.Usage.Model != "gpt-fake-1" || m.Usage.StopReason != "tool_calls" || m.Usage.InputTokens != 50 {
		t.Errorf("first assistant message = %+v usage %+v", m, m.Usage)
	}
	if res := decode[session.ToolResult](t, evs[3]); res.CallID != "call_a" || res.Content != "wrote 5 bytes to a.txt" {
		t.Errorf("write result = %+v", res)
	}
	if res := decode[session.ToolResult](t, evs[4]); res.CallID != "call_b" || !strings.Contains(res.Content, "rotated on Monday") ||
		evs[4].Actor.Kind != session.ActorSystem {
		t.Errorf("search result = %+v by %v", res, evs[4].Actor)
	}
	if hands.files["a.txt"] != "alpha" || !slices.Equal(hands.ran(), []string{"cat a.txt"}) || !slices.Equal(searcher.queries, []string{"deploy key/5"}) {
		t.Errorf("hands files %v commands %v, searches %v", hands.files, hands.ran(), searcher.queries)
	}
	if r.Message.Text != "Wrote a.txt; the deploy key rotated on Monday." || r.Event.Seq != evs[8].Seq {
		t.Errorf("reply = %+v", r)
	}

	calls := mustAllValid(t, fake, 3)
	if !slices.Equal(calls[0].Tools, []string{"run_command", "read_file", "write_file", "search_sessions"}) {
		t.Errorf("tools = %v", calls[0].Tools)
	}
	// system, user, assistant(2 calls), tool a, tool b
	if got := roles(calls[1].Messages); got != "system,user,assistant,tool,tool" {
		t.Fatalf("second request roles = %s", got)
	}
	if a, b := calls[1].Messages[3].Blocks[0].ToolUseID, calls[1].Messages[4].Blocks[0].ToolUseID; a != "call_a" || b != "call_b" {
		t.Errorf("tool messages answer %s, %s; want call_a, call_b in call order", a, b)
	}
}

// The process died between a tool_call and its tool_result. The next turn appends an
// interrupted result for every missing id, in call order, without running the tool again, and
// the provider accepts the request.
func TestCrashBetweenToolCallAndResultThenResume(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
			first, _ := e.user("run the migration and the backfill")
			turn1 := e.startTurn(first)
			e.append(
				session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
					Text: "Running both.", ToolCallIDs: []string{"toolu_1", "toolu_2"}, Turn: turn1}},
				session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_1", Name: "run_command", Input: []byte(`{"command":"make migrate"}`)}},
				session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_2", Name: "run_command", Input: []byte(`{"command":"make backfill"}`)}},
			)
			e.append(session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "sandbox"},
				Payload: session.ToolResult{CallID: "toolu_1", Content: "migrated"}})
			// The process dies here. A new mention arrives; a new cell starts a turn.
			second, _ := e.user("are you there?")
			turn2 := e.startTurn(second)

			var fake *fakeprovider.Server
			var p brain.Provider
			if kind == "anthropic" {
				fake = fakeprovider.NewAnthropic(t, anthropicKey)
				p = anthropicProvider(t, fake, anthropicKey)
			} else {
				fake = fakeprovider.NewOpenAI(t, openAIKey)
				p = openAIProvider(t, fake, openAIKey)
			}
			fake.Push(fakeprovider.Reply{Text: "Yes. The migration ran; the backfill was interrupted, so I don't know whether it finished."})
			hands := &fakeHands{}
			b, _ := newBrain(t, p, nil)
			r, err := b.Run(context.Background(), e.turn(hands, turn2))
			if err != nil {
				t.Fatal(err)
			}
			evs := e.after(turn2)
			wantTypes(t, evs, session.TypeToolResult, session.TypeAssistantMessage)
			syn := decode[session.ToolResult](t, evs[0])
			if !reflect.DeepEqual(syn, session.ToolResult{CallID: "toolu_2", Content: "interrupted; outcome unknown", IsError: true, Synthetic: true}) {
				t.Errorf("synthetic result = %+v", syn)
			}
			if r.Status != session.StatusOK || !strings.HasPrefix(r.Message.Text, "Yes.") {
				t.Errorf("reply = %+v", r)
			}
			if got := hands.ran(); len(got) != 0 {
				t.Errorf("tools were run again: %q", got)
			}
			calls := mustAllValid(t, fake, 1)
			msgs := calls[0].Messages
			if kind == "anthropic" {
				if got := blockTexts(msgs[2]); !slices.Equal(got, []string{"tool_result:toolu_1", "tool_result:toolu_2", "text:Alice: are you there?"}) {
					t.Errorf("results message = %q", got)
				}
				if !msgs[2].Blocks[1].IsError || msgs[2].Blocks[1].Text != "interrupted; outcome unknown" {
					t.Errorf("interrupted result as sent = %+v", msgs[2].Blocks[1])
				}
			} else if got := roles(msgs); got != "system,user,assistant,tool,tool,user" {
				t.Errorf("roles = %s", got)
			}

			// A second resume finds nothing to repair.
			third, _ := e.user("thanks")
			turn3 := e.startTurn(third)
			fake.Push(fakeprovider.Reply{Text: "You're welcome."})
			if _, err := b.Run(context.Background(), e.turn(hands, turn3)); err != nil {
				t.Fatal(err)
			}
			wantTypes(t, e.after(turn3), session.TypeAssistantMessage)
			mustAllValid(t, fake, 2)
		})
	}
}

// The fake providers reject what the real APIs reject, so the tests above prove something.
func TestFakeProvidersRejectInvalidHistories(t *testing.T) {
	t.Parallel()
	toolUse := brain.Block{ToolUse: &brain.ToolUse{ID: "toolu_9", Name: "run_command", Input: []byte(`{"command":"ls"}`)}}
	result := brain.Block{ToolResult: &brain.ToolResult{CallID: "toolu_9", Content: "ok"}}
	tools := []brain.ToolSpec{{Name: "run_command", Description: "run", Schema: map[string]any{"type": "object", "properties": map[string]any{}}}}
	user := func(bs ...brain.Block) brain.Message { return brain.Message{Role: brain.RoleUser, Blocks: bs} }
	asst := func(bs ...brain.Block) brain.Message { return brain.Message{Role: brain.RoleAssistant, Blocks: bs} }
	text := func(s string) brain.Block { return brain.Block{Text: s} }
	cases := []struct {
		name string
		msgs []brain.Message
		want map[string]string // kind -> part of the 400 message
	}{
		{"tool_use without result", []brain.Message{user(text("hi")), asst(toolUse), user(text("again"))},
			map[string]string{"anthropic": "without `tool_result` blocks immediately after", "openai": "must be followed by tool messages"}},
		{"result without tool_use", []brain.Message{user(text("hi")), asst(text("ok")), user(result, text("x"))},
			map[string]string{"anthropic": "unexpected `tool_use_id`", "openai": "must be a response to a preceeding message"}},
		{"empty text block", []brain.Message{user(text(""))},
			map[string]string{"anthropic": "non-empty", "openai": "must not be empty"}},
		{"first message from the assistant", []brain.Message{asst(text("hello")), user(text("hi"))},
			map[string]string{"anthropic": "first message must use the \"user\" role"}},
	}
	for _, kind := range []string{"anthropic", "openai"} {
		var fake *fakeprovider.Server
		var p brain.Provider
		if kind == "anthropic" {
			fake = fakeprovider.NewAnthropic(t, anthropicKey)
			p = anthropicProvider(t, fake, anthropicKey)
		} else {
			fake = fakeprovider.NewOpenAI(t, openAIKey)
			p = openAIProvider(t, fake, openAIKey)
		}
		for _, c := range cases {
			want, ok := c.want[kind]
			if !ok {
				continue
			}
			_, err := p.Complete(context.Background(), brain.Request{Messages: c.msgs, Tools: tools, MaxTokens: 100})
			var pe *brain.ProviderError
			if !errors.As(err, &pe) || pe.Status != 400 || pe.Transient || !strings.Contains(pe.Message, want) {
				t.Errorf("%s %s: err = %v, want a permanent 400 containing %q", kind, c.name, err, want)
			}
		}
	}
}

func TestTransientErrorsAreRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "Number of requests has exceeded your rate limit", RetryAfter: "7"},
		fakeprovider.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"},
		fakeprovider.Reply{Text: "Here you go.", InputTokens: 10, OutputTokens: 3},
	)
	b, sl := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	seq, _ := e.user("hello")
	turnSeq := e.startTurn(seq)
	r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeAssistantMessage)
	if m := decode[session.AssistantMessage](t, evs[0]); m.Text != "Here you go." || m.Usage.OutputTokens != 3 || r.Status != session.StatusOK {
		t.Errorf("reply = %+v, status %s", m, r.Status)
	}
	// First wait honours Retry-After (7s); the second is backoff 2s with jitter 0.5: 1s + 0.5s.
	if got := sl.all(); !slices.Equal(got, []time.Duration{7 * time.Second, 1500 * time.Millisecond}) {
		t.Errorf("waits = %v", got)
	}
	calls := mustAllValid(t, fake, 3)
	if len(calls[0].Tools) != 0 {
		t.Errorf("tools offered without hands or searcher: %v", calls[0].Tools)
	}
}

func TestOpenAIServerErrorsRetriedThenGiveUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	fake.Push(
		fakeprovider.Reply{Status: 503, ErrorType: "server_error", ErrorMessage: "The server is overloaded"},
		fakeprovider.Reply{Status: 500, ErrorType: "server_error", ErrorMessage: "internal"},
		fakeprovider.Reply{Status: 502, ErrorType: "server_error", ErrorMessage: "bad gateway"},
	)
	b, sl := newBrain(t, openAIProvider(t, fake, openAIKey), func(c *brain.Config) { c.Retry.Attempts = 3 })
	seq, _ := e.user("hello")
	turnSeq := e.startTurn(seq)
	r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeError, session.TypeAssistantMessage)
	if ev := decode[session.ErrorEvent](t, evs[0]); ev.Stage != "model" || ev.Code != "http_502" {
		t.Errorf("error event = %+v", ev)
	}
	if r.Status != session.StatusError || r.Reason != "http_502" || !strings.Contains(r.Message.Text, "unavailable") {
		t.Errorf("reply = %+v", r)
	}
	if got := len(sl.all()); got != 2 {
		t.Errorf("%d waits, want 2", got)
	}
	mustAllValid(t, fake, 3)
}

func TestPermanentErrorsEndTheTurn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		key      string // key the brain uses; the fake accepts anthropicKey only
		reply    *fakeprovider.Reply
		code     string
		replyHas string
	}{
		{"400", anthropicKey, &fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "prompt is too long: 250000 tokens > 200000 maximum"},
			"http_400", "rejected the request (HTTP 400, invalid_request_error)"},
		{"401", "sk-ant-wrong-key-42", nil, "http_401", "refused logbook's credentials"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			fake := fakeprovider.NewAnthropic(t, anthropicKey)
			if c.reply != nil {
				fake.Push(*c.reply)
			}
			b, sl := newBrain(t, anthropicProvider(t, fake, c.key), nil)
			seq, _ := e.user("hello")
			turnSeq := e.startTurn(seq)
			r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
			if err != nil {
				t.Fatal(err)
			}
			evs := e.after(turnSeq)
			wantTypes(t, evs, session.TypeError, session.TypeAssistantMessage) // no title after a failed turn
			ev := decode[session.ErrorEvent](t, evs[0])
			if ev.Stage != "model" || ev.Code != c.code || ev.Message == "" {
				t.Errorf("error event = %+v", ev)
			}
			m := decode[session.AssistantMessage](t, evs[1])
			if !m.Reply() || !strings.Contains(m.Text, c.replyHas) || r.Status != session.StatusError || r.Reason != c.code || r.Event.Seq != evs[1].Seq {
				t.Errorf("reply = %+v (Run: %+v)", m, r)
			}
			if len(sl.all()) != 0 {
				t.Errorf("a permanent error was retried: waits %v", sl.all())
			}
			if len(fake.Calls()) != 1 {
				t.Errorf("%d calls, want 1", len(fake.Calls()))
			}
			for _, ev := range e.after(0) {
				if strings.Contains(string(ev.Payload), "sk-ant-") {
					t.Errorf("an API key reached event %d: %s", ev.Seq, ev.Payload)
				}
			}
		})
	}
}

// An over-budget history is summarised at a turn boundary into a context_summary; the next
// request is summary + recent turns, and the provider accepts it.
func TestOverBudgetHistoryIsSummarised(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	sandboxActor := session.Actor{Kind: session.ActorSandbox, ID: "sandbox"}
	for i := range 6 {
		seq, _ := e.user(fmt.Sprintf("check disk %d", i))
		ts := e.startTurn(seq)
		id := fmt.Sprintf("toolu_old%d", i)
		e.append(
			session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{ToolCallIDs: []string{id}, Turn: ts}},
			session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: id, Name: "run_command", Input: []byte(`{"command":"df -h"}`)}},
		)
		e.append(
			session.NewEvent{Type: session.TypeToolResult, Actor: sandboxActor, Payload: session.ToolResult{CallID: id, Content: strings.Repeat("filesystem line\n", 120)}},
			session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: fmt.Sprintf("Disk %d is fine.", i), Turn: ts}},
			session.NewEvent{Type: session.TypeTurnCompleted, Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"}, Payload: session.TurnCompleted{Turn: ts, Status: "ok"}},
		)
	}
	seq, _ := e.user("and now?")
	turnSeq := e.startTurn(seq)

	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{Text: "Alice checked the disks six times with df -h; all were fine."},
		fakeprovider.Reply{Text: "Still fine."},
	)
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), func(c *brain.Config) { c.ContextBudget = 1500 })
	if _, err := b.Run(context.Background(), e.turn(&fakeHands{}, turnSeq)); err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeContextSummary, session.TypeAssistantMessage)
	sum := decode[session.ContextSummary](t, evs[0])
	if sum.FromSeq != 1 || sum.Summary != "Alice checked the disks six times with df -h; all were fine." || sum.ToSeq <= 1 || sum.ToSeq >= turnSeq {
		t.Fatalf("summary = %+v", sum)
	}
	// The cut is at a turn boundary: the first event after it is a user message.
	next, err := e.st.Events(context.Background(), e.sess.ID, session.Range{From: sum.ToSeq + 1, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if next[0].Type != session.TypeUserMessage {
		t.Errorf("the summary ends before a %s at seq %d, want a user_message", next[0].Type, next[0].Seq)
	}

	calls := mustAllValid(t, fake, 2)
	if !strings.Contains(calls[0].System, "condense") || !strings.Contains(calls[0].Messages[0].Blocks[0].Text, "check disk 0") {
		t.Errorf("the first call is not a summary request: %s", calls[0].System)
	}
	reqMsgs := calls[1].Messages
	if first := reqMsgs[0].Blocks[0].Text; !strings.HasPrefix(first, "[Summary of the earlier conversation") || !strings.Contains(first, sum.Summary) {
		t.Errorf("the request does not open with the summary: %q", first)
	}
	body := string(calls[1].Body)
	if strings.Contains(body, "toolu_old0") || !strings.Contains(body, "and now?") {
		t.Errorf("the request should hold recent events only")
	}

	// The next turn uses the stored summary without summarising again.
	seq, _ = e.user("thanks")
	turn2 := e.startTurn(seq)
	fake.Push(fakeprovider.Reply{Text: "Any time."})
	if _, err := b.Run(context.Background(), e.turn(&fakeHands{}, turn2)); err != nil {
		t.Fatal(err)
	}
	wantTypes(t, e.after(turn2), session.TypeAssistantMessage)
	calls = mustAllValid(t, fake, 3)
	if !strings.Contains(calls[2].Messages[0].Blocks[0].Text, sum.Summary) {
		t.Errorf("the next turn does not use the summary")
	}
}

// Edits replace the text, deleted messages are left out, and a message that arrived while the
// turn ran waits for the next turn.
func TestHistoryAppliesEditsDeletesAndTurnBoundary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	_, ts1 := e.user("deploy to prod")
	seq2, ts2 := e.user("my password is hunter2")
	e.append(
		session.NewEvent{Type: session.TypeUserMessageEdited, Actor: alice, Payload: session.UserMessageEdited{OrigTS: ts1, User: "U0000001", Text: "deploy to staging"}},
		session.NewEvent{Type: session.TypeUserMessageDeleted, Actor: alice, Payload: session.UserMessageDeleted{DeletedTS: ts2}},
	)
	turnSeq := e.startTurn(seq2)
	e.user("also, queued while the turn runs")

	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(fakeprovider.Reply{Text: "Deploying to staging."})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	if _, err := b.Run(context.Background(), e.turn(nil, turnSeq)); err != nil {
		t.Fatal(err)
	}
	calls := mustAllValid(t, fake, 1)
	if got := blockTexts(calls[0].Messages[0]); !slices.Equal(got, []string{"text:Alice: deploy to staging"}) {
		t.Errorf("user message = %q", got)
	}
	if strings.Contains(string(calls[0].Body), "hunter2") || strings.Contains(string(calls[0].Body), "queued") {
		t.Errorf("the request holds a deleted or queued message: %s", calls[0].Body)
	}
}

// A thread holding only a bare mention gets a question back, and no model call.
func TestBareMentionAsksWhatToDo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	seq, _ := e.user("@logbook")
	turnSeq := e.startTurn(seq)
	r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeAssistantMessage)
	if r.Message.Text != brain.EmptyMentionReply || r.Event.Seq != evs[0].Seq || r.Status != session.StatusOK {
		t.Errorf("reply = %+v", r)
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("%d model calls, want none", n)
	}
}

func TestRoundLimitForcesAnAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_a", Name: "run_command", Input: `{"command":"true"}`}}},
		fakeprovider.Reply{Text: "Done after one round."},
	)
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), func(c *brain.Config) { c.MaxRounds = 1 })
	seq, _ := e.user("loop forever")
	turnSeq := e.startTurn(seq)
	if _, err := b.Run(context.Background(), e.turn(&fakeHands{}, turnSeq)); err != nil {
		t.Fatal(err)
	}
	wantTypes(t, e.after(turnSeq), session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
	calls := mustAllValid(t, fake, 2)
	if calls[0].ToolChoice != "" || calls[1].ToolChoice != "none" {
		t.Errorf("tool_choice = %q, %q; want unset, then none", calls[0].ToolChoice, calls[1].ToolChoice)
	}
}

func TestOfflineProviderRunsTheLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hands := &fakeHands{exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{Stdout: "hi\n"}, nil
	}}
	b, _ := newBrain(t, brain.Offline{}, nil)
	seq, _ := e.user("@logbook run: echo hi")
	turnSeq := e.startTurn(seq)
	r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage, session.TypeTitle)
	m := decode[session.AssistantMessage](t, evs[0])
	if !strings.Contains(m.Text, "not a language model") || len(m.ToolCallIDs) != 1 || m.Usage.Provider != "offline" {
		t.Errorf("first message = %+v", m)
	}
	if c := decode[session.ToolCall](t, evs[1]); c.Name != "run_command" || c.CallID != m.ToolCallIDs[0] || !strings.Contains(string(c.Input), "echo hi") {
		t.Errorf("tool call = %+v", c)
	}
	if !slices.Equal(hands.ran(), []string{"echo hi"}) {
		t.Errorf("commands = %q", hands.ran())
	}
	if !strings.Contains(r.Message.Text, "hi") || !strings.Contains(r.Message.Text, "not a language model") || r.Event.Seq != evs[3].Seq {
		t.Errorf("reply = %+v", r)
	}
	// The offline title is the opening words of the thread's first message.
	if title := decode[session.Title](t, evs[4]); title.Text != "run: echo hi" {
		t.Errorf("title = %q", title.Text)
	}

	// A plain question is answered honestly, without a tool call, the same way every time.
	var replies []string
	for range 2 {
		seq, _ = e.user("what is the capital of France?")
		ts := e.startTurn(seq)
		r, err := b.Run(context.Background(), e.turn(hands, ts))
		if err != nil {
			t.Fatal(err)
		}
		wantTypes(t, e.after(ts), session.TypeAssistantMessage)
		replies = append(replies, r.Message.Text)
	}
	if replies[0] != replies[1] || !strings.Contains(replies[0], "not a language model") || !strings.Contains(replies[0], "run: <command>") {
		t.Errorf("offline replies = %q", replies)
	}
}

// The offline provider also writes a file ("write: PATH" and the lines after it) and hands one
// back ("attach: PATH"), so files out and write approvals can be tried without a model; where
// the tool is not offered it says so instead of calling it.
func TestOfflineProviderWritesAndAttaches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	hands := &fakeHands{}
	var attached []string
	b, _ := newBrain(t, brain.Offline{}, nil)
	turn := func(text string, attach bool) []session.Event {
		t.Helper()
		seq, _ := e.user(text)
		turnSeq := e.startTurn(seq)
		tu := e.turn(hands, turnSeq)
		if attach {
			tu.Tools = []brain.Tool{attachTool(func(callID, path, title string) (string, error) {
				attached = append(attached, path)
				return "attached " + path, nil
			})}
		}
		if _, err := b.Run(context.Background(), tu); err != nil {
			t.Fatal(err)
		}
		return e.after(turnSeq)
	}

	// Without Attach (no files:write) attach_file is not offered (asked first, so no earlier
	// call of it makes the history declare it): no call, and the reply says why.
	evs := turn("attach: notes/todo.txt", false)
	wantTypes(t, evs, session.TypeAssistantMessage)
	if m := decode[session.AssistantMessage](t, evs[0]); !strings.Contains(m.Text, "attach_file is not available here") {
		t.Errorf("reply = %q", m.Text)
	}
	evs = turn("@logbook write: notes/todo.txt\nfirst line\nrun: not a command\n", true)
	wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
	if c := decode[session.ToolCall](t, evs[1]); c.Name != brain.ToolWriteFile {
		t.Errorf("tool call = %+v, want write_file", c)
	}
	if got := hands.files["notes/todo.txt"]; got != "first line\nrun: not a command" {
		t.Errorf("written %q", got)
	}
	if len(hands.ran()) != 0 {
		t.Errorf("the content ran as a command: %q", hands.ran())
	}

	// "write: PATH" alone (sent before its lines) writes nothing, and says what it needs.
	evs = turn("write: empty.txt", true)
	wantTypes(t, evs, session.TypeAssistantMessage)
	if m := decode[session.AssistantMessage](t, evs[0]); !strings.Contains(m.Text, "Nothing was written: `write: empty.txt` needs the file's content on the lines after it") {
		t.Errorf("reply to a write without content = %q", m.Text)
	}
	if _, ok := hands.files["empty.txt"]; ok {
		t.Errorf("a write without content wrote the file")
	}

	evs = turn("attach: `notes/todo.txt`", true)
	wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
	if c := decode[session.ToolCall](t, evs[1]); c.Name != "attach_file" || !slices.Equal(attached, []string{"notes/todo.txt"}) {
		t.Errorf("tool call = %+v, attached %q", c, attached)
	}

	// A plain message names all three commands.
	evs = turn("hello", true)
	if m := decode[session.AssistantMessage](t, evs[0]); !strings.Contains(m.Text, brain.OfflineCommands) ||
		!strings.Contains(m.Text, "write: <path>") || !strings.Contains(m.Text, "attach: <path>") {
		t.Errorf("reply = %q", m.Text)
	}
}

func TestToolOutputIsCappedAndMarked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	big := strings.Repeat("0123456789", 500) + "THE END"
	hands := &fakeHands{exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{Stdout: big, ExitCode: 2, Stderr: "warning"}, nil
	}}
	b, _ := newBrain(t, brain.Offline{}, func(c *brain.Config) { c.MaxToolOutput = 600 })
	seq, _ := e.user("run: make noise")
	turnSeq := e.startTurn(seq)
	if _, err := b.Run(context.Background(), e.turn(hands, turnSeq)); err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
	res := decode[session.ToolResult](t, evs[2])
	if !res.Truncated || len(res.Content) > 600 || !strings.Contains(res.Content, "output truncated") ||
		!strings.HasPrefix(res.Content, "exit code: 2") || !strings.HasSuffix(res.Content, "warning") || !res.IsError || *res.ExitCode != 2 {
		t.Errorf("result (%d bytes) = %+v", len(res.Content), res)
	}
}

func TestTurnWallTimeEndsTheTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	clock := newTurnClock()
	hands := &fakeHands{exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
		clock.Advance(time.Second) // a command that outlives the turn
		<-ctx.Done()
		return sandbox.ExecResult{}, ctx.Err()
	}}
	b, _ := newBrain(t, brain.Offline{}, func(c *brain.Config) { c.MaxTurnTime, c.Now, c.AfterFunc = time.Second, clock.Now, clock.AfterFunc })
	seq, _ := e.user("run: sleep 1000")
	turnSeq := e.startTurn(seq)
	r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeError, session.TypeAssistantMessage)
	if res := decode[session.ToolResult](t, evs[2]); !res.IsError || !strings.Contains(res.Content, "ran out of time") {
		t.Errorf("result = %+v", res)
	}
	if ev := decode[session.ErrorEvent](t, evs[3]); ev.Stage != "turn" || ev.Code != "wall_time" {
		t.Errorf("error = %+v", ev)
	}
	if r.Status != session.StatusError || r.Reason != "wall_time" || !strings.Contains(r.Message.Text, "time limit") {
		t.Errorf("reply = %+v", r)
	}
}

// A cell that lost its lease cannot append: Run stops with the log's error and no reply.
func TestRunStopsWhenTheLogRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seq, _ := e.user("run: ls")
	turnSeq := e.startTurn(seq)
	b, _ := newBrain(t, brain.Offline{}, nil)
	tr := e.turn(&fakeHands{}, turnSeq)
	tr.Log = fencedLog{e.log}
	if _, err := b.Run(context.Background(), tr); !errors.Is(err, session.ErrFenced) {
		t.Fatalf("err = %v, want ErrFenced", err)
	}
	wantTypes(t, e.after(turnSeq))
}

type fencedLog struct{ storeLog }

func (l fencedLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return nil, fmt.Errorf("append: %w", session.ErrFenced)
}

func TestNewProvider(t *testing.T) {
	t.Parallel()
	cfg := brain.ProviderConfig{AnthropicAPIKey: "k"}
	for _, c := range []struct {
		spec, name, model string
		cfg               brain.ProviderConfig
		bad               bool
	}{
		{spec: "offline", name: "offline", model: "offline"},
		{spec: "anthropic:claude-x", name: "anthropic", model: "claude-x", cfg: cfg},
		{spec: "openai:llama3.1", name: "openai", model: "llama3.1"}, // local servers need no key
		{spec: "anthropic:claude-x", bad: true},                      // no key
		{spec: "openai:", bad: true},
		{spec: "gemini:pro", bad: true},
		{spec: "", bad: true},
	} {
		p, err := brain.NewProvider(c.spec, c.cfg)
		if c.bad {
			if !errors.Is(err, brain.ErrBadModelSpec) {
				t.Errorf("%q: err = %v, want ErrBadModelSpec", c.spec, err)
			}
			continue
		}
		if err != nil || p.Name() != c.name || p.Model() != c.model {
			t.Errorf("%q: %v, %v", c.spec, p, err)
		}
	}
}

// The process died after appending the reply but before turn_completed: running the turn
// again returns that reply and calls no model.
func TestRerunAfterReplyReturnsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(fakeprovider.Reply{Text: "Answer."})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	seq, _ := e.user("question")
	turnSeq := e.startTurn(seq)
	r1, err := b.Run(context.Background(), e.turn(nil, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	e.user("a later message, queued for the next turn")
	r2, err := b.Run(context.Background(), e.turn(nil, turnSeq))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Event.Seq != r1.Event.Seq || r2.Message.Text != "Answer." || r2.Status != session.StatusOK {
		t.Errorf("rerun = %+v, want the stored reply %d", r2, r1.Event.Seq)
	}
	wantTypes(t, e.after(turnSeq), session.TypeAssistantMessage, session.TypeUserMessage)
	mustAllValid(t, fake, 1)
}

// A thread whose history holds tool calls keeps them valid when the sandbox is gone: the tools
// are declared, but the model may not call one.
func TestHistoryWithToolsButNoHands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	seq, _ := e.user("run ls")
	ts := e.startTurn(seq)
	e.append(
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{ToolCallIDs: []string{"toolu_x"}, Turn: ts}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_x", Name: "run_command", Input: []byte(`{"command":"ls"}`)}},
		session.NewEvent{Type: session.TypeToolResult, Actor: bot, Payload: session.ToolResult{CallID: "toolu_x", Content: "a b"}},
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{Text: "a and b", Turn: ts}},
	)
	seq, _ = e.user("and again?")
	turnSeq := e.startTurn(seq)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(fakeprovider.Reply{Text: "I have no sandbox now."})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	if _, err := b.Run(context.Background(), e.turn(nil, turnSeq)); err != nil {
		t.Fatal(err)
	}
	wantTypes(t, e.after(turnSeq), session.TypeAssistantMessage)
	calls := mustAllValid(t, fake, 1)
	if calls[0].ToolChoice != "none" || len(calls[0].Tools) == 0 {
		t.Errorf("tools %v, tool_choice %q", calls[0].Tools, calls[0].ToolChoice)
	}
}

func TestUnreachableProviderIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/"
	srv.Close()
	for _, spec := range []string{"anthropic:m", "openai:m"} {
		p, err := brain.NewProvider(spec, brain.ProviderConfig{AnthropicAPIKey: "k", AnthropicBaseURL: url, OpenAIBaseURL: url})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Complete(context.Background(), brain.Request{Messages: []brain.Message{{Role: brain.RoleUser, Blocks: []brain.Block{{Text: "hi"}}}}})
		var pe *brain.ProviderError
		if !errors.As(err, &pe) || !pe.Transient || pe.Status != 0 || pe.Message != "no response: connection refused" {
			t.Errorf("%s: err = %v", spec, err)
		}
	}
}

// Tool output PostgreSQL cannot store is sanitised before it is stored, and the model sees
// the same sanitised text.
func TestToolOutputWithNULIsStoredSanitizedAndSentSanitized(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_n", Name: "run_command", Input: `{"command":"cat bin"}`}}},
		fakeprovider.Reply{Text: "It holds a NUL."},
	)
	hands := &fakeHands{exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{Stdout: "abc\x00def\xff"}, nil
	}}
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	seq, _ := e.user("what is in bin?")
	turnSeq := e.startTurn(seq)
	if _, err := b.Run(context.Background(), e.turn(hands, turnSeq)); err != nil {
		t.Fatal(err)
	}
	evs := e.after(turnSeq)
	wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
	res := decode[session.ToolResult](t, evs[2])
	if !evs[2].Sanitized || !strings.Contains(res.Content, "abc\uFFFDdef\uFFFD") {
		t.Fatalf("stored result (sanitized %v) = %q", evs[2].Sanitized, res.Content)
	}
	calls := mustAllValid(t, fake, 2)
	sent := calls[1].Messages[2].Blocks[0]
	if sent.Text != res.Content {
		t.Errorf("the model saw %q, the log holds %q", sent.Text, res.Content)
	}
}

// Some local models repeat tool call ids across turns; a repeated id is replaced, so no call or
// result is lost to idempotency and the history stays valid.
func TestRepeatedToolCallIDsAreReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	hands := &fakeHands{}
	var callIDs []string
	for i := range 2 {
		fake.Push(
			fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_0", Name: "run_command", Input: fmt.Sprintf(`{"command":"echo %d"}`, i)}}},
			fakeprovider.Reply{Text: fmt.Sprintf("done %d", i)},
		)
		seq, _ := e.user(fmt.Sprintf("echo %d", i))
		turnSeq := e.startTurn(seq)
		if _, err := b.Run(context.Background(), e.turn(hands, turnSeq)); err != nil {
			t.Fatal(err)
		}
		evs := e.after(turnSeq)
		wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
		c := decode[session.ToolCall](t, evs[1])
		r := decode[session.ToolResult](t, evs[2])
		if m := decode[session.AssistantMessage](t, evs[0]); !slices.Equal(m.ToolCallIDs, []string{c.CallID}) || r.CallID != c.CallID {
			t.Fatalf("turn %d: message ids %v, call %s, result %s", i, m.ToolCallIDs, c.CallID, r.CallID)
		}
		callIDs = append(callIDs, c.CallID)
	}
	if callIDs[0] != "call_0" || callIDs[1] == "call_0" {
		t.Errorf("call ids = %q, want the repeat replaced", callIDs)
	}
	mustAllValid(t, fake, 4)
}

// D1: a message that arrives while turn 1 runs (between turn 1's tool call and its result) is
// answered by turn 2 with a model call; both fake providers accept the history, which ends
// with that message after turn 1's reply.
func TestQueuedMessageIsAnsweredByTheNextTurn(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
			cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
			q1, _ := e.user("what is in the repo?")
			turn1 := e.startTurn(q1)
			e.append(
				session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
					ToolCallIDs: []string{"toolu_1"}, Turn: turn1}},
				session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_1", Name: "run_command", Input: []byte(`{"command":"ls"}`)}},
			)
			q2, _ := e.user("and how big is it?")
			e.append(session.NewEvent{Type: session.TypeQueued, Actor: cell, Payload: session.Queued{MessageSeq: q2}})
			e.append(session.NewEvent{Type: session.TypeToolResult, Actor: session.Actor{Kind: session.ActorSandbox, ID: "sandbox"},
				Payload: session.ToolResult{CallID: "toolu_1", Content: "README.md\nmain.go"}})
			a1 := e.append(session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
				Text: "A README and main.go.", Turn: turn1}})[0]
			e.append(session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{
				Turn: turn1, Status: session.StatusOK, Through: q1}})
			turn2 := e.startTurn(q2)

			var fake *fakeprovider.Server
			var p brain.Provider
			if kind == "anthropic" {
				fake = fakeprovider.NewAnthropic(t, anthropicKey)
				p = anthropicProvider(t, fake, anthropicKey)
			} else {
				fake = fakeprovider.NewOpenAI(t, openAIKey)
				p = openAIProvider(t, fake, openAIKey)
			}
			fake.Push(fakeprovider.Reply{Text: "Two files, small."})
			b, _ := newBrain(t, p, nil)
			r, err := b.Run(context.Background(), e.turn(&fakeHands{}, turn2))
			if err != nil {
				t.Fatal(err)
			}
			if r.Event.Seq == a1.Seq || r.Message.Text != "Two files, small." || r.Message.Turn != turn2 || r.Status != session.StatusOK {
				t.Fatalf("reply seq %d turn %d %q status %s, want turn %d's own answer (turn 1's reply is %d)",
					r.Event.Seq, r.Message.Turn, r.Message.Text, r.Status, turn2, a1.Seq)
			}
			wantTypes(t, e.after(turn2), session.TypeAssistantMessage)
			msgs := mustAllValid(t, fake, 1)[0].Messages
			if kind == "anthropic" {
				var got [][]string
				for _, m := range msgs {
					got = append(got, append([]string{m.Role}, blockTexts(m)...))
				}
				want := [][]string{
					{"user", "text:Alice: what is in the repo?"},
					{"assistant", "tool_use:toolu_1"},
					{"user", "tool_result:toolu_1"},
					{"assistant", "text:A README and main.go."},
					{"user", "text:Alice: and how big is it?"},
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("messages sent =\n%q\nwant\n%q", got, want)
				}
			} else {
				if got := roles(msgs); got != "system,user,assistant,tool,assistant,user" {
					t.Errorf("roles = %s", got)
				}
				if got := blockTexts(msgs[len(msgs)-1]); !slices.Equal(got, []string{"text:Alice: and how big is it?"}) {
					t.Errorf("last message = %q", got)
				}
			}
		})
	}
}

// recoveringTool is a tool whose interrupted calls its own record in the log explains: a
// done_marker event (here, a title naming the call) says the call finished.
type recoveringTool struct{ ran int }

func (*recoveringTool) Spec() brain.ToolSpec {
	return brain.ToolSpec{Name: "publish", Schema: map[string]any{"type": "object"}}
}
func (r *recoveringTool) Run(context.Context, brain.ToolUse) brain.Outcome {
	r.ran++
	return brain.Outcome{Content: "published"}
}
func (*recoveringTool) Recover(evs []session.Event, call session.ToolCall) (brain.Outcome, bool) {
	for _, e := range evs {
		var tt session.Title
		if e.Type == session.TypeTitle && e.Decode(&tt) == nil && tt.Text == "published "+call.CallID {
			return brain.Outcome{Content: "published before the restart"}, true
		}
	}
	return brain.Outcome{}, false
}

// An interrupted call of a tool whose own record says what it did (brain.Recoverer) is
// repaired with that outcome, not "outcome unknown", and is not run again; a call its record
// does not explain is repaired as unknown.
func TestRepairAsksTheToolWhatAnInterruptedCallDid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	first, _ := e.user("publish both")
	turn1 := e.startTurn(first)
	e.append(
		session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
			Text: "Publishing.", ToolCallIDs: []string{"toolu_p1", "toolu_p2"}, Turn: turn1}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_p1", Name: "publish", Input: []byte(`{}`)}},
		session.NewEvent{Type: session.TypeToolCall, Actor: bot, Payload: session.ToolCall{CallID: "toolu_p2", Name: "publish", Input: []byte(`{}`)}},
		session.NewEvent{Type: session.TypeTitle, Actor: bot, Payload: session.Title{Text: "published toolu_p1"}},
	)
	second, _ := e.user("done?")
	turn2 := e.startTurn(second)
	fake, p := fakeFor(t, "anthropic")
	fake.Push(fakeprovider.Reply{Text: "The first is out; the second I cannot tell."})
	b, _ := newBrain(t, p, nil)
	tool := &recoveringTool{}
	tu := e.turn(nil, turn2)
	tu.Tools = []brain.Tool{tool}
	if _, err := b.Run(context.Background(), tu); err != nil {
		t.Fatal(err)
	}
	evs := e.after(turn2)
	wantTypes(t, evs, session.TypeToolResult, session.TypeToolResult, session.TypeAssistantMessage)
	if got := decode[session.ToolResult](t, evs[0]); !reflect.DeepEqual(got, session.ToolResult{CallID: "toolu_p1", Content: "published before the restart", Synthetic: true}) {
		t.Errorf("recovered result = %+v", got)
	}
	if got := decode[session.ToolResult](t, evs[1]); got.Content != "interrupted; outcome unknown" || !got.IsError {
		t.Errorf("unexplained result = %+v", got)
	}
	if tool.ran != 0 {
		t.Errorf("an interrupted call ran again (%d)", tool.ran)
	}
}
