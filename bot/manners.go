package bot

import (
	"fmt"
	"slices"
	"strings"

	followsignal "github.com/logbook/logbook/bot/followup/signal"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
)

// ThreadReplies says which messages in a session's thread the bot answers
// (LOGBOOK_THREAD_REPLIES). Every message is recorded whatever the mode.
type ThreadReplies string

// The modes of ThreadReplies.
const (
	// RepliesAddressed (the default) answers every message except asides ("(aside) …",
	// "!aside …") and messages that mention another person but not the bot.
	RepliesAddressed ThreadReplies = "addressed"
	// RepliesMentions answers only messages that mention the bot.
	RepliesMentions ThreadReplies = "mentions"
	// RepliesAll answers every message.
	RepliesAll ThreadReplies = "all"
)

// ParseThreadReplies parses a ThreadReplies mode; "" is the default, addressed.
func ParseThreadReplies(s string) (ThreadReplies, error) {
	return parseChoice(s, RepliesAddressed, RepliesMentions, RepliesAll)
}

// parseChoice parses s, in any case and with space around it, as one of choices; "" is the
// first, the default. The error quotes s and names the choices.
func parseChoice[T ~string](s string, choices ...T) (T, error) {
	v := T(strings.ToLower(strings.TrimSpace(s)))
	switch {
	case v == "":
		return choices[0], nil
	case slices.Contains(choices, v):
		return v, nil
	}
	names := make([]string, len(choices))
	for i, c := range choices {
		names[i] = string(c)
	}
	last := len(names) - 1
	return "", fmt.Errorf("%q: want %s or %s", s, strings.Join(names[:last], ", "), names[last])
}

// Reasons a message is not answered (session.NotAddressed.Reason).
const (
	reasonAside        = "aside"
	reasonOtherPerson  = "other_person"
	reasonNotMentioned = "not_mentioned"
	reasonMuted        = "muted"
	reasonTakenOver    = "taken_over"
)

// Canned replies: answers that need no model.
const (
	mutedReply   = "Muted: I'll keep recording this thread but won't answer. Say `unmute` to bring me back."
	unmutedReply = "Unmuted — I'm listening again."
	stillMuted   = "I'm muted in this thread. Say `unmute` to bring me back."
	// takenOverReply answers a mention while a person holds the session (%s: who).
	takenOverReply  = "%s has taken this thread over; I'm recording it but not answering until they hand it back (`logbook handback`)."
	handedBackReply = "Handed back — I'm answering again."
	// notHolderReply answers "handback" from someone other than the holder (%s: who).
	notHolderReply = "%s has taken this thread over; only they can hand it back, by writing `handback` here if they took it over as their Slack user id (`logbook takeover --as <id>`), or anyone with the database with `logbook handback`."
	nothingToStop  = "Nothing is running here to stop."
)

// hearing is what the bot makes of one user message in a session's thread.
type hearing struct {
	answer bool   // the message starts a turn
	reason string // why not, when !answer
	mute   int    // +1: the message mutes the thread, -1: unmutes it
	canned string // the reply, when it needs no model
}

// hear decides what to do with msg, in a thread that is muted or not. The thread's opening
// message (first) is always answered: it mentioned the bot to start the session.
func hear(mode ThreadReplies, msg session.UserMessage, muted, first bool) hearing {
	text := strings.ToLower(strings.TrimSpace(msg.Text))
	switch strings.TrimRight(text, ".! ") {
	case "mute":
		if muted {
			return hearing{reason: reasonMuted}
		}
		return hearing{answer: true, mute: +1, canned: mutedReply}
	case "stop":
		// A stop that reached no running turn (one that did is taken up by that turn).
		if muted {
			return hearing{reason: reasonMuted}
		}
		return hearing{answer: true, canned: nothingToStop}
	case "unmute":
		if !muted {
			return hearing{answer: true, canned: unmutedReply}
		}
		return hearing{answer: true, mute: -1, canned: unmutedReply}
	}
	if muted {
		if msg.Mentioned {
			return hearing{answer: true, canned: stillMuted}
		}
		return hearing{reason: reasonMuted}
	}
	if first || mode == RepliesAll {
		return hearing{answer: true}
	}
	if mode == RepliesMentions && !msg.Mentioned {
		return hearing{reason: reasonNotMentioned}
	}
	if strings.HasPrefix(text, "(aside)") || strings.HasPrefix(text, "!aside") {
		return hearing{reason: reasonAside}
	}
	if !msg.Mentioned && len(msg.Names) > 0 {
		return hearing{reason: reasonOtherPerson}
	}
	return hearing{answer: true}
}

// heard is the outcome for the user messages a turn takes up.
type heard struct {
	answer bool               // some message is to be answered
	canned string             // the reply when the last answered message needs no model
	marks  []session.NewEvent // not_addressed, thread_muted, thread_unmuted, in log order
}

// hearAll applies hear to the user messages after through up to last, in order, starting
// from the thread's mute state in evs (the log so far).
func hearAll(mode ThreadReplies, evs []session.Event, through, last int64) heard {
	muted := isMuted(evs)
	holder := takenOverBy(evs)
	var out heard
	normal := false // some message the model should answer
	firstUser := int64(0)
	for _, e := range evs {
		if e.Type == session.TypeUserMessage {
			firstUser = e.Seq
			break
		}
	}
	for _, e := range session.Select(evs, session.Range{From: through + 1, To: last, Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Decode(&m) != nil {
			out.answer, out.canned = true, "" // unreadable: let the agent see what it can
			continue
		}
		actor := session.Actor{Kind: session.ActorUser, ID: m.User}
		if holder != "" {
			// A person holds the session: the bot answers nothing but their "handback", and
			// a mention gets a reminder of who has it.
			switch {
			case isHandback(m.Text) && m.User == holder:
				holder = ""
				out.marks = append(out.marks, session.NewEvent{Type: session.TypeHandedBack, Actor: actor,
					IdempotencyKey: "handed_back/" + e.ID.String(), Payload: session.HandedBack{By: m.User, Source: "message"}})
				out.answer, out.canned = true, handedBackReply
			case isHandback(m.Text):
				// Someone else: say who holds it, rather than ignore them.
				out.answer, out.canned = true, fmt.Sprintf(notHolderReply, mrkdwn.EscapeText(holder))
			case m.Mentioned:
				out.answer, out.canned = true, fmt.Sprintf(takenOverReply, mrkdwn.EscapeText(holder))
			default:
				out.marks = append(out.marks, session.NewEvent{Type: session.TypeNotAddressed, Actor: cellActor,
					IdempotencyKey: "not_addressed/" + e.ID.String(), Payload: session.NotAddressed{MessageSeq: e.Seq, Reason: reasonTakenOver}})
			}
			continue
		}
		h := hear(mode, m, muted, e.Seq == firstUser)
		switch h.mute {
		case +1:
			muted = true
			out.marks = append(out.marks, session.NewEvent{Type: session.TypeThreadMuted, Actor: actor,
				IdempotencyKey: "muted/" + e.ID.String(), Payload: session.ThreadMuted{MessageSeq: e.Seq}})
		case -1:
			muted = false
			out.marks = append(out.marks, session.NewEvent{Type: session.TypeThreadUnmuted, Actor: actor,
				IdempotencyKey: "unmuted/" + e.ID.String(), Payload: session.ThreadUnmuted{MessageSeq: e.Seq}})
		}
		if !h.answer {
			out.marks = append(out.marks, session.NewEvent{Type: session.TypeNotAddressed, Actor: cellActor,
				IdempotencyKey: "not_addressed/" + e.ID.String(), Payload: session.NotAddressed{MessageSeq: e.Seq, Reason: h.reason}})
			continue
		}
		out.answer, out.canned = true, h.canned
		normal = normal || h.canned == ""
	}
	// Signals about a pull request this thread opened (bot/followup): a failed check or a
	// review is the model's to work on; the checks green or the attempts used up is said
	// without it. Not while muted or taken over.
	var said []string
	for _, e := range session.Select(evs, session.Range{From: through + 1, To: last, Types: []session.Type{session.TypeFollowupSignal}}) {
		if holder != "" || muted {
			reason := reasonMuted
			if holder != "" {
				reason = reasonTakenOver
			}
			out.marks = append(out.marks, session.NewEvent{Type: session.TypeNotAddressed, Actor: cellActor,
				IdempotencyKey: "not_addressed/" + e.ID.String(), Payload: session.NotAddressed{MessageSeq: e.Seq, Reason: reason}})
			continue
		}
		out.answer = true
		if text, model := followsignal.Answer(e); model {
			normal = true
		} else {
			said = append(said, text)
		}
	}
	if len(said) > 0 && !normal {
		out.canned = strings.Join(append(nonEmptyStrings(out.canned), said...), "\n")
	}
	if out.canned != "" && out.canned != mutedReply && normal {
		// "unmute" (or a mention while muted) with a question in the same turn: the model
		// answers the question, and sees the unmute.
		out.canned = ""
	}
	return out
}

func nonEmptyStrings(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// takenOverBy is who holds the session (session.HolderOf), "" when the bot has it.
func takenOverBy(evs []session.Event) string {
	h, _ := session.HolderOf(evs)
	return h.By
}

// isHandback reports whether text is "handback" alone (any case, trailing "." or "!").
func isHandback(text string) bool {
	return strings.EqualFold(strings.TrimRight(strings.TrimSpace(text), ".! "), "handback")
}

// isMuted reports whether the log's last mute marker mutes the thread.
func isMuted(evs []session.Event) bool {
	for i := len(evs) - 1; i >= 0; i-- {
		switch evs[i].Type {
		case session.TypeThreadMuted:
			return true
		case session.TypeThreadUnmuted:
			return false
		}
	}
	return false
}
