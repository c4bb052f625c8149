package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// decideBudget bounds the work before a click is acked: Slack wants the ack within 3 s.
const decideBudget = 2 * time.Second

// decide records a person's click on an approval card's Approve or Deny button (a
// block_actions interaction): the first decision wins, only permitted people decide
// (GatewayConfig.Approvers), and the card is updated to show who decided and when. The
// decision wakes the session on whichever replica takes it up. The click is acked once the
// decision is stored (or refused); anyone not permitted, and a click on a card already decided
// or whose turn is over, gets an ephemeral note and the card stays as it is. A decision that
// cannot be stored is said to the person, never dropped silently.
func (g *Gateway) decide(ctx context.Context, log zerolog.Logger, req socketmode.Request, cb slack.InteractionCallback, act *slack.BlockAction) {
	work, cancel := context.WithTimeout(ctx, decideBudget)
	defer cancel()
	// The answers outlive a cancelled ctx (a graceful stop): the person hears what became of
	// the click.
	answer := context.WithoutCancel(ctx)
	note := func(text string) {
		if cb.ResponseURL == "" {
			return
		}
		nctx, stop := context.WithTimeout(answer, 5*time.Second)
		defer stop()
		if err := slack.PostWebhookCustomHTTPContext(nctx, cb.ResponseURL, g.hook,
			&slack.WebhookMessage{ResponseType: "ephemeral", ReplaceOriginal: false, Text: text}); err != nil {
			log.Warn().Str("error", withoutURL(err)).Msg("answer an approval click through its response_url")
		}
	}
	outcome, text, decided, req0 := g.recordDecision(work, log, cb, act)
	g.ack(log, req, nil)
	switch outcome {
	case "decided":
		g.signal(decided.SessionID, false)
		uctx, stop := context.WithTimeout(answer, 5*time.Second)
		defer stop()
		card := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
		if err := updateCard(uctx, g.api, req0, card, decided); err != nil {
			log.Warn().Err(err).Msg("could not update the approval card; the decision is in the log")
		}
	default:
		note(text)
	}
}

// recordDecision checks a click and appends its decision. It returns "decided" with the
// stored decision and its request, or another outcome with the note for the person.
func (g *Gateway) recordDecision(ctx context.Context, log zerolog.Logger, cb slack.InteractionCallback, act *slack.BlockAction) (outcome, text string, decided session.Event, req session.ApprovalRequested) {
	user := cb.User.ID
	sid, call, _ := strings.Cut(act.Value, " ")
	id, err := session.ParseID(sid)
	if err != nil || call == "" || user == "" {
		g.metrics.ignored.WithLabelValues("approval_malformed").Inc()
		return "malformed", "This button does not name a logbook approval request.", session.Event{}, req
	}
	log = log.With().Str("session_id", id.String()).Str("call_id", call).Str("user", user).Logger()
	retry := "I could not record your decision right now; the request is still open, try again in a moment."
	sess, err := g.store.Session(ctx, id)
	if errors.Is(err, session.ErrNotFound) {
		g.metrics.ignored.WithLabelValues("approval_unknown_session").Inc()
		return "unknown", "This button names no logbook session.", session.Event{}, req
	}
	if err != nil {
		log.Warn().Err(err).Msg("approval click: read the session")
		g.logFailed(time.Now())
		return "failed", retry, session.Event{}, req
	}
	threadTS := cmp.Or(cb.Container.ThreadTs, cb.Message.ThreadTimestamp)
	card := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
	if channel := cmp.Or(cb.Channel.ID, cb.Container.ChannelID); channel != sess.Key.Channel || threadTS != sess.Key.ThreadTS || card == "" {
		// A button value copied into another channel's or thread's message decides nothing.
		g.metrics.ignored.WithLabelValues("approval_wrong_thread").Inc()
		return "wrong_thread", "This button does not belong to a request in this thread.", session.Event{}, req
	}
	evs, err := g.store.Events(ctx, id, session.Range{Types: []session.Type{session.TypeUserMessage,
		session.TypeApprovalRequested, session.TypeApprovalDecided, session.TypeTurnStarted, session.TypeTurnCompleted}})
	if err != nil {
		log.Warn().Err(err).Msg("approval click: read the log")
		g.logFailed(time.Now())
		return "failed", retry, session.Event{}, req
	}
	ts := thread.FoldTurns(evs)
	a, ok := ts.Approval(call)
	if ok {
		req = a.Request
	}
	if !ok {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		return "stale", "This approval request is not in the session's log.", session.Event{}, req
	}
	if dec, _, ok := ts.Decision(call); ok {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		return "stale", "Already decided. " + decidedLine(dec), session.Event{}, req
	}
	if tn, ok := ts.Turn(req.Turn); ok && !tn.Open {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		return "stale", "This request is no longer waiting: its turn ended before anyone decided.", session.Event{}, req
	}
	external := cb.User.TeamID != "" && g.me.Team != "" && cb.User.TeamID != g.me.Team
	if !g.cfg.Approvers.may(user, external, evs) {
		g.metrics.approvals.WithLabelValues("not_permitted").Inc()
		log.Info().Msg("approval click by someone not permitted to decide")
		return "not_permitted", fmt.Sprintf("Only %s may approve or deny this request; it stays open.", g.cfg.Approvers.describe()), session.Event{}, req
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
		g.logFailed(time.Now())
		log.Error().Err(err).Msg("could not store an approval decision")
		return "failed", retry, session.Event{}, req
	}
	g.health.appendSucceeded()
	if stored[0].Duplicate {
		// Someone (or the deadline) decided first: theirs stands.
		return "stale", "Already decided. " + decidedLine(stored[0]), session.Event{}, req
	}
	g.metrics.approvals.WithLabelValues(decision).Inc()
	log.Info().Str("decision", decision).Msg("approval decided")
	return "decided", "", stored[0], req
}
