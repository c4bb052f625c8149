package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/session"
)

// Sessions logbook starts itself (issue 32): a schedule's tick (bot/schedule) and a signed
// hook (bot/hooks) each post one top-level message in a channel and run a session on it,
// the post's thread. Starter is that one step, for both.
//
// The post carries message metadata naming what started it ({event_type: Opening.Kind,
// event_payload: {id: Opening.Key}}). A caller retrying an opening whose first attempt may
// have posted (its replica died between Slack's answer and its record) sets Opening.Since:
// the channel's history from then on is searched for that metadata first, and a post found
// there is the session's, so an opening is posted once. The session's first event is a
// user_message with the opening's input (idempotency key team/channel/ts, the gateway's), so
// a retry appends nothing twice; the session is then signalled and runs like any other.

// startStore is the part of session.Store a Starter needs.
type startStore interface {
	Open(ctx context.Context, key session.ThreadKey) (session.Session, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
}

// Starter posts a top-level message and runs a session on it.
type Starter struct {
	api    *slack.Client
	store  startStore
	signal func(session.ID)
	team   string
}

// NewStarter returns a Starter that posts with api (the bot token), opens and appends in
// store, and signals sessions with signal (Runner.Signal). team is the workspace's team id.
func NewStarter(api *slack.Client, store startStore, signal func(session.ID), team string) *Starter {
	return &Starter{api: api, store: store, signal: signal, team: team}
}

// Opening is one session to start.
type Opening struct {
	Team    string // default the Starter's
	Channel string
	// Text is the top-level message, Slack mrkdwn: what is quoted from users or senders must
	// already be escaped (mrkdwn.EscapeText, mrkdwn.Inert).
	Text string
	// Input is the session's first user message, readable text (what the model reads).
	Input string
	// Actor is who the first message is from: the system (schedule/<id>, hook/<name>) or a
	// person.
	Actor    session.Actor
	UserName string
	// SetBy is, when Actor is the system, the person whose setting the opening runs (a
	// schedule's admin): recorded in the first message's payload.
	SetBy string
	// Kind is the post's metadata event_type (e.g. logbook_schedule_tick); Key names this
	// opening among Kind's (a tick, a delivery).
	Kind, Key string
	// Since, when set, is when an earlier attempt of this opening may have posted: the
	// channel's history from then on is searched for its post before posting.
	Since time.Time
}

// Started is what Start did.
type Started struct {
	Session session.Session
	TS      string // the top-level message
	Found   bool   // the message was an earlier attempt's, found in the channel's history
}

// ErrPrivateChannel is an opening refused because its channel is private (or a DM): logbook
// keeps no record of private conversations, so it starts no session there.
var ErrPrivateChannel = errors.New("the channel is private, and logbook keeps no record of private conversations")

// Permanent reports whether err is a refusal no retry mends: the channel is private
// (ErrPrivateChannel), the bot is not in it, it is archived or gone, or posting there is
// restricted.
func Permanent(err error) bool {
	if errors.Is(err, ErrPrivateChannel) {
		return true
	}
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		return false
	}
	switch se.Err {
	case "not_in_channel", "is_archived", "channel_not_found", "restricted_action", "restricted_action_read_only_channel",
		"restricted_action_non_threadable_channel", "restricted_action_thread_only_channel", "team_access_not_granted":
		return true
	}
	return false
}

// Start posts o's message (or finds an earlier attempt's), opens the session of its thread,
// appends the first user message and signals the session. Errors: a private channel
// (ErrPrivateChannel: nothing is posted), Slack's refusal of the post (channel_not_found,
// not_in_channel, is_archived: a slack.SlackErrorResponse), a failed search of the history
// (nothing is posted then), or the log's.
func (s *Starter) Start(ctx context.Context, o Opening) (Started, error) {
	team := cmp.Or(o.Team, s.team)
	var st Started
	if !o.Since.IsZero() {
		ts, err := s.find(ctx, o)
		if err != nil {
			return st, err
		}
		st.TS, st.Found = ts, ts != ""
	}
	if st.TS == "" {
		// The channel may have turned private since the schedule or hook named it: nothing is
		// posted, or stored, there. A channel that cannot be read now is not posted in either.
		ch, err := s.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: o.Channel})
		if err != nil {
			return st, fmt.Errorf("read %s before posting %s %s: %w", o.Channel, o.Kind, o.Key, err)
		}
		if ch.IsPrivate || ch.IsIM || ch.IsMpIM {
			return st, fmt.Errorf("post %s %s in %s: %w", o.Kind, o.Key, o.Channel, ErrPrivateChannel)
		}
		_, ts, err := s.api.PostMessageContext(ctx, o.Channel,
			slack.MsgOptionText(o.Text, false),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: o.Kind, EventPayload: map[string]any{"id": o.Key}}))
		if err != nil {
			return st, fmt.Errorf("post %s %s in %s: %w", o.Kind, o.Key, o.Channel, err)
		}
		st.TS = ts
	}
	sess, err := s.store.Open(ctx, session.ThreadKey{Team: team, Channel: o.Channel, ThreadTS: st.TS})
	if err != nil {
		return st, err
	}
	st.Session = sess
	user := ""
	if o.Actor.Kind == session.ActorUser {
		user = o.Actor.ID
	}
	_, err = s.store.Append(ctx, sess.ID, session.NewEvent{
		Type: session.TypeUserMessage, Actor: o.Actor, IdempotencyKey: sess.Key.Team + "/" + o.Channel + "/" + st.TS,
		Payload: session.UserMessage{Team: team, Channel: o.Channel, ThreadTS: st.TS, TS: st.TS, User: user,
			UserName: o.UserName, Text: o.Input, Mentioned: true, SetBy: o.SetBy},
	})
	if err != nil {
		return st, err
	}
	s.signal(sess.ID)
	return st, nil
}

// find looks for the bot's top-level post of o in the channel's history since o.Since (a
// minute earlier, for clocks that disagree), newest first, ten pages at most; "" when there is
// none.
func (s *Starter) find(ctx context.Context, o Opening) (string, error) {
	oldest := o.Since.Add(-time.Minute)
	p := &slack.GetConversationHistoryParameters{ChannelID: o.Channel, Limit: 200, IncludeAllMetadata: true,
		Oldest: strconv.FormatInt(oldest.Unix(), 10) + ".000000"}
	for range 10 {
		r, err := s.api.GetConversationHistoryContext(ctx, p)
		if err != nil {
			return "", fmt.Errorf("look for %s %s in %s: %w", o.Kind, o.Key, o.Channel, err)
		}
		for _, m := range r.Messages {
			if m.Metadata.EventType == o.Kind && fmt.Sprint(m.Metadata.EventPayload["id"]) == o.Key {
				return m.Timestamp, nil
			}
		}
		if !r.HasMore || r.ResponseMetaData.NextCursor == "" {
			return "", nil
		}
		p.Cursor = r.ResponseMetaData.NextCursor
	}
	return "", errors.New("look for " + o.Kind + " " + o.Key + " in " + o.Channel + ": more than ten pages of history")
}
