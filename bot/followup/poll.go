package followup

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/session"
)

// Polling across replicas (issue 48). Every replica runs Poll; each followed pull request has
// one poller among them (session.ClaimPoll, migration 00190): the replica that claims its
// first look, and that claims each next one once it is due. Another replica claims a look only
// once it is overdue by half the interval — its poller died or stalled — and polls the pull
// request from then on. Each pull request's looks fall on a fixed phase of the interval (by a
// hash of repo#number), so the looks at many pull requests are spread over it and every
// replica agrees on when each is due.
//
// A look's requests are conditional (forge.GitHub keeps each answer's ETag): what did not
// change is answered 304 Not Modified, free against the token's rate limit, and the poller
// keeping a pull request is what keeps those ETags useful.
//
// GitHub's rate limit pauses the polling of every replica (session.PauseGitHub): a refusal
// for it (forge.RateLimitError: the primary limit used up, until x-ratelimit-reset, or a
// secondary one, for its retry-after) or an answer saying that no more than RateReserve of
// the limit remains (until x-ratelimit-reset). The replica that stores a pause logs it, once.

// RateReserve is the share of the token's rate limit (a tenth) the poller leaves to
// create_pull_request and to webhooks' looks: once no more than that remains, polling pauses
// until the limit's reset.
const RateReserve = 10

// minPollWait is the least a poller waits between two passes.
const minPollWait = time.Second

// Poll looks at every followed pull request every Config.Poll, for installations GitHub's
// webhooks cannot reach, until ctx ends (it returns nil then): the looks this replica claims
// (as above), each pull request's once per interval across the fleet. A look costs four
// requests to GitHub's API, and up to two more when it finds new reviews or failed checks
// with annotations; those answered 304 cost the rate limit nothing. A failed look is logged
// and tried again at the next due time. With Config.Poll 0 it returns at once.
func (f *Follower) Poll(ctx context.Context) error {
	if f.cfg.Poll <= 0 {
		return nil
	}
	for {
		wait := f.pollPass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-f.cfg.After(max(wait, minPollWait)):
		}
	}
}

// takeover is how overdue another poller's look is before this replica takes it.
func (f *Follower) takeover() time.Duration { return f.cfg.Poll / 2 }

// pollPass claims and makes the looks due for this replica, and returns how long to wait
// before the next pass.
func (f *Follower) pollPass(ctx context.Context) time.Duration {
	now, err := f.store.Now(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.cfg.Log.Warn().Err(err).Msg("followup poll: could not read the database's clock")
		}
		return f.cfg.Poll
	}
	if until, err := f.store.GitHubPausedUntil(ctx); err != nil {
		if ctx.Err() == nil {
			f.cfg.Log.Warn().Err(err).Msg("followup poll: could not read whether GitHub's polling is paused")
		}
		return f.cfg.Poll
	} else if until.After(now) {
		return until.Sub(now)
	}
	all, err := f.store.FollowedAll(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.cfg.Log.Warn().Err(err).Msg("followup poll: could not list the followed pull requests")
		}
		return f.cfg.Poll
	}
	src := Source{Kind: "poll"}
	pulls := make([]session.PullRef, 0, len(all))
	for _, fl := range all {
		pulls = append(pulls, session.PullRef{Repo: fl.Repo, Number: fl.Number})
		ok, err := f.store.ClaimPoll(ctx, fl.Repo, fl.Number, f.cfg.Owner, now, f.nextDue(fl, now), f.takeover())
		if err != nil {
			if ctx.Err() == nil {
				f.cfg.Log.Warn().Err(err).Str("session_id", fl.Session.String()).Msg("followup poll: could not claim a look")
			}
			continue
		}
		if !ok {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, max(f.cfg.Poll/2, lookTimeout))
		_, err = f.Look(lctx, fl, src)
		cancel()
		if until, paused := f.backOff(ctx, err, now); paused {
			return until.Sub(now)
		}
		if err != nil && ctx.Err() == nil {
			f.cfg.Log.Warn().Err(err).Str("session_id", fl.Session.String()).Msg("followup poll: look failed; trying again when the next is due")
		}
	}
	if err := f.store.PrunePolls(ctx, now.Add(-24*time.Hour)); err != nil && ctx.Err() == nil {
		f.cfg.Log.Warn().Err(err).Msg("followup poll: could not prune the polls of pull requests no longer followed")
	}
	if len(pulls) == 0 {
		return f.cfg.Poll
	}
	next, err := f.store.NextPoll(ctx, f.cfg.Owner, now, f.takeover(), pulls)
	if err != nil {
		if ctx.Err() == nil {
			f.cfg.Log.Warn().Err(err).Msg("followup poll: could not read when the next look is due")
		}
		return f.cfg.Poll
	}
	return min(next.Sub(now), f.cfg.Poll)
}

// nextDue is when the look after one claimed at now is due: the first time, at least half an
// interval on, on fl's phase of the interval.
func (f *Follower) nextDue(fl session.Followed, now time.Time) time.Time {
	h := fnv.New64a()
	h.Write([]byte(fl.Repo + "#" + strconv.Itoa(fl.Number)))
	phase := time.Duration(h.Sum64() % uint64(f.cfg.Poll))
	base := now.Add(f.cfg.Poll / 2)
	due := base.Truncate(f.cfg.Poll).Add(phase)
	if due.Before(base) {
		due = due.Add(f.cfg.Poll)
	}
	return due
}

// backOff pauses the fleet's polling, the time now, when err is GitHub's refusal for a rate
// limit or GitHub's latest answer left no more than RateReserve of the limit: it returns until
// when, and true. The pause is logged by the replica that stored it.
func (f *Follower) backOff(ctx context.Context, err error, now time.Time) (time.Time, bool) {
	var until time.Time
	var reason string
	var rl *forge.RateLimitError
	rate := f.forge.Rate()
	switch {
	case errors.As(err, &rl):
		until, reason = rl.Until(now), rl.Error()
	case rate.Known() && rate.Reset.After(now) && rate.Remaining*100 <= rate.Limit*RateReserve:
		until = rate.Reset
		reason = fmt.Sprintf("GitHub's rate limit: %d of %d requests remain until %s", rate.Remaining, rate.Limit, rate.Reset.UTC().Format(time.RFC3339))
	default:
		return time.Time{}, false
	}
	longer, perr := f.store.PauseGitHub(ctx, until, reason)
	switch {
	case perr != nil:
		if ctx.Err() == nil {
			f.cfg.Log.Warn().Err(perr).Time("until", until).Msg("followup poll: could not store the pause for GitHub's rate limit; this replica pauses alone")
		}
	case longer:
		f.cfg.Log.Warn().Str("reason", reason).Time("until", until).Dur("for", until.Sub(now)).
			Msg("followup poll: paused on every replica for GitHub's rate limit")
	}
	return until, true
}
