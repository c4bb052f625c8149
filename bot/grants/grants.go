// Package grants is /logbook grants: the live scoped grants of a channel's threads ("Allow for
// 30 min in this thread" on an approval card, bot.ActionGrant), and their revocation. A
// revocation is an approval_grant_revoked event in the grant's session, with who revoked it;
// the engine reads the session's log again before it lets a grant allow a call, so a revoked
// grant allows nothing more, on any replica.
package grants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

// Store is what the command needs of session.Store.
type Store interface {
	GrantEvents(ctx context.Context, channel string, since time.Time) ([]session.Event, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
}

// Usage is the command's line in /logbook help.
const Usage = "`/logbook grants` lists this channel's live approval grants (\"Allow for 30 min in this thread\"); `/logbook grants revoke <id>` revokes one (its grantor or an admin)."

// Command is /logbook grants. admins (LOGBOOK_ADMINS) may revoke any grant, a grantor their
// own; now is the clock grants expire on.
func Command(store Store, admins []string, now func() time.Time, log zerolog.Logger) slashcmd.Command {
	return slashcmd.Command{Name: "grants", Who: slashcmd.Home, Usage: Usage,
		Refusal: "Only people of this workspace's organisation may see or revoke approval grants.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			return Run(ctx, store, admins, now(), log, c.ChannelID, c.UserID, c.Args)
		}}
}

// Run answers /logbook grants [revoke <id>] typed by user in channel at now.
func Run(ctx context.Context, store Store, admins []string, now time.Time, log zerolog.Logger, channel, user, args string) string {
	if store == nil {
		return "Approval grants are not kept by this deployment."
	}
	f := strings.Fields(args)
	if len(f) > 0 && f[0] != "revoke" || len(f) == 1 || len(f) > 2 {
		return "Usage: `/logbook grants` lists this channel's live grants; `/logbook grants revoke <id>` revokes one."
	}
	// A grant lasts bot.GrantTTL: older ones are all expired (the margin covers clocks).
	evs, err := store.GrantEvents(ctx, channel, now.Add(-bot.GrantTTL-5*time.Minute))
	if err != nil {
		log.Warn().Err(err).Str("channel", channel).Msg("/logbook grants: read the grants")
		return "I could not read this channel's grants right now; try again in a moment."
	}
	all := bot.Grants(evs)
	if len(f) == 0 {
		return list(all, now)
	}
	return revoke(ctx, store, admins, now, log, all, user, f[1])
}

func list(all []bot.Grant, now time.Time) string {
	var lines []string
	for _, g := range all {
		if g.Live(now) {
			lines = append(lines, "• "+describe(g))
		}
	}
	if len(lines) == 0 {
		return "No live approval grants in this channel. An approver makes one with *Allow for 30 min in this thread* on an approval card."
	}
	return "Live approval grants in this channel (`/logbook grants revoke <id>` revokes one):\n" + strings.Join(lines, "\n")
}

// describe is a grant's line: its id, tool, rule, thread, who gave it and until when. What
// came from the log is shown as inert code.
func describe(g bot.Grant) string {
	by := make([]string, 0, len(g.GrantedBy))
	for _, u := range g.GrantedBy {
		by = append(by, "<@"+u+">")
	}
	return fmt.Sprintf("`%s`: `%s` calls under the rule `%s` in the thread `%s`, granted by %s, until %s",
		code(g.ID), code(g.Tool), code(g.Rule), code(g.ThreadTS), strings.Join(by, " and "),
		fmt.Sprintf("<!date^%d^{time}|%s>", g.ExpiresAt.Unix(), g.ExpiresAt.UTC().Format("15:04 UTC")))
}

func code(s string) string { return mrkdwn.EscapeText(strings.ReplaceAll(s, "`", "'")) }

func revoke(ctx context.Context, store Store, admins []string, now time.Time, log zerolog.Logger, all []bot.Grant, user, id string) string {
	i := slices.IndexFunc(all, func(g bot.Grant) bool { return g.ID == id })
	if i < 0 {
		return fmt.Sprintf("There is no live grant `%s` in this channel (`/logbook grants` lists them).", code(id))
	}
	g := all[i]
	switch {
	case g.Revoked:
		return fmt.Sprintf("Grant `%s` is already revoked (by <@%s>).", code(g.ID), g.RevokedBy)
	case !g.Live(now):
		return fmt.Sprintf("Grant `%s` has already expired.", code(g.ID))
	case !slices.Contains(g.GrantedBy, user) && !slices.Contains(admins, user):
		return fmt.Sprintf("Only who granted it (%s) or logbook's admins (LOGBOOK_ADMINS) may revoke grant `%s`.", people(g.GrantedBy), code(g.ID))
	}
	if _, err := store.Append(ctx, g.Session, session.NewEvent{Type: session.TypeApprovalGrantRevoked,
		Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: "approval_grant_revoked/" + g.ID,
		Payload: session.ApprovalGrantRevoked{ID: g.ID}}); err != nil {
		log.Error().Err(err).Str("grant", g.ID).Msg("/logbook grants revoke: append the revocation")
		return fmt.Sprintf("I could not revoke grant `%s` right now; it still holds. Try again in a moment.", code(g.ID))
	}
	log.Info().Str("grant", g.ID).Str("user", user).Msg("approval grant revoked")
	return fmt.Sprintf("Revoked grant `%s`: later `%s` calls in that thread ask for approval again.", code(g.ID), code(g.Tool))
}

func people(ids []string) string {
	out := make([]string, len(ids))
	for i, u := range ids {
		out[i] = "<@" + u + ">"
	}
	return strings.Join(out, ", ")
}
