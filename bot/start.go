package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/session"
)

// Sessions logbook starts itself (issue 32): a schedule's tick (bot/schedule) and a signed
// hook (bot/hooks) each post one top-level message in a channel and run a session on it,
// the post's thread. Starter is that one step, for both.
//
// The post carries message metadata naming what started it ({event_type: Opening.Kind,
// event_payload: {id: Opening.Key, attempt: <marker>}}). Whether an opening was posted is
// read from the log, never paged out of Slack's history (1 request a minute and 15 messages
// a page for apps outside the Slack Marketplace): each attempt appends "posting" (with its
// marker) just before chat.postMessage and "posted" (with the ts) just after
// (session.Store.RecordPosting, RecordPosted). A retry of the same Opening.Key then
//
//   - reuses the ts of a "posted" record, asking Slack nothing;
//   - posts when no attempt recorded "posting": nothing was sent;
//   - when an attempt recorded "posting" and no ts (it died, or the database went away,
//     between Slack's answer and its record — a window of one INSERT), makes one narrow
//     conversations.history request: the channel from a minute before that attempt to
//     postWindow after it, one page of 15, for the post's metadata. Found, it is recorded and
//     reused; not found, the opening is posted. Were more than 15 messages posted in the
//     channel in that window, and the earlier post not among the newest 15, it is posted
//     again: a tick is never lost for it, and the double needs a crash inside that INSERT
//     and a busy channel at once. A rate-limited request fails the attempt; the next one
//     asks again.
//
// The session's first event is a user_message with the opening's input (idempotency key
// team/channel/ts, the gateway's), so a retry appends nothing twice; the session is then
// signalled and runs like any other.

// startStore is the part of session.Store a Starter needs.
type startStore interface {
	Open(ctx context.Context, key session.ThreadKey) (session.Session, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
	OpeningPosts(ctx context.Context, kind, key string) (session.OpeningRecord, error)
	RecordPosting(ctx context.Context, kind, key, marker, channel string) error
	RecordPosted(ctx context.Context, kind, key, marker, channel, ts string) error
}

// postWindow bounds when an attempt's post can have reached Slack after its "posting" record:
// the attempt's own deadline (a tick's is LOGBOOK_LEASE_TTL*2/3, a hook's a minute) and
// slack-go's request.
const postWindow = 2 * time.Minute

// pageOfHistory is the one page of conversations.history a retry may read: Slack's limit for
// apps outside the Marketplace.
const pageOfHistory = 15

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
	// opening among Kind's (a tick, a delivery), the same on every attempt: an earlier
	// attempt's post is found by it in the log.
	Kind, Key string
	// First, when set, is the session's first event in place of the user message: a fork's
	// session_forked (bot/fork), whose thread waits for someone to write in it, so the session
	// is not signalled. It must land at seq 1 (give it an idempotency key, so a retry appends it
	// once); Start fails when the thread's session holds something else first.
	First *session.NewEvent
}

// Started is what Start did.
type Started struct {
	Session session.Session
	TS      string // the top-level message
	Found   bool   // the message was an earlier attempt's
	// Checked says the channel's history was read once (an earlier attempt recorded posting
	// and no ts).
	Checked bool
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

// Start posts o's message (or finds an earlier attempt's, see the file's comment), opens the
// session of its thread, appends the first user message and signals the session. Errors: a
// private channel (ErrPrivateChannel: nothing is posted), Slack's refusal of the post
// (channel_not_found, not_in_channel, is_archived: a slack.SlackErrorResponse), a failed look
// at the channel (nothing is posted then), or the log's. When the post was made and its record
// failed, the error comes with Started.TS set.
func (s *Starter) Start(ctx context.Context, o Opening) (Started, error) {
	team := cmp.Or(o.Team, s.team)
	var st Started
	rec, err := s.store.OpeningPosts(ctx, o.Kind, o.Key)
	if err != nil {
		return st, err
	}
	st.TS, st.Found = rec.TS, rec.TS != ""
	if st.TS == "" && len(rec.Posting) > 0 {
		ts, err := s.check(ctx, o, rec.Posting)
		st.Checked = true
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
		marker := uuid.NewString()
		if err := s.store.RecordPosting(ctx, o.Kind, o.Key, marker, o.Channel); err != nil {
			return st, err
		}
		_, ts, err := s.api.PostMessageContext(ctx, o.Channel,
			slack.MsgOptionText(o.Text, false),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: o.Kind, EventPayload: map[string]any{"id": o.Key, "attempt": marker}}))
		if err != nil {
			return st, fmt.Errorf("post %s %s in %s: %w", o.Kind, o.Key, o.Channel, err)
		}
		st.TS = ts
		if err := s.store.RecordPosted(ctx, o.Kind, o.Key, marker, o.Channel, ts); err != nil {
			return st, err
		}
	}
	sess, err := s.store.Open(ctx, session.ThreadKey{Team: team, Channel: o.Channel, ThreadTS: st.TS})
	if err != nil {
		return st, err
	}
	st.Session = sess
	if o.First != nil {
		stored, err := s.store.Append(ctx, sess.ID, *o.First)
		if err != nil {
			return st, err
		}
		if stored[0].Seq != 1 {
			return st, fmt.Errorf("start %s %s in %s: %w: its %s is event %d of session %s, not the first",
				o.Kind, o.Key, o.Channel, session.ErrConflict, o.First.Type, stored[0].Seq, sess.ID)
		}
		return st, nil
	}
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

// check looks for o's post once, in one page of the channel's history around the attempts
// that recorded posting and no ts (a minute before the first, for clocks that disagree, to
// postWindow after the last); "" when it is not there. A post found is recorded, so no later
// attempt asks again.
func (s *Starter) check(ctx context.Context, o Opening, posting []time.Time) (string, error) {
	first, last := posting[0], posting[0]
	for _, at := range posting {
		if at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	p := &slack.GetConversationHistoryParameters{ChannelID: o.Channel, Limit: pageOfHistory, IncludeAllMetadata: true, Inclusive: true,
		Oldest: slackTS(first.Add(-time.Minute)), Latest: slackTS(last.Add(postWindow))}
	r, err := s.api.GetConversationHistoryContext(ctx, p)
	if err != nil {
		return "", fmt.Errorf("look for %s %s in %s: %w", o.Kind, o.Key, o.Channel, err)
	}
	for _, m := range r.Messages {
		if m.Metadata.EventType != o.Kind || fmt.Sprint(m.Metadata.EventPayload["id"]) != o.Key {
			continue
		}
		marker := fmt.Sprint(m.Metadata.EventPayload["attempt"])
		if marker == "" || marker == "<nil>" {
			marker = "found"
		}
		if err := s.store.RecordPosted(ctx, o.Kind, o.Key, marker, o.Channel, m.Timestamp); err != nil {
			return "", err
		}
		return m.Timestamp, nil
	}
	return "", nil
}
