package memory

import (
	"context"
	"fmt"
	"strings"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

// ToolRemember adds a note to the channel's memory.
const ToolRemember = "remember"

// Part is the channel's memory in each turn: its notes in the system prompt (their ids in
// the turn's turn_settings) and the remember tool, which adds a note as the agent.
func (m *Memory) Part() part.Part { return memoryPart{m} }

type memoryPart struct{ m *Memory }

// Offer reads the channel's notes. Notes that cannot be read are logged and left out: the
// turn goes on without them, and with the remember tool.
func (p memoryPart) Offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	key := s.Session.Key
	notes, err := p.m.Offer(ctx, key.Team, key.Channel)
	if err != nil {
		s.Logger.Warn().Err(err).Msg("the channel's memory could not be read: the turn goes without it")
	}
	var o part.Offer
	var ids []int64
	for _, n := range notes {
		o.Guidance.Memory = append(o.Guidance.Memory, brain.Note{ID: n.ID, Text: n.Text, By: noteBy(n), At: n.At})
		ids = append(ids, n.ID)
	}
	if len(ids) > 0 {
		o.Settings = func(rec *session.TurnSettings) { rec.Memory = append(rec.Memory, ids...) }
	}
	o.Tools = []brain.Tool{brain.NewTool(rememberSpec(), func(ctx context.Context, use brain.ToolUse) brain.Outcome {
		return p.remember(ctx, s, use)
	})}
	return o, nil
}

// noteBy says who asked for a note, for the model.
func noteBy(n session.Note) string {
	if n.ByKind == session.NoteByAgent {
		return Who(n)
	}
	return "user " + n.By
}

// rememberSpec is the remember tool.
func rememberSpec() brain.ToolSpec {
	return brain.ToolSpec{
		Name: ToolRemember,
		Description: "Add a short note to this channel's memory, offered to you in the channel's new threads: a fact, decision or " +
			"preference worth keeping (not secrets, not what only this thread needs). It is recorded with this thread and its date; " +
			"people list notes with /logbook memory and remove them with /logbook forget.",
		Schema: brain.ObjectSchema(map[string]any{"text": brain.Prop("string", "the note, one or two sentences")}, "text"),
	}
}

// remember is a call of the remember tool: a note of the channel's memory, asked by the agent
// in this session.
func (p memoryPart) remember(ctx context.Context, s part.Scope, use brain.ToolUse) brain.Outcome {
	var in struct {
		Text string `json:"text"`
	}
	if use.Decode(&in) != nil || strings.TrimSpace(in.Text) == "" {
		return brain.Failure("text is required")
	}
	key := s.Session.Key
	n, err := p.m.Remember(ctx, session.Note{Team: key.Team, Channel: key.Channel, Text: strings.TrimSpace(in.Text),
		ByKind: session.NoteByAgent, By: s.BotUser, Session: s.Session.ID, ThreadTS: key.ThreadTS, CallID: use.ID})
	if err != nil {
		return brain.Failure("not remembered: %s", clip(err.Error(), 300))
	}
	s.Logger.Info().Int64("note", n.ID).Str("call_id", use.ID).Msg("the agent added a note to the channel's memory")
	return brain.Outcome{Content: fmt.Sprintf("remembered as note %d of this channel's memory; people may remove it with /logbook forget %d", n.ID, n.ID)}
}
