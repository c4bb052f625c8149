// Package fakeprovider serves scripted model answers over the real HTTP APIs of Anthropic
// (POST /v1/messages) and OpenAI-compatible servers (POST /v1/chat/completions), for tests
// that run the official SDKs. Each server checks requests the way the real API does —
// credentials, alternating roles, non-empty text, every tool_use answered by a tool_result in
// the next message and no tool_result without its tool_use — and answers HTTP 400 with the
// API's error shape when a check fails, so a test sees the same failure production would.
// A request that asks for streaming gets the API's server-sent events, paced and cut as the
// Reply's Stream says; other requests get the whole response as JSON.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Reply is one scripted answer, used for the next request that passes the checks.
type Reply struct {
	// Status is the HTTP status; 0 means 200. An error status answers with the API's error
	// body built from ErrorType and ErrorMessage.
	Status       int
	ErrorType    string // e.g. "rate_limit_error", "overloaded_error", "invalid_request_error"
	ErrorMessage string
	RetryAfter   string // the Retry-After header, when set

	Text      string
	ToolCalls []ToolCall
	// InputTokens is the request's input tokens, cached ones included; CacheReadTokens and
	// CacheWriteTokens are the parts of it read from and written to the prompt cache. Each
	// API reports them its own way: Anthropic's input_tokens leaves out the cached parts
	// (cache_read_input_tokens, cache_creation_input_tokens), OpenAI's prompt_tokens holds them
	// and prompt_tokens_details.cached_tokens says how many were read (OpenAI has no cache
	// writes: CacheWriteTokens is then plain input).
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	// StopReason, when set, is sent as the stop_reason (Anthropic) or finish_reason (OpenAI)
	// instead of the one the content implies ("end_turn"/"tool_use", "stop"/"tool_calls"):
	// "max_tokens", "length", "refusal", "content_filter", "pause_turn", ...
	StopReason string
	// Stream paces a streamed answer and can break it part way; see Stream.
	Stream Stream
	// Arrived, when set, is closed when the request this Reply answers has arrived and passed
	// the checks, before any of the answer is sent: a test's signal that the provider has it.
	Arrived chan struct{}
}

// ToolCall is a scripted tool use.
type ToolCall struct {
	ID    string
	Name  string
	Input string // a JSON object
}

// Block is one part of a received message, the same shape for both APIs. Images and
// documents (Anthropic's image and document blocks; OpenAI's image_url and file parts) arrive
// decoded: Data is the bytes the base64 carried.
type Block struct {
	Type      string // "text", "tool_use", "tool_result", "image", "document"
	Text      string // text, or a tool result's content
	ID        string // tool_use id, or the id a tool_result answers
	Name      string // tool name; a document's title (Anthropic) or filename (OpenAI)
	Input     string // tool_use input (JSON)
	IsError   bool
	ToolUseID string
	MediaType string // image or document: "image/png", ..., "application/pdf"
	Data      []byte // image or document: the decoded content
	// Media are the image blocks inside an Anthropic tool_result's content, checked as the
	// Messages API checks images.
	Media []Block
}

// Message is one received message. For OpenAI, "system" and "tool" roles are kept as sent.
type Message struct {
	Role   string
	Blocks []Block
}

// Call is one request the server received.
type Call struct {
	Body       []byte
	System     string
	Messages   []Message
	Tools      []string // names
	ToolChoice string   // "none", "auto", ... as sent; "" when absent
	Stream     bool     // the request asked for streaming
	// Invalid is the reason the server rejected the request with 400 (no scripted reply was
	// used); "" for a request that passed the checks.
	Invalid string
	Reply   Reply     // the answer given, for accepted requests
	At      time.Time // when the request arrived
}

// Server is a fake provider API on a local httptest server.
type Server struct {
	URL string // base URL to give the SDK: ".../" for Anthropic, ".../v1/" for OpenAI
	Key string // the only API key accepted

	kind string
	srv  *httptest.Server

	mu      sync.Mutex
	script  []Reply
	calls   []Call
	counts  []Count // scripted count_tokens answers
	counted []Call  // count_tokens requests
	quirks  Quirks
}

// Quirks are ways real servers differ from the APIs' reference behaviour, for a test to turn
// on (SetQuirks) before it makes calls.
type Quirks struct {
	// ChunkIDs (OpenAI): every streamed chunk carries an id of its own, as several local
	// servers and gateways send them ("chatcmpl-fake1-0", "chatcmpl-fake1-1", ...), instead of
	// one id for the whole completion.
	ChunkIDs bool
	// RefuseMaxTokens (OpenAI): the server is a reasoning model's (GPT-5, o-series): a request
	// with max_tokens is answered HTTP 400 with OpenAI's unsupported_parameter error and uses
	// no scripted reply; max_completion_tokens is taken.
	RefuseMaxTokens bool
	// RefuseMaxCompletionTokens (OpenAI): the other way round, as older local servers do.
	RefuseMaxCompletionTokens bool
}

// locked runs f holding s.mu: each accessor below is one statement on the server's state.
func (s *Server) locked(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// SetQuirks sets the server's quirks for the calls that follow.
func (s *Server) SetQuirks(q Quirks) { s.locked(func() { s.quirks = q }) }

// Count is one scripted answer of Anthropic's count-tokens endpoint
// (POST /v1/messages/count_tokens). Without one, the endpoint counts a quarter of the
// request's text bytes plus 4 per block, about what the brain estimates.
type Count struct {
	InputTokens int64
	// Status, when not 0 or 200, answers with the API's error body (ErrorType, "count failed").
	Status    int
	ErrorType string
}

// PushCount appends count_tokens answers to their script.
func (s *Server) PushCount(cs ...Count) { s.locked(func() { s.counts = append(s.counts, cs...) }) }

// CountCalls returns every count_tokens request received so far (Anthropic), in order; they
// are not among Calls.
func (s *Server) CountCalls() (calls []Call) {
	s.locked(func() { calls = append([]Call(nil), s.counted...) })
	return calls
}

// NewAnthropic starts a fake Anthropic Messages API accepting key; it stops when the test ends.
func NewAnthropic(tb testing.TB, key string) *Server {
	tb.Helper()
	return start(tb, "anthropic", key)
}

// NewOpenAI starts a fake OpenAI Chat Completions API accepting key; it stops when the test
// ends.
func NewOpenAI(tb testing.TB, key string) *Server {
	tb.Helper()
	return start(tb, "openai", key)
}

func start(tb testing.TB, kind, key string) *Server {
	s := &Server{kind: kind, Key: key}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.srv.Close)
	s.URL = s.srv.URL + "/"
	if kind == "openai" {
		s.URL = s.srv.URL + "/v1/"
	}
	return s
}

// Push appends replies to the script.
func (s *Server) Push(rs ...Reply) { s.locked(func() { s.script = append(s.script, rs...) }) }

// Calls returns every request received so far, in order.
func (s *Server) Calls() (calls []Call) {
	s.locked(func() { calls = append([]Call(nil), s.calls...) })
	return calls
}

// Pending is the number of scripted replies not used yet.
func (s *Server) Pending() (n int) {
	s.locked(func() { n = len(s.script) })
	return n
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	wantPath := "/v1/messages"
	if s.kind == "openai" {
		wantPath = "/v1/chat/completions"
	}
	if s.kind == "anthropic" && r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens" {
		s.serveCount(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != wantPath {
		s.writeError(w, http.StatusNotFound, "not_found_error", "no route "+r.Method+" "+r.URL.Path)
		return
	}
	parse, validate := parseAnthropic, validateAnthropic
	if s.kind == "openai" {
		parse, validate = parseOpenAI, validateOpenAI
	}
	call, ok := s.request(w, r, &s.calls, parse, validate)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.kind == "openai" {
		if msg, param := s.unsupportedLocked(call); msg != "" {
			call.Invalid = msg
			s.calls = append(s.calls, call)
			s.mu.Unlock()
			s.writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", param, "unsupported_parameter", msg)
			return
		}
	}
	if len(s.script) == 0 {
		call.Invalid = "no scripted reply left"
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		// 400, not 500: an unscripted call is a test bug, and must not be retried.
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "fakeprovider: no scripted reply left")
		return
	}
	reply := s.script[0]
	s.script = s.script[1:]
	call.Reply = reply
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if reply.Arrived != nil {
		close(reply.Arrived)
	}
	s.answer(w, r, call, reply)
}

// request admits a call as the API would: the key, a readable body under the size limit, a
// request that parses and passes validate. A refusal is recorded in record and answered here
// (ok false); an admitted call is returned unrecorded.
func (s *Server) request(w http.ResponseWriter, r *http.Request, record *[]Call, parse func([]byte) (Call, error), validate func(Call) error) (Call, bool) {
	refuse := func(c Call, status int, typ, msg string) (Call, bool) {
		s.mu.Lock()
		*record = append(*record, c)
		s.mu.Unlock()
		s.writeError(w, status, typ, msg)
		return Call{}, false
	}
	if !s.authorised(r) {
		if s.kind == "openai" {
			return refuse(Call{Invalid: "unauthorised: wrong or missing API key"}, http.StatusUnauthorized, "invalid_api_key", "Incorrect API key provided.")
		}
		return refuse(Call{Invalid: "unauthorised: wrong or missing API key"}, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "unreadable body")
		return Call{}, false
	}
	if s.kind == "anthropic" && len(body) > maxAnthropicBody {
		return refuse(Call{Body: body, Invalid: "request_too_large", At: time.Now()},
			http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
	}
	call, err := parse(body)
	if err == nil {
		err = validate(call)
	}
	call.Body, call.At = body, time.Now()
	if err != nil {
		call.Invalid = err.Error()
		return refuse(call, http.StatusBadRequest, "invalid_request_error", err.Error())
	}
	return call, true
}

// answer sends the scripted reply: an error status, a stream, or one JSON response.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, call Call, reply Reply) {
	if reply.RetryAfter != "" {
		w.Header().Set("Retry-After", reply.RetryAfter)
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		// An error status answers before any stream starts, as the APIs do.
		s.writeError(w, reply.Status, reply.ErrorType, reply.ErrorMessage)
		return
	}
	n := len(s.Calls())
	s.mu.Lock()
	q := s.quirks
	s.mu.Unlock()
	switch {
	case call.Stream && s.kind == "openai":
		streamOpenAI(w, r, reply, n, q.ChunkIDs)
		return
	case call.Stream:
		streamAnthropic(w, r, reply, n)
		return
	}
	if d := generationTime(reply); d > 0 && !sleepCtx(r, d) {
		return
	}
	var out any
	if s.kind == "openai" {
		out = openAIResponse(reply, n)
	} else {
		out = anthropicResponse(reply, n)
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the APIs send "&" and "<" as they are
	_ = enc.Encode(out)
}

// serveCount answers Anthropic's count-tokens endpoint: the same checks as a Messages call,
// except that max_tokens is not taken.
func (s *Server) serveCount(w http.ResponseWriter, r *http.Request) {
	call, ok := s.request(w, r, &s.counted, func(body []byte) (Call, error) { return parseAnthropicRequest(body, false) }, validateAnthropic)
	if !ok {
		return
	}
	s.mu.Lock()
	c := Count{InputTokens: estimate(call)}
	if len(s.counts) > 0 {
		c, s.counts = s.counts[0], s.counts[1:]
	}
	s.counted = append(s.counted, call)
	s.mu.Unlock()
	if c.Status != 0 && c.Status != http.StatusOK {
		s.writeError(w, c.Status, c.ErrorType, "count failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"input_tokens": c.InputTokens})
}

// estimate is the fake's tokenizer: a quarter of the text bytes plus 4 per block, and 1600
// per image or document (about what the API bills a resized image).
func estimate(c Call) int64 {
	n, blocks, media := len(c.System), 0, 0
	for _, m := range c.Messages {
		for _, b := range m.Blocks {
			blocks++
			switch b.Type {
			case "image", "document":
				media++
			default:
				n += len(b.Text) + len(b.Name) + len(b.Input)
			}
		}
	}
	return int64(n/4 + 4*blocks + 1600*media)
}

func (s *Server) authorised(r *http.Request) bool {
	if s.kind == "openai" {
		return r.Header.Get("Authorization") == "Bearer "+s.Key
	}
	return r.Header.Get("X-Api-Key") == s.Key && r.Header.Get("Anthropic-Version") != ""
}

func (s *Server) writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var body any
	if s.kind == "openai" {
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": typ}}
	} else {
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	}
	_ = json.NewEncoder(w).Encode(body)
}

// unsupportedLocked is the error OpenAI answers a reasoning model's request that sends
// max_tokens (or, with RefuseMaxCompletionTokens, an older server's that sends
// max_completion_tokens), with the parameter it names; "" when the request is taken.
func (s *Server) unsupportedLocked(c Call) (msg, param string) {
	var body struct {
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	}
	if json.Unmarshal(c.Body, &body) != nil {
		return "", ""
	}
	switch {
	case s.quirks.RefuseMaxTokens && body.MaxTokens != nil:
		return "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "max_tokens"
	case s.quirks.RefuseMaxCompletionTokens && body.MaxCompletionTokens != nil:
		return "Unsupported parameter: 'max_completion_tokens' is not supported with this model. Use 'max_tokens' instead.", "max_completion_tokens"
	}
	return "", ""
}

// writeOpenAIError answers with OpenAI's error body, param and code as given.
func (s *Server) writeOpenAIError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": param, "code": code}})
}

func anthropicResponse(r Reply, n int) any {
	content := []map[string]any{}
	if r.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": r.Text})
	}
	for _, tc := range r.ToolCalls {
		// A tool_use cut by max_tokens still arrives as a JSON object in a non-streaming
		// response; an input scripted as cut JSON is sent as the object parsed so far: {}.
		input := json.RawMessage(tc.Input)
		if !json.Valid(input) {
			input = json.RawMessage("{}")
		}
		content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": input})
	}
	return map[string]any{
		"id": "msg_fake" + strconv.Itoa(n), "type": "message", "role": "assistant", "model": "claude-fake-1",
		"content": content, "stop_reason": anthropicStop(r), "stop_sequence": nil,
		"usage": anthropicUsage(r, r.OutputTokens),
	}
}

// anthropicUsage is r's usage as the Messages API reports it, with output tokens so far.
func anthropicUsage(r Reply, output int64) map[string]any {
	return map[string]any{"input_tokens": max(r.InputTokens-r.CacheReadTokens-r.CacheWriteTokens, 0),
		"cache_read_input_tokens": r.CacheReadTokens, "cache_creation_input_tokens": r.CacheWriteTokens,
		"output_tokens": output}
}

// openAIUsage is r's usage as Chat Completions reports it.
func openAIUsage(r Reply) map[string]any {
	return map[string]any{"prompt_tokens": r.InputTokens, "completion_tokens": r.OutputTokens,
		"total_tokens":              r.InputTokens + r.OutputTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": r.CacheReadTokens, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0}}
}

func openAIResponse(r Reply, n int) any {
	msg := map[string]any{"role": "assistant", "content": nil}
	if r.Text != "" {
		msg["content"] = r.Text
	}
	if len(r.ToolCalls) > 0 {
		var tcs []map[string]any
		for _, tc := range r.ToolCalls {
			tcs = append(tcs, map[string]any{"id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Input}})
		}
		msg["tool_calls"] = tcs
		if r.StopReason == "function_call" && len(r.ToolCalls) == 1 {
			// The deprecated form: one function_call, no id, no tool_calls.
			delete(msg, "tool_calls")
			msg["function_call"] = map[string]any{"name": r.ToolCalls[0].Name, "arguments": r.ToolCalls[0].Input}
		}
	}
	return map[string]any{
		"id": "chatcmpl-fake" + strconv.Itoa(n), "object": "chat.completion", "created": 1700000000, "model": "gpt-fake-1",
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": openAIFinish(r), "logprobs": nil}},
		"usage":   openAIUsage(r),
	}
}

// anthropicStop is the stop_reason of r; openAIFinish its finish_reason.
func anthropicStop(r Reply) string { return stopReason(r, "tool_use", "end_turn") }
func openAIFinish(r Reply) string  { return stopReason(r, "tool_calls", "stop") }

// stopReason is r's StopReason, else the one its content implies in an API's words: toolUse
// when it calls tools, else done.
func stopReason(r Reply, toolUse, done string) string {
	switch {
	case r.StopReason != "":
		return r.StopReason
	case len(r.ToolCalls) > 0:
		return toolUse
	}
	return done
}

// sleepCtx waits d unless the request ends first; it reports whether d passed.
func sleepCtx(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// textOf reads a content field that is a string or an array of text parts; a part of another
// type is an error (images and documents go in user messages only, never in a system prompt
// or a tool result, as far as the brain is concerned).
func textOf(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false, fmt.Errorf("content is neither a string nor a list of parts")
	}
	out := ""
	for i, p := range parts {
		if p.Type != "text" {
			return "", false, fmt.Errorf("content part %d has type %q: fakeprovider takes only text parts here", i, p.Type)
		}
		out += p.Text
	}
	return out, true, nil
}
