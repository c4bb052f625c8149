package slackemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"
)

// Post is a message a user posts through the driver.
type Post struct {
	Channel string `json:"channel"`
	// User defaults to "U0000001". A bot user (User.BotID set) posts like a modern
	// app: user + bot_id, no subtype.
	User string `json:"user"`
	Text string `json:"text"`
	// ThreadTS, if set, must be a top-level message's ts: the post is a thread reply.
	ThreadTS string `json:"thread_ts"`
	// Broadcast also shows a thread reply in the channel (subtype thread_broadcast).
	Broadcast bool            `json:"broadcast"`
	Blocks    json.RawMessage `json:"blocks,omitempty"`
	// Files makes the post a file share (subtype file_share). A file whose ID names a stored
	// file shares that file again (Content, if set, replaces its bytes); any other is stored
	// as a new file uploaded by User (an empty ID is assigned, Size defaults to len(Content),
	// empty Mimetype and Filetype are inferred from Name and Content), so the bot can
	// download it from its url_private with the bot token.
	Files []File `json:"files,omitempty"`
	// BotMessage posts as a legacy integration: subtype bot_message, the user's
	// bot_id and username, no user field.
	BotMessage bool `json:"bot_message"`
}

// Posted identifies what a driver action stored and the events it fired.
type Posted struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
	// EventIDs are the payload.event_ids fired, in order (e.g. message then app_mention).
	EventIDs []string `json:"event_ids"`
}

// Post stores p as a user's message and fires its events: `message` (if the app
// subscribes to that channel type and the bot is a member) and `app_mention`
// (if the text contains <@BotUserID>, not in a DM), both with the same ts.
func (s *Server) Post(p Post) (Posted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Posted{}, ErrClosed
	}
	user := cmpOr(p.User, "U0000001")
	ch, u, err := s.userChannelLocked(p.Channel, user)
	if err != nil {
		return Posted{}, fmt.Errorf("post in %s: %w", p.Channel, err)
	}
	m := &Message{Channel: ch.ID, TS: s.nextTS(), User: user, BotID: u.BotID, Text: p.Text, Blocks: slices.Clone(p.Blocks)}
	if p.BotMessage {
		m.User, m.Subtype = "", "bot_message"
	}
	if p.ThreadTS != "" {
		parent := ch.byTS[p.ThreadTS]
		if parent == nil || parent.ThreadTS != "" {
			return Posted{}, fmt.Errorf("reply in %s to %s: thread parent %w", ch.ID, p.ThreadTS, ErrNotFound)
		}
		m.ThreadTS, m.ParentUserID = parent.TS, parent.User
		if p.Broadcast {
			m.Subtype = "thread_broadcast"
		}
	}
	for _, f := range p.Files {
		if fs := s.files[f.ID]; fs != nil && f.ID != "" && fs.deleted {
			return Posted{}, fmt.Errorf("share file %s in %s: deleted: %w", f.ID, ch.ID, ErrNotFound)
		}
	}
	if len(p.Files) > 0 {
		m.Subtype = "file_share"
		created := time.Now().Unix()
		for _, f := range p.Files {
			m.Files = append(m.Files, s.sharedFileLocked(f, user, created).meta())
		}
	}
	s.insertLocked(ch, m)
	ids := s.publishNewLocked(ch, m)
	s.notifyLocked()
	return Posted{Channel: ch.ID, TS: m.TS, EventIDs: ids}, nil
}

// ShareFile posts f in channel (in thread threadTS if set) by user, with text; f is stored as
// Post.Files describes (set f.Content to make it downloadable).
func (s *Server) ShareFile(channel, user, threadTS, text string, f File) (Posted, error) {
	return s.Post(Post{Channel: channel, User: user, ThreadTS: threadTS, Text: text, Files: []File{f}})
}

func (s *Server) userChannelLocked(channel, user string) (*channelState, *User, error) {
	ch := s.channels[channel]
	if ch == nil {
		return nil, nil, fmt.Errorf("channel %s: %w", channel, ErrNotFound)
	}
	u := s.users[user]
	if u == nil {
		return nil, nil, fmt.Errorf("user %s: %w", user, ErrNotFound)
	}
	if !ch.members[user] {
		return nil, nil, fmt.Errorf("user %s in %s: %w", user, channel, ErrNotInChannel)
	}
	if ch.Archived {
		return nil, nil, fmt.Errorf("channel %s: %w", channel, ErrArchived)
	}
	return ch, u, nil
}

// Edit replaces the text of message ts in channel as its author and fires
// `message_changed` (and `app_mention` with `edited` when the new text mentions the bot).
func (s *Server) Edit(channel, ts, text string) (Posted, error) {
	return s.changeMessage("edit", channel, ts, func(ch *channelState, m *Message, prev Message) (string, []string) {
		m.Text = text
		s.touchLocked(m)
		editTS := s.nextTS()
		m.Edited = &Edited{User: cmpOr(m.User, m.BotID), TS: editTS}
		return editTS, s.publishChangedLocked(ch, m, prev, editTS)
	})
}

// Delete removes message ts from channel and fires `message_deleted`. A thread
// parent with replies becomes a tombstone. Posted.TS is the deletion's event ts.
func (s *Server) Delete(channel, ts string) (Posted, error) {
	return s.changeMessage("delete", channel, ts, func(ch *channelState, m *Message, prev Message) (string, []string) {
		s.removeLocked(ch, m)
		return prev.TS, s.publishDeletedLocked(ch, prev, s.nextTS())
	})
}

// changeMessage applies change to the live message ts of channel under the lock, with a copy
// of it as it was (prev), and wakes the waiters; change returns the Posted's ts and the
// events it fired.
func (s *Server) changeMessage(op, channel, ts string, change func(ch *channelState, m *Message, prev Message) (string, []string)) (Posted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m, err := s.liveMessageLocked(op, channel, ts)
	if err != nil {
		return Posted{}, err
	}
	postedTS, ids := change(ch, m, m.clone())
	s.notifyLocked()
	return Posted{Channel: ch.ID, TS: postedTS, EventIDs: ids}, nil
}

// Join adds user (the bot's user ID included) to channel and posts the
// `channel_join` message ("<@U…> has joined the channel").
func (s *Server) Join(channel, user string) (Posted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, u := s.channels[channel], s.users[user]
	if ch == nil || u == nil {
		return Posted{}, fmt.Errorf("join %s to %s: %w", user, channel, ErrNotFound)
	}
	if ch.members[user] {
		return Posted{}, fmt.Errorf("join %s to %s: already a member", user, channel)
	}
	if ch.Archived {
		return Posted{}, fmt.Errorf("join %s: %w", channel, ErrArchived)
	}
	ch.members[user] = true
	ch.Members = append(ch.Members, user)
	m := &Message{Channel: ch.ID, TS: s.nextTS(), User: user, Subtype: "channel_join", Text: "<@" + user + "> has joined the channel"}
	s.insertLocked(ch, m)
	ids := s.publishNewLocked(ch, m)
	s.notifyLocked()
	return Posted{Channel: ch.ID, TS: m.TS, EventIDs: ids}, nil
}

// AddUser adds or replaces a workspace user.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = &u
	s.dirty = true
	s.notifyLocked()
}

// AddChannel adds or replaces a conversation (its messages are dropped when replaced).
func (s *Server) AddChannel(c Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Members = slices.Clone(c.Members)
	s.addChannelLocked(c)
	s.notifyLocked()
}

// SetSubscriptions replaces the app's event subscriptions (Sub* constants).
func (s *Server) SetSubscriptions(subs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = map[string]bool{}
	for _, sub := range subs {
		s.subs[sub] = true
	}
}

// Message returns message ts of channel.
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireStreamsLocked(time.Now())
	if ch := s.channels[channel]; ch != nil && ch.byTS[ts] != nil {
		return ch.byTS[ts].clone(), true
	}
	return Message{}, false
}

// Thread returns the thread containing ts (parent first, then replies by ts).
func (s *Server) Thread(channel, ts string) ([]Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.readChannelLocked(channel)
	if ch == nil {
		return nil, fmt.Errorf("thread %s in %s: channel %w", ts, channel, ErrNotFound)
	}
	thread := s.threadLocked(ch, ts)
	if len(thread) == 0 {
		return nil, fmt.Errorf("thread %s in %s: %w", ts, channel, ErrNotFound)
	}
	out := make([]Message, len(thread))
	for i, m := range thread {
		out[i] = m.clone()
	}
	return out, nil
}

// History returns every message of channel, replies included, oldest first.
func (s *Server) History(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.readChannelLocked(channel)
	if ch == nil {
		return nil
	}
	out := make([]Message, len(ch.msgs))
	for i, m := range ch.msgs {
		out[i] = m.clone()
	}
	return out
}

// readChannelLocked returns channel (nil when there is none) as a reader sees it now: streams
// past their age are ended first. Callers hold s.mu.
func (s *Server) readChannelLocked(channel string) *channelState {
	s.expireStreamsLocked(time.Now())
	return s.channels[channel]
}

// msgRef names a message: its channel and ts.
type msgRef struct{ channel, ts string }

// touchLocked records that m was stored or its text changed, for ChangedSince.
func (s *Server) touchLocked(m *Message) {
	s.touched = append(s.touched, msgRef{m.Channel, m.TS})
}

// goneLocked records that m is being deleted (or made a tombstone), for ChangedSince: m as it
// was is what a watcher is told of it.
func (s *Server) goneLocked(m *Message) {
	if s.gone == nil {
		s.gone = map[msgRef]Message{}
	}
	r := msgRef{m.Channel, m.TS}
	if _, ok := s.gone[r]; ok {
		return // a tombstone removed with its last reply: the message went when it became one
	}
	s.gone[r] = m.clone()
	s.touched = append(s.touched, r)
}

// Change is one message's change as ChangedSince reports it: the message as it is now, or,
// when Deleted, as it was when it was deleted — conversations.history no longer shows it (a
// thread parent with replies shows as a tombstone there), so a watcher must not count it.
type Change struct {
	Message
	Deleted bool
}

// ChangedSince returns the messages stored, changed or deleted since cursor (0: since the
// start), each once and in the order of its first change: as it is now, or as it was when
// it was deleted (Deleted; also when it was stored and deleted since cursor); and the cursor
// to pass next time. A watcher polling it costs what changed, not the whole history.
func (s *Server) ChangedSince(cursor int) ([]Change, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireStreamsLocked(time.Now())
	cursor = min(max(cursor, 0), len(s.touched))
	seen := map[msgRef]bool{}
	var out []Change
	for _, r := range s.touched[cursor:] {
		if seen[r] {
			continue
		}
		seen[r] = true
		if g, ok := s.gone[r]; ok {
			out = append(out, Change{Message: g.clone(), Deleted: true})
			continue
		}
		if ch := s.channels[r.channel]; ch != nil && ch.byTS[r.ts] != nil {
			out = append(out, Change{Message: ch.byTS[r.ts].clone()})
		}
	}
	return out, len(s.touched)
}

// BotReplies returns the bot's messages in the thread threadTS of channel, oldest first.
func (s *Server) BotReplies(channel, threadTS string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.readChannelLocked(channel)
	if ch == nil {
		return nil
	}
	var out []Message
	for _, m := range ch.replies[threadTS] {
		if m.BotID == s.opts.BotID && m.BotID != "" {
			out = append(out, m.clone())
		}
	}
	return out
}

// WaitForReplies waits until the bot has posted at least n replies in thread
// threadTS of channel and returns all its replies there.
func (s *Server) WaitForReplies(ctx context.Context, channel, threadTS string, n int) ([]Message, error) {
	var got []Message
	err := s.Wait(ctx, func() bool {
		got = s.BotReplies(channel, threadTS)
		return len(got) >= n
	})
	if err != nil {
		return got, fmt.Errorf("wait for %d bot replies in %s/%s (have %d): %w", n, channel, threadTS, len(got), err)
	}
	return got, nil
}

// WaitForReply waits for the bot's first reply in thread threadTS of channel.
func (s *Server) WaitForReply(ctx context.Context, channel, threadTS string) (Message, error) {
	got, err := s.WaitForReplies(ctx, channel, threadTS, 1)
	if err != nil {
		return Message{}, err
	}
	return got[0], nil
}

// Acks returns every ack received, in order.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.acks)
	for i := range out {
		out[i].Payload = slices.Clone(out[i].Payload)
	}
	return out
}

// WaitForAck waits until a delivery of eventID (an event_id or SlashResult.ID) is
// acked in time and returns that ack.
func (s *Server) WaitForAck(ctx context.Context, eventID string) (Ack, error) {
	var got Ack
	err := s.Wait(ctx, func() bool {
		for _, a := range s.Acks() {
			if a.EventID == eventID && !a.Stale {
				got = a
				return true
			}
		}
		return false
	})
	if err != nil {
		return Ack{}, fmt.Errorf("wait for ack of %s: %w", eventID, err)
	}
	return got, nil
}

// Deliveries returns every envelope send attempt, in order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivLog)
}

// Delivery states returned by DeliveryState.
const (
	StateAwaitingAck   = "awaiting_ack"
	StateAwaitingRetry = "awaiting_retry"
	StateAcked         = "acked"
	StateFailed        = "failed" // retries exhausted (or a slash command not acked)
)

// DeliveryState returns the state of eventID's delivery, or "" if unknown.
func (s *Server) DeliveryState(eventID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.byEvent[eventID]; d != nil {
		return [...]string{StateAwaitingAck, StateAwaitingRetry, StateAcked, StateFailed}[d.state]
	}
	return ""
}

// Calls returns how many times method was called (failed calls included).
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Requests returns the calls of method ("" = all), in order, tokens removed.
func (s *Server) Requests(method string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if method == "" || r.Method == method {
			out = append(out, Request{Method: r.Method, Params: url.Values(maps.Clone(r.Params)), At: r.At})
		}
	}
	return out
}

// Ephemerals returns every ephemeral message, in order.
func (s *Server) Ephemerals() []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ephemerals)
}

// ThreadTitle returns the title the bot gave the thread (assistant.threads.setTitle or
// agents.sessions.*), "" if none.
func (s *Server) ThreadTitle(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.titles[channel+"/"+threadTS]
}

// AgentSessionStatus returns the thread's agent session status, "" when there is none.
func (s *Server) AgentSessionStatus(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agentSessions[channel+"/"+threadTS]
}

// AgentSessionStatuses returns every status the thread's agent session was given, in order
// (agents.sessions.setStatus, and chat.stopStream's session_status), e.g. processing then active.
func (s *Server) AgentSessionStatuses(channel, threadTS string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.agentHistory[channel+"/"+threadTS])
}

// AssistantLoadingMessages returns the loading_messages of the thread's current assistant
// status (at most 10), nil once the status is cleared.
func (s *Server) AssistantLoadingMessages(channel, threadTS string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loadingMessages[channel+"/"+threadTS])
}

// AssistantStatus returns the status last set by assistant.threads.setStatus for
// the thread, "" once cleared or after the bot replied there.
func (s *Server) AssistantStatus(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statuses[channel+"/"+threadTS]
}

// TB is the part of testing.TB that MustStart uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// MustStart starts a server for a test and closes it at the test's end.
func MustStart(tb TB, opts Options) *Server {
	tb.Helper()
	s, err := Start(opts)
	if err != nil {
		tb.Fatalf("start slack emulator: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// PublishEvent delivers a custom inner event (e.g. {"type":"reaction_added",…})
// in a standard event_callback envelope, with the usual ack window and retries,
// regardless of subscriptions. inner must be a JSON object with a string "type";
// send types slack-go knows, or the client reports a bad message. It returns the event_id.
func (s *Server) PublishEvent(inner json.RawMessage) (string, error) {
	var ev map[string]any
	if err := json.Unmarshal(inner, &ev); err != nil {
		return "", fmt.Errorf("publish event: %w", err)
	}
	typ, _ := ev["type"].(string)
	if typ == "" {
		return "", errors.New("publish event: inner event has no \"type\"")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	id := s.publishLocked(typ, ev)
	s.notifyLocked()
	return id, nil
}

// Streams returns every streamed message (chat.startStream), in start order.
func (s *Server) Streams() []Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireStreamsLocked(time.Now())
	out := make([]Stream, 0, len(s.streamOrder))
	for _, key := range s.streamOrder {
		out = append(out, s.streams[key].clone())
	}
	return out
}

// StreamState returns the stream of message ts in channel; false if that message was not streamed.
func (s *Server) StreamState(channel, ts string) (Stream, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireStreamsLocked(time.Now())
	st := s.streams[streamKey(channel, ts)]
	if st == nil {
		return Stream{}, false
	}
	return st.clone(), true
}

// WaitStream waits until the stream of message ts in channel has a Version above after (0
// waits for it to exist) and returns it. A terminal showing a reply as it grows loops on it:
// print the new part of Text and the TaskLines, then wait again with the Version it had,
// until the stream is no longer Streaming.
func (s *Server) WaitStream(ctx context.Context, channel, ts string, after int) (Stream, error) {
	var got Stream
	err := s.Wait(ctx, func() bool {
		st, ok := s.StreamState(channel, ts)
		got = st
		return ok && st.Version > after
	})
	if err != nil {
		return got, fmt.Errorf("wait for stream %s in %s past version %d: %w", ts, channel, after, err)
	}
	return got, nil
}

// ExpireStream ends a stream as Slack does when it times one out: later appends and its
// stop answer message_not_in_streaming_state; the message keeps what was streamed.
func (s *Server) ExpireStream(channel, ts string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[streamKey(channel, ts)]
	if st == nil {
		return fmt.Errorf("expire stream %s in %s: %w", ts, channel, ErrNotFound)
	}
	s.endStreamLocked(st, StreamExpired, time.Now())
	s.notifyLocked()
	return nil
}

// StopAgentSession is user pressing the stop button of the agent session of thread threadTS:
// the thread's messages still streaming stop (appends and stops then answer stopped_by_user) and, when the app subscribes to agent_session_stopped,
// that event is delivered (channel, thread_ts, user, streaming_message_ts, event_ts), which
// slack-go decodes as slackevents.AgentSessionStoppedEvent. The session's status is left as
// it is: the app must move it. Posted.TS is the event's ts.
func (s *Server) StopAgentSession(channel, threadTS, user string) (Posted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Posted{}, ErrClosed
	}
	ch, _, err := s.userChannelLocked(channel, user)
	if err != nil {
		return Posted{}, fmt.Errorf("stop agent session %s: %w", threadTS, err)
	}
	if p := ch.byTS[threadTS]; p == nil || p.ThreadTS != "" {
		return Posted{}, fmt.Errorf("stop agent session in %s: thread %s %w", channel, threadTS, ErrNotFound)
	}
	now := time.Now()
	s.expireStreamsLocked(now)
	halted := []string{}
	for _, key := range s.streamOrder {
		if st := s.streams[key]; st.Channel == ch.ID && st.ThreadTS == threadTS && st.Streaming() {
			s.endStreamLocked(st, StreamStoppedByUser, now)
			halted = append(halted, st.TS)
		}
	}
	ts := s.nextTS()
	var ids []string
	if s.subs[SubAgentSessionStopped] {
		ids = append(ids, s.publishLocked(SubAgentSessionStopped, map[string]any{
			"type": SubAgentSessionStopped, "channel": ch.ID, "thread_ts": threadTS, "user": user,
			"streaming_message_ts": halted, "event_ts": ts,
		}))
	}
	s.notifyLocked()
	return Posted{Channel: ch.ID, TS: ts, EventIDs: ids}, nil
}

// liveMessageLocked is message ts of channel, unless it is gone (deleted, or a tombstone);
// s.mu is held.
func (s *Server) liveMessageLocked(op, channel, ts string) (*channelState, *Message, error) {
	ch := s.channels[channel]
	if ch == nil || ch.byTS[ts] == nil || ch.byTS[ts].Subtype == "tombstone" {
		return nil, nil, fmt.Errorf("%s %s in %s: %w", op, ts, channel, ErrNotFound)
	}
	return ch, ch.byTS[ts], nil
}
