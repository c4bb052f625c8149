package slackemu

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Message is a message stored in the emulated workspace, as the driver returns it.
type Message struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
	// ThreadTS is the parent's ts for a thread reply; "" for a top-level message.
	ThreadTS     string `json:"thread_ts,omitempty"`
	ParentUserID string `json:"parent_user_id,omitempty"`
	User         string `json:"user,omitempty"`
	BotID        string `json:"bot_id,omitempty"`
	AppID        string `json:"app_id,omitempty"`
	// Subtype is "", "thread_broadcast", "file_share", "channel_join", "bot_message" or "tombstone".
	Subtype  string          `json:"subtype,omitempty"`
	Text     string          `json:"text"`
	Blocks   json.RawMessage `json:"blocks,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Files    []File          `json:"files,omitempty"`
	Edited   *Edited         `json:"edited,omitempty"`
	// Reactions maps an emoji name to the users who reacted with it, in order.
	Reactions   map[string][]string `json:"reactions,omitempty"`
	ReplyCount  int                 `json:"reply_count,omitempty"`
	ReplyUsers  []string            `json:"reply_users,omitempty"`
	LatestReply string              `json:"latest_reply,omitempty"`
	// Streaming is true while the message is a stream that accepts appends (chat.startStream
	// until chat.stopStream or its end); StreamState has the rest.
	Streaming bool `json:"streaming,omitempty"`
}

// Edited records the last edit of a message.
type Edited struct {
	User string `json:"user"`
	TS   string `json:"ts"`
}

// File is a file of the workspace: its metadata and, where the driver or an upload gave
// them, its bytes, which the emulator serves at the file's url_private and
// url_private_download (see Server.FileURL). Messages carry the metadata only.
type File struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Title    string `json:"title"`
	Mimetype string `json:"mimetype"`
	Filetype string `json:"filetype"`
	// Size defaults to len(Content) when 0.
	Size int `json:"size"`
	// Content is the file's bytes (Options.StateFile keeps them with the file, not in messages).
	Content []byte `json:"-"`
}

func (m *Message) clone() Message {
	c := *m
	c.Blocks = slices.Clone(m.Blocks)
	c.Metadata = slices.Clone(m.Metadata)
	c.Files = slices.Clone(m.Files)
	c.ReplyUsers = slices.Clone(m.ReplyUsers)
	if m.Edited != nil {
		e := *m.Edited
		c.Edited = &e
	}
	if m.Reactions != nil {
		c.Reactions = map[string][]string{}
		for k, v := range m.Reactions {
			c.Reactions[k] = slices.Clone(v)
		}
	}
	return c
}

// channelState is a channel with its members and messages (ordered by ts,
// replies included).
type channelState struct {
	Channel
	members map[string]bool
	msgs    []*Message
	byTS    map[string]*Message
	// replies indexes msgs by thread: a parent's ts to its replies, oldest first, so that a
	// thread is read without a scan of the whole channel (a long run's channel holds
	// thousands of threads, and every waiter reads its thread on each change).
	replies map[string][]*Message
	created int64
	gone    bool // deleted (DeleteChannel)
}

func (s *Server) addChannelLocked(c Channel) {
	s.dirty = true
	cs := &channelState{Channel: c, members: map[string]bool{}, byTS: map[string]*Message{}, replies: map[string][]*Message{}, created: time.Now().Unix()}
	for _, m := range c.Members {
		cs.members[m] = true
	}
	if _, ok := s.channels[c.ID]; !ok {
		s.channelOrder = append(s.channelOrder, c.ID)
	}
	s.channels[c.ID] = cs
}

// nextTS returns a new message ts ("1700000000.000100"): wall-clock microseconds,
// strictly increasing across the workspace.
func (s *Server) nextTS() string {
	micro := time.Now().UnixMicro()
	if micro <= s.lastMicro {
		micro = s.lastMicro + 1
	}
	s.lastMicro = micro
	s.dirty = true
	return fmt.Sprintf("%d.%06d", micro/1_000_000, micro%1_000_000)
}

// insertLocked stores m (whose ts is newer than every stored one) and updates
// its thread parent.
func (s *Server) insertLocked(ch *channelState, m *Message) {
	s.dirty = true
	ch.add(m)
	s.touchLocked(m)
	if m.ThreadTS == "" {
		return
	}
	if p := ch.byTS[m.ThreadTS]; p != nil {
		p.ReplyCount++
		p.LatestReply = m.TS
		if !slices.Contains(p.ReplyUsers, m.User) && m.User != "" {
			p.ReplyUsers = append(p.ReplyUsers, m.User)
		}
	}
}

// removeLocked deletes m. A thread parent with replies becomes a tombstone, as in Slack.
func (s *Server) removeLocked(ch *channelState, m *Message) {
	s.dirty = true
	s.goneLocked(m)
	if m.ThreadTS == "" && m.ReplyCount > 0 {
		m.Subtype = "tombstone"
		m.Text = "This message was deleted."
		m.User, m.BotID, m.AppID = "USLACKBOT", "", ""
		m.Blocks, m.Files, m.Metadata, m.Edited, m.Reactions = nil, nil, nil, nil, nil
		return
	}
	delete(ch.byTS, m.TS)
	ch.msgs = slices.DeleteFunc(ch.msgs, func(x *Message) bool { return x == m })
	if m.ThreadTS == "" {
		return
	}
	ch.replies[m.ThreadTS] = slices.DeleteFunc(ch.replies[m.ThreadTS], func(x *Message) bool { return x == m })
	if len(ch.replies[m.ThreadTS]) == 0 {
		delete(ch.replies, m.ThreadTS)
	}
	p := ch.byTS[m.ThreadTS]
	if p == nil {
		return
	}
	p.ReplyCount--
	p.ReplyUsers, p.LatestReply = nil, ""
	for _, r := range ch.replies[p.TS] {
		p.LatestReply = r.TS
		if r.User != "" && !slices.Contains(p.ReplyUsers, r.User) {
			p.ReplyUsers = append(p.ReplyUsers, r.User)
		}
	}
	if p.ReplyCount == 0 && p.Subtype == "tombstone" {
		s.removeLocked(ch, p)
	}
}

// threadLocked returns the parent and replies of the thread containing ts, oldest first.
func (s *Server) threadLocked(ch *channelState, ts string) []*Message {
	m := ch.byTS[ts]
	if m == nil {
		return nil
	}
	if m.ThreadTS != "" {
		m = ch.byTS[m.ThreadTS]
		if m == nil {
			return nil
		}
	}
	return append([]*Message{m}, ch.replies[m.TS]...)
}

// add appends m, whose ts is newer than every stored one, to the channel and its indexes.
func (ch *channelState) add(m *Message) {
	ch.msgs = append(ch.msgs, m)
	ch.byTS[m.TS] = m
	if m.ThreadTS != "" {
		ch.replies[m.ThreadTS] = append(ch.replies[m.ThreadTS], m)
	}
}

func (s *Server) mentionsBot(text string) bool {
	return strings.Contains(text, "<@"+s.opts.BotUserID+">") || strings.Contains(text, "<@"+s.opts.BotUserID+"|")
}

func (s *Server) botProfile() map[string]any {
	return map[string]any{
		"id": s.opts.BotID, "app_id": s.opts.AppID, "name": s.opts.BotName, "deleted": false,
		"team_id": s.opts.TeamID, "updated": 1700000000,
	}
}

// renderMessage is m in Web API shape (conversations.replies/history, chat.* "message").
func (s *Server) renderMessage(m *Message, withMetadata bool) map[string]any {
	out := map[string]any{"type": "message", "text": m.Text, "ts": m.TS}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("subtype", m.Subtype)
	set("user", m.User)
	set("bot_id", m.BotID)
	set("app_id", m.AppID)
	set("thread_ts", m.ThreadTS)
	set("parent_user_id", m.ParentUserID)
	if m.Subtype != "tombstone" {
		out["team"] = s.userTeamLocked(m.User)
		if ch := s.channels[m.Channel]; ch != nil && s.extSharedLocked(ch) && m.User != "" {
			out["user_team"], out["source_team"] = s.userTeamLocked(m.User), s.userTeamLocked(m.User)
		}
	} else {
		out["hidden"] = true
	}
	if m.BotID == s.opts.BotID && m.BotID != "" {
		out["bot_profile"] = s.botProfile()
	}
	s.addContent(out, m)
	if len(m.Files) > 0 {
		out["display_as_bot"] = false
	}
	if withMetadata && len(m.Metadata) > 0 {
		out["metadata"] = m.Metadata
	}
	if len(m.Reactions) > 0 {
		var rs []map[string]any
		names := make([]string, 0, len(m.Reactions))
		for n := range m.Reactions {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			rs = append(rs, map[string]any{"name": n, "users": m.Reactions[n], "count": len(m.Reactions[n])})
		}
		out["reactions"] = rs
	}
	if m.ThreadTS == "" && m.ReplyCount > 0 {
		out["thread_ts"] = m.TS
		out["reply_count"] = m.ReplyCount
		out["reply_users_count"] = len(m.ReplyUsers)
		out["reply_users"] = m.ReplyUsers
		out["latest_reply"] = m.LatestReply
	}
	return out
}

// renderFiles is m's files[]: each file as it is now (a tombstone once deleted).
func (s *Server) renderFiles(m *Message) []map[string]any {
	out := make([]map[string]any, 0, len(m.Files))
	if ch := s.channels[m.Channel]; ch != nil && s.extSharedLocked(ch) {
		for _, f := range m.Files {
			if fs := s.files[f.ID]; fs != nil && fs.deleted {
				out = append(out, map[string]any{"id": f.ID, "mode": "tombstone"})
			} else {
				out = append(out, checkFileInfo(f.ID))
			}
		}
		return out
	}
	for _, f := range m.Files {
		fs := s.files[f.ID]
		if fs == nil {
			// Not in the file store (a state file written before files were kept): its metadata.
			sec, _, _ := strings.Cut(m.TS, ".")
			var created int64
			fmt.Sscan(sec, &created)
			fs = &fileState{File: f, user: m.User, created: created}
		}
		out = append(out, s.renderFileLocked(fs, false))
	}
	return out
}

func (s *Server) renderChannel(ch *channelState) map[string]any {
	out := map[string]any{
		"id": ch.ID, "created": ch.created, "is_archived": ch.Archived, "is_im": ch.IM, "is_mpim": ch.MPIM,
		"is_private": ch.Private || ch.IM || ch.MPIM, "is_member": ch.members[s.opts.BotUserID],
		"context_team_id": s.hostLocked(ch), "is_ext_shared": s.extSharedLocked(ch), "is_shared": s.extSharedLocked(ch),
		"conversation_host_id": s.hostLocked(ch), "shared_team_ids": s.sharedTeamsLocked(ch),
	}
	if ch.IM {
		for _, m := range ch.Members {
			if m != s.opts.BotUserID {
				out["user"] = m
			}
		}
		out["is_open"] = true
		return out
	}
	out["name"] = ch.Name
	out["name_normalized"] = ch.Name
	out["is_channel"] = !ch.MPIM
	out["is_group"] = false
	out["is_general"] = ch.Name == "general"
	out["creator"] = ""
	out["topic"] = map[string]any{"value": "", "creator": "", "last_set": 0}
	out["purpose"] = map[string]any{"value": "", "creator": "", "last_set": 0}
	out["num_members"] = len(ch.members)
	return out
}

func (s *Server) renderUser(u *User) map[string]any {
	profile := map[string]any{"display_name": u.Name, "real_name": u.RealName, "team": s.userTeamLocked(u.ID)}
	if u.BotID != "" {
		profile["bot_id"] = u.BotID
	}
	if u.Email != "" {
		profile["email"] = u.Email
	}
	out := map[string]any{
		"id": u.ID, "team_id": s.userTeamLocked(u.ID), "name": u.Name, "real_name": u.RealName, "deleted": u.Deleted,
		"is_bot": u.IsBot, "tz": u.TZ, "tz_offset": 0, "updated": 1690000000, "profile": profile,
		"is_app_user": false, "is_admin": false, "is_owner": false,
	}
	return out
}
