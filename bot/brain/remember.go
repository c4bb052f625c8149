package brain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/logbook/logbook/session/clip"
)

// ToolRemember adds a note to the channel's memory (Turn.Remember).
const ToolRemember = "remember"

// rememberSpec is the remember tool, offered when the turn can keep notes.
func rememberSpec() ToolSpec {
	return ToolSpec{
		Name: ToolRemember,
		Description: "Add a short note to this channel's memory, offered to you in the channel's new threads: a fact, decision or " +
			"preference worth keeping (not secrets, not what only this thread needs). It is recorded with this thread and its date; " +
			"people list notes with /logbook memory and remove them with /logbook forget.",
		Schema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"text": map[string]any{"type": "string", "description": "the note, one or two sentences"},
			},
			"required": []string{"text"},
		},
	}
}

// remember runs the remember tool.
func remember(ctx context.Context, t Turn, use ToolUse) toolOutcome {
	if t.Remember == nil {
		return toolOutcome{Content: "remember is not available: this channel has no memory", IsError: true}
	}
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(use.Input, &in); err != nil || strings.TrimSpace(in.Text) == "" {
		return toolOutcome{Content: "text is required", IsError: true}
	}
	res, err := t.Remember(ctx, use.ID, strings.TrimSpace(in.Text))
	if err != nil {
		return toolOutcome{Content: fmt.Sprintf("not remembered: %s", clip.Text(err.Error(), 300)), IsError: true}
	}
	return toolOutcome{Content: res}
}
