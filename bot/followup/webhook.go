package followup

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// WebhookPath is where GitHub's webhooks are received.
const WebhookPath = "/webhooks/github"

// MaxWebhookBytes bounds a delivery's body (GitHub caps payloads at 25 MB; the events followed
// here are a few KB).
const MaxWebhookBytes = 5 << 20

// lookTimeout bounds the looks one delivery prompts: GitHub gives up on an answer after 10 s.
const lookTimeout = 8 * time.Second

// DeliveryTTL is how long a delivery's id and body are remembered (migration 00095): GitHub
// redelivers deliveries of the past three days.
const DeliveryTTL = 7 * 24 * time.Hour

// Events are the webhook events followed; any other is acknowledged and ignored.
var Events = []string{"check_run", "check_suite", "status", "pull_request_review", "pull_request_review_comment", "pull_request"}

// Webhook is the handler of POST /webhooks/github: a delivery is verified with
// X-Hub-Signature-256 (HMAC-SHA256 of the body with Config.Secret, compared in constant time)
// — a delivery without a valid one is refused 401 and counted, and the refusal logged with
// its delivery id and event, never the body —, then the pull requests it names (by branch)
// that sessions follow are looked at (Look) and what is new stored. 202 says it was taken,
// 200 that it concerns nothing followed, or that its id or body was taken already (a
// redelivery, or a captured delivery sent again: no request to GitHub; migration 00095); 502
// that GitHub's API or the log failed (the claim is released: the poller, or a redelivery,
// looks again). Looks at one pull request are at most one per Config.LookGap across replicas;
// a delivery that finds one due and not yet started leaves it to that one.
func (f *Follower) Webhook() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		event, delivery := r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery")
		log := f.cfg.Log.With().Str("delivery", clipText(delivery, 80)).Str("event", clipText(event, 60)).Str("remote", r.RemoteAddr).Logger()
		body, ok := f.readBody(w, r, log)
		if !ok {
			return
		}
		if !f.verify(r.Header.Get("X-Hub-Signature-256"), body) {
			f.webhooks.WithLabelValues("bad_signature").Inc()
			log.Warn().Bool("signed", r.Header.Get("X-Hub-Signature-256") != "").Msg("github webhook: refused, X-Hub-Signature-256 does not verify")
			http.Error(w, "signature does not verify", http.StatusUnauthorized)
			return
		}
		if event == "ping" {
			f.webhooks.WithLabelValues("ignored").Inc()
			io.WriteString(w, "pong\n")
			return
		}
		if delivery == "" || len(delivery) > 100 {
			f.webhooks.WithLabelValues("ignored").Inc()
			http.Error(w, "X-GitHub-Delivery is missing or too long", http.StatusBadRequest)
			return
		}
		// Once per delivery id and once per body: X-GitHub-Delivery is not signed, so a captured
		// delivery sent again under a new id is the same body. Either costs no request to GitHub.
		hash := sha256.Sum256(body)
		fresh, err := f.store.ClaimDelivery(r.Context(), delivery, hash[:], DeliveryTTL)
		if err != nil {
			f.webhooks.WithLabelValues("failed").Inc()
			log.Error().Err(err).Msg("github webhook: could not record the delivery")
			http.Error(w, "the log cannot be written right now", http.StatusBadGateway)
			return
		}
		if !fresh {
			f.webhooks.WithLabelValues("duplicate").Inc()
			log.Info().Msg("github webhook: delivery already taken (its id or its body); nothing looked at")
			io.WriteString(w, "already delivered\n")
			return
		}
		// A delivery whose look failed is released, so that GitHub's redelivery is taken.
		release := func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
			defer cancel()
			if err := f.store.ReleaseDelivery(rctx, delivery); err != nil {
				log.Warn().Err(err).Msg("github webhook: could not release the delivery; a redelivery will be taken as seen")
			}
		}
		targets, err := parseDelivery(event, body)
		if err != nil {
			f.webhooks.WithLabelValues("ignored").Inc()
			log.Warn().Err(err).Msg("github webhook: unreadable payload")
			http.Error(w, "unreadable payload", http.StatusBadRequest)
			return
		}
		reviews := 0
		if f.cfg.Reviews != nil {
			rctx, cancel := context.WithTimeout(r.Context(), lookTimeout)
			reviews, err = f.cfg.Reviews(rctx, event, body)
			cancel()
			if err != nil {
				f.webhooks.WithLabelValues("failed").Inc()
				log.Error().Err(err).Msg("github webhook: could not start the reviews it asks for")
				release()
				http.Error(w, "the reviews could not be started; a redelivery will", http.StatusBadGateway)
				return
			}
		}
		if len(targets.branches) == 0 {
			if reviews > 0 {
				f.webhooks.WithLabelValues("accepted").Inc()
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprintf(w, "started %d reviews\n", reviews)
				return
			}
			f.webhooks.WithLabelValues("ignored").Inc()
			io.WriteString(w, "nothing to follow\n")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), lookTimeout)
		defer cancel()
		src := Source{Kind: "webhook", Delivery: clipText(delivery, 80), Event: event, Sender: clipText(targets.sender, 100)}
		looked, covered, stored, failed := f.lookAll(ctx, targets, src, log)
		if failed != nil {
			f.webhooks.WithLabelValues("failed").Inc()
			release()
			http.Error(w, failed.msg, failed.status)
			return
		}
		if looked == 0 && covered > 0 {
			f.webhooks.WithLabelValues("accepted").Inc()
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, "a look at the %d followed pull requests is due already\n", covered)
			return
		}
		if looked == 0 {
			f.webhooks.WithLabelValues("ignored").Inc()
			io.WriteString(w, "nothing to follow\n")
			return
		}
		f.webhooks.WithLabelValues("accepted").Inc()
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "looked at %d followed pull requests, stored %d events\n", looked, stored)
	})
}

// readBody reads r's body, bounded in size (MaxWebhookBytes) and time (Config.ReadTimeout: the
// server bounds a request's headers only). When it cannot, it answers (413, 408 or 400),
// counts and logs why, and returns false.
func (f *Follower) readBody(w http.ResponseWriter, r *http.Request, log zerolog.Logger) ([]byte, bool) {
	if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(f.cfg.ReadTimeout)); err != nil {
		log.Debug().Err(err).Msg("github webhook: no read deadline")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWebhookBytes))
	if err == nil {
		return body, true
	}
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		f.webhooks.WithLabelValues("too_large").Inc()
		log.Warn().Int64("limit", tooLarge.Limit).Msg("github webhook: refused, body too large")
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		f.webhooks.WithLabelValues("too_slow").Inc()
		log.Warn().Dur("limit", f.cfg.ReadTimeout).Msg("github webhook: refused, body not read in time")
		http.Error(w, "body too slow", http.StatusRequestTimeout)
	default:
		http.Error(w, "could not read the body", http.StatusBadRequest)
	}
	return nil, false
}

// lookFailure is why a delivery's looks stopped: the answer to give its sender.
type lookFailure struct {
	status int
	msg    string
}

// lookAll looks at the followed pull requests of targets' branches, at most one look per pull
// request per Config.LookGap across replicas: a look due and not yet started reads what this
// one would (covered); otherwise it waits for the next slot. It returns how many it looked at,
// how many were covered, the events stored, and why it stopped (nil: it did not).
func (f *Follower) lookAll(ctx context.Context, targets delivery, src Source, log zerolog.Logger) (looked, covered, stored int, failed *lookFailure) {
	for _, branch := range targets.branches {
		followed, err := f.store.FollowedBranch(ctx, targets.repo, branch)
		if err != nil {
			log.Error().Err(err).Msg("github webhook: could not read the log")
			return looked, covered, stored, &lookFailure{http.StatusBadGateway, "the log cannot be read right now"}
		}
		for _, fl := range followed {
			wait, due, err := f.store.ClaimLook(ctx, fl.Repo, fl.Number, f.cfg.LookGap)
			if err != nil {
				log.Error().Err(err).Msg("github webhook: could not claim a look")
				return looked, covered, stored, &lookFailure{http.StatusBadGateway, "the log cannot be written right now"}
			}
			if !due {
				covered++
				continue
			}
			if wait > 0 {
				select {
				case <-ctx.Done():
					return looked, covered, stored, &lookFailure{http.StatusServiceUnavailable, "timed out waiting to look; the poller or a redelivery will"}
				case <-f.cfg.After(wait):
				}
			}
			evs, err := f.Look(ctx, fl, src)
			if err != nil {
				log.Error().Err(err).Str("session_id", fl.Session.String()).Msg("github webhook: look failed")
				return looked, covered, stored, &lookFailure{http.StatusBadGateway, "the pull request could not be looked at; the poller or a redelivery will"}
			}
			looked++
			stored += len(evs)
		}
	}
	return looked, covered, stored, nil
}

// verify checks X-Hub-Signature-256 ("sha256=" and the hex HMAC of body), in constant time.
// Without a secret nothing verifies.
func (f *Follower) verify(header string, body []byte) bool {
	if f.cfg.Secret == "" {
		return false
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(f.cfg.Secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// delivery is what a delivery names: the repository, the branches it concerns, its sender.
type delivery struct {
	repo     string
	branches []string
	sender   string
}

// parseDelivery reads the repository, branches and sender of a followed event. Events, and
// actions, that cannot change what a followed pull request asks for name no branch: a check
// not completed, a pending status, a pull request event other than closed.
func parseDelivery(event string, body []byte) (delivery, error) {
	type pullRef struct {
		Head struct {
			Ref string `json:"ref"`
		} `json:"head"`
	}
	var p struct {
		Action     string `json:"action"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
		Sender struct {
			Login string `json:"login"`
		} `json:"sender"`
		CheckRun struct {
			Status       string    `json:"status"`
			PullRequests []pullRef `json:"pull_requests"`
			CheckSuite   struct {
				HeadBranch string `json:"head_branch"`
			} `json:"check_suite"`
		} `json:"check_run"`
		CheckSuite struct {
			Status       string    `json:"status"`
			HeadBranch   string    `json:"head_branch"`
			PullRequests []pullRef `json:"pull_requests"`
		} `json:"check_suite"`
		State    string `json:"state"`
		Branches []struct {
			Name string `json:"name"`
		} `json:"branches"`
		PullRequest pullRef `json:"pull_request"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return delivery{}, err
	}
	d := delivery{repo: p.Repository.FullName, sender: p.Sender.Login}
	add := func(b string) {
		if b != "" && !slices.Contains(d.branches, b) {
			d.branches = append(d.branches, b)
		}
	}
	switch event {
	case "check_run":
		if p.Action == "completed" || p.CheckRun.Status == "completed" {
			add(p.CheckRun.CheckSuite.HeadBranch)
			for _, pr := range p.CheckRun.PullRequests {
				add(pr.Head.Ref)
			}
		}
	case "check_suite":
		if p.Action == "completed" {
			add(p.CheckSuite.HeadBranch)
			for _, pr := range p.CheckSuite.PullRequests {
				add(pr.Head.Ref)
			}
		}
	case "status":
		if p.State != "pending" {
			for _, b := range p.Branches {
				add(b.Name)
			}
		}
	case "pull_request_review", "pull_request_review_comment":
		if p.Action != "deleted" && p.Action != "dismissed" {
			add(p.PullRequest.Head.Ref)
		}
	case "pull_request":
		if p.Action == "closed" {
			add(p.PullRequest.Head.Ref)
		}
	}
	if d.repo == "" {
		d.branches = nil
	}
	return d, nil
}
