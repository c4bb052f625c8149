package brain

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Every tool the brain can offer has a func that runs it, and a name it does not know is an
// error result, not a panic: a spec added without its case in tool (or the other way round)
// fails here.
func TestEveryOfferedToolHasAFunc(t *testing.T) {
	b := &Brain{}
	for _, name := range ToolNames() {
		if _, ok := b.tool(name); !ok {
			t.Errorf("tool %q is offered but tool(%q) finds no func to run it", name, name)
		}
	}
	out := b.dispatch(context.Background(), Turn{}, ToolUse{ID: "c1", Name: "no_such_tool", Input: json.RawMessage(`{}`)})
	if !out.IsError || !strings.Contains(out.Content, `unknown tool "no_such_tool"`) {
		t.Fatalf("unknown tool: got %+v", out)
	}
	// A sandbox tool in a turn without a sandbox says so, before its own checks.
	out = b.dispatch(context.Background(), Turn{}, ToolUse{ID: "c2", Name: ToolRunCommand, Input: json.RawMessage(`{}`)})
	if !out.IsError || out.Content != "run_command is not available: this deployment has no sandbox" {
		t.Fatalf("run_command without a sandbox: got %+v", out)
	}
}
