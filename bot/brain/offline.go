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

	"github.com/logbook/logbook/session/clip"
)

// Offline is the provider for demos and `logbook dev` when no model is configured. It is not a
// language model and says so: it needs no network, answers the same request the same way, and
// still drives the whole loop — a message containing "run: <command>" becomes a run_command
// tool call, whose result it then reports. It is chosen only by the spec "offline", never as a
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
			if err := sleep(ctx, o.Pace); err != nil {
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
	if cmd, ok := runCommand(text); ok {
		if !hasTool(req.Tools, ToolRunCommand) || req.NoTools {
			return OfflineNotice + "\nI would run `" + cmd + "`, but command tools are not available here.", nil
		}
		input, _ := json.Marshal(map[string]string{"command": cmd})
		sum := sha256.Sum256([]byte(transcript(req.Messages, 1<<20)))
		id := "offline_" + hex.EncodeToString(sum[:8])
		return OfflineNotice + "\nRunning `" + cmd + "`.", []ToolUse{{ID: id, Name: ToolRunCommand, Input: input}}
	}
	return OfflineNotice + seen + "\nI can't understand or answer questions. Write `run: <command>` to run a shell command " +
		"in this thread's sandbox. To talk to a real model, set ANTHROPIC_API_KEY (or OPENAI_API_KEY / OPENAI_BASE_URL) and restart.", nil
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
