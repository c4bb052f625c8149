// Package fork branches a logbook thread at one of its events (issue 50): a new top-level
// post in the same channel links the parent at that point, and its thread's session begins
// with a chained session_forked event naming the parent, the seq and the hash of the parent's
// event there. The fork's model history is the parent's conversation through that seq, then
// its own (the cell reads the parent's log: nothing is copied); its sandbox starts from the
// newest work the parent saved at or before that seq. The parent is untouched and told
// nothing.
//
// Two ways in: `logbook fork` (cmd/logbook) and the message shortcut "Branch from here"
// (callback_id branch_from_here; Surface), on any message of a logbook thread.
package fork

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
)

// Kind is the fork's top-level post's metadata event_type, and the kind of its opening record.
const Kind = "logbook_fork"

// Store is what a fork reads of the log (session.Store).
type Store interface {
	Session(ctx context.Context, id session.ID) (session.Session, error)
	SessionByThread(ctx context.Context, key session.ThreadKey) (session.Session, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	ForkReference(ctx context.Context, parent session.ID, seq int64) (session.SessionForked, error)
}

// Starter posts a top-level message and opens its session (bot.Starter).
type Starter interface {
	Start(ctx context.Context, o bot.Opening) (bot.Started, error)
}

// Forker starts forks.
type Forker struct {
	Store   Store
	Starter Starter
	// Link returns a link to a message of a channel (chat.getPermalink), "" when it cannot;
	// nil: the post names the parent's thread without a link.
	Link func(ctx context.Context, channel, ts string) string
}

// Request is one fork to start.
type Request struct {
	Parent session.Session
	Seq    int64
	// By is who branched: a person (the shortcut) or the system (`logbook fork`).
	By session.Actor
	// At is the Slack ts of the message it was branched from ("" from the command line).
	At string
	// Key names this fork among the openings (a retry of it reuses the post); "" a new one.
	Key string
}

// Plan is what a fork is, before (Fork's dry run) or after it is started.
type Plan struct {
	Ref  session.SessionForked
	Text string // the top-level post
}

// Forked is a fork started.
type Forked struct {
	Plan
	Started bot.Started
}

// ErrNotThread is a request to fork a channel's ledger, or a session that is no thread.
var ErrNotThread = errors.New("not a thread")

// Plan checks r and returns the reference and the post Fork would make: the parent's event at
// r.Seq must exist. Errors: session.ErrNotFound (no such event), session.ErrInvalidEvent (a
// seq below 1, a channel's ledger).
func (f *Forker) Plan(ctx context.Context, r Request) (Plan, error) {
	ref, err := f.Store.ForkReference(ctx, r.Parent.ID, r.Seq)
	if err != nil {
		return Plan{}, err
	}
	ref.At = r.At
	if r.By.Kind == session.ActorUser {
		ref.By = r.By.ID
	}
	return Plan{Ref: ref, Text: f.text(ctx, r, ref)}, nil
}

// Fork posts the fork's opening in the parent's channel and opens its session with the
// session_forked event first. Errors: Plan's, and bot.Starter's (a private channel is
// bot.ErrPrivateChannel; nothing is posted then).
func (f *Forker) Fork(ctx context.Context, r Request) (Forked, error) {
	p, err := f.Plan(ctx, r)
	if err != nil {
		return Forked{}, err
	}
	key := r.Key
	if key == "" {
		key = uuid.NewString()
	}
	st, err := f.Starter.Start(ctx, bot.Opening{
		Team: r.Parent.Key.Team, Channel: r.Parent.Key.Channel, Text: p.Text, Actor: r.By,
		Kind: Kind, Key: r.Parent.ID.String() + "/" + strconv.FormatInt(r.Seq, 10) + "/" + key,
		First: &session.NewEvent{Type: session.TypeSessionForked, Actor: r.By, Payload: p.Ref, IdempotencyKey: p.Ref.Key()},
	})
	if err != nil {
		return Forked{Plan: p, Started: st}, fmt.Errorf("fork session %s at %d: %w", r.Parent.ID, r.Seq, err)
	}
	return Forked{Plan: p, Started: st}, nil
}

// text is the fork's top-level post: where it branched from (a link to the message, or to the
// parent's thread), at which event, by whom.
func (f *Forker) text(ctx context.Context, r Request, ref session.SessionForked) string {
	link := ""
	if f.Link != nil {
		link = f.Link(ctx, ref.ParentChannel, cmpOr(r.At, ref.ParentThreadTS))
	}
	where := "a logbook thread (" + mrkdwn.EscapeText(ref.ParentThreadTS) + ")"
	if link != "" {
		where = "<" + link + "|this message of a logbook thread>"
	}
	by := ""
	if r.By.Kind == session.ActorUser {
		by = " by <@" + r.By.ID + ">"
	}
	return fmt.Sprintf(":twisted_rightwards_arrows: Branched%s from %s at event %d. This thread goes on from the "+
		"conversation up to there; write here to try another way. The original thread is unchanged.", by, where, ref.Seq)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Permalinker asks Slack for a message's link (a *slack.Client: chat.getPermalink).
type Permalinker interface {
	GetPermalinkContext(ctx context.Context, params *slack.PermalinkParameters) (string, error)
}

// SlackLink is a Forker.Link over chat.getPermalink: "" when Slack does not answer.
func SlackLink(api Permalinker) func(ctx context.Context, channel, ts string) string {
	return func(ctx context.Context, channel, ts string) string {
		link, err := api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: channel, Ts: ts})
		if err != nil {
			return ""
		}
		return link
	}
}
