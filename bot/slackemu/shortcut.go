package slackemu

import (
	"encoding/json"
	"fmt"
	"time"
)

// MessageShortcut is a person choosing one of the app's message shortcuts on a message.
type MessageShortcut struct {
	CallbackID string `json:"callback_id"` // the shortcut's callback_id in the app manifest
	Channel    string `json:"channel"`     // default "C0000001"
	TS         string `json:"ts"`          // the message it was chosen on
	User       string `json:"user"`        // default "U0000001"
}

// SendMessageShortcut sends an interactive envelope with a message_action payload, as Slack
// does when a person picks a message shortcut: the channel, the message (with its thread_ts
// when it is in a thread), a trigger_id and a response_url (answered like a slash command's:
// see Ephemerals). Interactive envelopes are not retried.
func (s *Server) SendMessageShortcut(m MessageShortcut) (SlashResult, error) {
	m.User = cmpOr(m.User, "U0000001")
	m.Channel = cmpOr(m.Channel, "C0000001")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return SlashResult{}, ErrClosed
	}
	u, ch := s.users[m.User], s.channels[m.Channel]
	if u == nil || ch == nil {
		return SlashResult{}, fmt.Errorf("message shortcut by %s in %s: %w", m.User, m.Channel, ErrNotFound)
	}
	msg := ch.byTS[m.TS]
	if msg == nil {
		return SlashResult{}, fmt.Errorf("message shortcut on %s/%s: %w", m.Channel, m.TS, ErrNotFound)
	}
	res := s.newResponseLocked("Ms", ch.ID, u.ID)
	id := res.ID
	message := map[string]any{"type": "message", "ts": msg.TS, "text": msg.Text, "user": msg.User}
	if msg.ThreadTS != "" {
		message["thread_ts"] = msg.ThreadTS
	}
	raw, _ := json.Marshal(map[string]any{
		"type": "message_action", "token": "emu-verification-token", "action_ts": fmt.Sprintf("%d.000000", time.Now().Unix()),
		"team":         map[string]any{"id": s.opts.TeamID, "domain": s.opts.TeamDomain},
		"user":         map[string]any{"id": u.ID, "name": u.Name, "team_id": s.opts.TeamID},
		"channel":      map[string]any{"id": ch.ID, "name": ch.Name},
		"callback_id":  m.CallbackID,
		"trigger_id":   res.TriggerID,
		"response_url": res.ResponseURL,
		"message_ts":   msg.TS,
		"message":      message,
	})
	d := &delivery{id: id, kind: "interactive", eventType: "message_action", payload: raw}
	s.byEvent[id] = d
	s.attemptLocked(d)
	if d.state == deliveryFailed {
		return res, fmt.Errorf("message shortcut %s: %w", id, ErrNoConnection)
	}
	return res, nil
}
