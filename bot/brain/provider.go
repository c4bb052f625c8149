package brain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/logbook/logbook/session/clip"
)

// Role is the author of a message in a model request.
type Role string

// Roles of a conversation. The system prompt travels separately, in Request.System.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one provider-neutral message of a model request. A user message holds tool
// results first (answering the previous assistant message's tool uses, in call order), then
// text; an assistant message holds text, then tool uses.
type Message struct {
	Role   Role
	Blocks []Block
}

// Block is one part of a message: exactly one of Text (a non-empty text block), ToolUse,
// ToolResult, Image or Document is set. Images and documents (PDF) are files people shared in
// the thread; they appear only in user messages, after the text (a tool result's images are
// in its ToolResult).
type Block struct {
	Text       string
	ToolUse    *ToolUse
	ToolResult *ToolResult
	Image      *Media // MediaType image/png, image/jpeg, image/gif or image/webp
	Document   *Media // MediaType application/pdf
}

// media is the block's image or document, nil for other blocks.
func (b Block) media() *Media {
	if b.Image != nil {
		return b.Image
	}
	return b.Document
}

// ToolUse is the model's request to run a tool.
type ToolUse struct {
	ID    string
	Name  string
	Input json.RawMessage // a JSON object
}

// ToolResult answers a ToolUse: its text, and the images an MCP tool returned (Anthropic
// takes them inside the tool_result; OpenAI's Chat Completions takes no image in a tool
// message, so they follow in the next user message).
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
	Images  []Media // image/png, image/jpeg, image/gif or image/webp
}

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	Schema      map[string]any // JSON Schema of the input object: {"type":"object","properties":...}
	// Server and Tool name an MCP server's tool (Name is mcp__<server>__<tool>), and ReadOnly
	// says the server marks it safe to repeat: each call records them (session.ToolCall), and
	// a read-only call a crash left without a result is run again. Empty for other tools.
	Server, Tool string
	ReadOnly     bool
}

// Purpose says what a request is for. Real models get the same kind of request for every
// purpose; the offline provider answers by purpose.
type Purpose string

// Purposes of model requests.
const (
	PurposeReply   Purpose = "reply"
	PurposeSummary Purpose = "summary"
	PurposeTitle   Purpose = "title"
)

// Request is one model call.
type Request struct {
	Purpose   Purpose
	System    string
	Messages  []Message
	Tools     []ToolSpec
	NoTools   bool  // tools stay declared (the history may use them) but the model must not call one
	MaxTokens int64 // output tokens
	// OnText, when set, asks the provider to stream: it is called with each piece of text as
	// the model writes it, in order, before Complete returns the whole Response (whose Text
	// is the concatenation). Providers that cannot stream call it once with the whole text.
	OnText func(delta string)
}

// Response is a model's answer to a Request.
type Response struct {
	Text       string
	ToolUses   []ToolUse
	StopReason string // the provider's own words: "end_turn", "tool_use", "stop", "tool_calls", ...
	Model      string // the model that answered, as the provider names it
	// InputTokens is every input token of the call, cached ones included; CacheReadTokens
	// and CacheWriteTokens are the parts of it read from and written to the provider's
	// prompt cache, as the API reports them (Anthropic: cache_read_input_tokens and
	// cache_creation_input_tokens; OpenAI: prompt_tokens_details.cached_tokens).
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	// Partial is set on the Response that Complete returns with an error when the provider
	// had accepted the call — its stream began — before it broke, was stopped or timed out:
	// what arrived, for the budget to charge (the call's other fields are then empty). Nil
	// for a call that answered, and for one that failed before the provider accepted it
	// (connection refused, an HTTP error status before any stream): nothing to charge.
	Partial *Partial
}

// Partial is what arrived of a streamed call that failed after the provider accepted it.
type Partial struct {
	// InputKnown says the stream carried the provider's input counts (Anthropic's
	// message_start does; OpenAI's usage comes only in the last chunk): InputTokens (cached
	// ones included), CacheReadTokens and CacheWriteTokens.
	InputKnown                                     bool
	InputTokens, CacheReadTokens, CacheWriteTokens int64
	// OutputKnown says an event carried the provider's count of the output generated
	// (Anthropic's message_delta, OpenAI's usage chunk): OutputTokens.
	OutputKnown  bool
	OutputTokens int64
	// Pieces and Bytes are the output that streamed — text, tool input and thinking pieces
	// — for the estimate when the provider's count did not come.
	Pieces int
	Bytes  int64
	Model  string // the model that answered, when the stream named it
}

// streamed counts one piece of streamed output.
func (p *Partial) streamed(piece string) {
	if piece != "" {
		p.Pieces++
		p.Bytes += int64(len(piece))
	}
}

// Provider is a model API.
type Provider interface {
	// Name is the provider kind: "anthropic", "openai" or "offline".
	Name() string
	// Model is the configured model name.
	Model() string
	// Complete makes one call, without retrying. Errors from the API are *ProviderError.
	// With an error, the Response is empty but for its Partial (see Response.Partial).
	Complete(ctx context.Context, req Request) (Response, error)
}

// ProviderError is a failed model call. Message is short and safe to show and to log: it never
// holds the API key or the request.
type ProviderError struct {
	Provider   string
	Status     int    // HTTP status; 0 when no response arrived
	Code       string // the API's error type, e.g. "rate_limit_error", "overloaded_error"
	Message    string
	Transient  bool          // worth retrying: 408, 409, 429, 5xx (529 overloaded included), network errors
	RetryAfter time.Duration // the server's Retry-After, 0 when absent
	Err        error         // the underlying error, for errors.Is/As; not for display
}

func (e *ProviderError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

func (e *ProviderError) Unwrap() error { return e.Err }

// CodeNotSent is the Code of a *ProviderError for a request that never left logbook: the SDK
// refused it before sending (Status 0, not transient). It is no network failure.
const CodeNotSent = "not_sent"

// transientStatus reports whether an HTTP status is worth retrying.
func transientStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// networkError wraps an error that carried no HTTP response (connection refused, reset, a
// timeout of the call itself). It is transient unless ctx ended.
func networkError(ctx context.Context, provider string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &ProviderError{Provider: provider, Message: "no response: " + shortNetworkReason(err), Transient: true, Err: err}
}

// shortNetworkReason describes a transport error without quoting URLs or headers.
func shortNetworkReason(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.As(err, &dnsErr):
		return "host name not resolved"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	}
	return "network error"
}

// retryAfter parses a Retry-After header (seconds or an HTTP date) or retry-after-ms.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		var v float64
		if _, err := fmt.Sscanf(ms, "%g", &v); err == nil && v > 0 {
			return time.Duration(v * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	var secs float64
	if _, err := fmt.Sscanf(v, "%g", &secs); err == nil && secs > 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// apiMessage pulls a short message out of an API error body ({"error":{"message":...}}), cut
// to 300 bytes.
func apiMessage(raw string) string {
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) != nil {
		return ""
	}
	return clip.Text(body.Error.Message, 300)
}

// ProviderConfig carries what the providers need from the environment. cmd/logbook fills it
// from ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY and OPENAI_BASE_URL; the brain
// never reads the environment. Keys never reach a log line or an event.
type ProviderConfig struct {
	AnthropicAPIKey  string
	AnthropicBaseURL string // default https://api.anthropic.com/
	OpenAIAPIKey     string // may be empty for local servers (Ollama, vLLM, llama.cpp)
	OpenAIBaseURL    string // default https://api.openai.com/v1/
	// HTTPClient, when set, makes the calls (tests, proxies). Default: a client with a
	// 10-minute timeout per call.
	HTTPClient *http.Client
	// Vision says whether the model takes images (LOGBOOK_MODEL_VISION): "on", "off", or ""
	// (auto) — Anthropic and api.openai.com do, other OpenAI-compatible servers are not sent
	// images (a text-only model refusing one would fail every later turn of the thread); they
	// are told of them instead.
	Vision string
}

// Vision settings of ProviderConfig.
const (
	VisionAuto = ""
	VisionOn   = "on"
	VisionOff  = "off"
)

// ErrBadModelSpec is returned by NewProvider for a spec it cannot use.
var ErrBadModelSpec = errors.New("bad model spec")

// NewProvider returns the provider named by spec, which is LOGBOOK_MODEL's value:
// "anthropic:<model>", "openai:<model>" or "offline". It checks configuration only (no
// network). Errors wrap ErrBadModelSpec: an unknown provider, an empty model, or an Anthropic
// spec without an API key. It never falls back to another provider.
func NewProvider(spec string, cfg ProviderConfig) (Provider, error) {
	spec = strings.TrimSpace(spec)
	if spec == "offline" {
		return Offline{Pace: OfflinePace}, nil
	}
	kind, model, ok := strings.Cut(spec, ":")
	model = strings.TrimSpace(model)
	if !ok || model == "" {
		return nil, fmt.Errorf("model %q: %w: want anthropic:<model>, openai:<model> or offline", spec, ErrBadModelSpec)
	}
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Minute}
	}
	switch kind {
	case "anthropic":
		if cfg.AnthropicAPIKey == "" {
			return nil, fmt.Errorf("model %q: %w: ANTHROPIC_API_KEY is not set", spec, ErrBadModelSpec)
		}
		p := newAnthropic(model, cfg.AnthropicAPIKey, cfg.AnthropicBaseURL, httpClient)
		p.noVision = cfg.Vision == VisionOff
		return p, nil
	case "openai":
		p := newOpenAI(model, cfg.OpenAIAPIKey, cfg.OpenAIBaseURL, httpClient)
		p.vision = cfg.Vision == VisionOn || (cfg.Vision == VisionAuto && p.hosted)
		return p, nil
	}
	return nil, fmt.Errorf("model %q: %w: unknown provider %q (want anthropic, openai or offline)", spec, ErrBadModelSpec, kind)
}

// endOfStream is how a provider's stream ended: nil when it reached its end marker, else its
// error translated, the cancelled ctx's, or a stream cut before the marker (missing names it),
// which a retry may cure.
func endOfStream(ctx context.Context, provider string, err error, ended bool, missing string, translate func(context.Context, error) error) error {
	switch {
	case err != nil:
		return translate(ctx, err)
	case ended:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return &ProviderError{Provider: provider, Status: http.StatusOK, Message: "no response: the stream ended before " + missing, Transient: true}
}
