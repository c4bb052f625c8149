package brain

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// TokenCounter is a provider that can count a request's input tokens the way its model does.
// The budget uses it where it exists and falls back to estimateTokens when it fails.
type TokenCounter interface {
	// CountTokens returns the input tokens of req (system, messages, tools).
	CountTokens(ctx context.Context, req Request) (int64, error)
	// CountMethod names how it counts, for the log ("anthropic_count_tokens",
	// "tiktoken_o200k_base"); "" when this provider's model has no counter, and the
	// estimate is used.
	CountMethod() string
}

// Methods of measuring a history, recorded in context_summary.
const (
	MethodEstimate             = "estimate"
	MethodAnthropicCountTokens = "anthropic_count_tokens"
)

// measure is the history's size in tokens for the context budget, and how it was measured.
// Below a quarter of the budget the estimate is trusted (a tokenizer does not count four times
// more than a quarter of the bytes); above it the provider counts, when it can.
func (b *Brain) measure(ctx context.Context, st *turn, req Request) (int64, string) {
	est := int64(estimateTokens(req.System, req.Messages, req.Tools))
	tc, ok := b.cfg.Provider.(TokenCounter)
	if !ok || tc.CountMethod() == "" || est <= int64(b.cfg.ContextBudget/4) {
		return est, MethodEstimate
	}
	n, err := tc.CountTokens(ctx, req)
	if err != nil {
		st.log.Warn().Err(err).Str("method", tc.CountMethod()).Int64("estimate", est).
			Msg("counting tokens failed; the budget uses the estimate")
		return est, MethodEstimate
	}
	return n, tc.CountMethod()
}

// openAIEncoding is the tiktoken encoding of an OpenAI model, "" for other models (Ollama,
// vLLM and llama.cpp serve models with tokenizers of their own: those get the estimate).
func openAIEncoding(model string) string {
	m := strings.ToLower(model)
	for _, p := range []string{"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss"} {
		if strings.HasPrefix(m, p) {
			return tiktoken.MODEL_O200K_BASE
		}
	}
	for _, p := range []string{"gpt-4", "gpt-3.5"} {
		if strings.HasPrefix(m, p) {
			return tiktoken.MODEL_CL100K_BASE
		}
	}
	return ""
}

// tiktokenLoader makes tiktoken read its BPE files from the ones embedded in the binary
// (github.com/pkoukk/tiktoken-go-loader) instead of downloading them: the loader is
// tiktoken's package-level setting, set once before the first encoding is built.
var tiktokenLoader sync.Once

var encodings sync.Map // encoding name -> func() (*tiktoken.Tiktoken, error)

// encoding returns the named tiktoken encoding, built once (a few hundred milliseconds).
func encoding(name string) (*tiktoken.Tiktoken, error) {
	tiktokenLoader.Do(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })
	f, _ := encodings.LoadOrStore(name, sync.OnceValues(func() (*tiktoken.Tiktoken, error) { return tiktoken.GetEncoding(name) }))
	return f.(func() (*tiktoken.Tiktoken, error))()
}

// countChatTokens counts a Chat Completions request with enc the way OpenAI's cookbook does:
// 3 tokens per message plus its content, 3 to prime the reply, and the tools' definitions as
// JSON (an approximation: the API renders them its own way).
func countChatTokens(enc *tiktoken.Tiktoken, req Request) int64 {
	n := 3
	count := func(s string) {
		if s != "" {
			n += len(enc.EncodeOrdinary(s))
		}
	}
	if req.System != "" {
		n += 3
		count(req.System)
	}
	for _, m := range req.Messages {
		for _, b := range m.Blocks {
			n += 3
			switch {
			case b.ToolUse != nil:
				count(b.ToolUse.Name)
				count(string(b.ToolUse.Input))
			case b.ToolResult != nil:
				count(b.ToolResult.Content)
				n += imageTokens * len(b.ToolResult.Images)
			case b.media() != nil:
				n += mediaTokens(b) // the estimate: tiktoken does not see images
			default:
				count(b.Text)
			}
		}
	}
	for _, t := range req.Tools {
		schema, _ := json.Marshal(t.Schema)
		count(t.Name)
		count(t.Description)
		count(string(schema))
	}
	return int64(n)
}

var errNoTokenizer = errors.New("no tokenizer for this model")
