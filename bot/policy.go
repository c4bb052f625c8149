package bot

import (
	"cmp"
	"strings"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// inbound is a message-like inner event, normalised from app_mention and message events.
type inbound struct {
	// Team is the team that owns the channel (the envelope's context_team_id, else its
	// team_id); UserTeam the author's own team, when the event says (Slack Connect).
	Team         string
	UserTeam     string
	EventID      string // Events API event_id
	RetryAttempt int
	Kind         string // "app_mention" or "message"
	Subtype      string
	Channel      string
	ChannelType  string // "channel", "group", "im", "mpim"; empty for app_mention
	User         string
	BotID        string
	Text         string
	Blocks       slack.Blocks
	TS           string
	ThreadTS     string
	Files        []slack.File
	// message_changed: the message after the edit, and before it.
	Changed  *slack.Msg
	Previous *slack.Msg
	// message_deleted
	DeletedTS string
}

// action is what the gateway does with an inbound event.
type action int

const (
	actIgnore  action = iota // ack, store nothing
	actMessage               // store a user_message (starting or continuing a session)
	actEdit                  // store user_message_edited, if the thread has a session
	actDelete                // store user_message_deleted, if the thread has a session
)

// decision is Classify's answer.
type decision struct {
	Action    action
	Reason    string // why, for ignored events (metrics and debug logs; never content)
	Mentioned bool   // the message mentions the bot
	// Start: the message may start a session (it mentions the bot); otherwise it only
	// continues an existing one.
	Start    bool
	ThreadTS string // the session's thread: the parent ts
	TS       string // the message's own ts (for edits and deletions: the original message's)
}

// identity is who the bot is, from auth.test.
type identity struct {
	Team   string
	UserID string // the bot user, e.g. UB000001
	BotID  string // e.g. B0000001
	AppID  string
}

// Classify decides what an inbound event means for logbook. It does not decide privacy:
// the gateway checks the channel before storing anything.
func Classify(in inbound, me identity) decision {
	if in.User == me.UserID && me.UserID != "" {
		return decision{Reason: "own_message"}
	}
	if in.BotID != "" || in.Subtype == "bot_message" {
		return decision{Reason: "bot_message"}
	}
	switch in.Subtype {
	case "", "thread_broadcast", "file_share":
	case "message_changed":
		m := in.Changed
		if m == nil || m.BotID != "" || m.User == "" || m.User == me.UserID || m.SubType == "bot_message" {
			return decision{Reason: "bot_or_empty_edit"}
		}
		if in.Previous != nil && in.Previous.Text == m.Text {
			return decision{Reason: "edit_without_text_change"} // unfurls, attachments
		}
		return decision{Action: actEdit, ThreadTS: threadOf(m.ThreadTimestamp, m.Timestamp), TS: m.Timestamp}
	case "message_deleted":
		thread, ts := "", in.DeletedTS
		if p := in.Previous; p != nil {
			thread = threadOf(p.ThreadTimestamp, p.Timestamp)
			if p.BotID != "" || (p.User == me.UserID && me.UserID != "") {
				return decision{Reason: "bot_message_deleted"}
			}
		}
		if ts == "" {
			return decision{Reason: "delete_without_ts"}
		}
		if thread == "" {
			thread = ts
		}
		return decision{Action: actDelete, ThreadTS: thread, TS: ts}
	default:
		return decision{Reason: "subtype_" + in.Subtype}
	}
	if in.User == "" {
		return decision{Reason: "no_user"}
	}
	if !slackID(in.User) || !slackID(in.Channel) || !slackID(in.TS) || (in.ThreadTS != "" && !slackID(in.ThreadTS)) {
		return decision{Reason: "malformed_ids"}
	}
	if in.TS == "" || in.Channel == "" {
		return decision{Reason: "no_ts_or_channel"}
	}
	mentioned := in.Kind == "app_mention" || mentions(in.Text, me.UserID) || blocksMention(in.Blocks, me.UserID)
	return decision{
		Action:    actMessage,
		Mentioned: mentioned,
		Start:     mentioned,
		ThreadTS:  threadOf(in.ThreadTS, in.TS),
		TS:        in.TS,
	}
}

// threadOf returns the session's thread ts: the parent's ts for a reply, the message's own
// ts for a top-level message.
func threadOf(threadTS, ts string) string {
	if threadTS != "" {
		return threadTS
	}
	return ts
}

func mentions(text, userID string) bool {
	return userID != "" && (strings.Contains(text, "<@"+userID+">") || strings.Contains(text, "<@"+userID+"|"))
}

func blocksMention(blocks slack.Blocks, userID string) bool {
	for _, b := range blocks.BlockSet {
		rt, ok := b.(*slack.RichTextBlock)
		if !ok {
			continue
		}
		for _, el := range rt.Elements {
			sec, ok := el.(*slack.RichTextSection)
			if !ok {
				continue
			}
			for _, e := range sec.Elements {
				if u, ok := e.(*slack.RichTextSectionUserElement); ok && u.UserID == userID {
					return true
				}
			}
		}
	}
	return false
}

// inboundFromEvent normalises an Events API callback into an inbound event. ok is false for
// inner events that are not messages.
func inboundFromEvent(ev slackevents.EventsAPIEvent, retry int) (inbound, bool) {
	in := inbound{Team: ev.TeamID, RetryAttempt: retry}
	if cb, ok := ev.Data.(*slackevents.EventsAPICallbackEvent); ok {
		in.EventID = cb.EventID
	}
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		in.Kind, in.Channel, in.User, in.BotID = "app_mention", e.Channel, e.User, e.BotID
		in.Text, in.Blocks, in.TS, in.ThreadTS, in.Files = e.Text, e.Blocks, e.TimeStamp, e.ThreadTimeStamp, e.Files
		in.UserTeam = cmp.Or(e.UserTeam, e.SourceTeam)
	case *slackevents.MessageEvent:
		in.Kind, in.Subtype, in.Channel, in.ChannelType = "message", e.SubType, e.Channel, e.ChannelType
		in.User, in.BotID, in.Text, in.Blocks = e.User, e.BotID, e.Text, e.Blocks
		in.TS, in.ThreadTS, in.DeletedTS = e.TimeStamp, e.ThreadTimeStamp, e.DeletedTimeStamp
		in.UserTeam = cmp.Or(e.UserTeam, e.SourceTeam)
		if e.Message != nil {
			in.Files = e.Message.Files
			in.UserTeam = cmp.Or(in.UserTeam, e.Message.Team)
			if in.BotID == "" && e.SubType == "" {
				in.BotID = e.Message.BotID
			}
		}
		switch e.SubType {
		case "message_changed":
			in.Changed, in.Previous = e.Message, e.PreviousMessage
		case "message_deleted":
			in.Previous = e.PreviousMessage
		}
	default:
		return inbound{}, false
	}
	return in, true
}

// slackID reports whether s looks like a Slack id or ts: short, printable ASCII.
func slackID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
