package slackemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Stream states (Stream.State).
const (
	// StreamStreaming: chat.appendStream and chat.stopStream are accepted.
	StreamStreaming = "streaming"
	// StreamStopped: finalized by chat.stopStream.
	StreamStopped = "stopped"
	// StreamExpired: ended by Slack (Options.StreamMaxAge, Options.StreamMaxAppends or
	// ExpireStream) before the app stopped it; the message keeps what was streamed.
	StreamExpired = "expired"
	// StreamStoppedByUser: halted by the agent session's stop button (StopAgentSession).
	StreamStoppedByUser = "stopped_by_user"
)

// maxChunkTitle caps a task_update or plan_update title (answered with invalid_chunks), as
// developers measured; Slack's pages give no number.
const maxChunkTitle = 256

// Stream is a streamed message (chat.startStream … chat.stopStream) as the driver returns it.
// The message itself is in the thread from the start (Message.Streaming is true while
// State is StreamStreaming); Text is its accumulated markdown, also its Message.Text.
type Stream struct {
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts,omitempty"`
	// RecipientUserID and RecipientTeamID are chat.startStream's recipient_* parameters.
	RecipientUserID string `json:"recipient_user_id,omitempty"`
	RecipientTeamID string `json:"recipient_team_id,omitempty"`
	// TaskDisplayMode is "timeline" (the default), "plan" or "dense".
	TaskDisplayMode string `json:"task_display_mode"`
	State           string `json:"state"`
	Text            string `json:"text"`
	// Tasks are the task cards by first appearance; a task_update with a known id updates its card.
	Tasks     []Task `json:"tasks,omitempty"`
	PlanTitle string `json:"plan_title,omitempty"`
	// Blocks are those of the blocks chunks, in order; FinalBlocks chat.stopStream's blocks,
	// rendered after everything else.
	Blocks      json.RawMessage `json:"blocks,omitempty"`
	FinalBlocks json.RawMessage `json:"final_blocks,omitempty"`
	// Metadata is chat.stopStream's metadata (also the message's).
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Appends counts the successful chat.appendStream calls.
	Appends   int       `json:"appends"`
	StartedAt time.Time `json:"started_at"`
	// EndedAt is when the stream left StreamStreaming; zero while streaming.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Version grows with every change of the stream; WaitStream waits for a newer one.
	Version int `json:"version"`
}

// Streaming reports whether the stream still accepts appends.
func (st Stream) Streaming() bool { return st.State == StreamStreaming }

// TaskLines renders the plan title (if any) and one line per task card, as a terminal shows
// them: "[ ] pending", "[~] in progress", "[x] complete", "[!] error", then ": details" and
// " → output" when present.
func (st Stream) TaskLines() []string {
	var out []string
	if st.PlanTitle != "" {
		out = append(out, st.PlanTitle)
	}
	for _, t := range st.Tasks {
		mark := map[string]string{"pending": "[ ]", "in_progress": "[~]", "complete": "[x]", "error": "[!]"}[t.Status]
		line := cmpOr(mark, "[ ]") + " " + t.Title
		if t.Details != "" {
			line += ": " + t.Details
		}
		if t.Output != "" {
			line += " → " + t.Output
		}
		out = append(out, line)
	}
	return out
}

// Task is a task card of a stream (task_update chunks).
type Task struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Status is pending, in_progress, complete or error ("" until one is sent).
	Status  string       `json:"status,omitempty"`
	Details string       `json:"details,omitempty"`
	Output  string       `json:"output,omitempty"`
	Sources []TaskSource `json:"sources,omitempty"`
}

// TaskSource is a task card's source (a URL with a label).
type TaskSource struct {
	Type string `json:"type"`
	URL  string `json:"url"`
	Text string `json:"text"`
}

func (st *Stream) clone() Stream {
	c := *st
	c.Tasks = slices.Clone(st.Tasks)
	for i := range c.Tasks {
		c.Tasks[i].Sources = slices.Clone(c.Tasks[i].Sources)
	}
	c.Blocks = slices.Clone(st.Blocks)
	c.FinalBlocks = slices.Clone(st.FinalBlocks)
	c.Metadata = slices.Clone(st.Metadata)
	return c
}

// streamState is a stream and its bookkeeping.
type streamState struct {
	Stream
	blocks []json.RawMessage // the blocks chunks' blocks
}

func streamKey(channel, ts string) string { return channel + "/" + ts }

// chunk is one element of a chunks parameter.
type chunk struct {
	Type    string            `json:"type"`
	Text    string            `json:"text"`
	ID      string            `json:"id"`
	Title   *string           `json:"title"`
	Status  string            `json:"status"`
	Details string            `json:"details"`
	Output  string            `json:"output"`
	Sources []TaskSource      `json:"sources"`
	Blocks  []json.RawMessage `json:"blocks"`
}

// streamInput is what one start/append/stop call adds to a stream.
type streamInput struct {
	text   string // markdown_text then markdown_text chunks, in order
	chunks []chunk
}

// parseStreamInput reads markdown_text and chunks, answering invalid_chunks for a chunks
// parameter that is not an array of known, well-formed chunks.
func parseStreamInput(p url.Values) (streamInput, map[string]any) {
	in := streamInput{text: p.Get("markdown_text")}
	raw := p.Get("chunks")
	if raw == "" {
		return in, nil
	}
	invalid := func(msg string) (streamInput, map[string]any) {
		e := fail("invalid_chunks")
		e["response_metadata"] = map[string]any{"messages": []string{"[ERROR] " + msg}}
		return streamInput{}, e
	}
	if err := json.Unmarshal([]byte(raw), &in.chunks); err != nil {
		return invalid("chunks must be a JSON array of chunk objects")
	}
	for i, c := range in.chunks {
		switch c.Type {
		case "markdown_text":
			in.text += c.Text
		case "task_update":
			if c.ID == "" {
				return invalid(fmt.Sprintf("missing required field: id [json-pointer:/chunks/%d]", i))
			}
			if c.Title != nil && utf8.RuneCountInString(*c.Title) > maxChunkTitle {
				return invalid(fmt.Sprintf("must be at most %d characters [json-pointer:/chunks/%d/title]", maxChunkTitle, i))
			}
			switch c.Status {
			case "", "pending", "in_progress", "complete", "error":
			default:
				return invalid(fmt.Sprintf("must be one of pending, in_progress, complete, error [json-pointer:/chunks/%d/status]", i))
			}
		case "plan_update":
			if c.Title == nil || *c.Title == "" {
				return invalid(fmt.Sprintf("missing required field: title [json-pointer:/chunks/%d]", i))
			}
			if utf8.RuneCountInString(*c.Title) > maxChunkTitle {
				return invalid(fmt.Sprintf("must be at most %d characters [json-pointer:/chunks/%d/title]", maxChunkTitle, i))
			}
		case "blocks":
			if len(c.Blocks) == 0 {
				return invalid(fmt.Sprintf("missing required field: blocks [json-pointer:/chunks/%d]", i))
			}
		default:
			return invalid(fmt.Sprintf("unsupported chunk type %q [json-pointer:/chunks/%d/type]", c.Type, i))
		}
	}
	return in, nil
}

// streamChars is what Options.StreamMaxChars counts: markdown plus task card text.
func (st *streamState) streamChars() int {
	n := utf8.RuneCountInString(st.Text)
	for _, t := range st.Tasks {
		n += utf8.RuneCountInString(t.Title) + utf8.RuneCountInString(t.Details) + utf8.RuneCountInString(t.Output)
	}
	return n
}

// applyStreamLocked adds in to st, or answers the error that leaves st unchanged.
func (s *Server) applyStreamLocked(st *streamState, in streamInput) map[string]any {
	if utf8.RuneCountInString(in.text) > s.opts.StreamMaxCallChars {
		return fail("msg_too_long")
	}
	next := &streamState{Stream: st.clone(), blocks: slices.Clone(st.blocks)}
	next.Text += in.text
	for _, c := range in.chunks {
		switch c.Type {
		case "task_update":
			i := slices.IndexFunc(next.Tasks, func(t Task) bool { return t.ID == c.ID })
			if i < 0 {
				next.Tasks = append(next.Tasks, Task{ID: c.ID})
				i = len(next.Tasks) - 1
			}
			t := &next.Tasks[i]
			// title and status replace, details append, output and sources replace (as
			// developers measured title/status/details; output and sources are a choice).
			if c.Title != nil && *c.Title != "" {
				t.Title = *c.Title
			}
			t.Status = cmpOr(c.Status, t.Status)
			t.Details += c.Details
			t.Output = cmpOr(c.Output, t.Output)
			if c.Sources != nil {
				t.Sources = slices.Clone(c.Sources)
			}
		case "plan_update":
			next.PlanTitle = *c.Title
		case "blocks":
			next.blocks = append(next.blocks, c.Blocks...)
		}
	}
	if next.streamChars() > s.opts.StreamMaxChars {
		return fail("msg_too_long")
	}
	if len(next.blocks) > maxBlocks {
		return fail("msg_blocks_too_many")
	}
	if len(next.blocks) > len(st.blocks) {
		b, _ := json.Marshal(next.blocks)
		if _, bad := validateBlocks(string(b)); bad != nil {
			return bad
		}
		next.Blocks = b
	}
	*st = *next
	return nil
}

// richText is s as a rich_text block (what task_card details and output hold).
func richText(s string) map[string]any {
	return map[string]any{"type": "rich_text", "elements": []map[string]any{{
		"type": "rich_text_section", "elements": []map[string]any{{"type": "text", "text": s}},
	}}}
}

// renderBlocks is the message's blocks: the task cards (one plan block in plan mode), then
// the blocks chunks, then chat.stopStream's blocks. The markdown stays in the text field.
func (st *streamState) renderBlocks() json.RawMessage {
	var out []any
	cards := make([]map[string]any, 0, len(st.Tasks))
	for _, t := range st.Tasks {
		card := map[string]any{"type": "task_card", "task_id": t.ID, "title": t.Title}
		if t.Status != "" {
			card["status"] = t.Status
		}
		if t.Details != "" {
			card["details"] = richText(t.Details)
		}
		if t.Output != "" {
			card["output"] = richText(t.Output)
		}
		if len(t.Sources) > 0 {
			card["sources"] = t.Sources
		}
		cards = append(cards, card)
	}
	if st.TaskDisplayMode == "plan" && (len(cards) > 0 || st.PlanTitle != "") {
		out = append(out, map[string]any{"type": "plan", "title": st.PlanTitle, "tasks": cards})
	} else {
		for _, c := range cards {
			out = append(out, c)
		}
	}
	for _, b := range st.blocks {
		out = append(out, b)
	}
	var final []json.RawMessage
	_ = json.Unmarshal(st.FinalBlocks, &final)
	for _, b := range final {
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil
	}
	b, _ := json.Marshal(out)
	return b
}

// syncStreamLocked copies st into its message and counts the change.
func (s *Server) syncStreamLocked(st *streamState) {
	st.Version++
	s.dirty = true
	ch := s.channels[st.Channel]
	if ch == nil {
		return
	}
	if m := ch.byTS[st.TS]; m != nil {
		m.Text, m.Blocks, m.Streaming = st.Text, st.renderBlocks(), st.Streaming()
		s.touchLocked(m)
		if len(st.Metadata) > 0 {
			m.Metadata = slices.Clone(st.Metadata)
		}
	}
}

// endStreamLocked moves a streaming st to state.
func (s *Server) endStreamLocked(st *streamState, state string, now time.Time) {
	if st.State != StreamStreaming {
		return
	}
	st.State, st.EndedAt = state, now
	s.syncStreamLocked(st)
}

// expireStreamsLocked ends the streams older than Options.StreamMaxAge. Every reader of
// streams calls it first, so expiry needs no timer to be exact.
func (s *Server) expireStreamsLocked(now time.Time) {
	for s.streamsEnded < len(s.streamOrder) && s.streams[s.streamOrder[s.streamsEnded]].State != StreamStreaming {
		s.streamsEnded++ // a stream that ended never streams again
	}
	for _, key := range s.streamOrder[s.streamsEnded:] {
		st := s.streams[key]
		if st.State == StreamStreaming && now.Sub(st.StartedAt) >= s.opts.StreamMaxAge {
			s.endStreamLocked(st, StreamExpired, st.StartedAt.Add(s.opts.StreamMaxAge))
		}
	}
}

// streamTargetLocked resolves channel/ts for appendStream and stopStream: the bot's
// message that is streaming now. It answers the Slack error otherwise.
func (s *Server) streamTargetLocked(p url.Values) (*channelState, *streamState, map[string]any) {
	ch, code := s.writableChannel(p.Get("channel"))
	if code != "" {
		return nil, nil, fail(code)
	}
	m := ch.byTS[p.Get("ts")]
	if m == nil || m.Subtype == "tombstone" {
		return nil, nil, fail("message_not_found")
	}
	if m.BotID != s.opts.BotID {
		return nil, nil, fail("message_not_owned_by_app")
	}
	s.expireStreamsLocked(time.Now())
	st := s.streams[streamKey(ch.ID, m.TS)]
	switch {
	case st == nil:
		return nil, nil, fail("message_not_in_streaming_state")
	case st.State == StreamStoppedByUser:
		return nil, nil, fail("stopped_by_user") // a person stopped it in Slack: appends and the stop are refused alike
	case st.State != StreamStreaming:
		return nil, nil, fail("message_not_in_streaming_state")
	}
	return ch, st, nil
}

func (s *Server) chatStartStream(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.writableChannel(p.Get("channel"))
	if code != "" {
		return fail(code)
	}
	var parent *Message
	if ts := p.Get("thread_ts"); ts != "" {
		parent = ch.byTS[ts]
		if parent == nil || parent.ThreadTS != "" || parent.Subtype == "tombstone" {
			return fail("invalid_thread_ts")
		}
	}
	user, team := p.Get("recipient_user_id"), p.Get("recipient_team_id")
	if !ch.IM {
		if user == "" {
			return fail("missing_recipient_user_id")
		}
		if team == "" {
			return fail("missing_recipient_team_id")
		}
	}
	if user != "" && s.users[user] == nil {
		return fail("user_not_found")
	}
	mode := cmpOr(p.Get("task_display_mode"), "timeline")
	switch mode {
	case "timeline", "plan", "dense":
	default:
		return fail("invalid_arguments")
	}
	in, bad := parseStreamInput(p)
	if bad != nil {
		return bad
	}
	now := time.Now()
	m := &Message{Channel: ch.ID, TS: s.nextTS(), User: s.opts.BotUserID, BotID: s.opts.BotID, AppID: s.opts.AppID, Streaming: true}
	st := &streamState{Stream: Stream{
		Channel: ch.ID, TS: m.TS, RecipientUserID: user, RecipientTeamID: team,
		TaskDisplayMode: mode, State: StreamStreaming, StartedAt: now,
	}}
	if bad := s.applyStreamLocked(st, in); bad != nil {
		return bad
	}
	if parent != nil {
		m.ThreadTS, m.ParentUserID = parent.TS, parent.User
		st.ThreadTS = parent.TS
		s.clearStatusLocked(ch.ID, parent.TS)
	}
	m.Text, m.Blocks = st.Text, st.renderBlocks()
	key := streamKey(ch.ID, m.TS)
	s.streams[key] = st
	s.streamOrder = append(s.streamOrder, key)
	st.Version = 1
	s.insertLocked(ch, m)
	s.publishNewLocked(ch, m)
	// Wake waiters when the stream expires, though every reader also expires it itself.
	s.afterFunc(s.opts.StreamMaxAge, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.expireStreamsLocked(time.Now())
		s.notifyLocked()
	})
	return map[string]any{"ok": true, "channel": ch.ID, "ts": m.TS}
}

func (s *Server) chatAppendStream(_ *http.Request, p url.Values) map[string]any {
	ch, st, bad := s.streamTargetLocked(p)
	if bad != nil {
		return bad
	}
	if p.Get("markdown_text") == "" && p.Get("chunks") == "" {
		return fail("no_text")
	}
	in, bad := parseStreamInput(p)
	if bad != nil {
		return bad
	}
	if bad := s.applyStreamLocked(st, in); bad != nil {
		return bad
	}
	st.Appends++
	s.syncStreamLocked(st)
	if s.opts.StreamMaxAppends > 0 && st.Appends >= s.opts.StreamMaxAppends {
		s.endStreamLocked(st, StreamExpired, time.Now())
	}
	return map[string]any{"ok": true, "channel": ch.ID, "ts": st.TS}
}

func (s *Server) chatStopStream(_ *http.Request, p url.Values) map[string]any {
	ch, st, bad := s.streamTargetLocked(p)
	if bad != nil {
		return bad
	}
	in, bad := parseStreamInput(p)
	if bad != nil {
		return bad
	}
	var final json.RawMessage
	if raw := p.Get("blocks"); raw != "" {
		var blocks []json.RawMessage
		if json.Unmarshal([]byte(raw), &blocks) == nil && len(blocks) > maxBlocks {
			return fail("msg_blocks_too_many")
		}
		if final, bad = validateBlocks(raw); bad != nil {
			return bad
		}
	}
	metadata, ok := validateMetadata(p.Get("metadata"))
	if !ok {
		return fail("invalid_metadata_format")
	}
	session := p.Get("session_status")
	switch session {
	case "", "processing", "active", "suspended", "closed":
	default:
		return fail("invalid_arguments")
	}
	if bad := s.applyStreamLocked(st, in); bad != nil {
		return bad
	}
	st.FinalBlocks, st.Metadata = final, metadata
	st.State, st.EndedAt = StreamStopped, time.Now()
	s.syncStreamLocked(st)
	// session_status (default active) moves the thread's agent session, when there is one.
	if key := streamKey(ch.ID, st.ThreadTS); st.ThreadTS != "" {
		if _, ok := s.agentSessions[key]; ok || session != "" {
			s.setAgentStatusLocked(key, cmpOr(session, "active"))
		}
	}
	m := ch.byTS[st.TS]
	return map[string]any{"ok": true, "channel": ch.ID, "ts": st.TS, "message": s.renderMessage(m, true)}
}

// clearStatusLocked clears the thread's assistant status, as Slack does when the app posts there.
func (s *Server) clearStatusLocked(channel, threadTS string) {
	delete(s.statuses, channel+"/"+threadTS)
	delete(s.loadingMessages, channel+"/"+threadTS)
}

// setAgentStatusLocked sets an agent session's status and records it in its history.
func (s *Server) setAgentStatusLocked(key, status string) {
	s.agentSessions[key] = status
	s.agentHistory[key] = append(s.agentHistory[key], status)
}

// parseLoadingMessages reads loading_messages: a JSON array, or a comma-separated list as
// slack-go sends it. Slack rotates at most 10; the emulator keeps the first 10.
func parseLoadingMessages(v string) []string {
	if v == "" {
		return nil
	}
	var out []string
	if strings.HasPrefix(strings.TrimSpace(v), "[") {
		if json.Unmarshal([]byte(v), &out) != nil {
			out = nil
		}
	} else {
		for _, m := range strings.Split(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				out = append(out, m)
			}
		}
	}
	if len(out) > 10 {
		out = out[:10]
	}
	return out
}
