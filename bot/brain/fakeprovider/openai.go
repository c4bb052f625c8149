package fakeprovider

import (
	"encoding/json"
	"fmt"
	"strings"
)

type openAIRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

func parseOpenAI(body []byte) (Call, error) {
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return Call{}, fmt.Errorf("We could not parse the JSON body of your request: %v", err)
	}
	if req.Model == "" {
		return Call{}, fmt.Errorf("you must provide a model parameter")
	}
	var c Call
	if req.Stream != nil {
		c.Stream = *req.Stream
	}
	if req.StreamOptions != nil && !c.Stream {
		return Call{}, fmt.Errorf("The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	if c.Stream && (req.StreamOptions == nil || req.StreamOptions.IncludeUsage == nil || !*req.StreamOptions.IncludeUsage) {
		// Stricter than the API, which streams without usage: the brain records usage on
		// every call, so a stream without it is a bug here.
		return Call{}, fmt.Errorf("fakeprovider: a streaming request must set stream_options.include_usage, or the stream carries no usage")
	}
	for _, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return Call{}, fmt.Errorf("Invalid value for 'tools': each tool needs type 'function' and a name")
		}
		c.Tools = append(c.Tools, t.Function.Name)
	}
	if len(req.ToolChoice) > 0 {
		var s string
		if json.Unmarshal(req.ToolChoice, &s) == nil {
			c.ToolChoice = s
		} else {
			c.ToolChoice = string(req.ToolChoice)
		}
	}
	for i, m := range req.Messages {
		msg := Message{Role: m.Role}
		if m.Role == "user" {
			blocks, err := parseOpenAIUser(i, m.Content)
			if err != nil {
				return Call{}, err
			}
			msg.Blocks = blocks
			c.Messages = append(c.Messages, msg)
			continue
		}
		if err := openAINonUserParts(i, m.Role, m.Content); err != nil {
			return Call{}, err
		}
		text, has, err := textOf(m.Content)
		if err != nil {
			return Call{}, fmt.Errorf("Invalid 'messages[%d].content': %v", i, err)
		}
		switch m.Role {
		case "system", "developer":
			c.System += text
			msg.Blocks = []Block{{Type: "text", Text: text}}
		case "assistant":
			if has && text != "" {
				msg.Blocks = append(msg.Blocks, Block{Type: "text", Text: text})
			}
			for _, tc := range m.ToolCalls {
				msg.Blocks = append(msg.Blocks, Block{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: tc.Function.Arguments})
			}
		case "tool":
			msg.Blocks = []Block{{Type: "tool_result", ToolUseID: m.ToolCallID, Text: text}}
		default:
			return Call{}, fmt.Errorf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.", m.Role)
		}
		c.Messages = append(c.Messages, msg)
	}
	return c, nil
}

// validateOpenAI checks what Chat Completions checks about the conversation's shape, and that
// no user message is empty (which the real API refuses).
func validateOpenAI(c Call) error {
	if len(c.Messages) == 0 {
		return fmt.Errorf("Invalid 'messages': empty array. Expected an array with minimum length 1.")
	}
	tools := map[string]bool{}
	for _, t := range c.Tools {
		tools[t] = true
	}
	var pending []string // tool_call ids of the last assistant message not yet answered
	answered := map[string]bool{}
	for i, m := range c.Messages {
		if m.Role != "tool" && len(pending) > 0 {
			var missing []string
			for _, id := range pending {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each "+
					"'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(missing, ", "))
			}
			pending = nil
		}
		switch m.Role {
		case "user":
			empty := true
			for _, b := range m.Blocks {
				empty = empty && b.Type == "text" && strings.TrimSpace(b.Text) == ""
			}
			if empty {
				return fmt.Errorf("Invalid 'messages[%d].content': user content must not be empty", i)
			}
		case "assistant":
			if len(m.Blocks) == 0 {
				return fmt.Errorf("Invalid 'messages[%d]': an assistant message needs content or tool_calls", i)
			}
			for j, b := range m.Blocks {
				if b.Type != "tool_use" {
					continue
				}
				if len(b.ID) > maxToolCallID {
					return fmt.Errorf("Invalid 'messages[%d].tool_calls[%d].id': string too long. Expected a string with maximum length %d, "+
						"but got a string with length %d instead.", i, j-textBlocks(m), maxToolCallID, len(b.ID))
				}
				if !tools[b.Name] {
					return fmt.Errorf("Invalid 'messages[%d].tool_calls': function %q is not among the tools", i, b.Name)
				}
				var obj map[string]any
				if json.Unmarshal([]byte(b.Input), &obj) != nil {
					return fmt.Errorf("Invalid 'messages[%d].tool_calls': arguments must be a JSON object", i)
				}
				pending = append(pending, b.ID)
			}
		case "tool":
			id := m.Blocks[0].ToolUseID
			if len(id) > maxToolCallID {
				return fmt.Errorf("Invalid 'messages[%d].tool_call_id': string too long. Expected a string with maximum length %d, "+
					"but got a string with length %d instead.", i, maxToolCallID, len(id))
			}
			ok := false
			for _, p := range pending {
				ok = ok || p == id
			}
			if !ok || answered[id] {
				return fmt.Errorf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			answered[id] = true
		}
	}
	if len(pending) > 0 {
		for _, id := range pending {
			if !answered[id] {
				return fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "+
					"The following tool_call_ids did not have response messages: %s", id)
			}
		}
	}
	return nil
}

// maxToolCallID is the longest tool call id Chat Completions accepts.
const maxToolCallID = 40

func textBlocks(m Message) int {
	n := 0
	for _, b := range m.Blocks {
		if b.Type == "text" {
			n++
		}
	}
	return n
}
