package brain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/session/clip"
)

// Offline is the provider for demos and `logbook dev` when no model is configured. It is not a
// language model and says so: it needs no network, answers the same request the same way, and
// still drives the whole loop — "run: <command>" becomes a run_command tool call,
// "write: <path>" and the lines after it a write_file call, "attach: <path>" an attach_file
// call (see OfflineCommands), and it then reports the tool's result. It is chosen only by the spec "offline", never as a
// fallback for a failing provider.
//
// With Request.OnText it streams its text in groups of a few words, Pace apart, so a live view
// shows a reply growing as it would with a model.
type Offline struct {
	// Pace is the wait between two streamed pieces; 0 streams them at once. NewProvider's
	// offline provider uses OfflinePace.
	Pace time.Duration
}

// OfflinePace is the pace of the offline provider NewProvider returns.
const OfflinePace = 60 * time.Millisecond

// offlineWords is how many words one streamed piece of an offline reply holds.
const offlineWords = 4

// Name returns "offline".
func (Offline) Name() string { return "offline" }

// Model returns "offline".
func (Offline) Model() string { return "offline" }

// OfflineNotice opens every offline reply.
const OfflineNotice = "(offline mode: I am logbook's stand-in, not a language model.)"

// Complete answers deterministically from the request's last message.
func (o Offline) Complete(ctx context.Context, req Request) (Response, error) {
	resp, err := o.answer(ctx, req)
	if err != nil || req.OnText == nil {
		return resp, err
	}
	for i, piece := range wordGroups(resp.Text, offlineWords) {
		if i > 0 && o.Pace > 0 {
			if err := wait.Sleep(ctx, o.Pace); err != nil {
				return Response{}, err
			}
		}
		req.OnText(piece)
	}
	return resp, nil
}

// wordGroups splits s into pieces of n words each, every piece keeping the spacing after its
// words, so the pieces concatenate to s.
func wordGroups(s string, n int) []string {
	var out []string
	words, start, inWord := 0, 0, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if !space && !inWord {
			if words == n {
				out = append(out, s[start:i])
				start, words = i, 0
			}
			words++
		}
		inWord = !space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func (Offline) answer(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	resp := Response{Model: "offline", StopReason: "end_turn"}
	switch req.Purpose {
	case PurposeTitle:
		// The request carries a transcript ("ada: hello…\nassistant: …"): title its first line.
		line, _, _ := strings.Cut(strings.TrimSpace(lastUserText(req.Messages).Blocks[0].Text), "\n")
		msg := Message{Role: RoleUser, Blocks: []Block{{Text: line}}}
		resp.Text = firstWords(msg, 6)
		if resp.Text != firstWords(msg, len(line)) {
			resp.Text += "…" // cut at a word boundary, and said so
		}
	case PurposeSummary:
		text := lastUserText(req.Messages)
		resp.Text = fmt.Sprintf("Offline summary (not written by a model): %d lines of conversation. They began: %s",
			strings.Count(text.Blocks[0].Text, "\n"), clip.Text(text.Blocks[0].Text, 400))
	default:
		resp.Text, resp.ToolUses = offlineReply(req)
		if len(resp.ToolUses) > 0 {
			resp.StopReason = "tool_use"
		}
	}
	resp.InputTokens = int64(estimateTokens(req.System, req.Messages, req.Tools))
	resp.OutputTokens = int64(len(resp.Text) / 4)
	return resp, nil
}

func offlineReply(req Request) (string, []ToolUse) {
	if len(req.Messages) == 0 {
		return OfflineNotice, nil
	}
	last := req.Messages[len(req.Messages)-1]
	var results []string
	var said []string
	media := 0
	for _, b := range last.Blocks {
		switch {
		case b.media() != nil:
			media++
		case b.ToolResult != nil:
			status := "finished"
			if b.ToolResult.IsError {
				status = "failed"
			}
			results = append(results, fmt.Sprintf("The tool call %s:\n```\n%s\n```", status, clip.Text(b.ToolResult.Content, 3000)))
		case strings.HasPrefix(b.Text, "[File "):
			// A shared file, not what someone said: its text never becomes a command.
		case b.Text != "":
			said = append(said, b.Text)
		}
	}
	if len(results) > 0 && len(said) == 0 {
		return OfflineNotice + "\n" + strings.Join(results, "\n"), nil
	}
	text := strings.Join(said, "\n")
	seen := ""
	if media > 0 {
		seen = fmt.Sprintf("\nI got %d shared image(s) or document(s), but I can't look at them.", media)
	}
	if call, ok := offlineCall(text); ok {
		if call.refusal != "" {
			return OfflineNotice + "\n" + call.refusal, nil
		}
		if !hasTool(req.Tools, call.tool) || req.NoTools {
			return OfflineNotice + "\nI would " + call.what + ", but " + call.tool + " is not available here.", nil
		}
		input, _ := json.Marshal(call.input)
		sum := sha256.Sum256([]byte(transcript(req.Messages, 1<<20)))
		id := "offline_" + hex.EncodeToString(sum[:8])
		return OfflineNotice + "\n" + call.doing + ".", []ToolUse{{ID: id, Name: call.tool, Input: input}}
	}
	return OfflineNotice + seen + "\nI can't understand or answer questions. " + OfflineCommands +
		" To talk to a real model, set ANTHROPIC_API_KEY (or OPENAI_API_KEY / OPENAI_BASE_URL) and restart.", nil
}

// OfflineCommands says what the offline provider does; `logbook dev`'s help lists the same.
const OfflineCommands = "Write `run: <command>` to run a shell command in this thread's sandbox, " +
	"`write: <path>` with the file's content on the lines after it to write a file there, " +
	"or `attach: <path>` to hand a file of the sandbox back in the thread."

// offlineToolCall is a tool call the offline provider read in a message.
type offlineToolCall struct {
	tool  string
	input map[string]string
	what  string // "run `ls`", for a refusal
	doing string // "Running `ls`"
	// refusal, when set, is why the message's directive is not carried out (a write with
	// nothing to write): said instead of calling the tool.
	refusal string
}

// offlineAttach is the files part's attach_file (bot/files), which the offline model calls by
// name as a model would.
const offlineAttach = "attach_file"

// offlineCall finds the tool call a message asks for: a line starting with "write: PATH" (the
// lines after it are the content, whatever they say), else one starting with
// "attach: PATH", else "run: <command>" anywhere.
func offlineCall(text string) (offlineToolCall, bool) {
	if path, content, ok := directive(text, "write:"); ok {
		if strings.TrimSpace(content) == "" {
			// "write: notes.txt" sent alone (typed, then Enter) would write an empty file and
			// leave the lines typed after it as messages of their own: say so, write nothing.
			return offlineToolCall{tool: ToolWriteFile, refusal: "Nothing was written: `write: " + path + "` needs the file's " +
				"content on the lines after it, in the same message (in `logbook dev`, type the lines after it and end " +
				"them with a line of `\"\"\"`)."}, true
		}
		return offlineToolCall{tool: ToolWriteFile, input: map[string]string{"path": path, "content": content},
			what: "write `" + path + "`", doing: fmt.Sprintf("Writing `%s` (%d bytes)", path, len(content))}, true
	}
	if path, _, ok := directive(text, "attach:"); ok {
		return offlineToolCall{tool: offlineAttach, input: map[string]string{"path": path},
			what: "attach `" + path + "`", doing: "Attaching `" + path + "`"}, true
	}
	if cmd, ok := runCommand(text); ok {
		return offlineToolCall{tool: ToolRunCommand, input: map[string]string{"command": cmd},
			what: "run `" + cmd + "`", doing: "Running `" + cmd + "`"}, true
	}
	return offlineToolCall{}, false
}

// directive finds the first word (case aside) in text: the rest of its line, trimmed of
// spaces and backticks, and the lines after that line.
func directive(text, word string) (arg, rest string, ok bool) {
	i := strings.Index(strings.ToLower(text), word)
	if i < 0 {
		return "", "", false
	}
	arg, rest, _ = strings.Cut(text[i+len(word):], "\n")
	arg = strings.Trim(strings.TrimSpace(arg), "`")
	return arg, rest, arg != ""
}

// runCommand finds "run: <command>" in a message: the rest of the line after the last "run:".
func runCommand(text string) (string, bool) {
	i := strings.LastIndex(strings.ToLower(text), "run:")
	if i < 0 {
		return "", false
	}
	cmd, _, _ := strings.Cut(text[i+len("run:"):], "\n")
	cmd = strings.Trim(strings.TrimSpace(cmd), "`")
	return cmd, cmd != ""
}

func hasTool(tools []ToolSpec, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

func lastUserText(msgs []Message) Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != RoleUser {
			continue
		}
		for _, b := range msgs[i].Blocks {
			if b.Text != "" {
				return Message{Role: RoleUser, Blocks: []Block{b}}
			}
		}
	}
	return Message{Role: RoleUser, Blocks: []Block{{Text: ""}}}
}
