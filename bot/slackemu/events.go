package slackemu

import (
	"encoding/json"
	"fmt"
	"time"
)

// messageEvent is the inner `message` event for a new message m in ch.
func (s *Server) messageEvent(ch *channelState, m *Message) map[string]any {
	ev := s.renderMessage(m, false)
	delete(ev, "reply_count")
	delete(ev, "reply_users_count")
	delete(ev, "reply_users")
	delete(ev, "latest_reply")
	if m.ThreadTS == "" {
		delete(ev, "thread_ts")
	}
	ev["channel"] = ch.ID
	ev["channel_type"] = ch.channelType()
	ev["event_ts"] = m.TS
	if m.BotID == "" && m.User != "" && m.Subtype != "channel_join" {
		ev["client_msg_id"] = s.clientMsgID()
	}
	if m.Subtype == "thread_broadcast" {
		if p := ch.byTS[m.ThreadTS]; p != nil {
			ev["root"] = s.renderMessage(p, false)
		}
	}
	return ev
}

func (s *Server) clientMsgID() string {
	s.clientMsgSeq++
	s.dirty = true
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", s.clientMsgSeq)
}

// appMentionEvent is the inner `app_mention` event for m in ch (no channel_type,
// thread_ts only inside a thread).
func (s *Server) appMentionEvent(ch *channelState, m *Message) map[string]any {
	ev := map[string]any{
		"type": "app_mention", "user": m.User, "text": m.Text, "ts": m.TS, "channel": ch.ID,
		"event_ts": m.TS, "team": s.userTeamLocked(m.User),
	}
	if s.extSharedLocked(ch) {
		ev["user_team"], ev["source_team"] = s.userTeamLocked(m.User), s.userTeamLocked(m.User)
	}
	if m.ThreadTS != "" {
		ev["thread_ts"] = m.ThreadTS
	}
	if m.BotID != "" {
		ev["bot_id"] = m.BotID
	} else {
		ev["client_msg_id"] = s.clientMsgID()
	}
	s.addContent(ev, m)
	return ev
}

// wantsMessages reports whether the app gets `message` events from ch.
func (s *Server) wantsMessages(ch *channelState) bool {
	return s.subs[ch.subscription()] && ch.members[s.opts.BotUserID]
}

// wantsMention reports whether a message m in ch fires `app_mention`: the bot is
// mentioned by someone else in a conversation it is in, and never in a DM.
func (s *Server) wantsMention(ch *channelState, m *Message) bool {
	return s.subs[SubAppMention] && ch.members[s.opts.BotUserID] && !ch.IM &&
		m.User != s.opts.BotUserID && s.mentionsBot(m.Text)
}

// publishNewLocked fires the events for a newly stored message: `message` (per
// subscription) and `app_mention`, both carrying m.TS. It returns their event ids.
func (s *Server) publishNewLocked(ch *channelState, m *Message) []string {
	var ids []string
	if s.wantsMessages(ch) {
		ids = append(ids, s.publishLocked("message", s.messageEvent(ch, m)))
	}
	if s.wantsMention(ch, m) {
		ids = append(ids, s.publishLocked("app_mention", s.appMentionEvent(ch, m)))
	}
	return ids
}

// publishChangedLocked fires `message_changed` for an edit of m (prev is the
// message before the edit, editTS the edit's ts) and a new `app_mention` with
// `edited` when the new text mentions the bot.
func (s *Server) publishChangedLocked(ch *channelState, m *Message, prev Message, editTS string) []string {
	var ids []string
	if s.wantsMessages(ch) {
		inner := s.renderMessage(m, false)
		if m.ThreadTS == "" {
			delete(inner, "reply_users")
		}
		ev := map[string]any{
			"type": "message", "subtype": "message_changed", "hidden": true, "channel": ch.ID,
			"channel_type": ch.channelType(), "ts": editTS, "event_ts": editTS, "message": inner,
			"previous_message": s.renderMessage(&prev, false),
		}
		ids = append(ids, s.publishLocked("message", ev))
	}
	if s.wantsMention(ch, m) {
		ids = append(ids, s.publishLocked("app_mention", s.appMentionEvent(ch, m)))
	}
	return ids
}

// publishDeletedLocked fires `message_deleted` for prev, deleted at delTS.
func (s *Server) publishDeletedLocked(ch *channelState, prev Message, delTS string) []string {
	if !s.wantsMessages(ch) {
		return nil
	}
	ev := map[string]any{
		"type": "message", "subtype": "message_deleted", "hidden": true, "channel": ch.ID,
		"channel_type": ch.channelType(), "ts": delTS, "event_ts": delTS, "deleted_ts": prev.TS,
		"previous_message": s.renderMessage(&prev, false),
	}
	return []string{s.publishLocked("message", ev)}
}

// publishLocked wraps inner in an event_callback, registers its delivery and
// makes the first delivery attempt. It returns the event_id.
func (s *Server) publishLocked(eventType string, inner map[string]any) string {
	s.eventSeq++
	s.dirty = true
	id := fmt.Sprintf("Ev%010d", s.eventSeq)
	// In a channel hosted by another organisation, the outer team_id and context_team_id are
	// the host's; authorizations stay ours.
	host, shared := s.opts.TeamID, false
	if c, _ := inner["channel"].(string); c != "" {
		if ch := s.channels[c]; ch != nil {
			host, shared = s.hostLocked(ch), s.extSharedLocked(ch)
		}
	}
	outer := map[string]any{
		"token": "emu-verification-token", "team_id": host, "api_app_id": s.opts.AppID,
		"event": inner, "type": "event_callback", "event_id": id, "event_time": time.Now().Unix(),
		"authorizations": []map[string]any{{
			"enterprise_id": nil, "team_id": s.opts.TeamID, "user_id": s.opts.BotUserID,
			"is_bot": true, "is_enterprise_install": false,
		}},
		"is_ext_shared_channel": shared, "event_context": "4-emu-" + id,
		"context_team_id": host, "context_enterprise_id": nil,
	}
	payload, err := json.Marshal(outer)
	if err != nil {
		// Only maps of JSON-safe values are built here; a failure is a bug in the emulator.
		s.log.Error().Err(err).Str("event_id", id).Msg("encode event")
		return id
	}
	d := &delivery{id: id, kind: "events_api", eventType: eventType, payload: payload, retries: true}
	s.byEvent[id] = d
	s.attemptLocked(d)
	return id
}

// addContent sets what a message carries besides its text, as both its event and the Web API
// show it: blocks, files, and the edit.
func (s *Server) addContent(out map[string]any, m *Message) {
	if len(m.Blocks) > 0 {
		out["blocks"] = m.Blocks
	}
	if len(m.Files) > 0 {
		out["files"] = s.renderFiles(m)
		// A person's upload carries upload true; the app's own (files.completeUploadExternal) false.
		out["upload"] = m.BotID == "" || m.BotID != s.opts.BotID
	}
	if m.Edited != nil {
		out["edited"] = map[string]any{"user": m.Edited.User, "ts": m.Edited.TS}
	}
}
