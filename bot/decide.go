package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// decideBudget bounds the work before a click is acked: Slack wants the ack within 3 s.
const decideBudget = 2 * time.Second

// decide records a person's click on an approval card's Approve, Deny or "Allow for 30 min in
// this thread" button (a block_actions interaction): the first decision wins, only permitted
// people decide (GatewayConfig.Approvers, and the request's rule: approvers_in,
// not_requester), a request that needs several approvers counts each different person once
// and shows the count on its card ("1 of 2"), and the card is updated to show who decided and
// when. The decision wakes the session on whichever replica takes it up. The click is acked
// once it is stored (or refused); anyone not permitted, and a click on a card already decided
// or whose turn is over, gets an ephemeral note and the card stays as it is (a refusal by the
// request's rule is an approval_refused event). A decision that cannot be stored is said to
// the person, never dropped silently.
func (g *Gateway) decide(ctx context.Context, log zerolog.Logger, req socketmode.Request, cb slack.InteractionCallback, act *slack.BlockAction) {
	work, cancel := context.WithTimeout(ctx, decideBudget)
	defer cancel()
	// The answers outlive a cancelled ctx (a graceful stop): the person hears what became of
	// the click.
	answer := context.WithoutCancel(ctx)
	note := func(text string) {
		if cb.ResponseURL == "" || text == "" {
			return
		}
		nctx, stop := context.WithTimeout(answer, 5*time.Second)
		defer stop()
		if err := slack.PostWebhookCustomHTTPContext(nctx, cb.ResponseURL, g.hook,
			&slack.WebhookMessage{ResponseType: "ephemeral", ReplaceOriginal: false, Text: text}); err != nil {
			log.Warn().Str("error", withoutURL(err)).Msg("answer an approval click through its response_url")
		}
	}
	r := g.recordDecision(work, log, cb, act)
	g.ack(log, req, nil)
	uctx, stop := context.WithTimeout(answer, 5*time.Second)
	defer stop()
	card := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
	switch r.outcome {
	case "decided":
		g.signal(r.decided.SessionID, false)
		if err := updateCard(uctx, g.api, r.req, card, r.decided); err != nil {
			log.Warn().Err(err).Msg("could not update the approval card; the decision is in the log")
		}
		note(r.text)
	default:
		if r.status != "" {
			// The card shows the count so far, or why nobody can decide now.
			if err := statusCard(uctx, g.api, r.req, card, cb.Message.Blocks, r.status); err != nil {
				log.Warn().Err(err).Msg("could not update the approval card's status; the click is in the log")
			} else if dec, ok := g.decidedNow(uctx, r.id, r.req); ok {
				// A decision stored while the status was written (a second approver's click
				// at the same moment) may have updated the card before this status did: the
				// card ends showing the decision, whichever update Slack applied last.
				if err := updateCard(uctx, g.api, r.req, card, dec); err != nil {
					log.Warn().Err(err).Msg("could not update the approval card; the decision is in the log")
				}
			}
		}
		note(r.text)
	}
}

// decidedNow reads the decision of req's call, if one is stored now.
func (g *Gateway) decidedNow(ctx context.Context, id session.ID, req session.ApprovalRequested) (session.Event, bool) {
	evs, err := g.store.Events(ctx, id, session.Range{Types: []session.Type{session.TypeApprovalDecided}})
	if err != nil {
		return session.Event{}, false
	}
	dec, _, ok := thread.FoldTurns(evs).Decision(req.CallID)
	return dec, ok
}

// clickResult is what became of a click: outcome "decided" with the stored decision, else
// the note for the person (text) and, when the card should show it, its new status line.
type clickResult struct {
	outcome, text, status string
	decided               session.Event
	req                   session.ApprovalRequested
	id                    session.ID // the request's session
}

// recordDecision checks a click and appends what it did: a decision, a vote towards one, or
// a refusal by the request's rule.
func (g *Gateway) recordDecision(ctx context.Context, log zerolog.Logger, cb slack.InteractionCallback, act *slack.BlockAction) clickResult {
	user := cb.User.ID
	sid, call, _ := strings.Cut(act.Value, " ")
	id, err := session.ParseID(sid)
	if err != nil || call == "" || user == "" {
		g.metrics.ignored.WithLabelValues("approval_malformed").Inc()
		return clickResult{outcome: "malformed", text: "This button does not name a logbook approval request."}
	}
	log = log.With().Str("session_id", id.String()).Str("call_id", call).Str("user", user).Logger()
	retry := clickResult{outcome: "failed", text: "I could not record your decision right now; the request is still open, try again in a moment."}
	sess, err := g.store.Session(ctx, id)
	if errors.Is(err, session.ErrNotFound) {
		g.metrics.ignored.WithLabelValues("approval_unknown_session").Inc()
		return clickResult{outcome: "unknown", text: "This button names no logbook session."}
	}
	if err != nil {
		log.Warn().Err(err).Msg("approval click: read the session")
		g.logFailed(time.Now())
		return retry
	}
	threadTS := cmp.Or(cb.Container.ThreadTs, cb.Message.ThreadTimestamp)
	card := cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp)
	channel := cmp.Or(cb.Channel.ID, cb.Container.ChannelID)
	wrongThread := func() clickResult {
		// A button value copied into another channel's or thread's message decides nothing.
		g.metrics.ignored.WithLabelValues("approval_wrong_thread").Inc()
		return clickResult{outcome: "wrong_thread", text: "This button does not belong to a request in this thread."}
	}
	// The card is in the session's thread, or where its request says it was posted (a thread
	// of the session's code channel), which is checked once the request is read.
	inThread := channel == sess.Key.Channel && threadTS == sess.Key.ThreadTS
	if card == "" || (!inThread && (channel == "" || threadTS == "")) {
		return wrongThread()
	}
	evs, err := g.store.Events(ctx, id, session.Range{Types: []session.Type{session.TypeUserMessage,
		session.TypeApprovalRequested, session.TypeApprovalDecided, session.TypeApprovalVote,
		session.TypeTurnStarted, session.TypeTurnCompleted}})
	if err != nil {
		log.Warn().Err(err).Msg("approval click: read the log")
		g.logFailed(time.Now())
		return retry
	}
	ts := thread.FoldTurns(evs)
	a, ok := ts.Approval(call)
	if !inThread && (!ok || a.Request.ThreadTS == "" || a.Request.Channel != channel || a.Request.ThreadTS != threadTS) {
		return wrongThread()
	}
	if !ok {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		return clickResult{outcome: "stale", text: "This approval request is not in the session's log."}
	}
	req := a.Request
	res := clickResult{req: req, id: id}
	if dec, _, ok := ts.Decision(call); ok {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		res.outcome, res.text = "stale", "Already decided. "+decidedLine(dec)
		return res
	}
	if tn, ok := ts.Turn(req.Turn); ok && !tn.Open {
		g.metrics.approvals.WithLabelValues("stale").Inc()
		res.outcome, res.text = "stale", "This request is no longer waiting: its turn ended before anyone decided."
		return res
	}
	external := cb.User.TeamID != "" && g.me.Team != "" && cb.User.TeamID != g.me.Team
	action := clickAction(act.ActionID)
	refuse := func(reason, detail, text, status string) clickResult {
		// A refusal by the request's rule is on the record: who clicked what, and why not.
		if _, err := g.store.Append(ctx, id, session.NewEvent{Type: session.TypeApprovalRefused,
			Actor:   session.Actor{Kind: session.ActorUser, ID: user},
			Payload: session.ApprovalRefused{CallID: call, Action: action, Reason: reason, Detail: detail}}); err != nil {
			g.metrics.persistFailures.Inc()
			g.logFailed(time.Now())
			log.Error().Err(err).Msg("could not store a refused approval click")
			return retry
		}
		g.metrics.approvals.WithLabelValues("refused_" + reason).Inc()
		log.Info().Str("reason", reason).Msg("approval click refused by the request's rule")
		res.outcome, res.text, res.status = "refused", text, status
		return res
	}
	if req.ApproversIn != "" {
		// The group replaces "has posted in the thread" (its members decide wherever they are);
		// a list of approvers still applies on top of it.
		if g.cfg.Approvers.users != nil && !slices.Contains(g.cfg.Approvers.users, user) || g.cfg.Approvers.users == nil && external {
			return g.notPermitted(log, req)
		}
		members, err := g.api.GetUserGroupMembersContext(ctx, req.ApproversIn)
		if err != nil {
			why := clip.Text(err.Error(), 120)
			log.Warn().Err(err).Str("usergroup", req.ApproversIn).Msg("approval click: usergroups.users.list failed; nobody may decide")
			return refuse(session.RefusedGroupUnknown, why,
				fmt.Sprintf("I cannot check who is in the user group `%s` (Slack said: %s), so nobody can approve or deny this request now; it stays open. Try again later.",
					mrkdwn.EscapeText(req.ApproversIn), mrkdwn.EscapeText(why)),
				fmt.Sprintf(":warning: I cannot check who is in the user group `%s` (Slack said: %s): nobody can approve this call until I can.",
					mrkdwn.EscapeText(req.ApproversIn), mrkdwn.EscapeText(why)))
		}
		if !slices.Contains(members, user) {
			return refuse(session.RefusedNotInGroup, "",
				fmt.Sprintf("Only members of the user group `%s` may approve or deny this request; it stays open.", mrkdwn.EscapeText(req.ApproversIn)), "")
		}
	} else if !g.cfg.Approvers.may(user, external, evs) {
		return g.notPermitted(log, req)
	}
	if req.NotRequester && req.AskedBy(user) && action != "deny" {
		// Separation of duties is about letting a call run: the requester may still say no.
		return refuse(session.RefusedRequester, "",
			"You asked for this turn, and the rule for this call (not_requester) keeps the person who asked from approving its calls: someone else must approve it (you may still deny it). Your click is recorded; the request stays open.", "")
	}
	if action == "deny" {
		return g.appendDecision(ctx, log, res, id, sess, user, session.DecisionDenied, nil, false)
	}
	// Approve, or approve and grant: count the person once; the Needed-th different approver
	// decides.
	needed := req.Needed()
	var votes []session.ApprovalVote
	var voters []string
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeApprovalVote}}) {
		var v session.ApprovalVote
		if e.Decode(&v) == nil && v.CallID == call && !slices.Contains(voters, e.Actor.ID) {
			votes, voters = append(votes, v), append(voters, e.Actor.ID)
		}
	}
	for range needed + 1 {
		if slices.Contains(voters, user) {
			text := fmt.Sprintf("Your approval is already counted (%d of %d); the request waits for someone else.", len(voters), needed)
			return refuse(session.RefusedAlreadyVoted, "", text, "")
		}
		if len(voters)+1 >= needed {
			grant := action == "grant" && req.Rule != ""
			for _, v := range votes {
				grant = grant && v.Grant
			}
			return g.appendDecision(ctx, log, res, id, sess, user, session.DecisionApproved, append(slices.Clone(voters), user), grant)
		}
		n := len(voters) + 1
		stored, err := g.store.Append(ctx, id, session.NewEvent{Type: session.TypeApprovalVote,
			Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: session.ApprovalVoteKey(call, n),
			Payload: session.ApprovalVote{CallID: call, Count: n, Needed: needed, Grant: action == "grant"}})
		if err != nil {
			g.metrics.persistFailures.Inc()
			g.logFailed(time.Now())
			log.Error().Err(err).Msg("could not store an approval vote")
			return retry
		}
		g.health.appendSucceeded()
		var v session.ApprovalVote
		_ = stored[0].Decode(&v)
		if stored[0].Duplicate && stored[0].Actor.ID != user {
			// Someone else took this place a moment before: count them, and try the next.
			votes, voters = append(votes, v), append(voters, stored[0].Actor.ID)
			continue
		}
		if stored[0].Duplicate {
			voters = append(voters, user)
			continue // the same person twice at once: counted once
		}
		g.metrics.approvals.WithLabelValues("counted").Inc()
		log.Info().Int("count", n).Int("needed", needed).Msg("approval counted")
		res.outcome = "counted"
		res.text = fmt.Sprintf("Your approval is counted: %d of %d. The call runs once %s.", n, needed, more(needed-n))
		res.status = fmt.Sprintf(":ballot_box_with_check: Approved by %s (%d of %d); it runs once %s.", people(append(slices.Clone(voters), user), user), n, needed, more(needed-n))
		return res
	}
	return retry // unreachable: each pass counts one more person
}

// grantors are the people a grant names: every approver, or the one.
func grantors(approvers []string, user string) []string {
	if len(approvers) == 0 {
		return []string{user}
	}
	return approvers
}

// more says how many more different people must approve.
func more(n int) string {
	if n == 1 {
		return "one more person approves"
	}
	return fmt.Sprintf("%d more people approve", n)
}

// clickAction is what a card's button does: "approve", "grant" (approve, and allow for 30
// min in this thread) or "deny".
func clickAction(actionID string) string {
	switch actionID {
	case ActionApprove:
		return "approve"
	case ActionGrant:
		return "grant"
	}
	return "deny"
}

// notPermitted answers a click by someone LOGBOOK_TOOL_APPROVERS (or the thread default) does
// not permit: a note, nothing appended.
func (g *Gateway) notPermitted(log zerolog.Logger, req session.ApprovalRequested) clickResult {
	g.metrics.approvals.WithLabelValues("not_permitted").Inc()
	log.Info().Msg("approval click by someone not permitted to decide")
	return clickResult{outcome: "not_permitted", req: req,
		text: fmt.Sprintf("Only %s may approve or deny this request; it stays open.", whoMayDecide(g.cfg.Approvers, req))}
}

// appendDecision appends the decision on res.req's call by user (approvers: every approver,
// when the rule needed several) and, for a grant, the grant, in one append: the first decision
// wins.
func (g *Gateway) appendDecision(ctx context.Context, log zerolog.Logger, res clickResult, id session.ID, sess session.Session,
	user, decision string, approvers []string, grant bool) clickResult {
	req := res.req
	p := session.ApprovalDecided{CallID: req.CallID, Decision: decision, Via: "button"}
	if len(approvers) > 1 {
		p.Approvers = approvers
	}
	if grant {
		p.Via, p.Grant = viaGrant, newGrantID()
	}
	stored, err := g.store.Append(ctx, id, session.NewEvent{Type: session.TypeApprovalDecided,
		Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: session.ApprovalKey(req.CallID), Payload: p})
	failed := func(err error) clickResult {
		g.metrics.persistFailures.Inc()
		g.logFailed(time.Now())
		log.Error().Err(err).Msg("could not store an approval decision")
		return clickResult{outcome: "failed", req: req, text: "I could not record your decision right now; the request is still open, try again in a moment."}
	}
	if err != nil {
		return failed(err)
	}
	g.health.appendSucceeded()
	if stored[0].Duplicate {
		// Someone (or the deadline) decided first: theirs stands.
		res.outcome, res.text = "stale", "Already decided. "+decidedLine(stored[0])
		return res
	}
	if grant {
		// The grant only after its decision is stored: a decision that lost makes no grant.
		// (Should this append fail, the call is approved and no grant made: narrower, never
		// wider; the person is told.)
		if _, err := g.store.Append(ctx, id, session.NewEvent{Type: session.TypeApprovalGrant,
			Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: "approval_grant/" + req.CallID,
			Payload: session.ApprovalGrant{ID: p.Grant, Rule: req.Rule, Tool: req.Tool, Channel: sess.Key.Channel,
				ThreadTS: sess.Key.ThreadTS, CallID: req.CallID, GrantedBy: grantors(approvers, user),
				ExpiresAt: g.clock.Now().Add(GrantTTL)}}); err != nil {
			log.Error().Err(err).Msg("could not store a grant; the call is approved without it")
			res.text = "The call is approved, but I could not record the 30-minute grant: later calls will ask again."
		}
	}
	g.metrics.approvals.WithLabelValues(decision).Inc()
	log.Info().Str("decision", decision).Bool("grant", grant).Msg("approval decided")
	res.outcome, res.decided = "decided", stored[0]
	return res
}
