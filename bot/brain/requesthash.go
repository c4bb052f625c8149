package brain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// RequestHash is the canonical hash of a model request: the sha256 (hex) of the request's
// canonical JSON, recorded with each call's usage (session.Usage.RequestHash) so that
// `logbook replay` can check that today's code builds the same requests from the same log.
//
// The canonical JSON is an object whose keys are sorted at every level (encoding/json sorts
// a map's keys), with no insignificant space, holding exactly:
//
//   - purpose, no_tools, max_tokens;
//   - messages, in order: each its role and blocks, in order; a block one of text, tool_use
//     (id, name, input — the input re-encoded with sorted keys), tool_result (call_id, content,
//     is_error, images), image or document (media_type, name, sha256 and size of the data).
//
// Left out, because they are volatile or not the history's: tool call ids are replaced by
// their order of first appearance in the request ("1", "2", …: a provider's own ids, and the
// ids logbook gives calls without one, say nothing of the decision); the system prompt (it
// holds the clock, and the parts' guidance is recorded by turn_settings, by hash); the tools'
// specs (offered by parts and servers whose descriptions change with their versions; the
// calls the model makes are compared event by event); OnText (streaming).
func RequestHash(req Request) string {
	b, err := canonicalRequest(req)
	if err != nil {
		return "" // only a tool input that is not JSON; such a request never reaches a provider
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalRequest is RequestHash's JSON.
func canonicalRequest(req Request) ([]byte, error) {
	ids := map[string]string{}
	id := func(s string) string {
		if v, ok := ids[s]; ok {
			return v
		}
		ids[s] = strconv.Itoa(len(ids) + 1)
		return ids[s]
	}
	msgs := make([]any, 0, len(req.Messages))
	for _, m := range req.Messages {
		blocks := make([]any, 0, len(m.Blocks))
		for _, b := range m.Blocks {
			c, err := canonicalBlock(b, id)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, c)
		}
		msgs = append(msgs, map[string]any{"role": string(m.Role), "blocks": blocks})
	}
	return marshalCanonical(map[string]any{
		"purpose":    string(req.Purpose),
		"no_tools":   req.NoTools,
		"max_tokens": req.MaxTokens,
		"messages":   msgs,
	})
}

func canonicalBlock(b Block, id func(string) string) (map[string]any, error) {
	switch {
	case b.ToolUse != nil:
		var in any
		if len(b.ToolUse.Input) > 0 {
			if err := json.Unmarshal(b.ToolUse.Input, &in); err != nil {
				return nil, err
			}
		}
		return map[string]any{"tool_use": map[string]any{"id": id(b.ToolUse.ID), "name": b.ToolUse.Name, "input": in}}, nil
	case b.ToolResult != nil:
		imgs := make([]any, 0, len(b.ToolResult.Images))
		for _, m := range b.ToolResult.Images {
			imgs = append(imgs, canonicalMedia(m))
		}
		return map[string]any{"tool_result": map[string]any{"call_id": id(b.ToolResult.CallID),
			"content": b.ToolResult.Content, "is_error": b.ToolResult.IsError, "images": imgs}}, nil
	case b.Image != nil:
		return map[string]any{"image": canonicalMedia(*b.Image)}, nil
	case b.Document != nil:
		return map[string]any{"document": canonicalMedia(*b.Document)}, nil
	}
	return map[string]any{"text": b.Text}, nil
}

func canonicalMedia(m Media) map[string]any {
	sum := sha256.Sum256(m.Data)
	return map[string]any{"media_type": m.MediaType, "name": m.Name, "sha256": hex.EncodeToString(sum[:]), "size": len(m.Data)}
}

// marshalCanonical encodes v without HTML escaping and without a trailing newline; maps'
// keys come out sorted.
func marshalCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
