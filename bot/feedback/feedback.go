// Package feedback puts Slack's 👍/👎 feedback buttons under the agent's replies and records
// each click as a feedback event of the reply's session, with who clicked (a bot.Surface).
//
// A reply the model wrote gets a context_actions block with a feedback_buttons element under
// its last part (Buttons, which cmd/logbook gives the engine's delivery); logbook's own text
// (a canned reply, a turn that ended early) gets none. The block's block_id names the session
// and the reply's assistant_message event, so a click is checked against the log: a button
// copied into another thread, or naming a reply the session does not have, records nothing.
//
// Every click is an event (type feedback, its actor the person). A click delivered twice is
// one event (its idempotency key holds Slack's action_ts); a person who clicks 👍 and then 👎
// on the same reply changed their mind: both clicks are on the record and the latest is the
// one counted (session.Store.Feedback), so each person counts once per reply.
package feedback

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/logbook/logbook/session"
)

// ActionID is the action_id of the feedback buttons under a reply.
const ActionID = "logbook_feedback"

// blockPrefix starts the block_id of the feedback block: "logbook_feedback <session> <reply>".
const blockPrefix = ActionID + " "

// Buttons is the feedback block under reply's last part, or nil for a reply logbook wrote
// itself (there is no model to rate). Its shape is the engine's DeliveryConfig.Actions.
func Buttons(sess session.Session, reply session.Event, msg session.AssistantMessage) slack.Block {
	if msg.Own {
		return nil
	}
	good := slack.NewFeedbackButton(slack.NewTextBlockObject(slack.PlainTextType, "👍", true, false), session.FeedbackPositive).
		WithAccessibilityLabel("This reply was helpful")
	bad := slack.NewFeedbackButton(slack.NewTextBlockObject(slack.PlainTextType, "👎", true, false), session.FeedbackNegative).
		WithAccessibilityLabel("This reply was not helpful")
	return slack.NewContextActionsBlock(blockPrefix+sess.ID.String()+" "+reply.ID.String(),
		slack.NewFeedbackButtonsBlockElement(ActionID, good, bad))
}

// Store is what the surface needs of the log (session.Store has it).
type Store interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
}

// Privacy says whether a channel is private now (directory.Directory has it).
type Privacy interface {
	ChannelPrivate(ctx context.Context, id string) (bool, error)
}

// Surface records the clicks on the feedback buttons (a bot.Surface).
type Surface struct {
	Store   Store
	Privacy Privacy      // nil: every channel a session is in counts as public
	HTTP    *http.Client // answers through a click's response_url; nil: a 10 s client
	Log     zerolog.Logger
}

// Event claims no event: feedback arrives as interactions only.
func (s *Surface) Event(context.Context, slackevents.EventsAPIEvent) bool { return false }

// Interaction claims a click on a feedback button and records it. A click that cannot be
// recorded (a button that names no reply of this thread, a private channel, the database
// down) is said to the person alone, through the click's response_url; none is dropped
// silently.
func (s *Surface) Interaction(ctx context.Context, cb slack.InteractionCallback) bool {
	if cb.Type != slack.InteractionTypeBlockActions {
		return false
	}
	for _, a := range cb.ActionCallback.BlockActions {
		if a == nil || a.ActionID != ActionID {
			continue
		}
		log := s.Log.With().Str("user", cb.User.ID).Str("channel", cmp.Or(cb.Channel.ID, cb.Container.ChannelID)).Logger()
		if text := s.record(ctx, log, cb, a); text != "" {
			s.answer(ctx, log, cb.ResponseURL, text)
		}
		return true
	}
	return false
}

// record appends the click's feedback event; it returns what to tell the person when it
// could not ("" when it was recorded).
func (s *Surface) record(ctx context.Context, log zerolog.Logger, cb slack.InteractionCallback, a *slack.BlockAction) string {
	const notOurs = "This button does not belong to a logbook reply in this thread."
	retry := "I could not record your feedback right now; try again in a moment."
	sid, replyID, ok := strings.Cut(strings.TrimPrefix(a.BlockID, blockPrefix), " ")
	if !strings.HasPrefix(a.BlockID, blockPrefix) || !ok || cb.User.ID == "" {
		return notOurs
	}
	rating := a.Value
	if rating != session.FeedbackPositive && rating != session.FeedbackNegative {
		return notOurs
	}
	id, err := session.ParseID(sid)
	if err != nil {
		return notOurs
	}
	sess, err := s.Store.Session(ctx, id)
	if errors.Is(err, session.ErrNotFound) {
		return notOurs
	}
	if err != nil {
		log.Warn().Err(err).Msg("feedback click: read the session")
		return retry
	}
	channel := cmp.Or(cb.Channel.ID, cb.Container.ChannelID)
	threadTS := cmp.Or(cb.Container.ThreadTs, cb.Message.ThreadTimestamp)
	msgTS := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
	if channel != sess.Key.Channel || threadTS != sess.Key.ThreadTS || msgTS == "" {
		return notOurs // a block copied into another thread's message rates nothing
	}
	if s.Privacy != nil {
		private, err := s.Privacy.ChannelPrivate(ctx, channel)
		if err != nil {
			log.Warn().Err(err).Msg("feedback click: check the channel")
			return retry
		}
		if private {
			return "logbook keeps no record of private channels, group DMs or DMs."
		}
	}
	replies, err := s.Store.Events(ctx, id, session.Range{Types: []session.Type{session.TypeAssistantMessage}})
	if err != nil {
		log.Warn().Err(err).Msg("feedback click: read the log")
		return retry
	}
	var model string
	found := false
	for _, e := range replies {
		if e.ID.String() != replyID {
			continue
		}
		var m session.AssistantMessage
		if err := e.Decode(&m); err == nil && m.Usage != nil {
			model = m.Usage.Model
		}
		found = true
	}
	if !found {
		return notOurs
	}
	f := session.Feedback{Reply: replyID, Rating: rating, MessageTS: msgTS, Model: model, ActionTS: a.ActionTs}
	if _, err := s.Store.Append(ctx, id, session.NewEvent{Type: session.TypeFeedback,
		Actor: session.Actor{Kind: session.ActorUser, ID: cb.User.ID}, IdempotencyKey: f.Key(cb.User.ID), Payload: f}); err != nil {
		log.Error().Err(err).Str("session_id", id.String()).Msg("could not store feedback")
		return retry
	}
	log.Info().Str("session_id", id.String()).Str("rating", rating).Msg("feedback recorded")
	return ""
}

// answer tells the person text, ephemerally, through the click's response_url.
func (s *Surface) answer(ctx context.Context, log zerolog.Logger, responseURL, text string) {
	if responseURL == "" {
		return
	}
	hc := s.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := slack.PostWebhookCustomHTTPContext(actx, responseURL, hc,
		&slack.WebhookMessage{ResponseType: "ephemeral", ReplaceOriginal: false, Text: text}); err != nil {
		// The response_url is a short-lived credential that can post: keep it out of the log.
		var ue *url.Error
		msg := err.Error()
		if errors.As(err, &ue) {
			msg = ue.Op + " response_url: " + ue.Err.Error()
		}
		log.Warn().Str("error", msg).Msg("answer a feedback click through its response_url")
	}
}
