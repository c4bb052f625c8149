package bot

import (
	"cmp"
	"encoding/json"
)

// Slack Connect: a channel shared between organisations has one id in all of them, and one
// host. An envelope's outer team_id names the organisation the event came through — in a
// channel hosted by another organisation, that organisation — while authorizations name the
// installation it was delivered for (ours), and context_team_id the team in whose context the
// channel lives (its host). logbook keys a session by channel and thread, and records the
// channel's host as the session's team (session.ThreadKey); people whose own team is not the
// bot's are "from the other organisation" (see Approvers).

// teams are the team ids an Events API envelope names.
type teams struct {
	Outer   string // team_id
	Context string // context_team_id
	Ours    string // authorizations[0].team_id
}

// envelopeTeams reads the team ids of an events_api payload; outer is what slack-go decoded
// (used when the payload cannot be read).
func envelopeTeams(payload json.RawMessage, outer string) teams {
	var p struct {
		TeamID         string `json:"team_id"`
		ContextTeamID  string `json:"context_team_id"`
		Authorizations []struct {
			TeamID string `json:"team_id"`
		} `json:"authorizations"`
	}
	t := teams{Outer: outer}
	if len(payload) == 0 || json.Unmarshal(payload, &p) != nil {
		return t
	}
	t.Outer, t.Context = cmp.Or(p.TeamID, outer), p.ContextTeamID
	if len(p.Authorizations) > 0 {
		t.Ours = p.Authorizations[0].TeamID
	}
	return t
}

// owner is the team that owns the event's channel: context_team_id, else team_id.
func (t teams) owner() string { return cmp.Or(t.Context, t.Outer) }
