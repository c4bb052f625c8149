package bot

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/slacktext"
	"github.com/logbook/logbook/session/thread"
)

// Scoped grants (issue 52): an approver may answer a card with "Allow for 30 min in this
// thread" (ActionGrant). The decision then also makes a grant (an approval_grant event, in the
// same append as the decision), scoped to the rule that matched (its canonical text), the
// call's tool and the thread (the session), until GrantTTL after the click. A later call of
// that tool that the same rule matches in the same thread before then runs without a card:
// its approval_decided (via grant_applied, by the system) names the grant. A grant is never
// wider: another tool, another rule (a policy changed since), another thread, or after its
// expiry or its revocation (approval_grant_revoked, /logbook grants revoke), a card again.
// Under approvers:N a grant needs N approvers who all chose it; otherwise the call is approved
// and no grant made.

// ActionGrant is the card's "Allow for 30 min in this thread" button.
const ActionGrant = "logbook_grant"

// GrantTTL is how long a grant lasts.
const GrantTTL = 30 * time.Minute

// grantAttempts is how many times a grant's decision is tried again when the thread's head
// moved between reading the grant and appending (see turn.granted).
const grantAttempts = 3

// Vias of approval_decided for grants.
const (
	viaGrant        = "grant"         // every approver chose "Allow for 30 min": the decision made a grant
	ViaGrantApplied = "grant_applied" // no card: a live grant allowed the call
)

// people names the approvers of a decision: approvers when it lists them, else actor.
func people(approvers []string, actor string) string {
	if len(approvers) == 0 {
		approvers = []string{actor}
	}
	names := make([]string, 0, len(approvers))
	for _, u := range approvers {
		if slacktext.IsUserID(u) {
			names = append(names, "<@"+u+">")
		}
	}
	switch len(names) {
	case 0:
		return "someone"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// newGrantID is a grant's id: short enough to type in /logbook grants revoke.
func newGrantID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return "g" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// Grant is a grant as the log has it.
type Grant struct {
	session.ApprovalGrant
	Session   session.ID
	By        string    // who made it: the approver whose click completed it
	At        time.Time // when
	Revoked   bool
	RevokedBy string
}

// Grants folds approval_grant and approval_grant_revoked events (of one session or many, in
// log order) into the grants they make, oldest first.
func Grants(evs []session.Event) []Grant {
	var out []Grant
	at := map[string]int{}
	for _, e := range evs {
		switch e.Type {
		case session.TypeApprovalGrant:
			var p session.ApprovalGrant
			if e.Decode(&p) != nil || p.ID == "" {
				continue
			}
			if _, dup := at[p.ID]; dup {
				continue
			}
			at[p.ID] = len(out)
			out = append(out, Grant{ApprovalGrant: p, Session: e.SessionID, By: e.Actor.ID, At: e.CreatedAt})
		case session.TypeApprovalGrantRevoked:
			var p session.ApprovalGrantRevoked
			if e.Decode(&p) != nil {
				continue
			}
			if i, ok := at[p.ID]; ok && !out[i].Revoked {
				out[i].Revoked, out[i].RevokedBy = true, e.Actor.ID
			}
		}
	}
	return out
}

// Live reports whether g allows calls at now.
func (g Grant) Live(now time.Time) bool { return !g.Revoked && now.Before(g.ExpiresAt) }

// liveGrant finds a grant of the session's log (evs) that covers a call of tool under rule at
// now; the one that lasts longest.
func liveGrant(evs []session.Event, rule, tool string, now time.Time) (Grant, bool) {
	var best Grant
	found := false
	for _, g := range Grants(evs) {
		if g.Live(now) && g.Rule == rule && g.Tool == tool && (!found || g.ExpiresAt.After(best.ExpiresAt)) {
			best, found = g, true
		}
	}
	return best, found
}

// requesters are the people whose messages this turn has taken up so far: every author of a
// user message after what the turn before it covered — the messages that started it, and
// those steered or queued into it since. not_requester keeps each of them from approving.
func (t *turn) requesters() []string {
	evs := t.flog.snapshot()
	var from int64
	for _, tr := range thread.FoldTurns(evs).List {
		if tr.Seq < t.state.turnSeq {
			from = max(from, tr.Covered())
		}
	}
	var out []string
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Seq <= from || e.Decode(&m) != nil || !slacktext.IsUserID(m.User) || slices.Contains(out, m.User) {
			continue
		}
		out = append(out, m.User)
	}
	return out
}

// granted answers a call that a live grant of the thread covers: its decision appended (by the
// system, naming the grant) and the call allowed, with no card. ok false: no grant covers it
// (or the call already has a request: a card was asked for, and it decides).
func (t *turn) granted(ctx context.Context, use brain.ToolUse, rule Rule) (brain.Decision, bool, error) {
	if rule.Text == "" {
		return brain.Decision{}, false, nil
	}
	folded := thread.FoldTurns(t.flog.snapshot())
	if _, p, ok := folded.Decision(use.ID); ok && p.Via == ViaGrantApplied {
		return brain.Decision{Allow: true, Asked: true}, true, nil // decided by a grant before a crash
	}
	if _, ok := folded.Approval(use.ID); ok {
		return brain.Decision{}, false, nil
	}
	// A revocation may be appended by any replica at any moment: the decision is appended only
	// at the head the grant was read at, so a revocation in between makes it read again.
	var stored []session.Event
	var g Grant
	for attempt := 0; ; attempt++ {
		if err := t.flog.sync(ctx); err != nil {
			return brain.Decision{}, false, err
		}
		head := t.flog.head()
		var ok bool
		g, ok = liveGrant(t.flog.snapshot(), rule.Text, use.Name, t.clock.Now())
		if !ok {
			return brain.Decision{}, false, nil
		}
		if rule.NotRequester && slices.ContainsFunc(t.requesters(), func(u string) bool { return slices.Contains(g.GrantedBy, u) }) {
			// The grantor asked for this call: under not_requester their own grant cannot approve
			// it — a card asks someone else.
			return brain.Decision{}, false, nil
		}
		var err error
		stored, err = t.flog.AppendAt(ctx, head, session.NewEvent{Type: session.TypeApprovalDecided, Actor: approvalActor,
			IdempotencyKey: session.ApprovalKey(use.ID),
			Payload: session.ApprovalDecided{CallID: use.ID, Decision: session.DecisionApproved, Via: ViaGrantApplied,
				Grant: g.ID, Approvers: g.GrantedBy}})
		if errors.Is(err, session.ErrConflict) && attempt < grantAttempts {
			continue // the thread moved on meanwhile: read it again
		}
		if errors.Is(err, session.ErrConflict) {
			return brain.Decision{}, false, nil // a busy thread: a card asks a person instead
		}
		if err != nil {
			return brain.Decision{}, false, err
		}
		break
	}
	if p := thread.Decided(stored[0]); p.Decision != session.DecisionApproved || p.Via != ViaGrantApplied {
		// Something else decided the call first (a stop): that decision stands.
		return decisionFor(stored[0], p, session.ApprovalRequested{Tool: use.Name}), true, nil
	}
	t.metrics.approvals.WithLabelValues("granted").Inc()
	t.log.Info().Str("tool", use.Name).Str("call_id", use.ID).Str("grant", g.ID).Msg("tool call allowed by a grant")
	return brain.Decision{Allow: true, Asked: true}, true, nil
}
