package brain_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// Issue 28: an OpenAI-compatible server that gives each streamed chunk an id of its own (as
// several local servers and gateways do) streams a whole turn, a tool round and a reply, which
// the SDK's accumulator alone refuses as a malformed stream.
func TestStreamedTurnAgainstAServerWithAnIDPerChunk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	fake.SetQuirks(fakeprovider.Quirks{ChunkIDs: true})
	fake.Push(
		fakeprovider.Reply{Text: "Let me look.", ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "run_command", Input: `{"command":"ls -l"}`}},
			Stream: fakeprovider.Stream{Chunk: 3}},
		fakeprovider.Reply{Text: "There is one file, notes.txt.", InputTokens: 80, OutputTokens: 7, Stream: fakeprovider.Stream{Chunk: 3}},
	)
	b, _ := newBrain(t, openAIProvider(t, fake, openAIKey), nil)
	rec := &recLive{}
	seq, _ := e.user("@logbook what's here?")
	tn := e.turn(&fakeHands{}, e.startTurn(seq))
	tn.Live = rec
	r, err := b.Run(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	rec.done(t)
	if r.Status != session.StatusOK || r.Message.Text != "There is one file, notes.txt." {
		t.Fatalf("reply %+v; want the streamed answer", r)
	}
	calls := mustAllValid(t, fake, 2)
	if !calls[0].Stream || !calls[1].Stream {
		t.Errorf("the rounds were not streamed")
	}
	if r.Message.Usage == nil || r.Message.Usage.OutputTokens != 7 {
		t.Errorf("usage %+v; want the usage chunk's", r.Message.Usage)
	}
}

// tokenParam says which output-limit parameter a Chat Completions request carried.
func tokenParam(t *testing.T, c fakeprovider.Call) string {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(c.Body, &body); err != nil {
		t.Fatal(err)
	}
	_, mt := body["max_tokens"]
	_, mct := body["max_completion_tokens"]
	switch {
	case mt && mct:
		return "both"
	case mt:
		return "max_tokens"
	case mct:
		return "max_completion_tokens"
	}
	return "none"
}

// Issue 28: a reasoning model (GPT-5, o-series) behind a base URL that is not api.openai.com
// (Azure, a gateway) gets max_completion_tokens, decided by its name; a server that refuses the
// parameter sent (HTTP 400 unsupported_parameter, OpenAI's body) is asked once more with the
// other, which is kept for the rest of the process.
func TestOutputLimitParameterFollowsTheModelAndTheServer(t *testing.T) {
	t.Parallel()
	ask := func(t *testing.T, p brain.Provider, stream bool) (brain.Response, error) {
		req := brain.Request{Messages: hello(), MaxTokens: 1000}
		if stream {
			req.OnText = func(string) {}
		}
		return p.Complete(context.Background(), req)
	}
	for _, model := range []string{"gpt-5", "gpt-5-mini", "o3-mini", "o1", "o4-mini", "azure/o3", "openai/gpt-5.1"} {
		t.Run("reasoning model "+model, func(t *testing.T) {
			t.Parallel()
			fake := fakeprovider.NewOpenAI(t, openAIKey)
			fake.SetQuirks(fakeprovider.Quirks{RefuseMaxTokens: true})
			fake.Push(fakeprovider.Reply{Text: "hi"}, fakeprovider.Reply{Text: "hi again"})
			p, err := brain.NewProvider("openai:"+model, brain.ProviderConfig{OpenAIAPIKey: openAIKey, OpenAIBaseURL: fake.URL})
			if err != nil {
				t.Fatal(err)
			}
			for _, stream := range []bool{false, true} {
				if r, err := ask(t, p, stream); err != nil || r.Text != "hi" && r.Text != "hi again" {
					t.Fatalf("stream %v: %+v %v", stream, r, err)
				}
			}
			calls := mustAllValid(t, fake, 2)
			for _, c := range calls {
				if got := tokenParam(t, c); got != "max_completion_tokens" {
					t.Errorf("%s sent %s", model, got)
				}
			}
		})
	}
	t.Run("a name the rule does not know, refused once, then remembered", func(t *testing.T) {
		t.Parallel()
		fake := fakeprovider.NewOpenAI(t, openAIKey)
		fake.SetQuirks(fakeprovider.Quirks{RefuseMaxTokens: true})
		fake.Push(fakeprovider.Reply{Text: "one"}, fakeprovider.Reply{Text: "two"})
		p, err := brain.NewProvider("openai:my-deployment", brain.ProviderConfig{OpenAIAPIKey: openAIKey, OpenAIBaseURL: fake.URL})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := ask(t, p, true); err != nil || r.Text != "one" {
			t.Fatalf("first call: %+v %v", r, err)
		}
		if r, err := ask(t, p, false); err != nil || r.Text != "two" {
			t.Fatalf("second call: %+v %v", r, err)
		}
		calls := fake.Calls()
		var got []string
		for _, c := range calls {
			got = append(got, tokenParam(t, c))
		}
		if strings.Join(got, ",") != "max_tokens,max_completion_tokens,max_completion_tokens" {
			t.Fatalf("parameters sent: %v; want one refusal, then max_completion_tokens for good", got)
		}
		if !strings.Contains(calls[0].Invalid, "Unsupported parameter: 'max_tokens'") {
			t.Errorf("the fake's refusal: %q", calls[0].Invalid)
		}
	})
	t.Run("a local server that refuses max_completion_tokens", func(t *testing.T) {
		t.Parallel()
		fake := fakeprovider.NewOpenAI(t, openAIKey)
		fake.SetQuirks(fakeprovider.Quirks{RefuseMaxCompletionTokens: true})
		fake.Push(fakeprovider.Reply{Text: "ok"}, fakeprovider.Reply{Text: "ok"})
		p, err := brain.NewProvider("openai:o3-local", brain.ProviderConfig{OpenAIAPIKey: openAIKey, OpenAIBaseURL: fake.URL})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := ask(t, p, false); err != nil {
				t.Fatal(err)
			}
		}
		if calls := fake.Calls(); len(calls) != 3 || tokenParam(t, calls[2]) != "max_tokens" {
			t.Fatalf("%d calls; want one refusal, then max_tokens", len(calls))
		}
	})
	t.Run("a refusal of something else is not retried", func(t *testing.T) {
		t.Parallel()
		fake := fakeprovider.NewOpenAI(t, openAIKey)
		fake.Push(fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "Unsupported parameter: 'temperature'"})
		p := openAIProvider(t, fake, openAIKey)
		if _, err := ask(t, p, false); err == nil {
			t.Fatal("no error")
		}
		if n := len(fake.Calls()); n != 1 {
			t.Fatalf("%d calls; want 1", n)
		}
	})
}

// Issue 28: Anthropic with LOGBOOK_STREAM=off (no Live) and an output limit over the SDK's
// non-streaming ceiling (Messages.New refuses, before sending, a max_tokens that may take over
// 10 minutes, or over the model's own non-streaming limit) is streamed internally: the turn is
// answered, not retried as a network error and called unreachable.
func TestAnthropicUnstreamedTurnOverTheSDKsCeiling(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		model     string
		maxTokens int64
	}{
		{"claude-test", 64000},                // over 10 minutes at the SDK's rate (21,333 tokens)
		{"claude-opus-4-20250514", 10000},     // over the model's non-streaming limit (8,192)
		{"claude-sonnet-4-5-20250929", 20000}, // under both: not streamed
	} {
		t.Run(c.model, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake := fakeprovider.NewAnthropic(t, anthropicKey)
			fake.Push(fakeprovider.Reply{Text: "Here is the long report."})
			p, err := brain.NewProvider("anthropic:"+c.model, brain.ProviderConfig{AnthropicAPIKey: anthropicKey, AnthropicBaseURL: fake.URL})
			if err != nil {
				t.Fatal(err)
			}
			b, sl := newBrain(t, p, func(cfg *brain.Config) { cfg.MaxTokens = c.maxTokens })
			seq, _ := e.user("write the long report")
			r, err := b.Run(context.Background(), e.turn(nil, e.startTurn(seq))) // no Live: LOGBOOK_STREAM=off
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != session.StatusOK || r.Message.Text != "Here is the long report." {
				t.Fatalf("reply %+v", r.Message)
			}
			if len(sl.all()) != 0 {
				t.Errorf("retried: %v", sl.all())
			}
			calls := mustAllValid(t, fake, 1)
			wantStream := c.maxTokens != 20000
			if calls[0].Stream != wantStream {
				t.Errorf("streamed %v, want %v", calls[0].Stream, wantStream)
			}
		})
	}
}

// Issue 28: every provider error that reaches the thread says what a person can do — which
// setting, which limit — and a request the provider refused is never called unreachable.
func TestProviderFailuresSayWhatToDo(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		reply fakeprovider.Reply
		want  []string
	}{
		{"output limit over the model's", fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error",
			ErrorMessage: "max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-test"},
			[]string{"LOGBOOK_MAX_OUTPUT_TOKENS", "4096"}},
		{"context window", fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "prompt is too long: 250000 tokens > 200000 maximum"},
			[]string{"context window", "LOGBOOK_CONTEXT_BUDGET", "new thread"}},
		{"too large", fakeprovider.Reply{Status: 413, ErrorType: "request_too_large", ErrorMessage: "Request exceeds the maximum allowed number of bytes."},
			[]string{"LOGBOOK_FILE_MAX"}},
		{"unknown model", fakeprovider.Reply{Status: 404, ErrorType: "not_found_error", ErrorMessage: "model: claude-tset"},
			[]string{"LOGBOOK_MODEL", "ANTHROPIC_BASE_URL"}},
		{"anything else refused", fakeprovider.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "messages: text content blocks must be non-empty"},
			[]string{"LOGBOOK_MODEL", "the log"}},
		{"credentials", fakeprovider.Reply{Status: 401, ErrorType: "authentication_error", ErrorMessage: "invalid x-api-key"},
			[]string{"ANTHROPIC_API_KEY"}},
		{"rate limit", fakeprovider.Reply{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down"},
			[]string{"rate-limiting", "try again"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake := fakeprovider.NewAnthropic(t, anthropicKey)
			for range 5 {
				fake.Push(c.reply)
			}
			b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
			seq, _ := e.user("hello")
			r, err := b.Run(context.Background(), e.turn(nil, e.startTurn(seq)))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Message.Text, w) {
					t.Errorf("reply %q does not say %q", r.Message.Text, w)
				}
			}
			if strings.Contains(r.Message.Text, "did not respond") || r.Reason == "unreachable" {
				t.Errorf("a refused request called unreachable: %q", r.Message.Text)
			}
			mustBePlain(t, r.Message.Text, c.reply.ErrorMessage)
		})
	}
}
