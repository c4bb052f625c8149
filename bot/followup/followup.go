// Package followup follows the pull requests a session opened (issue 32): when a check run or
// commit status on the head fails, or a review asks for changes, the session wakes with it as
// a new input; when every check passes, the thread is told once; a merge or close ends it.
//
// How a signal is stored once and wakes the session once, on any replica: the create_pull_request
// turn appends followup_subscribed with its pull_request (Subscription). A Look at a followed
// pull request — prompted by a webhook (Webhook: POST /webhooks/github, signed with
// X-Hub-Signature-256) or by the poller (Poll) — reads the pull request's state from GitHub's
// REST API (its head, the head's check runs and combined status, its reviews and review
// comments, a failed check's annotations) and appends a followup_signal for each thing not
// already in the session's log, under a stable idempotency key (check name and conclusion on
// the head, status context and state on its commit, review id, the head's success), with the
// actor system:followup. Another replica's look or the poller's next one find the keys stored
// and add nothing; a delivery GitHub sends again — or anyone replays, under a new id — is not
// looked at (its id and body are claimed, migration 00095), and a pull request is looked at
// at most once per Config.LookGap for its deliveries. A followup_signal is work for its session as a user_message is (migration 00090):
// the pending poll of any replica finds it, one cell takes it up under the session's lease,
// and Look's NOTIFY only makes that immediate.
//
// Bounded: Config.Max attempts per pull request, counted in the log: an attempt is a wake —
// the failures one look found new, stored together (a head's checks failing at once are one
// attempt; a check failing later on the same head, or a review, is another). A failed check is
// keyed by head and name, so its re-run on the same head is the same attempt and wakes
// nothing. Reviews are followed only from the repository's people (OWNER, MEMBER,
// COLLABORATOR) unless Config.Reviewers allows others. A failure after the last attempt is
// stored once as an "exhausted" signal, which the thread
// answers (without the model) by saying so and naming who should look; nothing after it wakes
// the session for a failure again. A success is said once after each failure (and once at
// first).
//
// Everything a signal holds came from GitHub and is untrusted: Prompt frames it for the model
// as data, never as the thread's instructions, and Answer's canned replies name checks and
// people only through mrkdwn escaping, so nothing in them can mention anyone.
package followup

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/session"
)

// Forge is what a look needs of GitHub (*forge.GitHub).
type Forge interface {
	PullState(ctx context.Context, repo forge.Repo, number int) (*forge.PullState, error)
	CheckRuns(ctx context.Context, repo forge.Repo, ref string) ([]forge.CheckRun, error)
	Annotations(ctx context.Context, repo forge.Repo, id int64) ([]forge.Annotation, error)
	Status(ctx context.Context, repo forge.Repo, ref string) (*forge.CombinedStatus, error)
	Reviews(ctx context.Context, repo forge.Repo, number int) ([]forge.Review, error)
	ReviewComments(ctx context.Context, repo forge.Repo, number int) ([]forge.ReviewComment, error)
	Login(ctx context.Context) (string, error)
	// Rate is what GitHub's latest answer said of the token's rate limit.
	Rate() forge.Rate
}

// Store is what a look needs of the log (*session.Store).
type Store interface {
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	FollowedBranch(ctx context.Context, repo, branch string) ([]session.Followed, error)
	FollowedAll(ctx context.Context) ([]session.Followed, error)
	Notify(ctx context.Context, id session.ID, sender string) error
	ClaimDelivery(ctx context.Context, id string, bodyHash []byte, ttl time.Duration) (bool, error)
	ReleaseDelivery(ctx context.Context, id string) error
	ClaimLook(ctx context.Context, repo string, number int, gap time.Duration) (wait time.Duration, due bool, err error)
	// The poller's (poll.go): the database's clock, the claims of looks, GitHub's pause.
	Now(ctx context.Context) (time.Time, error)
	ClaimPoll(ctx context.Context, repo string, number int, poller string, now, next time.Time, takeover time.Duration) (bool, error)
	NextPoll(ctx context.Context, poller string, now time.Time, takeover time.Duration, pulls []session.PullRef) (time.Time, error)
	PrunePolls(ctx context.Context, before time.Time) error
	PauseGitHub(ctx context.Context, until time.Time, reason string) (bool, error)
	GitHubPausedUntil(ctx context.Context) (time.Time, error)
}

// DefaultMax is LOGBOOK_FOLLOWUP_MAX's default: attempts per pull request.
const DefaultMax = 3

// DefaultLookGap is Config.LookGap's default.
const DefaultLookGap = 2 * time.Second

// DefaultReadTimeout is Config.ReadTimeout's default.
const DefaultReadTimeout = 10 * time.Second

// Config configures a Follower.
type Config struct {
	// Max is the attempts per pull request (LOGBOOK_FOLLOWUP_MAX; 0: DefaultMax).
	Max int
	// Secret verifies webhooks (LOGBOOK_GITHUB_WEBHOOK_SECRET; "": the endpoint refuses every
	// delivery).
	Secret string
	// Bots are the bot accounts (GitHub type "Bot", or logbook's own) whose reviews are
	// followed anyway (LOGBOOK_FOLLOWUP_BOTS; "*": every bot). By default none are.
	Bots []string
	// Reviewers are whose reviews, besides the repository's people, are followed
	// (LOGBOOK_FOLLOWUP_REVIEWERS): nil or ["members"] only authors GitHub associates with the
	// repository as OWNER, MEMBER or COLLABORATOR; ["all"] anyone's; otherwise those logins as
	// well. Anything else, on a public repository a stranger's, is never followed: it would be
	// instructions to push, from anyone.
	Reviewers []string
	// Poll is the time between two looks at one followed pull request by the pollers of all
	// replicas (0: no polling).
	Poll time.Duration
	// Owner names this replica's poller among the replicas' ("": a random name).
	Owner string
	// ReadTimeout bounds reading a webhook delivery's body (0: DefaultReadTimeout): a client
	// that sends it slowly does not hold a connection.
	ReadTimeout time.Duration
	// LookGap is the least time between two looks a webhook prompts at one pull request,
	// across replicas (0: DefaultLookGap).
	LookGap time.Duration
	// After times the poller and a webhook's wait for its look (nil: time.After); Now is the
	// time (nil: time.Now).
	After func(time.Duration) <-chan time.Time
	Now   func() time.Time
	Log   zerolog.Logger
	// Registerer gets the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Reviews, when set, is given every verified, first-seen delivery's event and body before
	// the followed pull requests are looked at, and starts the reviews it asks for
	// (bot/review): how many it started. An error fails the delivery (released, 502), so that
	// GitHub's redelivery starts them; starting one twice asks once.
	Reviews func(ctx context.Context, event string, body []byte) (int, error)
}

// Follower looks at followed pull requests and stores their signals.
type Follower struct {
	store Store
	forge Forge
	cfg   Config

	loginMu    sync.Mutex
	login      string
	loginKnown bool      // asked and answered (a login, or GitHub's refusal: an installation token)
	loginNext  time.Time // when a failed ask may be made again

	webhooks *prometheus.CounterVec
	signals  *prometheus.CounterVec
}

// New returns a Follower over store and forge.
func New(store Store, fg Forge, cfg Config) *Follower {
	cfg.Max = cmp.Or(cfg.Max, DefaultMax)
	cfg.LookGap = cmp.Or(cfg.LookGap, DefaultLookGap)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, DefaultReadTimeout)
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Owner == "" {
		var b [8]byte
		rand.Read(b[:])
		cfg.Owner = "poller-" + hex.EncodeToString(b[:])
	}
	f := &Follower{store: store, forge: fg, cfg: cfg,
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "github_webhooks_total",
			Help: "GitHub webhook deliveries, by outcome (accepted, ignored, duplicate, bad_signature, too_large, too_slow, failed)."}, []string{"outcome"}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "logbook", Name: "followup_signals_total",
			Help: "Signals about followed pull requests stored (each once), by kind and source."}, []string{"kind", "source"}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(f.webhooks, f.signals)
	}
	return f
}

// Max is the attempts per pull request.
func (f *Follower) Max() int { return f.cfg.Max }

// Subscription is the followup_subscribed event that goes with the pull_request pr a turn
// recorded; requester is the Slack user whose turn opened it.
func (f *Follower) Subscription(pr session.PullRequest, requester string) session.NewEvent {
	return session.NewEvent{Type: session.TypeFollowupSubscribed, Actor: pollActor,
		IdempotencyKey: "followup_subscribed/" + pr.Repo + "#" + strconv.Itoa(pr.Number),
		Payload: session.FollowupSubscribed{Repo: pr.Repo, Number: pr.Number, Branch: pr.Branch, URL: pr.URL,
			Requester: requester, Max: f.cfg.Max}}
}

// Source says what prompted a look: a webhook delivery (its id, event and sender) or the poller.
type Source struct {
	Kind     string // "webhook" or "poll"
	Delivery string
	Event    string
	Sender   string // the delivery's sender login
}

// pollActor is the actor of everything a look stores, whatever prompted it: what is stored
// was read from GitHub's API by logbook, not said by the delivery's sender (who is a payload
// field, Sender, as a review's author is the review's).
var pollActor = session.Actor{Kind: session.ActorSystem, ID: "followup"}

func (s Source) actor() session.Actor { return pollActor }

// failedConclusions are the check run conclusions that ask for a fix.
var failedConclusions = map[string]bool{"failure": true, "timed_out": true, "action_required": true, "startup_failure": true}

// passedConclusions are those that pass.
var passedConclusions = map[string]bool{"success": true, "neutral": true, "skipped": true}

// Bounds on what a signal carries.
const (
	tailBytes       = 4 << 10
	maxAnnotations  = 20
	maxComments     = 30
	textBytes       = 2 << 10
	commentBytes    = 2 << 10
	maxChecksSignal = 20
)

// Look looks at followed pull request fl now, as src prompted, and stores what is new: its
// end (merged or closed: followup_ended), failed checks and reviews asking for changes (or,
// past the last attempt, one exhausted signal), a success. It returns the events it appended
// (not those already stored) and NOTIFYs the session when some are work.
func (f *Follower) Look(ctx context.Context, fl session.Followed, src Source) ([]session.Event, error) {
	repo, err := forge.ParseRepo(fl.Repo)
	if err != nil {
		return nil, fmt.Errorf("look at %s#%d: %w", fl.Repo, fl.Number, err)
	}
	pr, err := f.forge.PullState(ctx, repo, fl.Number)
	if err != nil {
		return nil, fmt.Errorf("look at %s#%d: %w", fl.Repo, fl.Number, err)
	}
	if pr.State == "closed" {
		reason := "closed"
		if pr.Merged {
			reason = "merged"
		}
		return f.append(ctx, fl, src, []session.NewEvent{{Type: session.TypeFollowupEnded, Actor: src.actor(),
			IdempotencyKey: "followup_ended/" + fl.Repo + "#" + strconv.Itoa(fl.Number),
			Payload:        session.FollowupEnded{Repo: fl.Repo, Number: fl.Number, Reason: reason, Sender: src.Sender}}})
	}
	head := pr.Head.SHA
	past, err := f.store.Events(ctx, fl.Session, session.Range{Types: []session.Type{session.TypeFollowupSignal, session.TypeFollowupEnded}})
	if err != nil {
		return nil, fmt.Errorf("look at %s#%d: read the session's signals: %w", fl.Repo, fl.Number, err)
	}
	h := readHistory(past, fl)
	if h.ended {
		return nil, nil
	}
	// The bound is the one the session subscribed under (LOGBOOK_FOLLOWUP_MAX then), whatever
	// this replica's setting.
	limit := cmp.Or(fl.Max, f.cfg.Max)
	base := session.FollowupSignal{Repo: fl.Repo, Number: fl.Number, Branch: fl.Branch, HeadSHA: head, Max: limit,
		Source: src.Kind, Delivery: src.Delivery, Event: src.Event, Sender: src.Sender}

	failures, green, err := f.checkFailures(ctx, repo, fl, head, h)
	if err != nil {
		return nil, err
	}
	reviews, err := f.reviewFailures(ctx, repo, fl, h)
	if err != nil {
		return nil, err
	}
	failures = append(failures, reviews...)
	return f.append(ctx, fl, src, signals(fl, h, base, limit, src, failures, green))
}

// failure is one new thing a look found to act on: a failed check (or commit status), or a
// review asking for changes, under the key that stores it once.
type failure struct {
	key    string
	check  session.FollowupCheck
	review *session.FollowupReview
}

// checkFailures reads head's check runs and commit statuses and returns the failures h has
// not stored yet, and whether every check has completed and passed (green).
func (f *Follower) checkFailures(ctx context.Context, repo forge.Repo, fl session.Followed, head string, h history) ([]failure, bool, error) {
	runs, err := f.forge.CheckRuns(ctx, repo, head)
	if err != nil {
		return nil, false, fmt.Errorf("look at %s#%d: check runs: %w", fl.Repo, fl.Number, err)
	}
	status, err := f.forge.Status(ctx, repo, head)
	if err != nil {
		return nil, false, fmt.Errorf("look at %s#%d: statuses: %w", fl.Repo, fl.Number, err)
	}
	var failures []failure
	green, complete := len(runs)+len(status.Statuses) > 0, true
	for _, run := range runs {
		if run.HeadSHA != "" && run.HeadSHA != head {
			continue
		}
		if run.Status != "completed" {
			complete = false
			continue
		}
		if !passedConclusions[run.Conclusion] {
			green = false
		}
		if !failedConclusions[run.Conclusion] {
			continue
		}
		// By head and name, not by run: a re-run of the check on the same head, failing again,
		// is the same attempt and wakes nothing.
		key := "check/" + head + "/" + run.Name + "/" + run.Conclusion
		if h.keys[key] || h.keys["check_run/"+strconv.FormatInt(run.ID, 10)+"/"+run.Conclusion] {
			continue
		}
		c := session.FollowupCheck{ID: run.ID, Name: run.Name, Conclusion: run.Conclusion, URL: cmp.Or(run.HTMLURL, run.DetailsURL),
			Title: clipText(run.Output.Title, 300), Summary: clipText(run.Output.Summary, textBytes), Tail: tail(run.Output.Text, tailBytes)}
		if run.Output.AnnotationsCount > 0 {
			if c.Annotations, err = f.annotations(ctx, repo, run.ID); err != nil {
				return nil, false, fmt.Errorf("look at %s#%d: annotations of check run %d: %w", fl.Repo, fl.Number, run.ID, err)
			}
		}
		failures = append(failures, failure{key: key, check: c})
	}
	for _, st := range status.Statuses {
		switch st.State {
		case "success":
		case "pending":
			complete = false
		default: // failure, error
			green = false
			key := "status/" + head + "/" + st.Context + "/" + st.State
			if !h.keys[key] {
				failures = append(failures, failure{key: key, check: session.FollowupCheck{Name: st.Context, Conclusion: st.State,
					URL: st.TargetURL, Summary: clipText(st.Description, textBytes)}})
			}
		}
	}
	return failures, green && complete && (status.State == "success" || status.TotalCount == 0), nil
}

// annotations are check run id's first maxAnnotations annotations.
func (f *Follower) annotations(ctx context.Context, repo forge.Repo, id int64) ([]session.FollowupAnnotation, error) {
	anns, err := f.forge.Annotations(ctx, repo, id)
	if err != nil {
		return nil, err
	}
	var out []session.FollowupAnnotation
	for _, a := range anns[:min(len(anns), maxAnnotations)] {
		out = append(out, session.FollowupAnnotation{Path: a.Path, Line: a.StartLine, Level: a.AnnotationLevel,
			Message: clipText(strings.TrimSpace(a.Title+"\n"+a.Message), 500)})
	}
	return out, nil
}

// reviewFailures returns the reviews (with their comments) of followed authors that ask for
// changes or comment, and that h has not stored yet.
func (f *Follower) reviewFailures(ctx context.Context, repo forge.Repo, fl session.Followed, h history) ([]failure, error) {
	reviews, err := f.forge.Reviews(ctx, repo, fl.Number)
	if err != nil {
		return nil, fmt.Errorf("look at %s#%d: reviews: %w", fl.Repo, fl.Number, err)
	}
	var failures []failure
	var comments []forge.ReviewComment
	commentsRead := false
	for _, rv := range reviews {
		key := "review/" + strconv.FormatInt(rv.ID, 10)
		if h.keys[key] || !f.followed(ctx, rv.User, rv.AuthorAssociation) || (rv.State != "CHANGES_REQUESTED" && rv.State != "COMMENTED") {
			continue
		}
		if !commentsRead {
			if comments, err = f.forge.ReviewComments(ctx, repo, fl.Number); err != nil {
				return nil, fmt.Errorf("look at %s#%d: review comments: %w", fl.Repo, fl.Number, err)
			}
			commentsRead = true
		}
		r := &session.FollowupReview{ID: rv.ID, Author: rv.User.Login, State: rv.State, Body: clipText(rv.Body, textBytes), URL: rv.HTMLURL}
		for _, c := range comments {
			if c.ReviewID != rv.ID || !f.followed(ctx, c.User, c.AuthorAssociation) || len(r.Comments) == maxComments {
				continue
			}
			r.Comments = append(r.Comments, session.FollowupComment{ID: c.ID, Author: c.User.Login, Path: c.Path,
				Line: cmp.Or(c.Line, c.OrigLine), Body: clipText(c.Body, commentBytes)})
		}
		if rv.State == "COMMENTED" && len(r.Comments) == 0 && strings.TrimSpace(rv.Body) == "" {
			continue // a reply with nothing to act on
		}
		failures = append(failures, failure{key: key, review: r})
	}
	return failures, nil
}

// signals are the followup_signal events for what a look found: the failures as one attempt
// (or, past the limit, one exhausted signal; nothing once exhausted), else a success when the
// head is green and one is due.
func signals(fl session.Followed, h history, base session.FollowupSignal, limit int, src Source, failures []failure, green bool) []session.NewEvent {
	keyPrefix := "followup_signal/" + fl.Repo + "#" + strconv.Itoa(fl.Number) + "/"
	signal := func(key string, sig session.FollowupSignal) session.NewEvent {
		return session.NewEvent{Type: session.TypeFollowupSignal, Actor: src.actor(), IdempotencyKey: keyPrefix + key, Payload: sig}
	}
	switch {
	case len(failures) > 0 && h.exhausted:
		// The thread was told who should look: failures no longer wake it.
		return nil
	case len(failures) > 0 && h.attempts+1 > limit:
		sig := base
		sig.Kind, sig.Attempt, sig.Look = session.SignalExhausted, 0, nonEmpty(fl.Requester)
		for _, fa := range failures {
			if fa.review == nil {
				sig.Checks = append(sig.Checks, session.FollowupCheck{Name: fa.check.Name, Conclusion: fa.check.Conclusion, URL: fa.check.URL})
			}
		}
		return []session.NewEvent{signal("exhausted", sig)}
	case len(failures) > 0:
		// Every wake is an attempt: the failures one look finds new are stored together and
		// wake the session once, whatever head or review they are about.
		var evs []session.NewEvent
		for _, fa := range failures[:min(len(failures), maxChecksSignal)] {
			sig := base
			sig.Attempt = h.attempts + 1
			if fa.review != nil {
				sig.Kind, sig.Review = session.SignalReview, fa.review
			} else {
				sig.Kind, sig.Checks = session.SignalCheckFailed, []session.FollowupCheck{fa.check}
			}
			evs = append(evs, signal(fa.key, sig))
		}
		return evs
	case green && h.successDue():
		sig := base
		sig.Kind = session.SignalSuccess
		return []session.NewEvent{signal("success/"+base.HeadSHA, sig)}
	}
	return nil
}

// append appends evs to fl's session and NOTIFYs it when some are new work.
func (f *Follower) append(ctx context.Context, fl session.Followed, src Source, evs []session.NewEvent) ([]session.Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	stored, err := f.store.Append(ctx, fl.Session, evs...)
	if err != nil {
		return nil, fmt.Errorf("store the signals of %s#%d: %w", fl.Repo, fl.Number, err)
	}
	var fresh []session.Event
	work := false
	for _, e := range stored {
		if e.Duplicate {
			continue
		}
		fresh = append(fresh, e)
		kind := "ended"
		if e.Type == session.TypeFollowupSignal {
			work = true
			var s session.FollowupSignal
			_ = e.Decode(&s)
			kind = s.Kind
		}
		f.signals.WithLabelValues(kind, src.Kind).Inc()
		f.cfg.Log.Info().Str("session_id", fl.Session.String()).Str("pull", fl.Repo+"#"+strconv.Itoa(fl.Number)).
			Str("type", string(e.Type)).Str("kind", kind).Str("source", src.Kind).Str("delivery", src.Delivery).Int64("seq", e.Seq).
			Msg("followup: stored")
	}
	if work {
		if err := f.store.Notify(ctx, fl.Session, "followup"); err != nil {
			// The pending poll finds the session all the same.
			f.cfg.Log.Warn().Err(err).Str("session_id", fl.Session.String()).Msg("followup: notify")
		}
	}
	return fresh, nil
}

// memberAssociations are the author_associations of people who may push to or administer the
// repository.
var memberAssociations = []string{"OWNER", "MEMBER", "COLLABORATOR"}

// followed reports whether a review or comment by u (author_association assoc) is followed: a
// bot's or logbook's own account's only when Config.Bots names it; a person's when GitHub
// associates them with the repository as OWNER, MEMBER or COLLABORATOR, or Config.Reviewers
// allows them.
func (f *Follower) followed(ctx context.Context, u forge.User, assoc string) bool {
	if slices.Contains(f.cfg.Bots, "*") || slices.ContainsFunc(f.cfg.Bots, func(b string) bool { return strings.EqualFold(b, u.Login) }) {
		return true
	}
	if u.IsBot() || strings.HasSuffix(u.Login, "[bot]") {
		return false
	}
	if !slices.Contains(memberAssociations, strings.ToUpper(assoc)) && !slices.Contains(f.cfg.Reviewers, "all") &&
		!slices.ContainsFunc(f.cfg.Reviewers, func(r string) bool { return strings.EqualFold(r, u.Login) }) {
		return false
	}
	login := f.ownLogin(ctx)
	return login == "" || !strings.EqualFold(login, u.Login)
}

// loginRetry is how long a failed ask for logbook's own login waits before it is asked again.
const loginRetry = time.Minute

// Login is the login of logbook's GitHub account, as ownLogin learns it ("" when GitHub
// will not say): bot/review tells its own reviews and comments apart by it.
func (f *Follower) Login(ctx context.Context) string { return f.ownLogin(ctx) }

// ownLogin is the login of logbook's GitHub account ("" when GitHub will not say: an
// installation token). An answer is kept; a failure to ask (the network, a timeout) is
// tried again after loginRetry, not taken as the answer.
func (f *Follower) ownLogin(ctx context.Context) string {
	f.loginMu.Lock()
	defer f.loginMu.Unlock()
	if f.loginKnown || f.cfg.Now().Before(f.loginNext) {
		return f.login
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	login, err := f.forge.Login(lctx)
	var fe *forge.Error
	switch {
	case err == nil, errors.As(err, &fe):
		f.login, f.loginKnown = login, true
	default:
		f.loginNext = f.cfg.Now().Add(loginRetry)
		f.cfg.Log.Warn().Err(err).Dur("retry_in", loginRetry).
			Msg("followup: could not learn logbook's GitHub login; its own reviews are told apart by bot type only until it is")
	}
	return f.login
}

// history is what a session's log says of one followed pull request.
type history struct {
	keys        map[string]bool // signals stored, by the key after the pull request's
	attempts    int             // the newest attempt stored (each a wake)
	exhausted   bool
	ended       bool
	lastFailure int64 // seq of the newest failure (check_failed, review, exhausted)
	lastSuccess int64 // seq of the newest success
}

func readHistory(evs []session.Event, fl session.Followed) history {
	h := history{keys: map[string]bool{}}
	prefix := "followup_signal/" + fl.Repo + "#" + strconv.Itoa(fl.Number) + "/"
	for _, e := range evs {
		if e.Type == session.TypeFollowupEnded {
			var p session.FollowupEnded
			if e.Decode(&p) == nil && p.Repo == fl.Repo && p.Number == fl.Number {
				h.ended = true
			}
			continue
		}
		key, ok := strings.CutPrefix(e.IdempotencyKey, prefix)
		if !ok {
			continue
		}
		h.keys[key] = true
		var s session.FollowupSignal
		if e.Decode(&s) != nil {
			continue
		}
		switch s.Kind {
		case session.SignalCheckFailed, session.SignalReview:
			h.attempts = max(h.attempts, s.Attempt)
			h.lastFailure = e.Seq
		case session.SignalExhausted:
			h.exhausted, h.lastFailure = true, e.Seq
		case session.SignalSuccess:
			h.lastSuccess = e.Seq
		}
	}
	return h
}

// successDue reports whether a success is to be said: never said yet, or a failure came after
// the last one said.
func (h history) successDue() bool { return h.lastSuccess == 0 || h.lastFailure > h.lastSuccess }

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// clipText cuts s to n bytes at a rune boundary, saying so.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + " […]"
}

// tail is the last n bytes of s, at a line boundary when one is near.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8Start(s[start]) {
		start++
	}
	t := s[start:]
	if i := strings.IndexByte(t, '\n'); i >= 0 && i < 200 {
		t = t[i+1:]
	}
	return "[…]\n" + t
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
