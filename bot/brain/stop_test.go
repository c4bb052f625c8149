package brain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

var kinds = []string{"anthropic", "openai"}

// fakeFor starts the fake of one provider kind and returns it with a provider that calls it.
func fakeFor(t testing.TB, kind string) (*fakeprovider.Server, brain.Provider) {
	t.Helper()
	if kind == "anthropic" {
		fake := fakeprovider.NewAnthropic(t, anthropicKey)
		return fake, anthropicProvider(t, fake, anthropicKey)
	}
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	return fake, openAIProvider(t, fake, openAIKey)
}

// cutReason is the stop reason of a completion the output limit cut.
func cutReason(kind string) string {
	if kind == "anthropic" {
		return "max_tokens"
	}
	return "length"
}

// lastText is the text of a received message's last text block.
func lastText(m fakeprovider.Message) string {
	for i := len(m.Blocks) - 1; i >= 0; i-- {
		if m.Blocks[i].Type == "text" {
			return m.Blocks[i].Text
		}
	}
	return ""
}

// A reply cut by the output limit is continued: the model is shown what it wrote and asked to
// go on, and the thread gets the whole reply once.
func TestCutReplyIsContinued(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{Text: "The deploy has three steps: build, push", StopReason: cutReason(kind), InputTokens: 100, OutputTokens: 50},
				fakeprovider.Reply{Text: " and roll out.", InputTokens: 120, OutputTokens: 5},
			)
			b, _ := newBrain(t, p, func(c *brain.Config) { c.MaxTokens = 50 })
			seq, _ := e.user("how does the deploy work?")
			turnSeq := e.startTurn(seq)
			r, err := b.Run(context.Background(), e.turn(&fakeHands{}, turnSeq))
			if err != nil {
				t.Fatal(err)
			}
			evs := e.after(turnSeq)
			wantTypes(t, evs, session.TypeAssistantMessage)
			m := decode[session.AssistantMessage](t, evs[0])
			if m.Text != "The deploy has three steps: build, push and roll out." || r.Status != session.StatusOK {
				t.Errorf("reply = %q (%s)", m.Text, r.Status)
			}
			if u := m.Usage; u == nil || u.InputTokens != 220 || u.OutputTokens != 55 || u.StopReason != "stop" && u.StopReason != "end_turn" {
				t.Errorf("usage = %+v, want both calls summed and the last stop reason", m.Usage)
			}
			calls := mustAllValid(t, fake, 2)
			msgs := calls[1].Messages
			n := len(msgs)
			if msgs[n-2].Role != "assistant" || lastText(msgs[n-2]) != "The deploy has three steps: build, push" ||
				msgs[n-1].Role != "user" || !strings.Contains(lastText(msgs[n-1]), "cut off by the output limit") {
				t.Errorf("continuation request ends %q / %q", blockTexts(msgs[n-2]), blockTexts(msgs[n-1]))
			}
			if calls[1].ToolChoice != "none" {
				t.Errorf("continuation tool_choice = %q, want none", calls[1].ToolChoice)
			}
		})
	}
}

// Continuing is bounded; a reply still cut says so plainly.
func TestReplyStillCutSaysSo(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{Text: "Part one,", StopReason: cutReason(kind)},
				fakeprovider.Reply{Text: " part two,", StopReason: cutReason(kind)},
			)
			b, _ := newBrain(t, p, func(c *brain.Config) { c.MaxContinuations = 1; c.MaxTokens = 64 })
			seq, _ := e.user("write me an essay")
			turnSeq := e.startTurn(seq)
			r, err := b.Run(context.Background(), e.turn(nil, turnSeq))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(r.Message.Text, "Part one, part two,") || !strings.Contains(r.Message.Text, "cut off") ||
				!strings.Contains(r.Message.Text, "64 tokens") {
				t.Errorf("reply = %q, want both parts and a note that it was cut", r.Message.Text)
			}
			mustAllValid(t, fake, 2)
		})
	}
}

// A tool call cut by the output limit is not run: its result says it was cut, so the model can
// retry smaller. The whole calls before it in the same response are run.
func TestCutToolCallIsNotRun(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{StopReason: cutReason(kind), ToolCalls: []fakeprovider.ToolCall{
					{ID: "call_ls", Name: "run_command", Input: `{"command":"ls"}`},
					{ID: "call_big", Name: "write_file", Input: `{"path":"big.txt","content":"aaaaaaaaaaaa`},
				}},
				fakeprovider.Reply{Text: "I will write it in parts."},
			)
			hands := &fakeHands{}
			b, _ := newBrain(t, p, func(c *brain.Config) { c.MaxTokens = 100 })
			seq, _ := e.user("write a big file")
			turnSeq := e.startTurn(seq)
			r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
			if err != nil {
				t.Fatal(err)
			}
			evs := e.after(turnSeq)
			wantTypes(t, evs, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolCall,
				session.TypeToolResult, session.TypeToolResult, session.TypeAssistantMessage)
			if res := decode[session.ToolResult](t, evs[3]); res.CallID != "call_ls" || res.IsError {
				t.Errorf("first result = %+v, want the whole call run", res)
			}
			res := decode[session.ToolResult](t, evs[4])
			if res.CallID != "call_big" || !res.IsError || !strings.Contains(res.Content, "cut off by the output limit (100 tokens)") {
				t.Errorf("cut call's result = %+v", res)
			}
			if len(hands.files) != 0 || !slices.Equal(hands.ran(), []string{"ls"}) {
				t.Errorf("files %v, commands %v: the cut call ran", hands.files, hands.ran())
			}
			if r.Message.Text != "I will write it in parts." {
				t.Errorf("reply = %q", r.Message.Text)
			}
			calls := mustAllValid(t, fake, 2)
			if got := blockTexts(calls[1].Messages[len(calls[1].Messages)-1]); kind == "anthropic" && !slices.Equal(got, []string{"tool_result:call_ls", "tool_result:call_big"}) {
				t.Errorf("last message = %q", got)
			}
		})
	}
}

// The same tool call failing the same way is not retried forever: the third identical failure
// ends the turn with a clear reply (the bug: a cut write_file led to 11 calls and 10 identical
// errors).
func TestIdenticalFailuresStopTheLoop(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		reply func(kind string) fakeprovider.Reply
		tool  string
	}{
		{"cut write_file", func(kind string) fakeprovider.Reply {
			return fakeprovider.Reply{StopReason: cutReason(kind), ToolCalls: []fakeprovider.ToolCall{
				{Name: "write_file", Input: `{"path":"report.md","content":"# Report\n\nLorem ipsum`}}}
		}, "write_file"},
		{"failing command", func(kind string) fakeprovider.Reply {
			return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{Name: "run_command", Input: `{"command":"cat missing.txt"}`}}}
		}, "run_command"},
	}
	for _, kind := range kinds {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.titled()
				fake, p := fakeFor(t, kind)
				for i := range 3 {
					r := c.reply(kind)
					r.ToolCalls[0].ID = fmt.Sprintf("call_%d", i)
					fake.Push(r)
				}
				hands := &fakeHands{exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
					return sandbox.ExecResult{ExitCode: 1, Stderr: "cat: missing.txt: No such file or directory"}, nil
				}}
				b, _ := newBrain(t, p, nil)
				seq, _ := e.user("write the report")
				turnSeq := e.startTurn(seq)
				r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
				if err != nil {
					t.Fatal(err)
				}
				evs := e.after(turnSeq)
				round := []session.Type{session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult}
				want := slices.Concat(round, round, round, []session.Type{session.TypeError, session.TypeAssistantMessage})
				wantTypes(t, evs, want...)
				if ev := decode[session.ErrorEvent](t, evs[9]); ev.Stage != "tool" || ev.Code != "repeated_tool_failure" {
					t.Errorf("error event = %+v", ev)
				}
				if r.Status != session.StatusError || r.Reason != "repeated_tool_failure" ||
					!strings.Contains(r.Message.Text, c.tool+" 3 times") {
					t.Errorf("reply = %+v", r)
				}
				mustAllValid(t, fake, 3)
			})
		}
	}
}

// A refusal (Anthropic) or a content filter stop (OpenAI) gets an honest reply, not the partial
// text as if it were an answer; tool calls that came with it are not run.
func TestRefusalGetsAnHonestReply(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := fakeFor(t, kind)
			reason := map[string]string{"anthropic": "refusal", "openai": "content_filter"}[kind]
			fake.Push(fakeprovider.Reply{Text: "Sure, here is how to", StopReason: reason,
				ToolCalls: []fakeprovider.ToolCall{{ID: "call_x", Name: "run_command", Input: `{"command":"rm -rf /"}`}}})
			hands := &fakeHands{}
			b, _ := newBrain(t, p, nil)
			seq, _ := e.user("do something bad")
			turnSeq := e.startTurn(seq)
			r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
			if err != nil {
				t.Fatal(err)
			}
			evs := e.after(turnSeq)
			wantTypes(t, evs, session.TypeError, session.TypeAssistantMessage)
			if ev := decode[session.ErrorEvent](t, evs[0]); ev.Stage != "model" || ev.Code != reason {
				t.Errorf("error event = %+v", ev)
			}
			if r.Status != session.StatusError || r.Reason != reason || strings.Contains(r.Message.Text, "here is how") ||
				!strings.Contains(r.Message.Text, reason) {
				t.Errorf("reply = %+v", r)
			}
			if r.Message.Usage == nil || r.Message.Usage.StopReason != reason {
				t.Errorf("usage = %+v", r.Message.Usage)
			}
			if len(hands.ran()) != 0 {
				t.Errorf("ran %v after a refusal", hands.ran())
			}
			mustAllValid(t, fake, 1)
		})
	}
}

// The remaining stop reasons: stop_sequence is a complete answer, pause_turn is continued, and
// the deprecated function_call form is run as a tool call.
func TestOtherStopReasons(t *testing.T) {
	t.Parallel()
	t.Run("anthropic stop_sequence", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		fake, p := fakeFor(t, "anthropic")
		fake.Push(fakeprovider.Reply{Text: "Done.", StopReason: "stop_sequence"})
		b, _ := newBrain(t, p, nil)
		seq, _ := e.user("hi")
		r, err := b.Run(context.Background(), e.turn(nil, e.startTurn(seq)))
		if err != nil || r.Message.Text != "Done." || r.Status != session.StatusOK {
			t.Errorf("reply = %+v, %v", r, err)
		}
		mustAllValid(t, fake, 1)
	})
	t.Run("anthropic pause_turn", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		fake, p := fakeFor(t, "anthropic")
		fake.Push(fakeprovider.Reply{Text: "Looking into it;", StopReason: "pause_turn"}, fakeprovider.Reply{Text: " it is fine."})
		b, _ := newBrain(t, p, nil)
		seq, _ := e.user("hi")
		r, err := b.Run(context.Background(), e.turn(nil, e.startTurn(seq)))
		if err != nil || r.Message.Text != "Looking into it; it is fine." {
			t.Errorf("reply = %+v, %v", r, err)
		}
		mustAllValid(t, fake, 2)
	})
	t.Run("openai function_call", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.titled()
		fake, p := fakeFor(t, "openai")
		fake.Push(
			fakeprovider.Reply{StopReason: "function_call", ToolCalls: []fakeprovider.ToolCall{{Name: "run_command", Input: `{"command":"uptime"}`}}},
			fakeprovider.Reply{Text: "Up for a week."},
		)
		hands := &fakeHands{}
		b, _ := newBrain(t, p, nil)
		seq, _ := e.user("uptime?")
		turnSeq := e.startTurn(seq)
		r, err := b.Run(context.Background(), e.turn(hands, turnSeq))
		if err != nil || r.Message.Text != "Up for a week." {
			t.Fatalf("reply = %+v, %v", r, err)
		}
		wantTypes(t, e.after(turnSeq), session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeAssistantMessage)
		if !slices.Equal(hands.ran(), []string{"uptime"}) {
			t.Errorf("commands = %v", hands.ran())
		}
		mustAllValid(t, fake, 2)
	})
}
