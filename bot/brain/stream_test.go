package brain_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
)

// pieces records the text pieces a streaming call hands OnText, and whether each arrived
// before Complete returned.
type pieces struct {
	mu       sync.Mutex
	got      []string
	returned bool
	late     int // pieces after Complete returned
}

func (p *pieces) onText(d string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.returned {
		p.late++
	}
	p.got = append(p.got, d)
}

func (p *pieces) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.returned = true
}

func (p *pieces) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.got, "")
}

func hello() []brain.Message {
	return []brain.Message{{Role: brain.RoleUser, Blocks: []brain.Block{{Text: "Alice: hello"}}}}
}

func streamTools() []brain.ToolSpec {
	return []brain.ToolSpec{
		{Name: "run_command", Description: "run", Schema: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}},
		{Name: "read_file", Description: "read", Schema: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}},
	}
}

// TestStreamingMatchesNonStreaming: for both APIs, the same scripted answer gives the same
// Response streamed and not, and the streamed pieces add up to its Text before Complete
// returns.
func TestStreamingMatchesNonStreaming(t *testing.T) {
	t.Parallel()
	scripts := map[string]fakeprovider.Reply{
		"text": {Text: "Hello Alice, this is a longer answer — with ünïcode — in several pieces.", InputTokens: 31, OutputTokens: 17},
		"text and tools": {Text: "Let me look.", ToolCalls: []fakeprovider.ToolCall{
			{ID: "toolu_1", Name: "run_command", Input: `{"command":"ls -la /tmp && echo \"done\""}`},
			{ID: "toolu_2", Name: "read_file", Input: `{"path":"notes.txt"}`},
		}, InputTokens: 120, OutputTokens: 40},
		"tool only": {ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_3", Name: "run_command", Input: `{"command":"make test"}`}}, InputTokens: 9, OutputTokens: 5},
		"cut":       {Text: "The first half of a long", StopReason: "max_tokens", InputTokens: 10, OutputTokens: 4096},
	}
	for _, kind := range []string{"anthropic", "openai"} {
		for name, script := range scripts {
			t.Run(kind+"/"+name, func(t *testing.T) {
				t.Parallel()
				if kind == "openai" && script.StopReason == "max_tokens" {
					script.StopReason = "length"
				}
				fake, p := fakeFor(t, kind)
				script.Stream = fakeprovider.Stream{Chunk: 5}
				fake.Push(script, script)
				req := brain.Request{Purpose: brain.PurposeReply, System: "be brief", Messages: hello(), Tools: streamTools(), MaxTokens: 4096}
				whole, err := p.Complete(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				var got pieces
				req.OnText = got.onText
				streamed, err := p.Complete(context.Background(), req)
				got.done()
				if err != nil {
					t.Fatal(err)
				}
				calls := mustAllValid(t, fake, 2)
				if calls[0].Stream || !calls[1].Stream {
					t.Fatalf("stream flags sent: %v, %v; want false, true", calls[0].Stream, calls[1].Stream)
				}
				if !reflect.DeepEqual(streamed, whole) {
					t.Errorf("streamed response\n%+v\nwant the non-streaming one\n%+v", streamed, whole)
				}
				for i, u := range streamed.ToolUses {
					if want := script.ToolCalls[i].Input; string(u.Input) != want {
						t.Errorf("tool use %d input %s, want %s", i, u.Input, want)
					}
				}
				if got.text() != streamed.Text {
					t.Errorf("pieces add up to %q, want the Text %q", got.text(), streamed.Text)
				}
				if streamed.Text != "" && len(got.got) < 2 {
					t.Errorf("text came in %d pieces, want several", len(got.got))
				}
				if got.late != 0 {
					t.Errorf("%d pieces arrived after Complete returned", got.late)
				}
			})
		}
	}
}

// TestStreamingDeliversTextBeforeTheEnd: the fake holds back the last piece until the client
// has seen the first, so a provider that buffered the stream would never finish.
func TestStreamingDeliversTextBeforeTheEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fake, p := fakeFor(t, kind)
			first := make(chan struct{})
			fake.Push(fakeprovider.Reply{Text: "one two three four five six", OutputTokens: 6,
				Stream: fakeprovider.Stream{Chunk: 4, Every: time.Millisecond, BeforeLast: first}})
			var once sync.Once
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, err := p.Complete(ctx, brain.Request{Messages: hello(), MaxTokens: 100,
				OnText: func(string) { once.Do(func() { close(first) }) }})
			if err != nil {
				t.Fatalf("the last piece waits for the first to arrive: %v", err)
			}
			if resp.Text != "one two three four five six" {
				t.Errorf("text %q", resp.Text)
			}
		})
	}
}

// TestStreamFailuresAreProviderErrors: failures before and during a stream map to the
// *ProviderError a non-streaming call gets, transient where a retry may help.
func TestStreamFailuresAreProviderErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		kind      string
		reply     fakeprovider.Reply
		status    int
		code      string
		transient bool
		pieces    int
	}{
		{"anthropic dropped", "anthropic", fakeprovider.Reply{Text: "Hello there, friend.", Stream: fakeprovider.Stream{Chunk: 4, DropAfter: 2}}, 0, "", true, 2},
		{"openai dropped", "openai", fakeprovider.Reply{Text: "Hello there, friend.", Stream: fakeprovider.Stream{Chunk: 4, DropAfter: 2}}, 0, "", true, 2},
		{"anthropic overloaded event", "anthropic", fakeprovider.Reply{Text: "Hello there, friend.",
			Stream: fakeprovider.Stream{Chunk: 4, ErrorType: "overloaded_error", ErrorAfter: 3}}, 529, "overloaded_error", true, 3},
		{"anthropic invalid event", "anthropic", fakeprovider.Reply{Text: "Hello",
			Stream: fakeprovider.Stream{ErrorType: "invalid_request_error", ErrorMessage: "bad"}}, 400, "invalid_request_error", false, 0},
		{"openai server_error chunk", "openai", fakeprovider.Reply{Text: "Hello there, friend.",
			Stream: fakeprovider.Stream{Chunk: 4, ErrorType: "server_error", ErrorAfter: 1}}, 500, "server_error", true, 1},
		{"anthropic 429 before the stream", "anthropic", fakeprovider.Reply{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down", RetryAfter: "7"}, 429, "rate_limit_error", true, 0},
		{"openai 503 before the stream", "openai", fakeprovider.Reply{Status: 503, ErrorType: "server_error", ErrorMessage: "busy"}, 503, "server_error", true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake, p := fakeFor(t, c.kind)
			fake.Push(c.reply)
			var got pieces
			_, err := p.Complete(context.Background(), brain.Request{Messages: hello(), MaxTokens: 100, OnText: got.onText})
			var pe *brain.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want a *ProviderError", err, err)
			}
			if pe.Status != c.status || pe.Code != c.code || pe.Transient != c.transient {
				t.Errorf("error %+v, want status %d code %q transient %v", pe, c.status, c.code, c.transient)
			}
			if c.reply.RetryAfter != "" && pe.RetryAfter != 7*time.Second {
				t.Errorf("retry after %v, want 7s", pe.RetryAfter)
			}
			if len(got.got) != c.pieces {
				t.Errorf("%d pieces before the failure, want %d", len(got.got), c.pieces)
			}
		})
	}
}

func TestOfflineStreams(t *testing.T) {
	t.Parallel()
	var got pieces
	req := brain.Request{Purpose: brain.PurposeReply, Messages: hello()}
	whole, err := brain.Offline{}.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.OnText = got.onText
	resp, err := brain.Offline{Pace: time.Microsecond}.Complete(context.Background(), req)
	got.done()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resp, whole) {
		t.Errorf("streamed %+v, want %+v", resp, whole)
	}
	if got.text() != resp.Text || len(got.got) < 5 || got.late != 0 {
		t.Errorf("%d pieces adding up to %q (%d late), want several adding up to %q", len(got.got), got.text(), got.late, resp.Text)
	}
	for _, p := range got.got[:len(got.got)-1] {
		if n := len(strings.Fields(p)); n != 4 {
			t.Errorf("piece %q has %d words, want 4", p, n)
		}
	}
}

// TestFakeOpenAIWantsUsageWhenStreaming: the fake refuses a stream without
// stream_options.include_usage (the brain records usage on every call), and stream_options
// without stream, as the API does.
func TestFakeOpenAIWantsUsageWhenStreaming(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	for _, body := range []string{
		`{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-test","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-test","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, fake.URL+"chat/completions", bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+openAIKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: HTTP %d, want 400", body, res.StatusCode)
		}
	}
	for i, c := range fake.Calls() {
		if !strings.Contains(c.Invalid, "stream") {
			t.Errorf("call %d rejected for %q, want a word on streaming", i, c.Invalid)
		}
	}
}

// BenchmarkStreamingFirstText: with a fake that writes 2,000 words at a fixed rate (first
// token after 200 ms, 20 characters every 30 ms), how soon the first text arrives compared
// with the whole response, streaming and not. Reported: first_ms, total_ms and first/total.
func BenchmarkStreamingFirstText(b *testing.B) {
	words := make([]string, 2000)
	for i := range words {
		words[i] = fmt.Sprintf("word%d", i%100)
	}
	text := strings.Join(words, " ")
	pace := fakeprovider.Stream{FirstToken: 200 * time.Millisecond, Chunk: 20, Every: 30 * time.Millisecond}
	for _, kind := range []string{"anthropic", "openai"} {
		for _, streaming := range []bool{true, false} {
			name := kind + "/non-streaming"
			if streaming {
				name = kind + "/streaming"
			}
			b.Run(name, func(b *testing.B) {
				fake, p := fakeFor(b, kind)
				var first, total time.Duration
				for b.Loop() {
					fake.Push(fakeprovider.Reply{Text: text, OutputTokens: 2000, Stream: pace})
					start := time.Now()
					var firstAt time.Duration
					req := brain.Request{Messages: hello(), MaxTokens: 8000}
					if streaming {
						req.OnText = func(string) {
							if firstAt == 0 {
								firstAt = time.Since(start)
							}
						}
					}
					resp, err := p.Complete(context.Background(), req)
					if err != nil || resp.Text != text {
						b.Fatalf("complete: %v (%d bytes of %d)", err, len(resp.Text), len(text))
					}
					end := time.Since(start)
					if firstAt == 0 {
						firstAt = end // without streaming the first text is the whole text
					}
					first += firstAt
					total += end
				}
				n := float64(b.N)
				b.ReportMetric(float64(first.Milliseconds())/n, "first_ms")
				b.ReportMetric(float64(total.Milliseconds())/n, "total_ms")
				b.ReportMetric(float64(first)/float64(total), "first/total")
			})
		}
	}
}
