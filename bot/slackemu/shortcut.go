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
	return s.interact("message shortcut", &m.User, &m.Channel, func(u *User, ch *channelState) (SlashResult, error) {
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
			"team":         map[string]any{"id": s.userTeamLocked(u.ID), "domain": s.opts.TeamDomain},
			"user":         map[string]any{"id": u.ID, "name": u.Name, "team_id": s.userTeamLocked(u.ID)},
			"channel":      map[string]any{"id": ch.ID, "name": ch.Name},
			"callback_id":  m.CallbackID,
			"trigger_id":   res.TriggerID,
			"response_url": res.ResponseURL,
			"message_ts":   msg.TS,
			"message":      message,
		})
		return res, s.deliverOnceLocked("message shortcut", &delivery{id: id, kind: "interactive", eventType: "message_action", payload: raw})
	})
}

// Click is a person clicking a button of a message's Block Kit blocks.
type Click struct {
	Channel  string `json:"channel"`   // default "C0000001"
	TS       string `json:"ts"`        // the message whose button is clicked
	ActionID string `json:"action_id"` // the button's action_id
	User     string `json:"user"`      // default "U0000001"
	// Value picks one button of a feedback_buttons element by its value (its positive or
	// negative button); "" picks the positive one. Ignored for plain buttons.
	Value string `json:"value,omitempty"`
}

// ClickButton sends an interactive envelope with a block_actions payload, as Slack does when a
// person clicks a button: the user, the container (the message, its channel and thread), the
// channel, the message with its blocks, a response_url (answered like a slash command's: see
// Ephemerals) and the action (action_id, block_id, value, type "button"). The message must
// show a button with that action_id now: a card whose buttons were removed cannot be clicked
// (ErrNotFound). Interactive envelopes are not retried.
func (s *Server) ClickButton(c Click) (SlashResult, error) {
	return s.interact("click", &c.User, &c.Channel, func(u *User, ch *channelState) (SlashResult, error) {
		msg := ch.byTS[c.TS]
		if msg == nil || msg.Subtype == "tombstone" {
			return SlashResult{}, fmt.Errorf("click on %s/%s: %w", c.Channel, c.TS, ErrNotFound)
		}
		blockID, kind, value, ok := findButton(msg.Blocks, c.ActionID, c.Value)
		if !ok {
			return SlashResult{}, fmt.Errorf("click on %s/%s: no button %q: %w", c.Channel, c.TS, c.ActionID, ErrNotFound)
		}
		res := s.newResponseLocked("Ba", ch.ID, u.ID)
		actionTS := fmt.Sprintf("%d.%06d", time.Now().Unix(), time.Now().Nanosecond()/1000)
		container := map[string]any{"type": "message", "message_ts": msg.TS, "channel_id": ch.ID, "is_ephemeral": false}
		message := map[string]any{"type": "message", "ts": msg.TS, "text": msg.Text, "user": msg.User, "bot_id": msg.BotID, "blocks": msg.Blocks}
		if msg.ThreadTS != "" {
			container["thread_ts"] = msg.ThreadTS
			message["thread_ts"] = msg.ThreadTS
		}
		raw, _ := json.Marshal(map[string]any{
			"type": "block_actions", "token": "emu-verification-token", "api_app_id": s.opts.AppID,
			"team":         map[string]any{"id": s.userTeamLocked(u.ID), "domain": s.opts.TeamDomain},
			"user":         map[string]any{"id": u.ID, "username": u.Name, "name": u.Name, "team_id": s.userTeamLocked(u.ID)},
			"container":    container,
			"trigger_id":   res.TriggerID,
			"channel":      map[string]any{"id": ch.ID, "name": ch.Name},
			"message":      message,
			"response_url": res.ResponseURL,
			"actions": []map[string]any{{
				"type": kind, "action_id": c.ActionID, "block_id": blockID, "value": value, "action_ts": actionTS,
				"text": map[string]any{"type": "plain_text", "text": c.ActionID},
			}},
		})
		return res, s.deliverOnceLocked("click", &delivery{id: res.ID, kind: "interactive", eventType: "block_actions", payload: raw})
	})
}

// findButton finds the button with actionID in blocks (actions and context_actions blocks'
// elements, and section accessories): its block_id, its type ("button", or
// "feedback_buttons", whose button pick names by value, the positive one when pick is "") and
// the value it sends.
func findButton(blocks json.RawMessage, actionID, pick string) (blockID, kind, value string, ok bool) {
	var bs []struct {
		Type      string `json:"type"`
		BlockID   string `json:"block_id"`
		Elements  []map[string]any
		Accessory map[string]any `json:"accessory"`
	}
	if json.Unmarshal(blocks, &bs) != nil {
		return "", "", "", false
	}
	for _, b := range bs {
		els := b.Elements
		if b.Accessory != nil {
			els = append(els, b.Accessory)
		}
		for _, e := range els {
			if e["action_id"] != actionID {
				continue
			}
			switch e["type"] {
			case "button":
				v, _ := e["value"].(string)
				return b.BlockID, "button", v, true
			case "feedback_buttons":
				for _, side := range []string{"positive_button", "negative_button"} {
					btn, _ := e[side].(map[string]any)
					v, _ := btn["value"].(string)
					if pick == v || (pick == "" && side == "positive_button") {
						return b.BlockID, "feedback_buttons", v, true
					}
				}
			}
		}
	}
	return "", "", "", false
}
