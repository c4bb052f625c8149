package brain

import (
	"context"
	"encoding/json"
	"testing"
)

// A call is dispatched by name to the tool the turn offers, and a name the turn does not
// offer is an error result, not a panic: a sandbox tool without a sandbox says so, any other
// says it is not available.
func TestDispatchByName(t *testing.T) {
	b := &Brain{}
	st := &turn{}
	echo := NewTool(ToolSpec{Name: "echo"}, func(_ context.Context, use ToolUse) Outcome {
		return Outcome{Content: "echo " + string(use.Input)}
	})
	st.Tools = []Tool{echo}
	b.refreshTools(context.Background(), st)
	if out := dispatch(context.Background(), st, ToolUse{ID: "c0", Name: "echo", Input: json.RawMessage(`{"a":1}`)}); out.IsError || out.Content != `echo {"a":1}` {
		t.Fatalf("echo: got %+v", out)
	}
	out := dispatch(context.Background(), st, ToolUse{ID: "c1", Name: "no_such_tool", Input: json.RawMessage(`{}`)})
	if !out.IsError || out.Content != "no_such_tool is not available in this turn" {
		t.Fatalf("unknown tool: got %+v", out)
	}
	// A sandbox tool in a turn without a sandbox says so, before its own checks.
	out = dispatch(context.Background(), st, ToolUse{ID: "c2", Name: ToolRunCommand, Input: json.RawMessage(`{}`)})
	if !out.IsError || out.Content != "run_command is not available: this deployment has no sandbox" {
		t.Fatalf("run_command without a sandbox: got %+v", out)
	}
	// Input that is not an object, or that the provider could not parse, never reaches the tool.
	out = dispatch(context.Background(), st, ToolUse{ID: "c3", Name: "echo", Input: json.RawMessage(`[1]`)})
	if !out.IsError || out.Content[:len("the tool input is not a JSON object")] != "the tool input is not a JSON object" {
		t.Fatalf("array input: got %+v", out)
	}
	out = dispatch(context.Background(), st, ToolUse{ID: "c4", Name: "echo", Input: json.RawMessage(`{"_invalid_arguments":"{\"a\":"}`)})
	if !out.IsError || out.Content != `the tool arguments are not valid JSON: {"a":` {
		t.Fatalf("invalid arguments: got %+v", out)
	}
}

// Two tools of one name: the first is kept, and the second is neither declared nor run.
func TestDuplicateToolNameKeepsTheFirst(t *testing.T) {
	b := &Brain{}
	st := &turn{}
	mk := func(text string) Tool {
		return NewTool(ToolSpec{Name: "dup"}, func(context.Context, ToolUse) Outcome { return Outcome{Content: text} })
	}
	st.Tools = []Tool{mk("first"), mk("second")}
	b.refreshTools(context.Background(), st)
	if len(st.tools) != 1 {
		t.Fatalf("declared %d tools, want 1", len(st.tools))
	}
	if out := dispatch(context.Background(), st, ToolUse{Name: "dup", Input: json.RawMessage(`{}`)}); out.Content != "first" {
		t.Fatalf("dup ran %q, want the first", out.Content)
	}
}

// specsOf is the specs of tools, in order.
func specsOf(tools []Tool) []ToolSpec {
	var specs []ToolSpec
	for _, t := range tools {
		specs = append(specs, t.Spec())
	}
	return specs
}
