package main

import (
	"context"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/review"
	"github.com/logbook/logbook/session"
)

// buildReview builds what starts reviews (issue 52): /logbook review, and the webhooks of
// pull requests in channels that opted in (review_on). None without GitHub (no follower).
func (w *wiring) buildReview(store *session.Store) {
	if w.follow == nil || w.starter == nil {
		return
	}
	w.review = &review.Trigger{Store: store, Starter: w.starter, Repo: w.repos.OnForge, Login: w.follow.Login, Team: w.me.TeamID,
		Signal: func(id session.ID) {
			if signal := w.signal.Load(); signal != nil {
				(*signal)(id)
			}
		}}
}

// reviewWebhook starts the reviews a GitHub delivery asks for (followup.Config.Reviews).
func (w *wiring) reviewWebhook(ctx context.Context, event string, body []byte) (int, error) {
	if w.review == nil {
		return 0, nil
	}
	return w.review.Webhook(ctx, event, body)
}

// reviewPart is the review's turn part: review_finding and submit_review in a review's turns.
func (w *wiring) reviewPart() part.Part {
	p := &review.Part{Forge: forge.NewGitHub(w.cfg.GitHubAPI, w.cfg.GitHubToken.Reveal(), nil), Repo: w.repos.OnForge, Transcript: w.transcriptURL}
	if w.follow != nil {
		p.Login = w.follow.Login
	}
	return p
}
