package fork

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// Shortcut is the callback_id of the "Branch from here" message shortcut (in the app
// manifest).
const Shortcut = "branch_from_here"

// Members lists a channel's members (a *slack.Client: conversations.members).
type Members interface {
	GetUsersInConversationContext(ctx context.Context, params *slack.GetUsersInConversationParameters) ([]string, string, error)
}

// Surface answers the "Branch from here" shortcut (a bot.Surface): on any message of a
// logbook thread, a member of the channel — which must still be public — branches the thread
// at that message (SeqAt); the answer, to that person only, links the new thread or says
// plainly why there is none.
type Surface struct {
	Forker  *Forker
	Dir     *directory.Directory
	Members Members
	// Hook posts to response_url (nil: http.DefaultClient).
	Hook *http.Client
	Log  zerolog.Logger
}

var _ bot.Surface = (*Surface)(nil)

// Interaction answers the branch_from_here message shortcut.
func (s *Surface) Interaction(ctx context.Context, cb slack.InteractionCallback) bool {
	if cb.Type != slack.InteractionTypeMessageAction || cb.CallbackID != Shortcut {
		return false
	}
	text := s.branch(ctx, cb)
	if cb.ResponseURL == "" {
		return true
	}
	if err := slack.PostWebhookCustomHTTPContext(ctx, cb.ResponseURL, cmp.Or(s.Hook, http.DefaultClient),
		&slack.WebhookMessage{ResponseType: "ephemeral", Text: text}); err != nil {
		s.Log.Warn().Str("channel", cb.Channel.ID).Msg("answer the branch shortcut through its response_url failed")
	}
	return true
}

// Event claims no event.
func (s *Surface) Event(context.Context, slackevents.EventsAPIEvent) bool { return false }

// branch forks the thread of cb's message, and returns what the person is told.
func (s *Surface) branch(ctx context.Context, cb slack.InteractionCallback) string {
	channel, user := cb.Channel.ID, cb.User.ID
	at := cmp.Or(cb.Message.Timestamp, cb.MessageTs)
	thread := cmp.Or(cb.Message.ThreadTimestamp, at)
	log := s.Log.With().Str("channel", channel).Str("user", user).Logger()
	private, err := s.Dir.ChannelPrivate(ctx, channel)
	if err != nil {
		log.Warn().Err(err).Msg("branch: check the channel")
		return "I could not check this channel right now; try again in a moment."
	}
	if private {
		return notPublic
	}
	member, err := s.member(ctx, channel, user)
	if err != nil {
		log.Warn().Err(err).Msg("branch: list the channel's members")
		return "I could not check that you are in this channel right now; try again in a moment."
	}
	if !member {
		return "Only a member of this channel can branch its threads: join the channel, then try again."
	}
	sess, err := s.Forker.Store.SessionByThread(ctx, session.ThreadKey{Team: cb.Team.ID, Channel: channel, ThreadTS: thread})
	if errors.Is(err, session.ErrNotFound) {
		return "This message is not in a logbook thread: there is nothing to branch."
	}
	if err != nil {
		log.Warn().Err(err).Msg("branch: find the thread's session")
		return "I could not look this thread up right now; try again in a moment."
	}
	seq, err := SeqAt(ctx, s.Forker.Store, sess.ID, at)
	if err != nil {
		log.Warn().Err(err).Msg("branch: find the event of the message")
		return "I could not read this thread's log right now; try again in a moment."
	}
	if seq == 0 {
		return "This thread's log has nothing at or before that message: there is nothing to branch from."
	}
	f, err := s.Forker.Fork(ctx, Request{Parent: sess, Seq: seq, By: session.Actor{Kind: session.ActorUser, ID: user}, At: at,
		Key: cmp.Or(cb.TriggerID, cb.ActionTs)})
	if err != nil {
		log.Warn().Err(err).Str("session_id", sess.ID.String()).Int64("seq", seq).Msg("branch the thread")
		if errors.Is(err, bot.ErrPrivateChannel) {
			return notPublic // turned private since the directory looked
		}
		if bot.Permanent(err) {
			return "Slack refused the new thread's post in this channel, so no branch was started."
		}
		return "I could not start the branch right now; try again in a moment."
	}
	where := "the new thread"
	if s.Forker.Link != nil {
		if link := s.Forker.Link(ctx, channel, f.Started.TS); link != "" {
			where = "<" + link + "|the new thread>"
		}
	}
	return "Branched at event " + strconv.FormatInt(seq, 10) + " of this thread: " + where +
		" goes on from here. This thread is unchanged."
}

const notPublic = "This channel is not public, and logbook keeps no record of private channels, group DMs or DMs: " +
	"no branch is started here."

// member reports whether user is in channel (conversations.members, every page).
func (s *Surface) member(ctx context.Context, channel, user string) (bool, error) {
	p := &slack.GetUsersInConversationParameters{ChannelID: channel, Limit: 1000}
	for {
		ids, next, err := s.Members.GetUsersInConversationContext(ctx, p)
		if err != nil {
			return false, err
		}
		for _, id := range ids {
			if id == user {
				return true, nil
			}
		}
		if next == "" {
			return false, nil
		}
		p.Cursor = next
	}
}

// SeqAt maps a message of a session's thread (its Slack ts) to the seq a fork is taken at: the
// newest event of the session at or before that message. That is the event that recorded the
// message — a person's user_message with that ts, or the delivered record of a reply posted
// as that ts (the reply is in the conversation through it) — and, for a message the log does
// not name (posted by someone else, or its record purged), the newest event created at or
// before the message's time. 0: none.
func SeqAt(ctx context.Context, store Store, id session.ID, ts string) (int64, error) {
	evs, err := store.Events(ctx, id, session.Range{})
	if err != nil {
		return 0, err
	}
	for _, it := range thread.Fold(evs).Items {
		if it.Kind == thread.KindUser && it.Message != nil && !it.Message.Stray && it.Message.TS == ts {
			return it.Seq(), nil
		}
	}
	if seq, ok := thread.FoldTurns(evs).PostedBy[ts]; ok {
		return seq, nil
	}
	at, ok := slackTime(ts)
	if !ok {
		return 0, nil
	}
	var seq int64
	for _, e := range evs {
		if !e.CreatedAt.After(at) {
			seq = e.Seq
		}
	}
	return seq, nil
}

// slackTime is the time of a Slack ts ("1700000000.000100": seconds and microseconds).
func slackTime(ts string) (time.Time, bool) {
	secs, frac, _ := strings.Cut(ts, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || sec <= 0 || len(frac) > 9 {
		return time.Time{}, false
	}
	var nsec int64
	if frac != "" {
		n, err := strconv.ParseInt(frac, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, false
		}
		for range 9 - len(frac) {
			n *= 10
		}
		nsec = n
	}
	return time.Unix(sec, nsec), true
}
