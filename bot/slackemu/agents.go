package slackemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Slack Code code channels (agents.conversations.*): a channel an agent makes for one of its
// sessions, with a context bar of at most five items and the agent's own slash commands. The
// emulator keeps each code channel as an ordinary public (or private) channel the bot is a
// member of, plus its CodeChannel record.

// maxContextBarItems is how many context bar items Slack keeps; more are dropped with a
// warning (slack-go: "Check warnings for truncated context bars").
const maxContextBarItems = 5

// ContextBarItem is an item of a code channel's context bar (agents.conversations.setProperties'
// code_channel.context_bar_items).
type ContextBarItem struct {
	Key      string `json:"key"`
	Label    string `json:"label"`
	Icon     string `json:"icon,omitempty"`
	URL      string `json:"url,omitempty"`
	ItemType string `json:"item_type,omitempty"`
}

// AgentCommand is a slash command an agent registered in a code channel
// (agents.conversations.setCommands).
type AgentCommand struct {
	Name         string `json:"name"`
	Description  string `json:"description,omitempty"`
	ArgumentHint string `json:"argument_hint,omitempty"`
	ShouldEscape bool   `json:"should_escape,omitempty"`
}

// CodeChannel is a code channel as the emulator keeps it.
type CodeChannel struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SessionID string `json:"session_id,omitempty"` // the creation's session_id ("" none)
	// OriginChannel and OriginTS are the message the channel was made from.
	OriginChannel string           `json:"origin_channel,omitempty"`
	OriginTS      string           `json:"origin_ts,omitempty"`
	Private       bool             `json:"private,omitempty"`
	ContextBar    []ContextBarItem `json:"context_bar,omitempty"`
	// ContextBarSets counts setProperties calls that carried a context bar.
	ContextBarSets int            `json:"context_bar_sets,omitempty"`
	Commands       []AgentCommand `json:"commands,omitempty"`
	Archived       bool           `json:"archived,omitempty"`
	// Status is the channel's agent session status (agents.sessions.setStatus with its
	// channel_id and no thread_ts), "" none.
	Status string `json:"status,omitempty"`
}

// codeChannelsState is the emulator's code channels: by id, by session_id, in creation order;
// refused makes agents.conversations.create answer not_allowed (SetCodeChannelsAllowed).
type codeChannelsState struct {
	byID      map[string]*CodeChannel
	bySession map[string]string
	order     []string
	refused   bool
}

func (c *codeChannelsState) init() {
	if c.byID == nil {
		c.byID, c.bySession = map[string]*CodeChannel{}, map[string]string{}
	}
}

// SetCodeChannelsAllowed says whether the app may make code channels (an app not declared as
// an agent, or a workspace that turned Slack Code off, may not: not_allowed).
func (s *Server) SetCodeChannelsAllowed(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codeChannels.refused = !ok
}

// CodeChannels returns the code channels made, oldest first.
func (s *Server) CodeChannels() []CodeChannel {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CodeChannel, 0, len(s.codeChannels.order))
	for _, id := range s.codeChannels.order {
		out = append(out, s.codeChannelCopyLocked(id))
	}
	return out
}

// CodeChannel returns the code channel id, if it is one.
func (s *Server) CodeChannel(id string) (CodeChannel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.codeChannels.byID[id] == nil {
		return CodeChannel{}, false
	}
	return s.codeChannelCopyLocked(id), true
}

func (s *Server) codeChannelCopyLocked(id string) CodeChannel {
	c := *s.codeChannels.byID[id]
	c.ContextBar, c.Commands = slices.Clone(c.ContextBar), slices.Clone(c.Commands)
	c.Status = s.agentSessions[id+"/"]
	return c
}

// agentsConversationsCreate makes a code channel (agents.conversations.create): name is
// required unless origin_channel_id and origin_message_ts are given (together); session_id
// makes the call idempotent — a channel already made for it is answered again. The origin
// channel must be one the bot can read and not shared with another organisation.
func (s *Server) agentsConversationsCreate(_ *http.Request, p url.Values) map[string]any {
	cc := &s.codeChannels
	cc.init()
	if cc.refused {
		return fail("not_allowed")
	}
	name, origin, originTS := strings.TrimSpace(p.Get("name")), p.Get("origin_channel_id"), p.Get("origin_message_ts")
	if (origin == "") != (originTS == "") || (name == "" && origin == "") {
		return fail("invalid_arguments")
	}
	if t := p.Get("team_id"); t != "" && t != s.opts.TeamID {
		return fail("invalid_arguments")
	}
	private := false
	var author string
	if origin != "" {
		ch, code := s.botChannel(origin, false)
		if code != "" {
			return fail(code)
		}
		if s.extSharedLocked(ch) {
			return fail("not_allowed")
		}
		m := ch.byTS[originTS]
		if m == nil {
			return fail("message_not_found")
		}
		private, author = ch.Private, m.User
		if name == "" {
			name = firstLine(m.Text)
		}
	}
	if v := p.Get("is_private"); v != "" {
		private = parseBool(v)
	}
	sid := p.Get("session_id")
	if id, ok := cc.bySession[sid]; ok && sid != "" && !cc.byID[id].Archived {
		return map[string]any{"ok": true, "channel_id": id}
	}
	id := fmt.Sprintf("CCODE%05d", len(cc.order)+1)
	members := []string{s.opts.BotUserID}
	if author != "" && author != s.opts.BotUserID {
		members = append(members, author)
	}
	s.addChannelLocked(Channel{ID: id, Name: channelSlug(name, id), Private: private, Members: members})
	cc.byID[id] = &CodeChannel{ID: id, Name: name, SessionID: sid, OriginChannel: origin, OriginTS: originTS, Private: private}
	cc.order = append(cc.order, id)
	s.dirty = true
	if sid != "" {
		cc.bySession[sid] = id
	}
	return map[string]any{"ok": true, "channel_id": id}
}

// codeChannelLocked resolves channel_id to one of the app's live code channels: an unknown
// channel is channel_not_found, a channel that is not a code channel not_allowed, an archived
// one is_archived.
func (s *Server) codeChannelLocked(p url.Values) (*CodeChannel, string) {
	s.codeChannels.init()
	id := p.Get("channel_id")
	if id == "" {
		return nil, "invalid_arguments"
	}
	if _, code := s.botChannel(id, false); code != "" {
		return nil, code
	}
	c := s.codeChannels.byID[id]
	if c == nil {
		return nil, "not_allowed"
	}
	if c.Archived {
		return nil, "is_archived"
	}
	return c, ""
}

// agentsConversationsSetProperties sets a code channel's context bar (code_channel:
// {"context_bar_items":[…], "summary_message":…}) or its agent_resource. At least one is
// required; every item needs a key and a label, item_type is info (default) or action; items
// past the fifth are dropped with a warning.
func (s *Server) agentsConversationsSetProperties(_ *http.Request, p url.Values) map[string]any {
	c, code := s.codeChannelLocked(p)
	if code != "" {
		return fail(code)
	}
	raw, resource := p.Get("code_channel"), p.Get("agent_resource")
	if raw == "" && resource == "" {
		return fail("invalid_arguments")
	}
	if resource != "" && !json.Valid([]byte(resource)) {
		return fail("invalid_arguments")
	}
	out := map[string]any{"ok": true, "channel_id": c.ID}
	if raw == "" {
		return out
	}
	var props struct {
		Items *[]ContextBarItem `json:"context_bar_items"`
	}
	if err := json.Unmarshal([]byte(raw), &props); err != nil {
		return fail("invalid_arguments")
	}
	if props.Items == nil {
		return out
	}
	items := *props.Items
	for _, it := range items {
		if it.Key == "" || it.Label == "" || (it.ItemType != "" && it.ItemType != "info" && it.ItemType != "action") {
			return fail("invalid_arguments")
		}
	}
	if len(items) > maxContextBarItems {
		items = items[:maxContextBarItems]
		out["warning"] = "context_bar_items_truncated"
	}
	c.ContextBar = slices.Clone(items)
	c.ContextBarSets++
	s.dirty = true
	return out
}

// agentsConversationsSetCommands replaces the app's commands in a code channel (commands: a
// JSON array; each needs a name, without a leading slash).
func (s *Server) agentsConversationsSetCommands(_ *http.Request, p url.Values) map[string]any {
	c, code := s.codeChannelLocked(p)
	if code != "" {
		return fail(code)
	}
	var cmds []AgentCommand
	if err := json.Unmarshal([]byte(p.Get("commands")), &cmds); err != nil {
		return fail("invalid_arguments")
	}
	for _, cmd := range cmds {
		if cmd.Name == "" || strings.HasPrefix(cmd.Name, "/") || strings.ContainsAny(cmd.Name, " \t\n") {
			return fail("invalid_arguments")
		}
	}
	c.Commands, s.dirty = cmds, true
	return map[string]any{"ok": true, "channel_id": c.ID, "command_count": len(cmds)}
}

// agentsConversationsArchive archives a code channel (agents.conversations.archive).
func (s *Server) agentsConversationsArchive(_ *http.Request, p url.Values) map[string]any {
	c, code := s.codeChannelLocked(p)
	if code != "" {
		return fail(code)
	}
	c.Archived, s.dirty = true, true
	if ch := s.channels[c.ID]; ch != nil {
		ch.Archived = true
	}
	return map[string]any{"ok": true}
}

// channelSlug is a channel name from a display name: lower case letters, digits and dashes,
// at most 80; id's when nothing is left.
func channelSlug(name, id string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 80 {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		return strings.ToLower(id)
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
