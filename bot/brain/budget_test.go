package brain_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// longSession appends n finished turns, each with a long reply, then a question and its
// turn_started; it returns the turn's seq.
func (e *env) longSession(n int) int64 {
	e.t.Helper()
	bot := session.Actor{Kind: session.ActorBot, ID: "UB000001"}
	cell := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	for i := range n {
		seq, _ := e.user(fmt.Sprintf("explain part %d", i))
		ts := e.startTurn(seq)
		e.append(
			session.NewEvent{Type: session.TypeAssistantMessage, Actor: bot, Payload: session.AssistantMessage{
				Text: strings.Repeat(fmt.Sprintf("Part %d works like this. ", i), 40), Turn: ts}},
			session.NewEvent{Type: session.TypeTurnCompleted, Actor: cell, Payload: session.TurnCompleted{Turn: ts, Status: "ok", Through: seq}},
		)
	}
	seq, _ := e.user("and the last part?")
	return e.startTurn(seq)
}

// The budget asks Anthropic's count-tokens endpoint (through the SDK) and follows its answer:
// an estimate over budget that the count puts under is not summarised; a count over budget is,
// and the summary records the count, the budget and the method; a failing count falls back to
// the estimate.
func TestContextBudgetUsesAnthropicCountTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		count     fakeprovider.Count
		summarise bool
		method    string
	}{
		{"count under budget", fakeprovider.Count{InputTokens: 1200}, false, ""},
		{"count over budget", fakeprovider.Count{InputTokens: 9000}, true, brain.MethodAnthropicCountTokens},
		{"count fails", fakeprovider.Count{Status: 500, ErrorType: "api_error"}, true, brain.MethodEstimate},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			turnSeq := e.longSession(6) // about 1800 estimated tokens
			fake, p := fakeFor(t, "anthropic")
			fake.PushCount(c.count)
			if c.summarise {
				fake.Push(fakeprovider.Reply{Text: "Parts 0 to 4 were explained."})
			}
			fake.Push(fakeprovider.Reply{Text: "The last part is simple."})
			b, _ := newBrain(t, p, func(cfg *brain.Config) { cfg.ContextBudget = 1500 })
			if _, err := b.Run(context.Background(), e.turn(nil, turnSeq)); err != nil {
				t.Fatal(err)
			}
			counts := fake.CountCalls()
			if len(counts) != 1 || counts[0].Invalid != "" || !strings.Contains(string(counts[0].Body), "and the last part?") {
				t.Fatalf("count_tokens calls = %+v", counts)
			}
			evs := e.after(turnSeq)
			if !c.summarise {
				wantTypes(t, evs, session.TypeAssistantMessage)
				mustAllValid(t, fake, 1)
				return
			}
			wantTypes(t, evs, session.TypeContextSummary, session.TypeAssistantMessage)
			sum := decode[session.ContextSummary](t, evs[0])
			if sum.Method != c.method || sum.Budget != 1500 || sum.Tokens <= 1500 ||
				c.method == brain.MethodAnthropicCountTokens && sum.Tokens != 9000 {
				t.Errorf("summary records tokens %d, budget %d, method %q; want method %q", sum.Tokens, sum.Budget, sum.Method, c.method)
			}
			mustAllValid(t, fake, 2)
		})
	}
}

// For OpenAI's models the budget counts with tiktoken, offline; other OpenAI-compatible models
// (Ollama, vLLM, ...) keep the estimate.
func TestContextBudgetUsesTiktokenForOpenAIModels(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ model, method string }{{"gpt-4o-mini", "tiktoken_o200k_base"}, {"llama3.1:8b", brain.MethodEstimate}} {
		t.Run(c.model, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			turnSeq := e.longSession(6)
			fake := fakeprovider.NewOpenAI(t, openAIKey)
			p, err := brain.NewProvider("openai:"+c.model, brain.ProviderConfig{OpenAIAPIKey: openAIKey, OpenAIBaseURL: fake.URL})
			if err != nil {
				t.Fatal(err)
			}
			fake.Push(fakeprovider.Reply{Text: "Parts 0 to 4 were explained."}, fakeprovider.Reply{Text: "Simple."})
			b, _ := newBrain(t, p, func(cfg *brain.Config) { cfg.ContextBudget = 1000 })
			if _, err := b.Run(context.Background(), e.turn(nil, turnSeq)); err != nil {
				t.Fatal(err)
			}
			evs := e.after(turnSeq)
			wantTypes(t, evs, session.TypeContextSummary, session.TypeAssistantMessage)
			if sum := decode[session.ContextSummary](t, evs[0]); sum.Method != c.method || sum.Tokens <= 1000 || sum.Budget != 1000 {
				t.Errorf("summary records %d tokens by %q (budget %d), want %q", sum.Tokens, sum.Method, sum.Budget, c.method)
			}
			mustAllValid(t, fake, 2)
		})
	}
}
