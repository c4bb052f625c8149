package brain

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// systemPrompt tells the model where it is and what it can do.
func systemPrompt(w Where, tools []ToolSpec, now time.Time, g Guidance) string {
	var sb strings.Builder
	name := w.BotName
	if name == "" {
		name = "logbook"
	}
	fmt.Fprintf(&sb, "You are %s, an assistant for an engineering team, talking in Slack.\n", name)
	if w.Workspace != "" {
		fmt.Fprintf(&sb, "Workspace: %s. ", w.Workspace)
	}
	if w.Channel != "" {
		fmt.Fprintf(&sb, "Channel: #%s. ", strings.TrimPrefix(w.Channel, "#"))
	}
	if w.ThreadTS != "" {
		fmt.Fprintf(&sb, "Thread: %s. ", w.ThreadTS)
	}
	fmt.Fprintf(&sb, "Today is %s (UTC).\n", now.UTC().Format("Monday 2006-01-02"))
	sb.WriteString("Several people may write in the thread: each user message starts with the writer's name. " +
		"Everything in this thread is recorded in an append-only log that people can search and audit. " +
		"Answer concisely in Markdown; Slack shows it.\n")
	if len(tools) == 0 {
		sb.WriteString("You have no tools in this thread: answer from the conversation.\n")
	} else {
		sb.WriteString("Tools:\n")
		for _, t := range tools {
			if t.Server != "" {
				// The server's text, not logbook's: one line, bounded, and said to be the server's.
				fmt.Fprintf(&sb, "- %s: (MCP server %s describes it, in its own words, not logbook's) %s\n", t.Name, t.Server,
					clip.Text(framed(strings.Join(strings.Fields(t.Description), " ")), maxServerDescription))
				continue
			}
			fmt.Fprintf(&sb, "- %s: %s\n", t.Name, t.Description)
		}
		sb.WriteString("A tool error is a result you can read and act on. Do not put secrets into commands or files.\n")
	}
	sb.WriteString(guidanceText(g)) // after logbook's own rules
	return sb.String()
}

const summarySystem = "You condense a Slack thread between engineers and an AI assistant into notes the assistant " +
	"will read instead of the original messages. Keep: who asked what, decisions, facts learned, commands run and " +
	"what they showed, files written, open questions. Drop pleasantries. Plain text, at most 300 words."

// compact summarises the older turns of an over-budget history (tokens, measured by method,
// are recorded in the summary) into a context_summary event and
// returns the history rebuilt from summary + recent events. Cuts fall only at turn boundaries,
// so a tool_use and its tool_result stay together (a provider refuses a tool_result whose
// tool_use was cut away). When there is no boundary to cut at,
// or the summary call fails, the history is returned as it was and the turn goes on: the
// original events are never changed either way. It returns an error only when the log fails.
func (b *Brain) compact(ctx context.Context, st *turn, evs []session.Event, h history, tokens int64, method string) (history, error) {
	i, ok := cutPoint(h, st.system, st.tools, b.cfg.ContextBudget/2)
	if !ok {
		st.log.Warn().Msg("history over the context budget, but no turn boundary to cut at")
		return h, nil
	}
	toSeq := h.Start[i] - 1
	older := transcript(h.Messages[:i], 2000)
	older, _ = headTail(older, b.cfg.ContextBudget*3) // about three quarters of the budget, in bytes
	req := Request{
		Purpose:   PurposeSummary,
		System:    summarySystem,
		Messages:  []Message{{Role: RoleUser, Blocks: []Block{{Text: "Summarise this conversation:\n\n" + older}}}},
		MaxTokens: 1024,
	}
	resp, _, err := b.call(ctx, st.Meter, req, nil)
	if err != nil || strings.TrimSpace(resp.Text) == "" {
		st.log.Warn().Err(err).Msg("summarising the history failed; sending it whole")
		return h, nil
	}
	from := int64(1)
	switch {
	case h.Summary.ToSeq > 0:
		from = h.Summary.FromSeq // the new summary takes in the old one
	case len(evs) > 0:
		from = evs[0].Seq
	}
	stored, err := st.Log.Append(ctx, session.NewEvent{
		Type:  session.TypeContextSummary,
		Actor: st.bot,
		Payload: session.ContextSummary{FromSeq: from, ToSeq: toSeq, Summary: resp.Text,
			Tokens: tokens, Budget: int64(b.cfg.ContextBudget), Method: method},
	})
	if err != nil {
		return h, fmt.Errorf("run turn %d: append context summary: %w", st.TurnSeq, err)
	}
	st.log.Info().Int64("to_seq", toSeq).Msg("summarised older turns")
	return st.history(append(evs, stored...))
}

const titleSystem = "Write a title for this Slack thread: at most six words, no quotes, no trailing period. " +
	"Reply with the title only."

// maybeTitle appends the session's title after its first reply: a model-written one, or, when
// that call fails, the opening words of the first message. At most one title per session
// (idempotency key "title"). Failures are logged, never the turn's.
func (b *Brain) maybeTitle(ctx context.Context, st *turn, evs []session.Event, r Reply) {
	titles, err := st.Log.Events(ctx, session.Range{Types: []session.Type{session.TypeTitle}, Limit: 1})
	if err != nil || len(titles) > 0 {
		return
	}
	h, err := st.history(evs)
	if err != nil || len(h.Messages) == 0 {
		return
	}
	msgs := append(h.Messages, Message{Role: RoleAssistant, Blocks: []Block{{Text: r.Message.Text}}})
	req := Request{
		Purpose:   PurposeTitle,
		System:    titleSystem,
		Messages:  []Message{{Role: RoleUser, Blocks: []Block{{Text: clip.Text(transcript(msgs, 300), 4000)}}}},
		MaxTokens: 30,
	}
	title := ""
	if resp, _, err := b.call(ctx, st.Meter, req, nil); err == nil {
		title = cleanTitle(resp.Text)
	} else {
		st.log.Warn().Err(err).Msg("title call failed; using the first words")
	}
	if title == "" {
		title = cleanTitle(firstWords(h.Messages[0], 8))
	}
	if title == "" {
		return
	}
	if _, err := st.Log.Append(ctx, session.NewEvent{
		Type: session.TypeTitle, Actor: st.bot, Payload: session.Title{Text: title}, IdempotencyKey: "title",
	}); err != nil {
		st.log.Warn().Err(err).Msg("append title")
	}
}

func cleanTitle(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.Trim(strings.TrimSpace(s), "\"'`*#.")
	return clip.Text(strings.TrimSpace(s), 80)
}

// firstWords is up to n words of a message's first text, without the speaker's name.
func firstWords(m Message, n int) string {
	for _, b := range m.Blocks {
		if b.Text == "" {
			continue
		}
		t := b.Text
		if _, rest, ok := strings.Cut(t, ": "); ok {
			t = rest
		}
		w := strings.Fields(t)
		return strings.Join(w[:min(n, len(w))], " ")
	}
	return ""
}

// maxServerDescription bounds an MCP server's description of a tool in the system prompt, in
// bytes (the tool's spec carries the server's whole text, bounded by bot/connectors).
const maxServerDescription = 300
