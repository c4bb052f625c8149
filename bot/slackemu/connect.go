package slackemu

import (
	"fmt"
	"slices"
)

// Slack Connect and a channel's life, as Slack shows them to an app.
//
// A channel may be shared with other organisations (Channel.ExtShared) and hosted by one of
// them (Channel.HostTeam): it has one id everywhere. Events from it carry the host's id as the
// outer team_id and context_team_id, our installation in authorizations, and
// is_ext_shared_channel true; a message's team is its author's (User.Team); conversations.info
// says is_ext_shared, context_team_id (the host) and shared_team_ids. Files shared in such a
// channel arrive in events, conversations.history and conversations.replies as Slack sends
// them there — {"id","mode":"file_access","file_access":"check_file_info","created":0,
// "timestamp":0,"user":""}, without name or URL — and files.info gives the whole file.
//
// The driver can change a channel's visibility as people do: ConvertToPrivate and
// ConvertToPublic (message subtypes channel_convert_to_private / channel_convert_to_public, by
// the message subscription of the channel as it was or as it becomes), ShareChannel and
// UnshareChannel (channel_shared / channel_unshared), ArchiveChannel (channel_archive),
// DeleteChannel (channel_deleted; the channel is gone for the bot: channel_not_found) and
// RemoveFromChannel (member_left_channel, to the bot when the bot is removed).

// Subscriptions to a channel's life (bot events).
const (
	SubChannelShared     = "channel_shared"
	SubChannelUnshared   = "channel_unshared"
	SubChannelArchive    = "channel_archive"
	SubChannelDeleted    = "channel_deleted"
	SubMemberLeftChannel = "member_left_channel"
)

// hostLocked is the team that hosts ch.
func (s *Server) hostLocked(ch *channelState) string { return cmpOr(ch.HostTeam, s.opts.TeamID) }

// extSharedLocked reports whether ch is shared with another organisation.
func (s *Server) extSharedLocked(ch *channelState) bool {
	return ch.ExtShared || s.hostLocked(ch) != s.opts.TeamID || len(ch.SharedTeams) > 0
}

// userTeamLocked is the team of user id (ours for unknown users and the bot).
func (s *Server) userTeamLocked(id string) string {
	if u := s.users[id]; u != nil && u.Team != "" {
		return u.Team
	}
	return s.opts.TeamID
}

// sharedTeamsLocked is shared_team_ids of ch: the host, ours, and the teams it was shared with.
func (s *Server) sharedTeamsLocked(ch *channelState) []string {
	out := []string{s.hostLocked(ch)}
	for _, t := range append([]string{s.opts.TeamID}, ch.SharedTeams...) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// checkFileInfo is a file as a Slack Connect channel's messages carry it.
func checkFileInfo(id string) map[string]any {
	return map[string]any{"id": id, "mode": "file_access", "file_access": "check_file_info", "created": 0, "timestamp": 0, "user": ""}
}

// ConvertToPrivate makes channel private, as user, and posts the channel_convert_to_private
// message (channel_type "group").
func (s *Server) ConvertToPrivate(channel, user string) (Posted, error) {
	return s.convert(channel, user, true)
}

// ConvertToPublic makes channel public, as user, and posts the channel_convert_to_public
// message (channel_type "channel").
func (s *Server) ConvertToPublic(channel, user string) (Posted, error) {
	return s.convert(channel, user, false)
}

func (s *Server) convert(channel, user string, private bool) (Posted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, _, err := s.userChannelLocked(channel, user)
	if err != nil {
		return Posted{}, fmt.Errorf("convert %s: %w", channel, err)
	}
	if ch.IM || ch.MPIM || ch.Private == private {
		return Posted{}, fmt.Errorf("convert %s: already %s", channel, ch.channelType())
	}
	was := s.wantsMessages(ch)
	ch.Private = private
	s.dirty = true
	m := &Message{Channel: ch.ID, TS: s.nextTS(), User: user, Subtype: "channel_convert_to_public",
		Text: "made this channel *public*. Any member in this workspace can see and join it."}
	if private {
		m.Subtype, m.Text = "channel_convert_to_private", "made this channel *private*. Now, it can only be viewed or joined by invitation."
	}
	s.insertLocked(ch, m)
	var ids []string
	if was || s.wantsMessages(ch) {
		ids = append(ids, s.publishLocked("message", s.messageEvent(ch, m)))
	}
	s.notifyLocked()
	return Posted{Channel: ch.ID, TS: m.TS, EventIDs: ids}, nil
}

// ShareChannel shares channel with team (channel_shared, connected_team_id team).
func (s *Server) ShareChannel(channel, team string) (Posted, error) {
	return s.lifeEvent(channel, SubChannelShared, func(ch *channelState, ev map[string]any) {
		if !slices.Contains(ch.SharedTeams, team) {
			ch.SharedTeams = append(ch.SharedTeams, team)
		}
		ev["connected_team_id"] = team
	})
}

// UnshareChannel stops sharing channel with team (channel_unshared).
func (s *Server) UnshareChannel(channel, team string) (Posted, error) {
	return s.lifeEvent(channel, SubChannelUnshared, func(ch *channelState, ev map[string]any) {
		ch.SharedTeams = slices.DeleteFunc(ch.SharedTeams, func(t string) bool { return t == team })
		if ch.HostTeam == team {
			ch.HostTeam = ""
		}
		ch.ExtShared = false
		ev["previously_connected_team_id"], ev["is_ext_shared"] = team, s.extSharedLocked(ch)
	})
}

// ArchiveChannel archives channel, as user (channel_archive).
func (s *Server) ArchiveChannel(channel, user string) (Posted, error) {
	return s.lifeEvent(channel, SubChannelArchive, func(ch *channelState, ev map[string]any) {
		ch.Archived = true
		ev["user"] = user
	})
}

// DeleteChannel deletes channel (channel_deleted): conversations.* then answer
// channel_not_found for it.
func (s *Server) DeleteChannel(channel string) (Posted, error) {
	return s.lifeEvent(channel, SubChannelDeleted, func(ch *channelState, _ map[string]any) { ch.gone = true })
}

// RemoveFromChannel removes user (the bot's user id included) from channel
// (member_left_channel, which the bot gets about itself and, where it is a member, others).
func (s *Server) RemoveFromChannel(channel, user string) (Posted, error) {
	return s.lifeEvent(channel, SubMemberLeftChannel, func(ch *channelState, ev map[string]any) {
		delete(ch.members, user)
		ch.Members = slices.DeleteFunc(ch.Members, func(m string) bool { return m == user })
		ev["user"], ev["channel_type"], ev["team"] = user, ch.channelType(), s.userTeamLocked(user)
	})
}

// lifeEvent changes channel with change and fires the event typ (when subscribed), which
// change may fill in; the bot gets it if it is a member before or after the change.
func (s *Server) lifeEvent(channel, typ string, change func(ch *channelState, ev map[string]any)) (Posted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	if ch == nil || ch.gone {
		return Posted{}, fmt.Errorf("%s %s: %w", typ, channel, ErrNotFound)
	}
	member := ch.members[s.opts.BotUserID]
	ts := s.nextTS()
	ev := map[string]any{"type": typ, "channel": ch.ID, "event_ts": ts}
	change(ch, ev)
	s.dirty = true
	var ids []string
	if s.subs[typ] && (member || ch.members[s.opts.BotUserID]) {
		ids = append(ids, s.publishLocked(typ, ev))
	}
	s.notifyLocked()
	return Posted{Channel: ch.ID, TS: ts, EventIDs: ids}, nil
}
