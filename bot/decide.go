package bot

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/session"
)

// decide records a person's click on an approval card's Approve or Deny button (a
// block_actions interaction, acked already): the first decision wins, only permitted people
// decide (GatewayConfig.Approvers), and the card is updated to show who decided and when. The
// decision wakes the session on whichever replica takes it up. Anyone else, and a click on a
// card already decided or no longer waiting, gets an ephemeral note and the card stays as it is.
func (g *Gateway) decide(ctx context.Context, log zerolog.Logger, cb slack.InteractionCallback, act *slack.BlockAction) {
	note := func(text string) {
		if cb.ResponseURL == "" {
			return
		}
		if err := slack.PostWebhookCustomHTTPContext(ctx, cb.ResponseURL, g.hook,
			&slack.WebhookMessage{ResponseType: "ephemeral", ReplaceOriginal: false, Text: text}); err != nil {
			log.Warn().Str("error", withoutURL(err)).Msg("answer an approval click through its response_url")
		}
	}
	user := cb.User.ID
	sid, call, _ := strings.Cut(act.Value, " ")
	id, err := session.ParseID(sid)
	if err != nil || call == "" || user == "" {
		g.metrics.ignored.WithLabelValues("approval_malformed").Inc()
		note("This button does not name a logbook approval request.")
		return
	}
	log = log.With().Str("session_id", id.String()).Str("call_id", call).Str("user", user).Logger()
	sess, err := g.store.Session(ctx, id)
	if err != nil {
		log.Warn().Err(err).Msg("approval click: read the session")
		note("I could not record your decision right now; try again in a moment.")
		return
	}
	if channel := cb.Channel.ID; channel != "" && channel != sess.Key.Channel {
		// A value copied into another channel's message: it decides nothing there.
		g.metrics.ignored.WithLabelValues("approval_wrong_channel").Inc()
		note("This button does not belong to a request in this channel.")
		return
	}
	evs, err := g.store.Events(ctx, id, session.Range{Types: []session.Type{session.TypeUserMessage,
		session.TypeApprovalRequested, session.TypeApprovalDecided}})
	if err != nil {
		log.Warn().Err(err).Msg("approval click: read the log")
		note("I could not record your decision right now; try again in a moment.")
		return
	}
	req, ok := approvalRequest(evs, call)
	if !ok {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		note("This approval request is not in the session's log.")
		return
	}
	if dec, ok := approvalDecision(evs, call); ok {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		note("Already decided. " + decidedLine(dec))
		return
	}
	if !g.cfg.Approvers.may(user, evs) {
		g.metrics.approvals.WithLabelValues("not_permitted").Inc()
		log.Info().Msg("approval click by someone not permitted to decide")
		note(fmt.Sprintf("Only %s may approve or deny this request; it stays open.", g.cfg.Approvers.describe()))
		return
	}
	decision := session.DecisionDenied
	if act.ActionID == ActionApprove {
		decision = session.DecisionApproved
	}
	stored, err := g.store.Append(ctx, id, session.NewEvent{Type: session.TypeApprovalDecided,
		Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: session.ApprovalKey(call),
		Payload: session.ApprovalDecided{CallID: call, Decision: decision, Via: "button"}})
	if err != nil {
		g.metrics.persistFailures.Inc()
		log.Error().Err(err).Msg("could not store an approval decision")
		note("I could not record your decision right now; the request is still open, try again in a moment.")
		return
	}
	g.health.appendSucceeded()
	if stored[0].Duplicate {
		// Someone (or the deadline) decided first: theirs stands.
		note("Already decided. " + decidedLine(stored[0]))
		return
	}
	g.metrics.approvals.WithLabelValues(decision).Inc()
	log.Info().Str("decision", decision).Msg("approval decided")
	g.signal(id)
	card := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
	if err := updateCard(ctx, g.api, req, card, stored[0]); err != nil {
		log.Warn().Err(err).Msg("could not update the approval card; the decision is in the log")
	}
}
