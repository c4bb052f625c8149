package brain

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/logbook/logbook/session/clip"
)

// anthropicProvider calls the Anthropic Messages API (POST /v1/messages) through the official
// SDK: non-streaming, or streaming (Messages.NewStreaming) when the request has OnText. It is built from the message service alone, not anthropic.NewClient,
// so the SDK never reads ANTHROPIC_* from the environment: configuration comes in through
// ProviderConfig. The SDK's own retries are off; the brain retries within its turn budget.
type anthropicProvider struct {
	model    string
	messages anthropic.MessageService
	noVision bool // LOGBOOK_MODEL_VISION=off: images are named, not sent
}

func newAnthropic(model, apiKey, baseURL string, hc *http.Client) *anthropicProvider {
	return &anthropicProvider{
		model: model,
		messages: anthropic.NewMessageService(
			option.WithHTTPClient(hc),
			option.WithBaseURL(cmp.Or(baseURL, "https://api.anthropic.com/")),
			option.WithAPIKey(apiKey),
			option.WithMaxRetries(0),
		),
	}
}

func (p *anthropicProvider) Name() string  { return "anthropic" }
func (p *anthropicProvider) Model() string { return p.model }

// CountMethod is "anthropic_count_tokens".
func (p *anthropicProvider) CountMethod() string { return MethodAnthropicCountTokens }

// CountTokens counts req's input tokens with the API's count-tokens endpoint
// (POST /v1/messages/count_tokens), which takes the request a Messages call would send.
func (p *anthropicProvider) CountTokens(ctx context.Context, req Request) (int64, error) {
	mp := p.params(req)
	params := anthropic.MessageCountTokensParams{Model: mp.Model, Messages: mp.Messages, ToolChoice: mp.ToolChoice}
	if len(mp.System) > 0 {
		params.System = anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: mp.System}
	}
	for _, t := range mp.Tools {
		params.Tools = append(params.Tools, anthropic.MessageCountTokensToolUnionParam{OfTool: t.OfTool})
	}
	res, err := p.messages.CountTokens(ctx, params)
	if err != nil {
		return 0, p.translate(ctx, err)
	}
	return res.InputTokens, nil
}

// Complete makes the call, streaming when req has OnText. A call without OnText is streamed
// all the same when the SDK would refuse it unstreamed: Messages.New refuses, before sending
// anything, a max_tokens that could take over 10 minutes to generate (over 21,333 tokens, or
// over the model's own non-streaming limit, anthropic.CalculateNonStreamingTimeout), so
// LOGBOOK_STREAM=off with a large LOGBOOK_MAX_OUTPUT_TOKENS still gets answers.
func (p *anthropicProvider) Complete(ctx context.Context, req Request) (Response, error) {
	if req.OnText == nil && p.mustStream(req) {
		req.OnText = func(string) {}
	}
	if req.OnText != nil {
		return p.stream(ctx, req)
	}
	msg, err := p.messages.New(ctx, p.params(req))
	if err != nil {
		return Response{}, p.translateUnsent(ctx, err)
	}
	return p.response(msg), nil
}

// mustStream reports a request the SDK would refuse to send without streaming.
func (p *anthropicProvider) mustStream(req Request) bool {
	params := p.params(Request{MaxTokens: req.MaxTokens})
	_, err := anthropic.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, nil)
	return err != nil
}

// translateUnsent is translate for Messages.New, whose errors without a response are either
// the transport's (*url.Error: the request may have left) or the SDK's own refusal before it
// sent anything, which no retry cures and which is no network failure.
func (p *anthropicProvider) translateUnsent(ctx context.Context, err error) error {
	var apiErr *anthropic.Error
	var ue *url.Error
	if errors.As(err, &apiErr) || errors.As(err, &ue) || ctx.Err() != nil {
		return p.translate(ctx, err)
	}
	return &ProviderError{Provider: p.Name(), Code: CodeNotSent, Message: clip.Text("the SDK refused to send the request: "+err.Error(), 300), Err: err}
}

// stream makes the call with server-sent events, accumulating them with the SDK into the
// message a non-streaming call returns, and hands each text_delta to req.OnText. The pieces
// add up to the Response's Text: the "\n\n" that joins text blocks is sent before the next
// block's first text, and a block that holds only whitespace (which Text leaves out) is never
// sent. A stream that fails part way (an error event, a dropped connection, no message_stop)
// is a *ProviderError like a failed non-streaming call, returned with the Response's Partial
// once message_start (which carries the input's usage) arrived.
func (p *anthropicProvider) stream(ctx context.Context, req Request) (Response, error) {
	s := p.messages.NewStreaming(ctx, p.params(req))
	defer s.Close()
	var (
		msg      anthropic.Message
		part     *Partial // what arrived, from message_start on
		stopped  bool
		sentText bool   // a text block was sent: the next one opens with "\n\n"
		held     string // the whitespace a text block opened with, sent when text follows
		sending  bool   // the current text block has been sent in part
	)
	failed := func(err error) (Response, error) {
		if part != nil {
			part.InputTokens = msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens + msg.Usage.CacheCreationInputTokens
			part.CacheReadTokens, part.CacheWriteTokens = msg.Usage.CacheReadInputTokens, msg.Usage.CacheCreationInputTokens
			part.OutputTokens, part.Model = msg.Usage.OutputTokens, string(msg.Model)
		}
		return Response{Partial: part}, err
	}
	for s.Next() {
		ev := s.Current()
		if part == nil {
			part = &Partial{}
		}
		if err := msg.Accumulate(ev); err != nil {
			return failed(&ProviderError{Provider: p.Name(), Status: http.StatusOK, Message: "malformed event stream", Err: err})
		}
		switch ev.Type {
		case "message_start":
			part.InputKnown = true
		case "message_delta":
			part.OutputKnown = true // its usage counts the output so far (message_start's is a placeholder)
		case "content_block_start":
			held, sending = "", false
		case "content_block_delta":
			part.streamed(ev.Delta.Text + ev.Delta.PartialJSON + ev.Delta.Thinking)
			if ev.Delta.Type != "text_delta" || ev.Delta.Text == "" {
				continue
			}
			if !sending && strings.TrimSpace(held+ev.Delta.Text) == "" {
				held += ev.Delta.Text
				continue
			}
			piece := ev.Delta.Text
			if !sending {
				piece = held + piece
				if sentText {
					piece = "\n\n" + piece
				}
				sending, sentText = true, true
			}
			req.OnText(piece)
		case "message_stop":
			stopped = true
		}
	}
	if err := endOfStream(ctx, p.Name(), s.Err(), stopped, "message_stop", p.translate); err != nil {
		return failed(err)
	}
	return p.response(&msg), nil
}

// toolResult is a tool_result block: its text, then the tool's images as image blocks (the
// Messages API takes text and image blocks in a tool_result's content), or, for a model not
// given images, a line naming them.
func (p *anthropicProvider) toolResult(r *ToolResult) anthropic.ContentBlockParamUnion {
	if len(r.Images) == 0 {
		return anthropic.NewToolResultBlock(anthropicToolID(r.CallID), r.Content, r.IsError)
	}
	text := r.Content
	if p.noVision {
		text = strings.TrimSpace(text + "\n" + imagesLine(r.Images) + " (not shown: this model is not given images, LOGBOOK_MODEL_VISION)")
	}
	tb := anthropic.ToolResultBlockParam{ToolUseID: anthropicToolID(r.CallID), IsError: anthropic.Bool(r.IsError)}
	if strings.TrimSpace(text) != "" {
		tb.Content = append(tb.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: text}})
	}
	if !p.noVision {
		for _, im := range r.Images {
			img := anthropic.NewImageBlockBase64(im.MediaType, base64.StdEncoding.EncodeToString(im.Data))
			tb.Content = append(tb.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: img.OfImage})
		}
	}
	return anthropic.ContentBlockParamUnion{OfToolResult: &tb}
}

// params is req as the SDK's request.
func (p *anthropicProvider) params(req Request) anthropic.MessageNewParams {
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(p.model),
		MaxTokens: cmp.Or(req.MaxTokens, 4096),
		Messages:  make([]anthropic.MessageParam, 0, len(req.Messages)),
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, m := range req.Messages {
		blocks := make([]anthropic.ContentBlockParamUnion, 0, len(m.Blocks))
		for _, b := range m.Blocks {
			switch {
			case b.ToolUse != nil:
				blocks = append(blocks, anthropic.NewToolUseBlock(anthropicToolID(b.ToolUse.ID), b.ToolUse.Input, b.ToolUse.Name))
			case b.ToolResult != nil:
				blocks = append(blocks, p.toolResult(b.ToolResult))
			case b.Image != nil && p.noVision:
				blocks = append(blocks, anthropic.NewTextBlock(imageNote(b.Image)))
			case b.Image != nil:
				blocks = append(blocks, anthropic.NewImageBlockBase64(b.Image.MediaType, base64.StdEncoding.EncodeToString(b.Image.Data)))
			case b.Document != nil:
				doc := anthropic.NewDocumentBlock(anthropic.Base64PDFSourceParam{Data: base64.StdEncoding.EncodeToString(b.Document.Data)})
				if name := strings.TrimSpace(b.Document.Name); name != "" {
					doc.OfDocument.Title = anthropic.String(clip.Text(name, 200))
				}
				blocks = append(blocks, doc)
			default:
				blocks = append(blocks, anthropic.NewTextBlock(b.Text))
			}
		}
		if m.Role == RoleAssistant {
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
		} else {
			params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
		}
	}
	for _, t := range req.Tools {
		tp := &anthropic.ToolParam{
			Name:        t.Name,
			Description: anthropic.String(t.Description),
			InputSchema: anthropicSchema(t.Schema),
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: tp})
	}
	if req.NoTools && len(params.Tools) > 0 {
		params.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
	}
	return params
}

// response is the SDK's answer as a Response.
func (p *anthropicProvider) response(msg *anthropic.Message) Response {
	out := Response{
		StopReason:   string(msg.StopReason),
		Model:        string(msg.Model),
		InputTokens:  msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens + msg.Usage.CacheCreationInputTokens,
		OutputTokens: msg.Usage.OutputTokens,
		// Part of InputTokens, priced apart.
		CacheReadTokens:  msg.Usage.CacheReadInputTokens,
		CacheWriteTokens: msg.Usage.CacheCreationInputTokens,
	}
	var text []string
	for _, c := range msg.Content {
		switch c.Type {
		case "text":
			if strings.TrimSpace(c.Text) != "" {
				text = append(text, c.Text)
			}
		case "tool_use":
			input := json.RawMessage(c.Input)
			if len(input) == 0 || string(input) == "null" || !json.Valid(input) {
				// A streamed input the output limit cut is partial JSON; the
				// non-streaming API sends what it parsed of it, an object.
				input = json.RawMessage("{}")
			}
			out.ToolUses = append(out.ToolUses, ToolUse{ID: c.ID, Name: c.Name, Input: input})
		}
	}
	out.Text = strings.Join(text, "\n\n")
	return out
}

// translate turns the SDK's error into a *ProviderError, once, at the provider edge.
func (p *anthropicProvider) translate(ctx context.Context, err error) error {
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		return networkError(ctx, p.Name(), err)
	}
	status := apiErr.StatusCode
	if status == http.StatusOK {
		// An error event in a stream that began with 200: the status a non-streaming call
		// would have had, so retries and replies treat both alike.
		status = anthropicErrorStatus(string(apiErr.Type()))
	}
	pe := &ProviderError{
		Provider:  p.Name(),
		Status:    status,
		Code:      string(apiErr.Type()),
		Message:   apiMessage(apiErr.RawJSON()),
		Transient: transientStatus(status) || apiErr.Type() == "overloaded_error",
		Err:       err,
	}
	if apiErr.Response != nil {
		pe.RetryAfter = retryAfter(apiErr.Response.Header, time.Now())
	}
	return pe
}

// anthropicErrorStatus is the HTTP status the Messages API gives an error type
// (docs.anthropic.com "Errors"); 500 for a type it does not list.
func anthropicErrorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "timeout_error":
		return http.StatusGatewayTimeout
	case "overloaded_error":
		return 529
	}
	return http.StatusInternalServerError
}

// anthropicSchema is a tool's input schema as the SDK sends it: properties, required (as our
// tools write it, []string, or as a decoded JSON schema has it, []any), and every other
// keyword (additionalProperties, $defs, ... of an MCP server's schema) as is. Properties is
// never left nil: the SDK would then leave input_schema out, which the API refuses.
func anthropicSchema(schema map[string]any) anthropic.ToolInputSchemaParam {
	p := anthropic.ToolInputSchemaParam{Properties: schema["properties"]}
	if p.Properties == nil {
		p.Properties = map[string]any{}
	}
	switch r := schema["required"].(type) {
	case []string:
		p.Required = r
	case []any:
		for _, v := range r {
			if s, ok := v.(string); ok {
				p.Required = append(p.Required, s)
			}
		}
	}
	for k, v := range schema {
		switch k {
		case "type", "properties", "required":
		default:
			if p.ExtraFields == nil {
				p.ExtraFields = map[string]any{}
			}
			p.ExtraFields[k] = v
		}
	}
	return p
}
