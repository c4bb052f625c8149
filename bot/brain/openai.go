package brain

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// openAIProvider calls an OpenAI-compatible Chat Completions API (POST /chat/completions)
// through the official SDK, streaming (with stream_options.include_usage) when the request has
// OnText: hosted OpenAI, Ollama, vLLM, llama.cpp's server.
// Like the Anthropic provider it is built from the service alone, so the SDK never reads
// OPENAI_* from the environment, and the SDK's retries are off.
type openAIProvider struct {
	model string
	chat  openai.ChatCompletionService
	// hosted is set for api.openai.com (whose every model takes max_completion_tokens).
	hosted bool
	// vision: images are sent (ProviderConfig.Vision); otherwise the model is told of them.
	vision bool
	// completionTokens says the output limit goes as max_completion_tokens, not max_tokens:
	// decided by the model at start (reasoningModel), flipped for the process when a server
	// answers that the one sent is unsupported.
	completionTokens atomic.Bool
}

func newOpenAI(model, apiKey, baseURL string, hc *http.Client) *openAIProvider {
	opts := []option.RequestOption{
		option.WithHTTPClient(hc),
		option.WithBaseURL(cmp.Or(baseURL, "https://api.openai.com/v1/")),
		option.WithMaxRetries(0),
	}
	if apiKey != "" {
		opts = append(opts, option.WithAPIKey(apiKey))
	}
	hosted := baseURL == "" || strings.Contains(baseURL, "api.openai.com")
	p := &openAIProvider{model: model, chat: openai.NewChatCompletionService(opts...), hosted: hosted}
	p.completionTokens.Store(hosted || reasoningModel(model))
	return p
}

// reasoningModel reports a model of OpenAI's reasoning families (GPT-5 and the o-series: o1,
// o3, o4-mini, ...), which take max_completion_tokens and refuse max_tokens behind any base
// URL (Azure, a gateway, a proxy). A gateway's prefix ("openai/gpt-5", "azure/o3-mini") and
// case are ignored.
func reasoningModel(model string) bool {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexAny(m, "/:"); i >= 0 {
		m = m[i+1:]
	}
	if strings.HasPrefix(m, "gpt-5") {
		return true
	}
	return len(m) >= 2 && m[0] == 'o' && m[1] >= '1' && m[1] <= '9'
}

// CountMethod is "tiktoken_<encoding>" for OpenAI's models, "" for others.
func (p *openAIProvider) CountMethod() string {
	if enc := openAIEncoding(p.model); enc != "" {
		return "tiktoken_" + enc
	}
	return ""
}

// CountTokens counts req with the model's tiktoken encoding, offline: Chat Completions has no
// count endpoint.
func (p *openAIProvider) CountTokens(ctx context.Context, req Request) (int64, error) {
	name := openAIEncoding(p.model)
	if name == "" {
		return 0, errNoTokenizer
	}
	enc, err := encoding(name)
	if err != nil {
		return 0, err
	}
	return countChatTokens(enc, req), nil
}

func (p *openAIProvider) Name() string  { return "openai" }
func (p *openAIProvider) Model() string { return p.model }

// Complete makes the call. When the server answers HTTP 400 unsupported_parameter for the
// output limit's parameter (max_tokens or max_completion_tokens), the call is made once more
// with the other one, which the provider then sends for the rest of the process.
func (p *openAIProvider) Complete(ctx context.Context, req Request) (Response, error) {
	completion := p.completionTokens.Load()
	resp, err := p.complete(ctx, req, completion)
	if req.MaxTokens > 0 && unsupportedTokenParam(err, completion) {
		p.completionTokens.CompareAndSwap(completion, !completion)
		resp, err = p.complete(ctx, req, !completion)
	}
	return resp, err
}

func (p *openAIProvider) complete(ctx context.Context, req Request, completion bool) (Response, error) {
	if req.OnText != nil {
		return p.stream(ctx, req, completion)
	}
	cc, err := p.chat.New(ctx, p.params(req, completion))
	if err != nil {
		return Response{}, p.translate(ctx, err)
	}
	return p.response(cc)
}

// unsupportedTokenParam reports the server refusing the output limit's parameter that was sent
// (max_completion_tokens when completion, else max_tokens): HTTP 400 with code
// unsupported_parameter (OpenAI, Azure) naming it, in its param or its message.
func unsupportedTokenParam(err error, completion bool) bool {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusBadRequest {
		return false
	}
	sent := "max_tokens"
	if completion {
		sent = "max_completion_tokens"
	}
	var apiErr *openai.Error
	param := ""
	if errors.As(err, &apiErr) {
		param = apiErr.Param
	}
	unsupported := pe.Code == "unsupported_parameter" || strings.Contains(strings.ToLower(pe.Message), "unsupported parameter")
	return unsupported && (param == sent || param == "" && strings.Contains(pe.Message, "'"+sent+"'"))
}

// stream makes the call as a stream of chunks, accumulated with the SDK's
// ChatCompletionAccumulator into the completion a non-streaming call returns (content,
// tool_calls pieces, finish_reason, and the usage of the last chunk that
// stream_options.include_usage asks for); each content piece goes to req.OnText. The
// deprecated function_call form, which the accumulator leaves out, is accumulated here. A
// stream that fails part way (an error chunk, a dropped connection, no finish_reason) is a
// *ProviderError like a failed non-streaming call, returned with the Response's Partial once
// the first chunk arrived (its usage is known only if the last chunk came).
func (p *openAIProvider) stream(ctx context.Context, req Request, completion bool) (Response, error) {
	params := p.params(req, completion)
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := p.chat.NewStreaming(ctx, params)
	defer s.Close()
	var (
		acc      openai.ChatCompletionAccumulator
		fc       openai.ChatCompletionMessageFunctionCall
		finished bool
		id       string
		part     *Partial // what arrived, from the first chunk on
		usage    bool     // a chunk carried the usage
	)
	failed := func(err error) (Response, error) {
		if part != nil && usage {
			u := acc.Usage
			part.InputKnown, part.OutputKnown = true, true
			part.InputTokens, part.OutputTokens = u.PromptTokens, u.CompletionTokens
			part.CacheReadTokens = u.PromptTokensDetails.CachedTokens
		}
		if part != nil {
			part.Model = acc.Model
		}
		return Response{Partial: part}, err
	}
	for s.Next() {
		chunk := s.Current()
		if part == nil {
			part = &Partial{}
		}
		usage = usage || chunk.Usage.PromptTokens > 0 || chunk.Usage.CompletionTokens > 0
		// Several local servers and gateways give each chunk an id of its own; the
		// accumulator, which joins choices by index, refuses a stream whose ids differ, so
		// every chunk takes the first one's.
		if id == "" {
			id = chunk.ID
		}
		chunk.ID = id
		if !acc.AddChunk(chunk) {
			return failed(&ProviderError{Provider: p.Name(), Status: http.StatusOK, Message: "malformed chunk stream"})
		}
		for _, c := range chunk.Choices {
			part.streamed(c.Delta.Content + c.Delta.Refusal + c.Delta.FunctionCall.Arguments)
			for _, tc := range c.Delta.ToolCalls {
				part.streamed(tc.Function.Arguments)
			}
			if c.Index != 0 {
				continue
			}
			if c.Delta.Content != "" {
				req.OnText(c.Delta.Content)
			}
			fc.Name += c.Delta.FunctionCall.Name
			fc.Arguments += c.Delta.FunctionCall.Arguments
			finished = finished || c.FinishReason != ""
		}
	}
	if err := endOfStream(ctx, p.Name(), s.Err(), finished, "a finish_reason", p.translate); err != nil {
		return failed(err)
	}
	cc := acc.ChatCompletion
	if len(cc.Choices) > 0 && cc.Choices[0].Message.FunctionCall.Name == "" {
		cc.Choices[0].Message.FunctionCall = fc
	}
	return p.response(&cc)
}

// params is req as the SDK's request; completion sends the output limit as
// max_completion_tokens, else as max_tokens.
func (p *openAIProvider) params(req Request, completion bool) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(p.model)}
	switch {
	case req.MaxTokens > 0 && completion:
		params.MaxCompletionTokens = openai.Int(req.MaxTokens)
	case req.MaxTokens > 0:
		params.MaxTokens = openai.Int(req.MaxTokens)
	}
	if req.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		if m.Role == RoleAssistant {
			params.Messages = append(params.Messages, assistantParam(m))
		} else {
			params.Messages = append(params.Messages, p.userParams(m)...)
		}
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  shared.FunctionParameters(t.Schema),
		}))
	}
	if req.NoTools && len(params.Tools) > 0 {
		params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	}
	return params
}

// assistantParam is an assistant message: its text, and its tool calls as function calls.
func assistantParam(m Message) openai.ChatCompletionMessageParamUnion {
	var text []string
	am := openai.ChatCompletionAssistantMessageParam{}
	for _, b := range m.Blocks {
		switch {
		case b.ToolUse != nil:
			am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: openAIToolID(b.ToolUse.ID),
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name: b.ToolUse.Name, Arguments: string(b.ToolUse.Input),
					},
				},
			})
		case b.ToolResult == nil:
			text = append(text, b.Text)
		}
	}
	if len(text) > 0 {
		am.Content.OfString = openai.String(strings.Join(text, "\n\n"))
	}
	return openai.ChatCompletionMessageParamUnion{OfAssistant: &am}
}

// userParams is a user message: its tool results as "tool" messages, then the rest.
func (p *openAIProvider) userParams(m Message) []openai.ChatCompletionMessageParamUnion {
	var msgs []openai.ChatCompletionMessageParamUnion
	var text []string
	// Tool results become "tool" messages right after the assistant message that
	// called them (text only: the API takes no image in a tool message); the user's
	// text follows as a user message, a string, or an array of content parts when the
	// message carries images or documents.
	var parts []openai.ChatCompletionContentPartUnionParam
	flush := func() {
		if len(text) > 0 {
			parts = append(parts, openai.TextContentPart(strings.Join(text, "\n\n")))
			text = nil
		}
	}
	media := false
	var toolImages []openai.ChatCompletionContentPartUnionParam
	for _, b := range m.Blocks {
		switch {
		case b.ToolResult != nil:
			content := b.ToolResult.Content
			if b.ToolResult.IsError {
				content = "ERROR: " + content
			}
			if ims := b.ToolResult.Images; len(ims) > 0 {
				// A tool message takes no image: the images follow in the user message after
				// the tool messages, under a line naming the call they came from.
				line := imagesLine(ims)
				if p.vision {
					line += " (shown in the next message)"
					toolImages = append(toolImages, openai.TextContentPart(fmt.Sprintf("[The images returned by tool call %s follow.]", openAIToolID(b.ToolResult.CallID))))
					for _, im := range ims {
						toolImages = append(toolImages, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL(&im)}))
					}
				} else {
					line += " (not shown: this model is not given images, LOGBOOK_MODEL_VISION)"
				}
				content = strings.TrimSpace(content + "\n" + line)
			}
			msgs = append(msgs, openai.ToolMessage(content, openAIToolID(b.ToolResult.CallID)))
		case b.Image != nil && !p.vision:
			text = append(text, imageNote(b.Image))
		case b.Image != nil:
			flush()
			media = true
			parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
				URL: dataURL(b.Image),
			}))
		case b.Document != nil && p.hosted:
			flush()
			media = true
			parts = append(parts, openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{
				FileData: openai.String(dataURL(b.Document)),
				Filename: openai.String(nonEmpty(b.Document.Name, "document.pdf")),
			}))
		case b.Document != nil:
			// OpenAI-compatible servers (Ollama, vLLM, llama.cpp) do not take the file
			// part, and a request they refuse would fail every later turn of the thread:
			// they are told of the PDF instead.
			text = append(text, fmt.Sprintf("[The PDF %s (%s) is not shown: this model server does not take PDF documents.]",
				nonEmpty(b.Document.Name, "document"), session.FileSize(int64(len(b.Document.Data)))))
		case b.ToolUse == nil:
			text = append(text, b.Text)
		}
	}
	if len(toolImages) > 0 {
		flush()
		parts = append(toolImages, parts...)
		media = true
	}
	switch {
	case media:
		flush()
		msgs = append(msgs, openai.UserMessage(parts))
	case len(text) > 0:
		msgs = append(msgs, openai.UserMessage(strings.Join(text, "\n\n")))
	}
	return msgs
}

// dataURL is m as a data: URL, "data:<media type>;base64,<data>".
func dataURL(m *Media) string {
	return "data:" + m.MediaType + ";base64," + base64.StdEncoding.EncodeToString(m.Data)
}

// response is the SDK's completion as a Response.
func (p *openAIProvider) response(cc *openai.ChatCompletion) (Response, error) {
	out := Response{
		Model:        cc.Model,
		InputTokens:  cc.Usage.PromptTokens,
		OutputTokens: cc.Usage.CompletionTokens,
		// Part of PromptTokens, priced apart.
		CacheReadTokens: cc.Usage.PromptTokensDetails.CachedTokens,
	}
	if len(cc.Choices) == 0 {
		return Response{}, &ProviderError{Provider: p.Name(), Status: http.StatusOK, Message: "the response has no choices", Transient: true}
	}
	choice := cc.Choices[0]
	out.StopReason = choice.FinishReason
	// The text is kept as sent: a reply cut by the limit is continued, and the continuation's
	// leading space matters. The brain trims the whole reply.
	out.Text = choice.Message.Content
	if choice.Message.Refusal != "" {
		// A refusal in the message's own field; say so whatever the finish reason.
		out.StopReason, out.Text = "refusal", ""
	}
	for _, tc := range choice.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		out.ToolUses = append(out.ToolUses, ToolUse{ID: tc.ID, Name: tc.Function.Name, Input: toolArguments(tc.Function.Arguments)})
	}
	if fc := choice.Message.FunctionCall; len(out.ToolUses) == 0 && fc.Name != "" {
		// The deprecated function_call form (finish_reason function_call) of older servers: one
		// call without an id; the brain gives it one.
		out.ToolUses = append(out.ToolUses, ToolUse{Name: fc.Name, Input: toolArguments(fc.Arguments)})
	}
	return out, nil
}

func (p *openAIProvider) translate(ctx context.Context, err error) error {
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return p.streamError(streamErr)
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return networkError(ctx, p.Name(), err)
	}
	pe := &ProviderError{
		Provider:  p.Name(),
		Status:    apiErr.StatusCode,
		Code:      cmp.Or(apiErr.Code, apiErr.Type),
		Message:   clip.Text(apiErr.Message, 300),
		Transient: transientStatus(apiErr.StatusCode) && apiErr.Code != "insufficient_quota", // no retry refills a quota
		Err:       err,
	}
	if apiErr.Response != nil {
		pe.RetryAfter = retryAfter(apiErr.Response.Header, time.Now())
	}
	return pe
}

// streamError is an error chunk of a stream that began with 200 ({"error":{"message","type",
// "code"}}), with the status a non-streaming call would have had, so retries and replies
// treat both alike.
func (p *openAIProvider) streamError(se *ssestream.StreamError) error {
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(se.Event.Data, &body)
	code := body.Error.Type
	if c, ok := body.Error.Code.(string); ok && c != "" {
		code = c
	}
	status := http.StatusInternalServerError // server_error, and what the API does not name
	switch {
	case strings.Contains(code, "rate_limit"), code == "insufficient_quota":
		status = http.StatusTooManyRequests
	case code == "invalid_request_error", code == "context_length_exceeded":
		status = http.StatusBadRequest
	}
	return &ProviderError{
		Provider: p.Name(), Status: status, Code: code, Message: clip.Text(body.Error.Message, 300),
		Transient: transientStatus(status), Err: se,
	}
}

// toolArguments is a call's arguments as a JSON object. A local model may send arguments that
// are not JSON (and the output limit may cut them); they stay visible to the tool layer, which
// answers with an error result the model can read.
func toolArguments(args string) json.RawMessage {
	input := json.RawMessage(args)
	if !json.Valid(input) || len(strings.TrimSpace(args)) == 0 {
		b, _ := json.Marshal(map[string]string{"_invalid_arguments": args})
		return b
	}
	return input
}

// imageNote tells a model that is not sent images of one.
func imageNote(m *Media) string {
	return fmt.Sprintf("[The image %s (%s) is not shown: this model is not given images (LOGBOOK_MODEL_VISION).]",
		nonEmpty(m.Name, "image"), session.FileSize(int64(len(m.Data))))
}
