package brain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// anthropicProvider calls the Anthropic Messages API (POST /v1/messages, non-streaming)
// through the official SDK. It is built from the message service alone, not anthropic.NewClient,
// so the SDK never reads ANTHROPIC_* from the environment: configuration comes in through
// ProviderConfig. The SDK's own retries are off; the brain retries within its turn budget.
type anthropicProvider struct {
	model    string
	messages anthropic.MessageService
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

func (p *anthropicProvider) Complete(ctx context.Context, req Request) (Response, error) {
	msg, err := p.messages.New(ctx, p.params(req))
	if err != nil {
		return Response{}, p.translate(ctx, err)
	}
	return p.response(msg), nil
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
				blocks = append(blocks, anthropic.NewToolResultBlock(anthropicToolID(b.ToolResult.CallID), b.ToolResult.Content, b.ToolResult.IsError))
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
			InputSchema: anthropic.ToolInputSchemaParam{Properties: t.Schema["properties"]},
		}
		if required, ok := t.Schema["required"].([]string); ok {
			tp.InputSchema.Required = required
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
			if len(input) == 0 || string(input) == "null" {
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
	pe := &ProviderError{
		Provider:  p.Name(),
		Status:    apiErr.StatusCode,
		Code:      string(apiErr.Type()),
		Message:   apiMessage(apiErr.RawJSON()),
		Transient: transientStatus(apiErr.StatusCode) || apiErr.Type() == "overloaded_error",
		Err:       err,
	}
	if apiErr.Response != nil {
		pe.RetryAfter = retryAfter(apiErr.Response.Header, time.Now())
	}
	return pe
}
