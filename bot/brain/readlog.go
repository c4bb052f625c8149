package brain

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// ToolReadLog rereads the session's own log. It is offered when the session has a
// context_summary, that is when the model sees a summary instead of the earlier messages; a
// session without one has every message in the request already.
const ToolReadLog = "read_log"

// Bounds of one read_log result.
const (
	readLogDefault  = 20       // events when the model asks for no limit
	readLogMax      = 50       // events at most
	readLogMaxBytes = 12 << 10 // bytes of the rendered events at most
	readLogPerEvent = 2000     // bytes of one event's text at most
)

// readLogTypes are the types read_log returns: the conversation, never markers (turn_started,
// queued, delivered, cell_woken, ...).
var readLogTypes = []session.Type{
	session.TypeUserMessage, session.TypeUserMessageEdited, session.TypeUserMessageDeleted,
	session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult,
}

// readLogTool is read_log over the turn's log (st nil: only its spec is wanted).
func readLogTool(b *Brain, st *turn) Tool {
	return NewTool(ToolSpec{
		Name: ToolReadLog,
		Description: "Reread this thread's own log, which the summary of the earlier conversation condenses: " +
			"events by seq range (from_seq, to_seq), or the events just before a seq (before_seq), optionally " +
			"of some types only. Each line starts with the event's #seq. At most 50 events and 12 KiB per call.",
		Schema: ObjectSchema(map[string]any{
			"from_seq":   Prop("integer", "first seq, inclusive"),
			"to_seq":     Prop("integer", "last seq, inclusive"),
			"before_seq": Prop("integer", "return the events just before this seq instead of a range"),
			"types": map[string]any{"type": "array", "description": "only these event types; default all of them",
				"items": map[string]any{"type": "string", "enum": typeStrings(readLogTypes)}},
			"limit": Prop("integer", "how many events, default 20, at most 50"),
		}),
	}, func(ctx context.Context, use ToolUse) Outcome { return b.readLog(ctx, st.Turn, use.Input) })
}

// readLog runs read_log over the turn's Log, which is bound to the session: nothing from
// another session can be read. The call and its result are logged like every tool's, so the
// log records what was reread.
func (b *Brain) readLog(ctx context.Context, t Turn, input json.RawMessage) Outcome {
	var in struct {
		FromSeq   int64    `json:"from_seq"`
		ToSeq     int64    `json:"to_seq"`
		BeforeSeq int64    `json:"before_seq"`
		Types     []string `json:"types"`
		Limit     int      `json:"limit"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return Outcome{IsError: true, Content: fmt.Sprintf("the input does not match read_log's schema: %v", err)}
	}
	types := readLogTypes
	if len(in.Types) > 0 {
		types = nil
		for _, name := range in.Types {
			if !slices.Contains(readLogTypes, session.Type(name)) {
				return Outcome{IsError: true, Content: fmt.Sprintf("read_log does not return %q events; it returns %s",
					name, typeNames(readLogTypes))}
			}
			types = append(types, session.Type(name))
		}
	}
	limit := in.Limit
	if limit <= 0 {
		limit = readLogDefault
	}
	limit = min(limit, readLogMax)
	r := session.Range{Types: types}
	if in.BeforeSeq > 0 {
		r.Before, r.Limit = in.BeforeSeq, limit
	} else {
		r.From, r.To, r.Limit = in.FromSeq, in.ToSeq, limit+1 // one more tells whether there are more
	}
	evs, err := t.Log.Events(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			return Outcome{IsError: true, Content: "read_log stopped: the turn ran out of time"}
		}
		b.log.Error().Err(err).Str("session_id", t.Session.ID.String()).Msg("read_log failed")
		return Outcome{IsError: true, Content: "reading the log failed; the error is recorded in the operator's log"}
	}
	more := len(evs) > limit
	if more {
		evs = evs[:limit]
	}
	if len(evs) == 0 {
		return Outcome{Content: "no events match"}
	}
	var sb strings.Builder
	for i, e := range evs {
		line := renderLogEvent(e)
		if sb.Len()+len(line) > readLogMaxBytes {
			fmt.Fprintf(&sb, "[… %d more events in this selection did not fit: call read_log with from_seq=%d]\n", len(evs)-i, e.Seq)
			return Outcome{Content: sb.String(), Truncated: true}
		}
		sb.WriteString(line)
	}
	if more {
		fmt.Fprintf(&sb, "[… more events follow: call read_log with from_seq=%d]\n", evs[len(evs)-1].Seq+1)
	}
	return Outcome{Content: sb.String()}
}

// renderLogEvent is one event as read_log shows it: "#seq time type: text", cut to
// readLogPerEvent bytes.
func renderLogEvent(e session.Event) string {
	head := fmt.Sprintf("#%d %s %s", e.Seq, e.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"), e.Type)
	body := logEventText(e)
	if body == "" {
		body = "(unreadable payload)"
	}
	return clip.Text(head+": "+body, readLogPerEvent) + "\n"
}

// logEventText is the text of e (one of readLogTypes) that read_log shows; "" when its
// payload does not decode.
func logEventText(e session.Event) string {
	switch e.Type {
	case session.TypeUserMessage:
		return renderPayload(e, func(m session.UserMessage) string { return fmt.Sprintf("%s (ts %s): %s", speaker(m), m.TS, m.Text) })
	case session.TypeUserMessageEdited:
		return renderPayload(e, func(m session.UserMessageEdited) string {
			return fmt.Sprintf("%s edited ts %s to: %s", m.User, m.OrigTS, m.Text)
		})
	case session.TypeUserMessageDeleted:
		return renderPayload(e, func(m session.UserMessageDeleted) string { return fmt.Sprintf("deleted ts %s", m.DeletedTS) })
	case session.TypeAssistantMessage:
		return renderPayload(e, func(m session.AssistantMessage) string {
			if len(m.ToolCallIDs) > 0 {
				return m.Text + fmt.Sprintf(" [tool calls: %s]", strings.Join(m.ToolCallIDs, ", "))
			}
			return m.Text
		})
	case session.TypeToolCall:
		return renderPayload(e, func(c session.ToolCall) string { return fmt.Sprintf("%s id=%s input=%s", c.Name, c.CallID, c.Input) })
	case session.TypeToolResult:
		return renderPayload(e, func(r session.ToolResult) string {
			status := "ok"
			if r.IsError {
				status = "error"
			}
			return fmt.Sprintf("id=%s %s: %s", r.CallID, status, r.Content)
		})
	}
	return ""
}

// renderPayload is render of e's payload, "" when it does not decode as a P.
func renderPayload[P any](e session.Event, render func(P) string) string {
	var p P
	if e.Decode(&p) != nil {
		return ""
	}
	return render(p)
}

func typeNames(ts []session.Type) string { return strings.Join(typeStrings(ts), ", ") }

func typeStrings(ts []session.Type) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = string(t)
	}
	return names
}
