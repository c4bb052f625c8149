package brain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session/clip"
)

// Tool names offered to the model.
const (
	ToolRunCommand     = "run_command"
	ToolReadFile       = "read_file"
	ToolWriteFile      = "write_file"
	ToolSearchSessions = "search_sessions"
	ToolAttachFile     = "attach_file"
	ToolPullRequest    = "create_pull_request"
)

// ToolNames is the name of every tool a turn may offer, for policies that name tools.
func ToolNames() []string {
	var names []string
	for _, s := range allToolSpecs() {
		names = append(names, s.Name)
	}
	return names
}

// allToolSpecs is every tool this package knows: what a history may show calls of.
func allToolSpecs() []ToolSpec {
	return append(toolSpecs(offered{hands: true, search: true, attach: true, pullRequest: true, remember: true}), readLogSpec())
}

// objectSchema is the JSON Schema of a tool's input: an object with these properties, of
// which required must be given (none: no "required" key).
func objectSchema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// prop is one property of an input's schema: its JSON type and what it is for.
func prop(typ, description string) map[string]any {
	return map[string]any{"type": typ, "description": description}
}

// pullRequestSpec is create_pull_request.
func pullRequestSpec() ToolSpec {
	return ToolSpec{
		Name: ToolPullRequest,
		Description: "Open a pull request on this channel's repository from a branch already pushed to it, " +
			"against the repository's default branch. Opening it again for the same branch returns the same pull request. " +
			"The workspace is the repository's checkout: commit, then push with `git push origin HEAD:logbook/<name>` " +
			"(the sandbox may push only branches under logbook/).",
		Schema: objectSchema(map[string]any{
			"branch": prop("string", "the pushed branch with the changes"),
			"title":  prop("string", "the pull request's title"),
			"body":   prop("string", "what changed and why, in Markdown"),
		}, "branch", "title"),
	}
}

// offered is which of the optional tools a turn offers.
type offered struct {
	hands       bool // run_command, read_file, write_file
	search      bool // search_sessions
	attach      bool // attach_file, with hands
	pullRequest bool // create_pull_request
	remember    bool // remember
}

// toolSpecs lists the tools a turn offers, in this order: the sandbox tools, attach_file,
// search_sessions, create_pull_request, remember.
func toolSpecs(o offered) []ToolSpec {
	var specs []ToolSpec
	if o.hands {
		specs = append(specs,
			ToolSpec{
				Name: ToolRunCommand,
				Description: "Run a shell command (bash -c) in this thread's sandbox, a Linux workspace kept for " +
					"the session. Returns the exit code, stdout and stderr; long output is cut in the middle.",
				Schema: objectSchema(map[string]any{
					"command":         prop("string", "the shell command line"),
					"timeout_seconds": prop("integer", "optional, lower than the default limit"),
				}, "command"),
			},
			ToolSpec{
				Name:        ToolReadFile,
				Description: "Read a text file of the sandbox workspace.",
				Schema:      objectSchema(map[string]any{"path": prop("string", "path relative to the workspace")}, "path"),
			},
			ToolSpec{
				Name:        ToolWriteFile,
				Description: "Create or replace a file of the sandbox workspace.",
				Schema: objectSchema(map[string]any{
					"path":    prop("string", "path relative to the workspace"),
					"content": prop("string", "the whole new content"),
				}, "path", "content"),
			})
	}
	if o.hands && o.attach {
		specs = append(specs, ToolSpec{
			Name: ToolAttachFile,
			Description: "Attach a file from the sandbox workspace to the reply in the Slack thread, so people can " +
				"download it (a report, a patch, a chart, a log). Write the file first; say in the reply what it is.",
			Schema: objectSchema(map[string]any{
				"path":  prop("string", "path relative to the workspace"),
				"title": prop("string", "optional title shown in Slack; default the file name"),
			}, "path"),
		})
	}
	if o.search {
		specs = append(specs, ToolSpec{
			Name:        ToolSearchSessions,
			Description: "Full-text search of past conversations (other Slack threads) this bot took part in.",
			Schema: objectSchema(map[string]any{
				"query": prop("string", "words to look for"),
				"limit": prop("integer", "how many hits, default 5"),
			}, "query"),
		})
	}
	if o.pullRequest {
		specs = append(specs, pullRequestSpec())
	}
	if o.remember {
		specs = append(specs, rememberSpec())
	}
	return specs
}

// toolOutcome is what a tool did, before it becomes a tool_result event.
type toolOutcome struct {
	Content   string
	IsError   bool
	Truncated bool
	ExitCode  *int
	Duration  time.Duration
	FromHands bool    // the sandbox produced it (actor: sandbox)
	Images    []Media // images an MCP tool returned, for the model (kept in Turn.Keep)
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

// runTool runs one tool call. Every failure is an outcome the model sees (IsError), never an
// error of the turn; only the ctx's end stops it.
func (b *Brain) runTool(ctx context.Context, t Turn, use ToolUse, budget *outputBudget) toolOutcome {
	start := b.now()
	var out toolOutcome
	if connectors.IsTool(use.Name) {
		out = b.callConnector(ctx, t, use)
	} else {
		out = b.dispatch(ctx, t, use)
	}
	if out.Duration == 0 {
		out.Duration = b.now().Sub(start)
	}
	if len(out.Images) == 0 || out.Content != "" {
		out.Content = nonEmpty(out.Content, "(no output)")
	}
	content, cutOff := budget.fit(out.Content)
	out.Content = content
	out.Truncated = out.Truncated || cutOff
	return out
}

// toolInput is every tool's arguments, decoded at once: each tool reads its own.
type toolInput struct {
	Command        string  `json:"command"`
	TimeoutSeconds int     `json:"timeout_seconds"`
	Path           string  `json:"path"`
	Content        *string `json:"content"`
	Query          string  `json:"query"`
	Limit          int     `json:"limit"`
	Title          string  `json:"title"`
	Branch         string  `json:"branch"`
	Body           string  `json:"body"`
	Invalid        string  `json:"_invalid_arguments"`
}

// toolFunc runs one call of a tool, its input decoded (use.Input is the raw input).
type toolFunc func(ctx context.Context, t Turn, use ToolUse, in toolInput) toolOutcome

// dispatch runs use: its input decoded, then the tool's toolFunc.
func (b *Brain) dispatch(ctx context.Context, t Turn, use ToolUse) toolOutcome {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(use.Input, &obj); err != nil {
		return toolFailure("the tool input is not a JSON object: %v", err)
	}
	var in toolInput
	if err := json.Unmarshal(use.Input, &in); err != nil {
		return toolFailure("the tool input does not match %s's schema: %v", use.Name, err)
	}
	if in.Invalid != "" {
		return toolFailure("the tool arguments are not valid JSON: %s", clip.Text(in.Invalid, 200))
	}
	run, ok := b.tool(use.Name)
	if !ok {
		return toolFailure("unknown tool %q", use.Name)
	}
	return run(ctx, t, use, in)
}

// tool is the toolFunc of the built-in tool called name, false for a name this brain does
// not know. A tool is offered by toolSpecs (or its own specs func) and runs here: a new tool
// is one case. Tools from elsewhere plug in beside dispatch, in runTool (a connector's
// mcp__ tools go to callConnector).
func (b *Brain) tool(name string) (toolFunc, bool) {
	switch name {
	case ToolReadLog:
		return func(ctx context.Context, t Turn, use ToolUse, _ toolInput) toolOutcome {
			return b.readLog(ctx, t, use.Input)
		}, true
	case ToolRemember:
		return func(ctx context.Context, t Turn, use ToolUse, _ toolInput) toolOutcome {
			return remember(ctx, t, use)
		}, true
	case ToolRunCommand:
		return sandboxed(b.runCommand), true
	case ToolReadFile:
		return sandboxed(readFile), true
	case ToolWriteFile:
		return sandboxed(writeFile), true
	case ToolAttachFile:
		return sandboxed(attachFile), true
	case ToolPullRequest:
		return pullRequest, true
	case ToolSearchSessions:
		return b.searchSessions, true
	}
	return nil, false
}

// toolFailure is an error result the model reads.
func toolFailure(format string, args ...any) toolOutcome {
	return toolOutcome{Content: fmt.Sprintf(format, args...), IsError: true}
}

// sandboxed is run for a turn with a sandbox; without one the call fails saying so.
func sandboxed(run toolFunc) toolFunc {
	return func(ctx context.Context, t Turn, use ToolUse, in toolInput) toolOutcome {
		if t.Hands == nil {
			return toolFailure("%s is not available: this deployment has no sandbox", use.Name)
		}
		return run(ctx, t, use, in)
	}
}

// runCommand is run_command: the command in the sandbox, with at most the brain's timeout.
func (b *Brain) runCommand(ctx context.Context, t Turn, _ ToolUse, in toolInput) toolOutcome {
	if strings.TrimSpace(in.Command) == "" {
		return toolFailure("command is required")
	}
	timeout := b.cfg.CommandTimeout
	if in.TimeoutSeconds > 0 && time.Duration(in.TimeoutSeconds)*time.Second < timeout {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	res, err := t.Hands.Exec(ctx, sandbox.ExecRequest{Shell: in.Command, Timeout: timeout})
	if err != nil {
		return sandboxFailure(err)
	}
	return commandOutcome(res)
}

// readFile is read_file: a text file of the sandbox (a binary one is only described).
func readFile(ctx context.Context, t Turn, _ ToolUse, in toolInput) toolOutcome {
	if in.Path == "" {
		return toolFailure("path is required")
	}
	data, err := t.Hands.ReadFile(ctx, in.Path)
	if err != nil {
		return sandboxFailure(err)
	}
	if !utf8.Valid(data) {
		return toolOutcome{Content: fmt.Sprintf("%s is binary (%d bytes); use run_command with xxd or file to inspect it", in.Path, len(data)), FromHands: true}
	}
	return toolOutcome{Content: string(data), FromHands: true}
}

// writeFile is write_file: the whole content of a file of the sandbox.
func writeFile(ctx context.Context, t Turn, _ ToolUse, in toolInput) toolOutcome {
	if in.Path == "" || in.Content == nil {
		return toolFailure("path and content are required")
	}
	if err := t.Hands.WriteFile(ctx, in.Path, []byte(*in.Content)); err != nil {
		return sandboxFailure(err)
	}
	return toolOutcome{Content: fmt.Sprintf("wrote %d bytes to %s", len(*in.Content), in.Path), FromHands: true}
}

// attachFile is attach_file, through the turn's Attach.
func attachFile(ctx context.Context, t Turn, use ToolUse, in toolInput) toolOutcome {
	if t.Attach == nil {
		return toolFailure("attach_file is not available: this turn cannot attach files to the thread")
	}
	if strings.TrimSpace(in.Path) == "" {
		return toolFailure("path is required")
	}
	res, err := t.Attach(ctx, use.ID, in.Path, in.Title)
	if err != nil {
		return toolFailure("%s", clip.Text(err.Error(), 200))
	}
	return toolOutcome{Content: res}
}

// pullRequest is create_pull_request, through the turn's PullRequest.
func pullRequest(ctx context.Context, t Turn, use ToolUse, in toolInput) toolOutcome {
	if t.PullRequest == nil {
		return toolFailure("create_pull_request is not available: this channel has no repository configured")
	}
	if strings.TrimSpace(in.Branch) == "" || strings.TrimSpace(in.Title) == "" {
		return toolFailure("branch and title are required")
	}
	res, err := t.PullRequest(ctx, use.ID, strings.TrimSpace(in.Branch), strings.TrimSpace(in.Title), in.Body)
	if err != nil {
		return toolFailure("%s", clip.Text(err.Error(), 300))
	}
	return toolOutcome{Content: res}
}

// searchSessions is search_sessions, through the turn's Searcher.
func (b *Brain) searchSessions(ctx context.Context, t Turn, _ ToolUse, in toolInput) toolOutcome {
	if t.Searcher == nil {
		return toolFailure("search_sessions is not available in this deployment")
	}
	if strings.TrimSpace(in.Query) == "" {
		return toolFailure("query is required")
	}
	limit := in.Limit
	if limit <= 0 || limit > 20 {
		limit = 5
	}
	s, err := t.Searcher.Search(ctx, in.Query, limit)
	if err != nil {
		if ctx.Err() != nil {
			return toolFailure("search stopped: the turn ran out of time")
		}
		// The searcher's error is the database's: ids and SQL are for operators, not for the
		// model, which could quote them in the thread.
		b.log.Error().Err(err).Str("session_id", t.Session.ID.String()).Msg("search_sessions failed")
		return toolFailure("search failed; the error is recorded in the operator's log. Answer without it or try again later")
	}
	return toolOutcome{Content: nonEmpty(s, "no matches")}
}

// commandOutcome renders a command's result for the model.
func commandOutcome(res sandbox.ExecResult) toolOutcome {
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
	return toolOutcome{
		Content:   strings.TrimRight(sb.String(), "\n"),
		IsError:   res.ExitCode != 0 || res.TimedOut || res.Killed != "",
		Truncated: res.Truncated,
		ExitCode:  &code,
		Duration:  res.Duration,
		FromHands: true,
	}
}

// sandboxFailure turns a sandbox error into a result the model can act on.
func sandboxFailure(err error) toolOutcome {
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
	return toolOutcome{Content: msg, IsError: true, FromHands: true}
}
