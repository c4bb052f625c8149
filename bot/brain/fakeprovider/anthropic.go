package fakeprovider

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// toolIDPattern is what the Messages API requires of tool_use ids (and so of tool_use_id).
var toolIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

type anthropicRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
	} `json:"tool_choice"`
	Stream *bool `json:"stream"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    json.RawMessage `json:"source"` // image, document
	Title     *string         `json:"title"`  // document
}

func parseAnthropic(body []byte) (Call, error) { return parseAnthropicRequest(body, true) }

// parseAnthropicRequest parses a Messages request; count-tokens requests take no max_tokens.
func parseAnthropicRequest(body []byte, needMaxTokens bool) (Call, error) {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return Call{}, fmt.Errorf("the request body is not valid JSON: %v", err)
	}
	if req.Model == "" {
		return Call{}, fmt.Errorf("model: Field required")
	}
	if needMaxTokens && req.MaxTokens < 1 {
		return Call{}, fmt.Errorf("max_tokens: Field required")
	}
	var c Call
	if req.Stream != nil {
		if !needMaxTokens {
			return Call{}, fmt.Errorf("stream: Extra inputs are not permitted")
		}
		c.Stream = *req.Stream
	}
	if len(req.System) > 0 {
		if s, ok, err := textOf(req.System); err == nil && ok {
			c.System = s
		} else if err != nil {
			return Call{}, fmt.Errorf("system: %v", err)
		}
	}
	for _, t := range req.Tools {
		if t.Name == "" || len(t.InputSchema) == 0 {
			return Call{}, fmt.Errorf("tools: name and input_schema are required")
		}
		c.Tools = append(c.Tools, t.Name)
	}
	if req.ToolChoice != nil {
		c.ToolChoice = req.ToolChoice.Type
	}
	images := 0
	for i, m := range req.Messages {
		msg := Message{Role: m.Role}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			if strings.TrimSpace(s) == "" {
				return Call{}, fmt.Errorf("messages.%d: user messages must have non-empty content", i)
			}
			msg.Blocks = []Block{{Type: "text", Text: s}}
			c.Messages = append(c.Messages, msg)
			continue
		}
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return Call{}, fmt.Errorf("messages.%d.content: Input should be a valid list", i)
		}
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return Call{}, fmt.Errorf("messages.%d.content.%d.text: text content blocks must be non-empty", i, j)
				}
				if strings.TrimSpace(*b.Text) == "" {
					return Call{}, fmt.Errorf("messages.%d.content.%d.text: text content blocks must contain non-whitespace text", i, j)
				}
				msg.Blocks = append(msg.Blocks, Block{Type: "text", Text: *b.Text})
			case "tool_use":
				var obj map[string]any
				if json.Unmarshal(b.Input, &obj) != nil {
					return Call{}, fmt.Errorf("messages.%d.content.%d.input: Input should be a valid dictionary", i, j)
				}
				msg.Blocks = append(msg.Blocks, Block{Type: "tool_use", ID: b.ID, Name: b.Name, Input: string(b.Input)})
			case "tool_result":
				text, media, err := toolResultContent(i, j, m.Role, b.Content)
				if err != nil {
					return Call{}, err
				}
				images += len(media)
				msg.Blocks = append(msg.Blocks, Block{Type: "tool_result", ToolUseID: b.ToolUseID, Text: text, IsError: b.IsError, Media: media})
			case "image", "document":
				mb, err := parseAnthropicMedia(i, j, m.Role, b)
				if err != nil {
					return Call{}, err
				}
				if mb.Type == "image" {
					images++
				}
				msg.Blocks = append(msg.Blocks, mb)
			default:
				return Call{}, fmt.Errorf("messages.%d.content.%d: unsupported block type %q", i, j, b.Type)
			}
		}
		c.Messages = append(c.Messages, msg)
	}
	if images > maxImages {
		return Call{}, fmt.Errorf("messages: too many images in the request: %d > %d", images, maxImages)
	}
	return c, nil
}

// toolResultContent parses a tool_result's content: a string, or a list of text and image
// blocks (the images checked like those of a user message).
func toolResultContent(i, j int, role string, raw json.RawMessage) (string, []Block, error) {
	var parts []anthropicBlock
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		text, _, err := textOf(raw)
		if err != nil {
			return "", nil, fmt.Errorf("messages.%d.content.%d.content: %v", i, j, err)
		}
		return text, nil, nil
	}
	text := ""
	var media []Block
	for k, p := range parts {
		switch p.Type {
		case "text":
			if p.Text == nil || strings.TrimSpace(*p.Text) == "" {
				return "", nil, fmt.Errorf("messages.%d.content.%d.content.%d.text: text content blocks must contain non-whitespace text", i, j, k)
			}
			text += *p.Text
		case "image":
			mb, err := parseAnthropicMedia(i, j, role, p)
			if err != nil {
				return "", nil, err
			}
			media = append(media, mb)
		default:
			return "", nil, fmt.Errorf("messages.%d.content.%d.content.%d: fakeprovider takes only text and image blocks in a tool_result, not %q", i, j, k, p.Type)
		}
	}
	return text, media, nil
}

// validateAnthropic checks what the Messages API checks about the conversation's shape.
func validateAnthropic(c Call) error {
	if len(c.Messages) == 0 {
		return fmt.Errorf("messages: at least one message is required")
	}
	if c.Messages[0].Role != "user" {
		return fmt.Errorf("messages: first message must use the \"user\" role")
	}
	tools := map[string]bool{}
	for _, t := range c.Tools {
		tools[t] = true
	}
	seen := map[string]bool{}
	for i, m := range c.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i > 0 && c.Messages[i-1].Role == m.Role {
			return fmt.Errorf("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row", m.Role)
		}
		if len(m.Blocks) == 0 {
			return fmt.Errorf("messages.%d: all messages must have non-empty content", i)
		}
		pending := map[string]bool{}
		var order []string
		if m.Role == "user" && i > 0 {
			for _, b := range c.Messages[i-1].Blocks {
				if b.Type == "tool_use" {
					pending[b.ID] = true
					order = append(order, b.ID)
				}
			}
		}
		afterText := false
		for j, b := range m.Blocks {
			switch b.Type {
			case "tool_use":
				if m.Role != "assistant" {
					return fmt.Errorf("messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
				}
				if len(tools) == 0 {
					return fmt.Errorf("Requests which include `tool_use` or `tool_result` blocks must define tools.")
				}
				if !tools[b.Name] {
					return fmt.Errorf("messages.%d.content.%d: tool %q is not defined in tools", i, j, b.Name)
				}
				if !toolIDPattern.MatchString(b.ID) {
					return fmt.Errorf("messages.%d.content.%d.id: String should match pattern '^[a-zA-Z0-9_-]+$'", i, j)
				}
				if b.ID == "" || seen[b.ID] {
					return fmt.Errorf("messages.%d.content.%d: `tool_use` ids must be unique", i, j)
				}
				seen[b.ID] = true
			case "tool_result":
				if m.Role != "user" {
					return fmt.Errorf("messages.%d.content.%d: tool_result blocks are only allowed in user messages", i, j)
				}
				if !toolIDPattern.MatchString(b.ToolUseID) {
					return fmt.Errorf("messages.%d.content.%d.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'", i, j)
				}
				if !pending[b.ToolUseID] {
					return fmt.Errorf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
						"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				if afterText {
					return fmt.Errorf("messages.%d.content.%d: `tool_result` blocks must come before any other content in a user message", i, j)
				}
				delete(pending, b.ToolUseID)
			default:
				afterText = true
			}
		}
		var missing []string
		for _, id := range order {
			if pending[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
				"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
		}
	}
	if last := c.Messages[len(c.Messages)-1]; last.Role == "assistant" {
		for _, b := range last.Blocks {
			if b.Type == "tool_use" {
				return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", len(c.Messages)-1, b.ID)
			}
		}
	}
	return nil
}
