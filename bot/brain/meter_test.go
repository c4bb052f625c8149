package brain_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
	"github.com/rs/zerolog"
)

// recMeter admits calls while their most (MaxOutputTokens) fits in left, and records what it
// was asked and told.
type recMeter struct {
	mu      sync.Mutex
	left    int64
	asked   []brain.MeteredCall
	settled []*session.Usage
}

func (m *recMeter) Admit(_ context.Context, c brain.MeteredCall) (func(context.Context, *session.Usage), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, c)
	if c.MaxOutputTokens > m.left {
		return nil, &brain.OverBudgetError{Code: "channel_budget", Reply: "over budget: ask an admin"}
	}
	return func(_ context.Context, u *session.Usage) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.settled = append(m.settled, u)
		if u != nil {
			m.left -= u.OutputTokens
		}
	}, nil
}

// The meter is asked before each model call with the call's output limit and an input
// estimate, and told each answer's usage as the API reported it — cache tokens included, in
// streams as in whole responses, for both APIs; a call it refuses never reaches the provider,
// and the turn ends with the refusal's reply and an error event.
func TestMeterAdmitsEachCallAndSeesTheUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		fake   func(t *testing.T) (*fakeprovider.Server, brain.Provider)
		stream bool
	}{
		{"anthropic", func(t *testing.T) (*fakeprovider.Server, brain.Provider) {
			f := fakeprovider.NewAnthropic(t, anthropicKey)
			return f, anthropicProvider(t, f, anthropicKey)
		}, false},
		{"anthropic stream", func(t *testing.T) (*fakeprovider.Server, brain.Provider) {
			f := fakeprovider.NewAnthropic(t, anthropicKey)
			return f, anthropicProvider(t, f, anthropicKey)
		}, true},
		{"openai stream", func(t *testing.T) (*fakeprovider.Server, brain.Provider) {
			f := fakeprovider.NewOpenAI(t, openAIKey)
			return f, openAIProvider(t, f, openAIKey)
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := c.fake(t)
			fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "search_sessions", Input: `{"query":"x"}`}},
				InputTokens: 500, CacheReadTokens: 300, CacheWriteTokens: 100, OutputTokens: 3000},
				fakeprovider.Reply{Text: "never sent"})
			b, _ := newBrain(t, p, func(cfg *brain.Config) { cfg.MaxTokens = 2000 })
			m := &recMeter{left: 4500}
			seq, _ := e.user("find it")
			turn := e.turn(nil, e.startTurn(seq))
			turn.Meter, turn.Tools = m, []brain.Tool{brain.SearchTool(stubSearcher{}, zerolog.Nop())}
			if c.stream {
				turn.Live = &recLive{}
			}
			r, err := b.Run(context.Background(), turn)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != session.StatusError || r.Reason != "channel_budget" || !strings.Contains(r.Message.Text, "ask an admin") {
				t.Fatalf("reply %+v", r)
			}
			if n := len(fake.Calls()); n != 1 {
				t.Fatalf("%d calls reached the provider; the second was refused", n)
			}
			if len(m.asked) != 2 || m.asked[0].MaxOutputTokens != 2000 || m.asked[0].InputTokens <= 0 || m.asked[0].Purpose != brain.PurposeReply {
				t.Fatalf("asked %+v", m.asked)
			}
			u := m.settled[0]
			wantWrite := int64(100)
			if strings.HasPrefix(c.name, "openai") {
				wantWrite = 0 // OpenAI reports no cache writes
			}
			if len(m.settled) != 1 || u.InputTokens != 500 || u.CacheReadTokens != 300 || u.CacheWriteTokens != wantWrite || u.OutputTokens != 3000 {
				t.Fatalf("settled %+v", u)
			}
		})
	}
}

type stubSearcher struct{}

func (stubSearcher) Search(context.Context, string, int) (string, error) {
	return "no past sessions match", nil
}
