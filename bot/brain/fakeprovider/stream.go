package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// Stream shapes how a scripted Reply is streamed to a request that asks for streaming
// (Anthropic: "stream": true; OpenAI: "stream": true with stream_options.include_usage). The
// zero value streams at once, in pieces of DefaultChunk characters.
//
// A non-streaming request answered by a Reply with FirstToken or Every set waits as long as
// the stream would have taken (FirstToken plus Every per piece) before it answers whole, as a
// real server that generates first and answers after.
type Stream struct {
	// FirstToken is the wait before the first content piece (after message_start / the role
	// chunk, which go out at once).
	FirstToken time.Duration
	// Chunk is the number of characters (runes) of text per piece; tool inputs (JSON) are split
	// into pieces of the same size. 0 means DefaultChunk.
	Chunk int
	// Every is the wait between two pieces.
	Every time.Duration
	// DropAfter, when > 0, drops the connection after that many pieces (text and tool input
	// pieces together): no stop reason, no usage, no end of stream.
	DropAfter int
	// ErrorType, when set, sends an SSE error event of that type ("overloaded_error",
	// "api_error", "rate_limit_error"; OpenAI: "server_error", ...) after ErrorAfter pieces, and
	// ends the stream. ErrorMessage is its message ("Overloaded" when empty).
	ErrorType    string
	ErrorAfter   int
	ErrorMessage string
	// BeforeLast, when set, is waited for (closed, or a value received) before the last text
	// piece is sent, or until the request ends: a test proves that the client saw the first
	// pieces while the last was not yet sent.
	BeforeLast <-chan struct{}
}

// DefaultChunk is the piece size, in characters, of a Stream whose Chunk is 0.
const DefaultChunk = 8

// pieces splits s into pieces of n runes.
func pieces(s string, n int) []string {
	if n <= 0 {
		n = DefaultChunk
	}
	var out []string
	for s != "" {
		i, k := 0, 0
		for i < len(s) && k < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			k++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// streamPieces is how many pieces a reply streams in.
func streamPieces(r Reply) int {
	n := len(pieces(r.Text, r.Stream.Chunk))
	for _, tc := range r.ToolCalls {
		n += len(pieces(tc.Input, r.Stream.Chunk))
	}
	return n
}

// generationTime is how long the paced stream of r takes.
func generationTime(r Reply) time.Duration {
	n := streamPieces(r)
	if n == 0 {
		return r.Stream.FirstToken
	}
	return r.Stream.FirstToken + time.Duration(n-1)*r.Stream.Every
}

// sse writes server-sent events and paces the content pieces.
type sse struct {
	w     http.ResponseWriter
	r     *http.Request
	s     Stream
	sent  int // content pieces sent
	total int // content pieces of the reply
	kind  string
}

func newSSE(w http.ResponseWriter, r *http.Request, reply Reply, kind string) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, r: r, s: reply.Stream, total: streamPieces(reply), kind: kind}
}

// event writes one event; name is "" for OpenAI's data-only events.
func (e *sse) event(name string, data any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the APIs send "&" and "<" as they are
	if err := enc.Encode(data); err != nil {
		panic(err) // the fake's own maps always marshal
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", bytes.TrimSpace(b.Bytes()))
	http.NewResponseController(e.w).Flush()
}

// wait sleeps d unless the request ends first; it reports whether to go on.
func (e *sse) wait(d time.Duration) bool {
	if d <= 0 {
		return e.r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.r.Context().Done():
		return false
	}
}

// piece paces and sends one content piece via send. It returns false when the stream ends
// here: the request ended, the connection was dropped or an error event was sent.
func (e *sse) piece(last bool, send func()) bool {
	if e.s.ErrorType != "" && e.sent == e.s.ErrorAfter {
		e.error()
		return false
	}
	d := e.s.Every
	if e.sent == 0 {
		d = e.s.FirstToken
	}
	if !e.wait(d) {
		return false
	}
	if last && e.s.BeforeLast != nil {
		select {
		case <-e.s.BeforeLast:
		case <-e.r.Context().Done():
			return false
		}
	}
	send()
	e.sent++
	if e.s.DropAfter > 0 && e.sent >= e.s.DropAfter {
		// The server's documented way to cut a response short: the connection is closed
		// without the end of the chunked body, as when a proxy or the network drops it.
		panic(http.ErrAbortHandler)
	}
	return true
}

// end is called after the content pieces; an error scheduled after them is sent here. It
// reports whether the stream goes on to its stop reason.
func (e *sse) end() bool {
	if e.s.ErrorType != "" && e.sent <= e.s.ErrorAfter {
		e.error()
		return false
	}
	return e.r.Context().Err() == nil
}

func (e *sse) error() {
	msg := e.s.ErrorMessage
	if msg == "" {
		msg = "Overloaded"
	}
	if e.kind == "openai" {
		e.event("", map[string]any{"error": map[string]any{"message": msg, "type": e.s.ErrorType, "param": nil, "code": nil}})
		return
	}
	e.event("error", map[string]any{"type": "error", "error": map[string]any{"type": e.s.ErrorType, "message": msg}})
}

// streamAnthropic sends r as the Messages API's event stream: message_start, ping, per block
// content_block_start / content_block_delta (text_delta, input_json_delta) /
// content_block_stop, message_delta (stop_reason, usage) and message_stop.
func streamAnthropic(w http.ResponseWriter, req *http.Request, r Reply, n int) {
	e := newSSE(w, req, r, "anthropic")
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake" + strconv.Itoa(n), "type": "message", "role": "assistant", "model": "claude-fake-1",
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": anthropicUsage(r, min(r.OutputTokens, 1)),
	}})
	e.event("ping", map[string]any{"type": "ping"})
	index := 0
	if r.Text != "" {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "text", "text": ""}})
		ps := pieces(r.Text, r.Stream.Chunk)
		for i, p := range ps {
			if !e.piece(i == len(ps)-1, func() {
				e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
					"delta": map[string]any{"type": "text_delta", "text": p}})
			}) {
				return
			}
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	for _, tc := range r.ToolCalls {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}})
		// The API opens every tool input with an empty piece.
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": ""}})
		for _, p := range pieces(tc.Input, r.Stream.Chunk) {
			if !e.piece(false, func() {
				e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}) {
				return
			}
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	if !e.end() {
		return
	}
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStop(r), "stop_sequence": nil},
		"usage": anthropicUsage(r, r.OutputTokens)}) // the API repeats the input counts here
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// streamOpenAI sends r as Chat Completions chunks: a role chunk, content pieces, tool_calls
// pieces (id, type and name in the first chunk of each call, arguments in pieces), a chunk
// with the finish_reason, a usage chunk with no choices (stream_options.include_usage), and
// data: [DONE]. With chunkIDs every chunk has an id of its own (Quirks.ChunkIDs).
func streamOpenAI(w http.ResponseWriter, req *http.Request, r Reply, n int, chunkIDs bool) {
	e := newSSE(w, req, r, "openai")
	base := "chatcmpl-fake" + strconv.Itoa(n)
	sent := 0
	nextID := func() string {
		sent++
		if chunkIDs {
			return base + "-" + strconv.Itoa(sent-1)
		}
		return base
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": nextID(), "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-fake-1",
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}, "usage": nil}
	}
	e.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	ps := pieces(r.Text, r.Stream.Chunk)
	for i, p := range ps {
		if !e.piece(i == len(ps)-1, func() { e.event("", chunk(map[string]any{"content": p}, nil)) }) {
			return
		}
	}
	legacy := r.StopReason == "function_call" && len(r.ToolCalls) == 1
	for i, tc := range r.ToolCalls {
		if legacy {
			e.event("", chunk(map[string]any{"function_call": map[string]any{"name": tc.Name, "arguments": ""}}, nil))
		} else {
			e.event("", chunk(map[string]any{"tool_calls": []map[string]any{{"index": i, "id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": ""}}}}, nil))
		}
		for _, p := range pieces(tc.Input, r.Stream.Chunk) {
			if !e.piece(false, func() {
				if legacy {
					e.event("", chunk(map[string]any{"function_call": map[string]any{"arguments": p}}, nil))
				} else {
					e.event("", chunk(map[string]any{"tool_calls": []map[string]any{{"index": i,
						"function": map[string]any{"arguments": p}}}}, nil))
				}
			}) {
				return
			}
		}
	}
	if !e.end() {
		return
	}
	e.event("", chunk(map[string]any{}, openAIFinish(r)))
	e.event("", map[string]any{"id": nextID(), "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-fake-1",
		"choices": []any{}, "usage": openAIUsage(r)})
	fmt.Fprint(w, "data: [DONE]\n\n")
	http.NewResponseController(w).Flush()
}
