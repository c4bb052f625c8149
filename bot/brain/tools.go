package brain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session/clip"
)

// Names of the brain's own tools: the sandbox's (offered with Turn.Hands) and read_log
// (offered once a summary condenses the history). The tools of the turn's parts have
// their own names, in their packages.
const (
	ToolRunCommand = "run_command"
	ToolReadFile   = "read_file"
	ToolWriteFile  = "write_file"
)

// Tool is one tool the model may call: its declaration and a call of it. A capability adds a
// tool by implementing Tool in a package of its own and offering it from its turn part
// (bot/part) in Turn.Tools; the brain knows it only by Spec().Name, which must be unique in a
// turn.
type Tool interface {
	Spec() ToolSpec
	// Run runs one call, its input a JSON object (Decode reads it). Every failure is an
	// Outcome the model reads (IsError, see Failure), never an error of the turn; ctx ends
	// with the turn.
	Run(ctx context.Context, use ToolUse) Outcome
}

// Toolset is tools that may change while a turn runs (a channel's MCP servers, whose lists
// a server may change): the brain asks for them again before each model call.
type Toolset interface {
	Tools(ctx context.Context) []Tool
}

// NewTool is the Tool of spec whose calls run.
func NewTool(spec ToolSpec, run func(ctx context.Context, use ToolUse) Outcome) Tool {
	return funcTool{spec: spec, run: run}
}

type funcTool struct {
	spec ToolSpec
	run  func(ctx context.Context, use ToolUse) Outcome
}

func (f funcTool) Spec() ToolSpec                               { return f.spec }
func (f funcTool) Run(ctx context.Context, use ToolUse) Outcome { return f.run(ctx, use) }

// Decode reads the call's input into v; the error says, for the model, how it does not fit
// the tool's schema.
func (u ToolUse) Decode(v any) error {
	if err := json.Unmarshal(u.Input, v); err != nil {
		return fmt.Errorf("the tool input does not match %s's schema: %v", u.Name, err)
	}
	return nil
}

// ToolNames is the name of every tool of the brain's own, for policies that name tools (the
// parts' tools are named by their parts).
func ToolNames() []string {
	return []string{ToolRunCommand, ToolReadFile, ToolWriteFile, ToolReadLog, ToolSearchSessions}
}

// ObjectSchema is the JSON Schema of a tool's input: an object with these properties, of
// which required must be given (none: no "required" key).
func ObjectSchema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// Prop is one property of an input's schema: its JSON type and what it is for.
func Prop(typ, description string) map[string]any {
	return map[string]any{"type": typ, "description": description}
}

// handsTools are the sandbox's tools, over hands: run_command (at most timeout a command),
// read_file and write_file.
func handsTools(hands Hands, timeout time.Duration) []Tool {
	return []Tool{
		NewTool(ToolSpec{
			Name: ToolRunCommand,
			Description: "Run a shell command (bash -c) in this thread's sandbox, a Linux workspace kept for " +
				"the session. Returns the exit code, stdout and stderr; long output is cut in the middle.",
			Schema: ObjectSchema(map[string]any{
				"command":         Prop("string", "the shell command line"),
				"timeout_seconds": Prop("integer", "optional, lower than the default limit"),
			}, "command"),
		}, func(ctx context.Context, use ToolUse) Outcome { return execCommand(ctx, hands, timeout, use) }),
		NewTool(ToolSpec{
			Name:        ToolReadFile,
			Description: "Read a text file of the sandbox workspace.",
			Schema:      ObjectSchema(map[string]any{"path": Prop("string", "path relative to the workspace")}, "path"),
		}, func(ctx context.Context, use ToolUse) Outcome { return readFile(ctx, hands, use) }),
		NewTool(ToolSpec{
			Name:        ToolWriteFile,
			Description: "Create or replace a file of the sandbox workspace.",
			Schema: ObjectSchema(map[string]any{
				"path":    Prop("string", "path relative to the workspace"),
				"content": Prop("string", "the whole new content"),
			}, "path", "content"),
		}, func(ctx context.Context, use ToolUse) Outcome { return writeFile(ctx, hands, use) }),
	}
}

// HandsTools are the sandbox's tools over hands, as a turn with Turn.Hands offers them
// (run_command at most timeout a command; 0: the default, 2 minutes), for a caller that runs
// some of their calls itself: a what-if replay (bot/replay) serves recorded results and runs
// only the other calls in a sandbox of its own.
func HandsTools(hands Hands, timeout time.Duration) []Tool {
	return handsTools(hands, cmp.Or(timeout, defaultCommandTimeout))
}

// defaultCommandTimeout bounds a run_command whose Config.CommandTimeout is zero.
const defaultCommandTimeout = 2 * time.Minute

// goneSpec declares a tool the history calls and the turn no longer offers (its part or
// server gone, its sandbox switched off): the APIs want every called tool declared.
func goneSpec(name string) ToolSpec {
	return ToolSpec{Name: name, Description: "A tool no longer offered here; calling it fails.",
		Schema: map[string]any{"type": "object"}}
}

// Outcome is what a tool did, before it becomes a tool_result event.
type Outcome struct {
	Content   string
	IsError   bool
	Truncated bool
	ExitCode  *int
	Duration  time.Duration
	FromHands bool // the sandbox produced it (actor: sandbox)
	// Images a tool returned (an MCP server's), MediaType as the tool declared it: the brain
	// shows the model those it takes (kept in Turn.Keep) and names the others.
	Images []Media
}

// outputBudget is what a turn may still put into tool results, in bytes.
type outputBudget struct {
	perResult int
	left      int
}

// fit cuts s to the budget, keeping head and tail and marking the cut, and charges it.
func (b *outputBudget) fit(s string) (string, bool) {
	limit := min(b.perResult, b.left)
	if limit < 0 {
		limit = 0
	}
	out, cutOff := headTail(s, limit)
	b.left -= len(out)
	return out, cutOff
}

// headTail keeps at most n bytes of s: its head and tail around a marker that says how much was
// left out. Cuts fall on rune boundaries.
func headTail(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	marker := func(omitted int) string {
		return fmt.Sprintf("\n[… output truncated: %d bytes omitted …]\n", omitted)
	}
	if n <= len(marker(len(s)-n))+16 {
		return fmt.Sprintf("[output omitted: %d bytes, over the turn's output limit]", len(s)), true
	}
	out, _ := headTailWith(s, n, marker)
	return out, true
}

// headTailWith keeps at most n bytes of s: two thirds of the room from its head, one third
// from its tail, around marker(omitted). It returns the result and how many bytes of s were
// left out (0: s fits whole). When n leaves no room beside the marker, only the marker is left.
func headTailWith(s string, n int, marker func(omitted int) string) (string, int) {
	if len(s) <= n {
		return s, 0
	}
	room := n - len(marker(len(s)-n)) - 2 // the final count may have more digits
	if room <= 0 {
		return marker(len(s)), len(s)
	}
	i := room * 2 / 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	j := len(s) - (room - room*2/3)
	for j < len(s) && !utf8.RuneStart(s[j]) {
		j++
	}
	return s[:i] + marker(j-i) + s[j:], j - i
}

// runTool runs one tool call: the tool the turn offers by that name, its result cut to the
// turn's output budget. Every failure is an outcome the model sees (IsError), never an error
// of the turn; only the ctx's end stops it.
func (b *Brain) runTool(ctx context.Context, st *turn, use ToolUse, budget *outputBudget) Outcome {
	start := b.now()
	out := dispatch(ctx, st, use)
	if out.Duration == 0 {
		out.Duration = b.now().Sub(start)
	}
	if len(out.Images) > 0 {
		shown, notes := screenImages(out.Images, st.Keep != nil && st.Files != nil)
		out.Images = shown
		if len(notes) > 0 {
			out.Content = strings.TrimSpace(out.Content + "\n" + strings.Join(notes, "\n"))
		}
	}
	if len(out.Images) == 0 || out.Content != "" {
		out.Content = nonEmpty(out.Content, "(no output)")
	}
	content, cutOff := budget.fit(out.Content)
	out.Content = content
	out.Truncated = out.Truncated || cutOff
	return out
}

// dispatch runs use with the offered tool of its name, once its input is a JSON object.
func dispatch(ctx context.Context, st *turn, use ToolUse) Outcome {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(use.Input, &obj); err != nil {
		return Failure("the tool input is not a JSON object: %v", err)
	}
	if raw, ok := obj["_invalid_arguments"]; ok {
		var invalid string
		_ = json.Unmarshal(raw, &invalid)
		if invalid != "" {
			return Failure("the tool arguments are not valid JSON: %s", clip.Text(invalid, 200))
		}
	}
	tool, ok := st.byName[use.Name]
	if !ok {
		if slices.Contains([]string{ToolRunCommand, ToolReadFile, ToolWriteFile}, use.Name) {
			return Failure("%s is not available: this deployment has no sandbox", use.Name)
		}
		return Failure("%s is not available in this turn", use.Name)
	}
	return tool.Run(ctx, use)
}

// Failure is an error result the model reads.
func Failure(format string, args ...any) Outcome {
	return Outcome{Content: fmt.Sprintf(format, args...), IsError: true}
}

// execCommand is run_command: the command in the sandbox, with at most timeout.
func execCommand(ctx context.Context, hands Hands, timeout time.Duration, use ToolUse) Outcome {
	var in struct {
		Command        string `json:"command"`
		TimeoutSeconds int    `json:"timeout_seconds"`
	}
	if err := use.Decode(&in); err != nil {
		return Failure("%v", err)
	}
	if strings.TrimSpace(in.Command) == "" {
		return Failure("command is required")
	}
	if in.TimeoutSeconds > 0 && time.Duration(in.TimeoutSeconds)*time.Second < timeout {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	res, err := hands.Exec(ctx, sandbox.ExecRequest{Shell: in.Command, Timeout: timeout})
	if err != nil {
		return sandboxFailure(err)
	}
	return commandOutcome(res)
}

// readFile is read_file: a text file of the sandbox (a binary one is only described).
func readFile(ctx context.Context, hands Hands, use ToolUse) Outcome {
	var in struct {
		Path string `json:"path"`
	}
	if err := use.Decode(&in); err != nil {
		return Failure("%v", err)
	}
	if in.Path == "" {
		return Failure("path is required")
	}
	data, err := hands.ReadFile(ctx, in.Path)
	if err != nil {
		return sandboxFailure(err)
	}
	if !utf8.Valid(data) {
		return Outcome{Content: fmt.Sprintf("%s is binary (%d bytes); use run_command with xxd or file to inspect it", in.Path, len(data)), FromHands: true}
	}
	return Outcome{Content: string(data), FromHands: true}
}

// writeFile is write_file: the whole content of a file of the sandbox.
func writeFile(ctx context.Context, hands Hands, use ToolUse) Outcome {
	var in struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := use.Decode(&in); err != nil {
		return Failure("%v", err)
	}
	if in.Path == "" || in.Content == nil {
		return Failure("path and content are required")
	}
	if err := hands.WriteFile(ctx, in.Path, []byte(*in.Content)); err != nil {
		return sandboxFailure(err)
	}
	return Outcome{Content: fmt.Sprintf("wrote %d bytes to %s", len(*in.Content), in.Path), FromHands: true}
}

// commandOutcome renders a command's result for the model.
func commandOutcome(res sandbox.ExecResult) Outcome {
	var sb strings.Builder
	fmt.Fprintf(&sb, "exit code: %d", res.ExitCode)
	if res.Killed != "" {
		fmt.Fprintf(&sb, " (killed: %s)", res.Killed)
	} else if res.TimedOut {
		sb.WriteString(" (timed out)")
	}
	if res.Truncated {
		sb.WriteString(" (output truncated by the sandbox)")
	}
	sb.WriteString("\n")
	if res.Stdout != "" {
		sb.WriteString("--- stdout ---\n" + res.Stdout)
		if !strings.HasSuffix(res.Stdout, "\n") {
			sb.WriteString("\n")
		}
	}
	if res.Stderr != "" {
		sb.WriteString("--- stderr ---\n" + res.Stderr)
	}
	code := res.ExitCode
	return Outcome{
		Content:   strings.TrimRight(sb.String(), "\n"),
		IsError:   res.ExitCode != 0 || res.TimedOut || res.Killed != "",
		Truncated: res.Truncated,
		ExitCode:  &code,
		Duration:  res.Duration,
		FromHands: true,
	}
}

// sandboxFailure turns a sandbox error into a result the model can act on.
func sandboxFailure(err error) Outcome {
	var msg string
	switch {
	case errors.Is(err, sandbox.ErrDisabled):
		msg = "command tools are switched off on this deployment"
	case errors.Is(err, sandbox.ErrLost):
		msg = "the sandbox was lost (its workspace is gone); the next tool call gets a fresh one, so earlier files are gone: " + clip.Text(err.Error(), 200)
	case errors.Is(err, sandbox.ErrOutsideWorkspace):
		msg = "the path is outside the sandbox workspace"
	case errors.Is(err, sandbox.ErrTooLarge):
		msg = "the file is too large to read whole; use run_command with head, tail or grep"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		msg = "stopped: the turn ran out of time"
	default:
		msg = "the sandbox failed: " + clip.Text(err.Error(), 200)
	}
	return Outcome{Content: msg, IsError: true, FromHands: true}
}

// SpecOf is the spec of the brain's own tool name (the sandbox's tools, read_log), as the
// model is offered it; false for any other name. A what-if replay (bot/replay) offers the
// recorded tools under their own specs where it knows them.
func SpecOf(name string) (ToolSpec, bool) {
	spec := ownSpec(name)
	return spec, spec.Description != goneSpec(name).Description
}
