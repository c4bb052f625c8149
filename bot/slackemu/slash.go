package slackemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"time"

	"github.com/google/uuid"
)

// Response URL limits, as documented by Slack: 5 uses within 30 minutes.
const (
	responseURLUses = 5
	responseURLTTL  = 30 * time.Minute
)

// SlashCommand is a user invoking a slash command.
type SlashCommand struct {
	Command string `json:"command"` // e.g. "/logbook"
	Text    string `json:"text"`
	User    string `json:"user"`    // default "U0000001"
	Channel string `json:"channel"` // default "C0000001"
}

// SlashResult identifies a sent slash command.
type SlashResult struct {
	// ID is the delivery's id: Ack.EventID and Delivery.EventID carry it.
	ID          string `json:"id"`
	ResponseURL string `json:"response_url"`
	TriggerID   string `json:"trigger_id"`
}

// Ephemeral is a message only one user sees: chat.postEphemeral, a slash
// command's ack payload or a response_url post with response_type "ephemeral".
type Ephemeral struct {
	Channel  string          `json:"channel"`
	User     string          `json:"user"`
	Text     string          `json:"text"`
	Blocks   json.RawMessage `json:"blocks,omitempty"`
	ThreadTS string          `json:"thread_ts,omitempty"`
	TS       string          `json:"ts"`
	Source   string          `json:"source"` // "chat.postEphemeral", "ack" or "response_url"
}

type slashState struct {
	cmd    SlashCommand
	failed bool
}

type responseURL struct {
	channel, user string
	uses          int
	expires       time.Time
}

// commandResponse is the body of a slash command response (ack payload or response_url POST).
type commandResponse struct {
	Text            string          `json:"text"`
	Blocks          json.RawMessage `json:"blocks"`
	ResponseType    string          `json:"response_type"`
	ThreadTS        string          `json:"thread_ts"`
	ReplaceOriginal bool            `json:"replace_original"`
	DeleteOriginal  bool            `json:"delete_original"`
}

// SlashCommand sends a slash_commands envelope (accepts_response_payload true).
// Slash commands are not retried: unacked within the ack window, or sent while
// no socket is open, the command fails (the user would see an error). The error
// is ErrNoConnection in the latter case.
func (s *Server) SlashCommand(c SlashCommand) (SlashResult, error) {
	return s.interact("slash command", &c.User, &c.Channel, func(u *User, ch *channelState) (SlashResult, error) {
		res := s.newResponseLocked("Sc", ch.ID, u.ID)
		id := res.ID
		payload := map[string]any{
			"token": "emu-verification-token", "team_id": s.userTeamLocked(u.ID), "team_domain": s.opts.TeamDomain,
			"channel_id": ch.ID, "channel_name": ch.Name, "user_id": u.ID, "user_name": u.Name,
			"command": c.Command, "text": c.Text, "api_app_id": s.opts.AppID,
			"response_url": res.ResponseURL, "trigger_id": res.TriggerID,
		}
		// Slack sends is_enterprise_install as "false", false or not at all (slack-go#1265).
		switch s.slashSeq % 3 {
		case 1:
			payload["is_enterprise_install"] = "false"
		case 2:
			payload["is_enterprise_install"] = false
		}
		raw, _ := json.Marshal(payload)
		err := s.deliverOnceLocked("slash command", &delivery{id: id, kind: "slash_commands", eventType: c.Command, payload: raw, slash: &slashState{cmd: c}})
		s.persistLocked()
		return res, err
	})
}

// deliverOnceLocked registers d, an envelope Slack sends once (a slash command, an
// interactive action: never retried), and makes its one attempt. With no socket open the
// attempt fails and so does the call: ErrNoConnection, named by what and d's id.
func (s *Server) deliverOnceLocked(what string, d *delivery) error {
	s.byEvent[d.id] = d
	s.attemptLocked(d)
	if d.state == deliveryFailed {
		return fmt.Errorf("%s %s: %w", what, d.id, ErrNoConnection)
	}
	return nil
}

// newResponseLocked registers a response_url (and a trigger_id) for an interaction by user in
// channel, with an id that starts with prefix.
func (s *Server) newResponseLocked(prefix, channel, user string) SlashResult {
	s.slashSeq++
	s.dirty = true
	tok := uuid.NewString()
	s.responses[tok] = &responseURL{channel: channel, user: user, expires: time.Now().Add(responseURLTTL)}
	return SlashResult{
		ID:          fmt.Sprintf("%s%010d", prefix, s.slashSeq),
		ResponseURL: fmt.Sprintf("%s/commands/%s/%d/%s", s.URL(), s.opts.TeamID, s.slashSeq, tok),
		TriggerID:   fmt.Sprintf("%d.%s", s.slashSeq, tok[:8]),
	}
}

// applySlashAckLocked turns an ack payload into the immediate response message.
func (s *Server) applySlashAckLocked(d *delivery, payload json.RawMessage) {
	if len(payload) == 0 || string(payload) == "null" {
		return
	}
	var r commandResponse
	if json.Unmarshal(payload, &r) != nil {
		return
	}
	s.commandResponseLocked(d.slash.cmd.Channel, d.slash.cmd.User, r, "ack")
}

func (s *Server) commandResponseLocked(channel, user string, r commandResponse, source string) {
	if r.Text == "" && len(r.Blocks) == 0 {
		return
	}
	ch := s.channels[channel]
	if ch == nil {
		return
	}
	if r.ResponseType != "in_channel" {
		s.ephemerals = append(s.ephemerals, Ephemeral{
			Channel: channel, User: user, Text: r.Text, Blocks: r.Blocks, ThreadTS: r.ThreadTS, TS: s.nextTS(), Source: source,
		})
		s.notifyLocked()
		return
	}
	m := &Message{Channel: channel, TS: s.nextTS(), User: s.opts.BotUserID, BotID: s.opts.BotID, AppID: s.opts.AppID, Text: r.Text, Blocks: r.Blocks}
	if p := ch.byTS[r.ThreadTS]; p != nil && p.ThreadTS == "" {
		m.ThreadTS, m.ParentUserID = p.TS, p.User
	}
	s.insertLocked(ch, m)
	s.publishNewLocked(ch, m)
	s.notifyLocked()
}

// handleResponseURL serves POST /commands/{team}/{n}/{token}: a slash command's response_url.
func (s *Server) handleResponseURL(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var body commandResponse
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, fail("invalid_payload"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ru := s.responses[path.Base(r.URL.Path)]
	switch {
	case ru == nil:
		writeJSON(w, http.StatusNotFound, fail("invalid_url"))
		return
	case ru.uses >= responseURLUses || time.Now().After(ru.expires):
		writeJSON(w, http.StatusNotFound, fail("expired_url"))
		return
	}
	ru.uses++
	s.commandResponseLocked(ru.channel, ru.user, body, "response_url")
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// interact runs send, under s.mu, for the person and the channel of an interactive action
// (what: "click", "slash command", ...), *user defaulting to U0000001 and *channel to
// C0000001; with the server closed, or either unknown, it fails without calling send.
func (s *Server) interact(what string, user, channel *string, send func(*User, *channelState) (SlashResult, error)) (SlashResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*user, *channel = cmpOr(*user, "U0000001"), cmpOr(*channel, "C0000001")
	if s.closed {
		return SlashResult{}, ErrClosed
	}
	u, ch := s.users[*user], s.channels[*channel]
	if u == nil || ch == nil {
		return SlashResult{}, fmt.Errorf("%s by %s in %s: %w", what, *user, *channel, ErrNotFound)
	}
	return send(u, ch)
}
