package followup

import (
	"context"
	"time"
)

// Poll looks at every followed pull request every Config.Poll, for installations GitHub's
// webhooks cannot reach, until ctx ends (it returns nil then). The looks of one round are
// spread evenly over the interval, one at a time, so each pull request is looked at once per
// interval and the rate is bounded by it: a look costs four requests to GitHub's API, and
// up to two more when it finds new reviews or failed checks with annotations.
// A failed look is logged and tried again next round. With Config.Poll 0 it returns at once.
func (f *Follower) Poll(ctx context.Context) error {
	if f.cfg.Poll <= 0 {
		return nil
	}
	src := Source{Kind: "poll"}
	for {
		started := time.Now()
		all, err := f.store.FollowedAll(ctx)
		if err != nil && ctx.Err() == nil {
			f.cfg.Log.Warn().Err(err).Msg("followup poll: could not list the followed pull requests")
		}
		gap := f.cfg.Poll
		if len(all) > 0 {
			gap = f.cfg.Poll / time.Duration(len(all))
		}
		for i, fl := range all {
			if i > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-f.cfg.After(gap):
				}
			}
			lctx, cancel := context.WithTimeout(ctx, max(gap, lookTimeout))
			if _, err := f.Look(lctx, fl, src); err != nil && ctx.Err() == nil {
				f.cfg.Log.Warn().Err(err).Str("session_id", fl.Session.String()).Msg("followup poll: look failed; trying again next round")
			}
			cancel()
		}
		wait := gap
		if len(all) == 0 {
			wait = f.cfg.Poll - time.Since(started)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-f.cfg.After(max(wait, 0)):
		}
	}
}
