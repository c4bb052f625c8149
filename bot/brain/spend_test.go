package brain_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/session"
)

// Issue 48: a model call that fails after the provider accepted it — a broken stream, a
// person's stop, a timeout — is charged what was sent and what streamed, and the charge says
// whether the provider counted it or logbook estimated it. One that failed before the provider
// accepted it is charged 0, and says so.

// spendBudget is a budget over e's store that prices every model of the fakes at 3 per Mtok in
// and 15 out (claude-test, claude-fake-1, gpt-test, gpt-fake-1), with limits as
// LOGBOOK_BUDGET.
func spendBudget(t *testing.T, e *env, limits string) *budget.Budget {
	t.Helper()
	l, err := budget.ParseLimits(limits)
	if err != nil {
		t.Fatal(err)
	}
	p, err := budget.ParsePrices("claude=3/15,gpt=3/15")
	if err != nil {
		t.Fatal(err)
	}
	b, err := budget.New(budget.Config{Store: e.st, Prices: p, Limits: l, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// charges are the session's charge rows.
func charges(t *testing.T, e *env) []session.Spend {
	t.Helper()
	rows, err := e.st.SessionSpend(context.Background(), e.sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []session.Spend
	for _, r := range rows {
		if r.Kind == session.SpendCharge {
			out = append(out, r)
		}
	}
	return out
}

// pieceLive is a turn's Live that calls at(n) when the n-th text piece arrives: a test's
// signal that the stream is part way.
type pieceLive struct {
	*recLive
	mu sync.Mutex
	n  int
	at func(n int)
}

func (l *pieceLive) Text(delta string) {
	l.recLive.Text(delta)
	l.mu.Lock()
	l.n++
	n := l.n
	l.mu.Unlock()
	l.at(n)
}

// longReply streams 200 pieces of 8 characters after 50,000 input tokens, and never sends
// its last piece (hold is never closed) unless the request ends: only a stop, a timeout or a
// broken connection ends it.
func longReply(hold chan struct{}) fakeprovider.Reply {
	return fakeprovider.Reply{Text: strings.Repeat("abcdefgh", 200), InputTokens: 50_000, OutputTokens: 4_000,
		Stream: fakeprovider.Stream{Chunk: 8, BeforeLast: hold}}
}

type spendFake struct {
	name string
	fake func(t *testing.T) (*fakeprovider.Server, brain.Provider)
	// inputKnown: the stream's start carries the input's usage (Anthropic's message_start).
	inputKnown bool
}

func spendFakes() []spendFake {
	return []spendFake{
		{"anthropic", func(t *testing.T) (*fakeprovider.Server, brain.Provider) {
			f := fakeprovider.NewAnthropic(t, anthropicKey)
			return f, anthropicProvider(t, f, anthropicKey)
		}, true},
		{"openai", func(t *testing.T) (*fakeprovider.Server, brain.Provider) {
			f := fakeprovider.NewOpenAI(t, openAIKey)
			return f, openAIProvider(t, f, openAIKey)
		}, false},
	}
}

// checkPartialCharge checks a charge of a call that failed part way after at least pieces
// pieces of 8 bytes: the input as the provider counted it when inputKnown (else estimated),
// the output estimated from what streamed, a cost, source "estimate" and a reason naming why.
func checkPartialCharge(t *testing.T, c session.Spend, inputKnown bool, pieces int64, why string) {
	t.Helper()
	if c.CostMicros <= 0 {
		t.Fatalf("charge %+v: cost %d, want what was sent and streamed", c, c.CostMicros)
	}
	if c.Source != session.UsageEstimated {
		t.Errorf("charge source %q, want %q", c.Source, session.UsageEstimated)
	}
	if inputKnown && c.InputTokens != 50_000 {
		t.Errorf("input %d tokens, want the provider's 50000 (message_start)", c.InputTokens)
	}
	if !inputKnown && (c.InputTokens <= 0 || c.InputTokens == 50_000) {
		t.Errorf("input %d tokens, want the request's estimate", c.InputTokens)
	}
	// 8 bytes a piece is 2 tokens a piece by the estimate.
	if c.OutputTokens < 2*pieces || c.OutputTokens >= 4_000 {
		t.Errorf("output %d tokens, want the estimate of at least %d pieces streamed (2 tokens each), below the scripted 4000", c.OutputTokens, pieces)
	}
	if !strings.Contains(c.Reason, why) || !strings.Contains(c.Reason, "estimated") {
		t.Errorf("reason %q, want it to say the call %s and the tokens were estimated", c.Reason, why)
	}
}

// A stream the connection drops part way is charged what was sent and what streamed, each
// attempt — the retry that answered at its usage, the provider's.
func TestBrokenStreamIsCharged(t *testing.T) {
	t.Parallel()
	for _, f := range spendFakes() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := f.fake(t)
			broken := longReply(nil)
			broken.Stream.DropAfter = 20
			fake.Push(broken, fakeprovider.Reply{Text: "Done.", InputTokens: 50_000, OutputTokens: 2})
			b, _ := newBrain(t, p, nil)
			seq, _ := e.user("write the long report")
			turn := e.turn(nil, e.startTurn(seq))
			turn.Meter, turn.Live = spendBudget(t, e, "").For("C0000001", "U0000001", e.sess.ID, turn.TurnSeq), &recLive{}
			r, err := b.Run(context.Background(), turn)
			if err != nil || r.Status != session.StatusOK {
				t.Fatalf("reply %+v, %v", r, err)
			}
			cs := charges(t, e)
			if len(cs) != 2 {
				t.Fatalf("%d charges, want the broken attempt's and the retry's: %+v", len(cs), cs)
			}
			checkPartialCharge(t, cs[0], f.inputKnown, 20, "broke off")
			if cs[1].Source != session.UsageFromProvider || cs[1].InputTokens != 50_000 || cs[1].OutputTokens != 2 || cs[1].Reason != "" {
				t.Errorf("the answer's charge %+v, want the provider's usage", cs[1])
			}
		})
	}
}

// A person's stop part way through a streamed answer charges what was sent and streamed.
func TestStoppedCallIsCharged(t *testing.T) {
	t.Parallel()
	for _, f := range spendFakes() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := f.fake(t)
			hold := make(chan struct{}) // never closed: the answer ends only by the stop
			fake.Push(longReply(hold))
			b, _ := newBrain(t, p, nil)
			seq, _ := e.user("write the long report")
			turn := e.turn(nil, e.startTurn(seq))
			ctx, stop := context.WithCancelCause(context.Background())
			defer stop(nil)
			errStop := errors.New("Alice pressed stop")
			turn.Meter = spendBudget(t, e, "").For("C0000001", "U0000001", e.sess.ID, turn.TurnSeq)
			turn.Live = &pieceLive{recLive: &recLive{}, at: func(n int) {
				if n == 134 {
					stop(errStop)
				}
			}}
			if _, err := b.Run(ctx, turn); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: %v, want it stopped", err)
			}
			cs := charges(t, e)
			if len(cs) != 1 {
				t.Fatalf("%d charges, want the stopped call's: %+v", len(cs), cs)
			}
			checkPartialCharge(t, cs[0], f.inputKnown, 134, "was stopped")
		})
	}
}

// A call the turn's wall time ends part way is charged what was sent and streamed, and the
// turn's error reply keeps that usage, marked as an estimate.
func TestTimedOutCallIsCharged(t *testing.T) {
	t.Parallel()
	for _, f := range spendFakes() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := f.fake(t)
			hold := make(chan struct{})
			fake.Push(longReply(hold))
			clock := newTurnClock()
			b, _ := newBrain(t, p, func(c *brain.Config) { c.MaxTurnTime, c.Now, c.AfterFunc = time.Minute, clock.Now, clock.AfterFunc })
			seq, _ := e.user("write the long report")
			turn := e.turn(nil, e.startTurn(seq))
			turn.Meter = spendBudget(t, e, "").For("C0000001", "U0000001", e.sess.ID, turn.TurnSeq)
			turn.Live = &pieceLive{recLive: &recLive{}, at: func(n int) {
				if n == 50 {
					clock.Advance(2 * time.Minute)
				}
			}}
			r, err := b.Run(context.Background(), turn)
			if err != nil || r.Status != session.StatusError || r.Reason != "wall_time" {
				t.Fatalf("reply %+v, %v, want the wall time's", r, err)
			}
			cs := charges(t, e)
			if len(cs) != 1 {
				t.Fatalf("%d charges, want the timed-out call's: %+v", len(cs), cs)
			}
			checkPartialCharge(t, cs[0], f.inputKnown, 50, "timed out")
			u := r.Message.Usage
			if u == nil || u.Source != session.UsageEstimated || u.Ended != session.CallTimedOut ||
				u.InputTokens != cs[0].InputTokens || u.OutputTokens != cs[0].OutputTokens {
				t.Fatalf("the error reply's usage %+v, want the charge's tokens, estimated, timed out", u)
			}
		})
	}
}

// Someone who presses stop near the end of every answer reaches the hard cap: each stopped
// call is charged, so the budget refuses a call once they add up to it.
func TestStoppedCallsReachTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	hold := make(chan struct{})
	const tries = 10
	for range tries {
		fake.Push(longReply(hold))
	}
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), func(c *brain.Config) { c.MaxTokens = 4096 })
	// Each stopped call sent 50,000 input tokens (0.15) and streamed 134 pieces (about 0.004);
	// a call may cost up to 0.06 more than its input (4,096 output tokens at 15 per Mtok).
	bud := spendBudget(t, e, "channel=0.5/day")
	for i := range tries {
		seq, _ := e.user("write the long report again")
		turn := e.turn(nil, e.startTurn(seq))
		turn.Meter = bud.For("C0000001", "U0000001", e.sess.ID, turn.TurnSeq)
		ctx, stop := context.WithCancelCause(context.Background())
		turn.Live = &pieceLive{recLive: &recLive{}, at: func(n int) {
			if n == 134 {
				stop(errors.New("Alice pressed stop"))
			}
		}}
		r, err := b.Run(ctx, turn)
		stop(nil)
		if err == nil && r.Status == session.StatusError && r.Reason == "channel_budget" {
			if i != 3 {
				t.Fatalf("refused at call %d, want the fourth (three stopped calls spent 0.46 of 0.50, and it could cost 0.06)", i+1)
			}
			if n := len(fake.Calls()); n != 3 {
				t.Fatalf("%d calls reached the provider, want 3", n)
			}
			tot, err := e.st.Spent(context.Background(), "C0000001", "", time.Now())
			if err != nil || tot.Channel < 450_000 {
				t.Fatalf("spent %d micros (%v), want the three stopped calls' charges", tot.Channel, err)
			}
			return
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("turn %d: %+v, %v, want it stopped", i+1, r, err)
		}
	}
	t.Fatalf("%d stopped calls walked past a budget of 0.50: none was refused", tries)
}

// A call that failed before the provider accepted it — an HTTP error before any stream, a
// connection refused — is charged 0, and its charge says nothing reached the model.
func TestCallRefusedBeforeTheStreamIsNotCharged(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(nil)
	closedURL := closed.URL + "/"
	closed.Close()
	for _, c := range []struct {
		name     string
		provider func(t *testing.T) brain.Provider
	}{
		{"http 400", func(t *testing.T) brain.Provider {
			f := fakeprovider.NewAnthropic(t, anthropicKey)
			f.Push(fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "bad"})
			return anthropicProvider(t, f, anthropicKey)
		}},
		{"connection refused", func(t *testing.T) brain.Provider {
			p, err := brain.NewProvider("anthropic:claude-test", brain.ProviderConfig{AnthropicAPIKey: anthropicKey, AnthropicBaseURL: closedURL})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			b, _ := newBrain(t, c.provider(t), func(cfg *brain.Config) { cfg.Retry.Attempts = 1 })
			seq, _ := e.user("hello")
			turn := e.turn(nil, e.startTurn(seq))
			turn.Meter, turn.Live = spendBudget(t, e, "").For("C0000001", "U0000001", e.sess.ID, turn.TurnSeq), &recLive{}
			r, err := b.Run(context.Background(), turn)
			if err != nil || r.Status != session.StatusError {
				t.Fatalf("reply %+v, %v", r, err)
			}
			cs := charges(t, e)
			if len(cs) != 1 || cs[0].CostMicros != 0 || cs[0].InputTokens != 0 || cs[0].OutputTokens != 0 ||
				cs[0].Source != session.UsageNone || !strings.Contains(cs[0].Reason, "before the provider accepted it") {
				t.Fatalf("charges %+v, want one of 0, source none, saying it never reached the model", cs)
			}
			if r.Message.Usage != nil {
				t.Fatalf("the error reply's usage %+v, want none: nothing was spent", r.Message.Usage)
			}
		})
	}
}

// A call stopped while the provider had it and no answer had arrived yet — a call made
// without streaming, here — is charged its input, estimated: a stop before the answer is not
// free either.
func TestCallStoppedBeforeItsAnswerIsChargedItsInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	arrived := make(chan struct{})
	// The whole answer would take an hour: only the stop ends the call.
	fake.Push(fakeprovider.Reply{Text: "never sent", InputTokens: 50_000, OutputTokens: 10, Arrived: arrived,
		Stream: fakeprovider.Stream{FirstToken: time.Hour}})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	seq, _ := e.user("write the long report")
	turn := e.turn(nil, e.startTurn(seq)) // no live view: the call is not streamed
	turn.Meter = spendBudget(t, e, "").For("C0000001", "U0000001", e.sess.ID, turn.TurnSeq)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-arrived
		stop()
	}()
	if _, err := b.Run(ctx, turn); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want it stopped", err)
	}
	<-done
	if calls := fake.Calls(); len(calls) != 1 || calls[0].Stream {
		t.Fatalf("calls %+v, want one, not streamed", calls)
	}
	cs := charges(t, e)
	if len(cs) != 1 || cs[0].CostMicros <= 0 || cs[0].InputTokens <= 0 || cs[0].OutputTokens != 0 ||
		cs[0].Source != session.UsageEstimated || !strings.Contains(cs[0].Reason, "was stopped") {
		t.Fatalf("charges %+v, want its input estimated, nothing streamed, stopped", cs)
	}
}
