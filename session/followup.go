package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FollowupSubscribed records that the session follows a pull request it opened (type
// followup_subscribed, appended with its pull_request): its signals wake the session until the
// pull request is merged or closed (followup_ended). Requester is the Slack user whose turn
// opened it: who should look when the attempts are used up. Max is LOGBOOK_FOLLOWUP_MAX as it
// was when the session subscribed.
type FollowupSubscribed struct {
	Repo      string `json:"repo"` // owner/name
	Number    int    `json:"number"`
	Branch    string `json:"branch"`
	URL       string `json:"url"`
	Requester string `json:"requester,omitempty"`
	Max       int    `json:"max"`
}

// Kinds of a followup_signal.
const (
	SignalCheckFailed = "check_failed" // a check run or commit status on the head failed
	SignalReview      = "review"       // a review (with its comments) asks for changes
	SignalSuccess     = "success"      // every check and status on the head passed
	SignalExhausted   = "exhausted"    // a failure came after the last attempt: the thread is told who should look
)

// FollowupSignal is one signal about a followed pull request (type followup_signal), stored
// once under a stable key (the check run and its conclusion, the status's context and state on
// its commit, the review's id, the head's success), whichever replica, delivery or poll saw it
// first. It is work for the session, as a user_message is (migration 00090). Attempt is the
// attempt it is part of (check_failed, review: 1..Max; 0 otherwise): each wake is one, the
// failures one look stored together. Its actor is system:followup. Source is "webhook" (Delivery: X-GitHub-Delivery, Event:
// X-GitHub-Event) or "poll". Every text here came from GitHub: untrusted.
type FollowupSignal struct {
	Repo     string `json:"repo"`
	Number   int    `json:"number"`
	Branch   string `json:"branch"`
	Kind     string `json:"kind"`
	HeadSHA  string `json:"head_sha"`
	Attempt  int    `json:"attempt,omitempty"`
	Max      int    `json:"max,omitempty"`
	Source   string `json:"source"`
	Delivery string `json:"delivery,omitempty"`
	Event    string `json:"event,omitempty"`
	// Sender is the webhook delivery's sender login: who prompted the look, not who said
	// what was found (the event's actor is system:followup; a review's author is the review's).
	Sender string          `json:"sender,omitempty"`
	Checks []FollowupCheck `json:"checks,omitempty"`
	Review *FollowupReview `json:"review,omitempty"`
	// Look names who should look once the attempts are used up (exhausted): Slack user ids.
	Look []string `json:"look,omitempty"`
}

// FollowupCheck is a failed check run (ID > 0) or commit status: its name (a status's
// context), conclusion (a status's state), link, and what it said — its output's title and
// summary, the tail of its text, its annotations.
type FollowupCheck struct {
	ID          int64                `json:"id,omitempty"`
	Name        string               `json:"name"`
	Conclusion  string               `json:"conclusion"`
	URL         string               `json:"url,omitempty"`
	Title       string               `json:"title,omitempty"`
	Summary     string               `json:"summary,omitempty"`
	Tail        string               `json:"tail,omitempty"`
	Annotations []FollowupAnnotation `json:"annotations,omitempty"`
}

// FollowupAnnotation is one annotation of a check run: a file, a line, what it says.
type FollowupAnnotation struct {
	Path    string `json:"path"`
	Line    int    `json:"line,omitempty"`
	Level   string `json:"level,omitempty"`
	Message string `json:"message"`
}

// FollowupReview is a review and its comments, with file and line.
type FollowupReview struct {
	ID       int64             `json:"id"`
	Author   string            `json:"author"`
	State    string            `json:"state"`
	Body     string            `json:"body,omitempty"`
	URL      string            `json:"url,omitempty"`
	Comments []FollowupComment `json:"comments,omitempty"`
}

// FollowupComment is one review comment.
type FollowupComment struct {
	ID     int64  `json:"id"`
	Author string `json:"author"`
	Path   string `json:"path"`
	Line   int    `json:"line,omitempty"`
	Body   string `json:"body"`
}

// FollowupEnded records that the session no longer follows the pull request (type
// followup_ended): Reason "merged" or "closed".
type FollowupEnded struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Reason string `json:"reason"`
	Sender string `json:"sender,omitempty"` // the webhook delivery's sender, if one prompted the look
}

// Followed is a pull request a session follows: the session and its subscription.
type Followed struct {
	Session ID
	FollowupSubscribed
}

const sqlFollowedBranch = `
SELECT e.session_id, e.payload FROM events e
WHERE e.type = 'followup_subscribed' AND e.payload->>'repo' = $1 AND e.payload->>'branch' = $2
  AND NOT EXISTS (SELECT 1 FROM events x WHERE x.type = 'followup_ended' AND x.session_id = e.session_id
                  AND x.payload->>'repo' = e.payload->>'repo' AND x.payload->>'number' = e.payload->>'number')
ORDER BY e.position`

// FollowedBranch returns the followed pull requests (not ended) of repo (owner/name) from
// branch: those a webhook about the branch concerns.
func (s *Store) FollowedBranch(ctx context.Context, repo, branch string) ([]Followed, error) {
	return s.followed(ctx, "list the sessions following "+repo+" "+branch, sqlFollowedBranch, repo, branch)
}

const sqlFollowedAll = `
SELECT e.session_id, e.payload FROM events e
WHERE e.type = 'followup_subscribed'
  AND NOT EXISTS (SELECT 1 FROM events x WHERE x.type = 'followup_ended' AND x.session_id = e.session_id
                  AND x.payload->>'repo' = e.payload->>'repo' AND x.payload->>'number' = e.payload->>'number')
ORDER BY e.position`

// FollowedAll returns every followed pull request not ended, oldest subscription first: what
// the poller looks at.
func (s *Store) FollowedAll(ctx context.Context) ([]Followed, error) {
	return s.followed(ctx, "list the followed pull requests", sqlFollowedAll)
}

func (s *Store) followed(ctx context.Context, what, sql string, args ...any) ([]Followed, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Followed, error) {
		var f Followed
		var payload []byte
		if err := row.Scan(&f.Session, &payload); err != nil {
			return f, err
		}
		if payload == nil { // purged by retention: nothing left to follow
			return f, nil
		}
		return f, json.Unmarshal(payload, &f.FollowupSubscribed)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	kept := out[:0]
	for _, f := range out {
		if f.Number > 0 {
			kept = append(kept, f)
		}
	}
	return kept, nil
}

const sqlPruneDeliveries = `DELETE FROM github_deliveries WHERE expires_at < clock_timestamp()`

const sqlClaimDelivery = `
INSERT INTO github_deliveries (delivery_id, body_sha256, expires_at)
VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
ON CONFLICT DO NOTHING`

// ClaimDelivery claims GitHub webhook delivery id, whose body has SHA-256 bodyHash, for ttl
// (migration 00095): true the first time; false when the id or the body was claimed already
// and has not expired — a redelivery, or a captured delivery sent again under a new id.
// Expired claims are deleted first.
func (s *Store) ClaimDelivery(ctx context.Context, id string, bodyHash []byte, ttl time.Duration) (bool, error) {
	if _, err := s.pool.Exec(ctx, sqlPruneDeliveries); err != nil {
		return false, fmt.Errorf("prune the webhook deliveries: %w", err)
	}
	tag, err := s.pool.Exec(ctx, sqlClaimDelivery, id, bodyHash, ttl.Seconds())
	if err != nil {
		return false, fmt.Errorf("claim webhook delivery %q: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

const sqlReleaseDelivery = `DELETE FROM github_deliveries WHERE delivery_id = $1`

// ReleaseDelivery gives up the claim on delivery id (its look failed): GitHub's redelivery is
// taken again.
func (s *Store) ReleaseDelivery(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, sqlReleaseDelivery, id); err != nil {
		return fmt.Errorf("release webhook delivery %q: %w", id, err)
	}
	return nil
}

const sqlClaimLook = `
INSERT INTO followup_looks AS l (repo, number, look_at) VALUES ($1, $2, clock_timestamp())
ON CONFLICT (repo, number) DO UPDATE
    SET look_at = greatest(clock_timestamp(), l.look_at + make_interval(secs => $3))
    WHERE l.look_at < clock_timestamp()
RETURNING greatest(extract(epoch FROM l.look_at - clock_timestamp()), 0)::float8`

// ClaimLook claims a look at pull request number of repo (owner/name), at most one per gap
// across replicas, by the database's clock (migration 00095): due false when a look not yet
// started is already due — it will read what this caller would have, so none is needed —;
// otherwise the look is the caller's, to start after wait (0, or what is left of the gap
// since the last look started).
func (s *Store) ClaimLook(ctx context.Context, repo string, number int, gap time.Duration) (wait time.Duration, due bool, err error) {
	var secs float64
	switch err := s.pool.QueryRow(ctx, sqlClaimLook, repo, number, gap.Seconds()).Scan(&secs); {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("claim a look at %s#%d: %w", repo, number, err)
	}
	return time.Duration(secs * float64(time.Second)), true, nil
}

// PullRef names a pull request: its repository (owner/name) and number.
type PullRef struct {
	Repo   string
	Number int
}

const sqlClaimPoll = `
INSERT INTO followup_polls AS p (repo, number, poller, due_at) VALUES ($1, $2, $3, $5)
ON CONFLICT (repo, number) DO UPDATE SET poller = $3, due_at = $5
    WHERE p.due_at <= $4 AND (p.poller = $3 OR p.due_at <= $4 - make_interval(secs => $6))
RETURNING true`

// ClaimPoll claims the poller's look at pull request number of repo (owner/name), the time
// now, and makes the next one due at next (migration 00190): true when the look is poller's
// to make — the pull request has no poller yet, or its look is due and poller polls it, or its
// look is overdue by takeover (its poller died or stalled: poller takes it over). Exactly one
// caller across replicas gets true for each due look.
func (s *Store) ClaimPoll(ctx context.Context, repo string, number int, poller string, now, next time.Time, takeover time.Duration) (bool, error) {
	var ok bool
	switch err := s.pool.QueryRow(ctx, sqlClaimPoll, repo, number, poller, now.UTC(), next.UTC(), takeover.Seconds()).Scan(&ok); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim the poll of %s#%d: %w", repo, number, err)
	}
	return true, nil
}

const sqlNextPoll = `
SELECT min(CASE WHEN p.repo IS NULL THEN $4
                WHEN p.poller = $3 THEN p.due_at
                ELSE p.due_at + make_interval(secs => $5) END)
FROM unnest($1::text[], $2::int[]) AS f(repo, number)
LEFT JOIN followup_polls p ON p.repo = f.repo AND p.number = f.number`

// NextPoll is when poller may next claim a look at one of pulls (ClaimPoll's rules), the time
// now: now for a pull request without a poller, its due time for poller's own, its due time
// and takeover for another's. With no pulls it is the zero time.
func (s *Store) NextPoll(ctx context.Context, poller string, now time.Time, takeover time.Duration, pulls []PullRef) (time.Time, error) {
	repos, numbers := make([]string, len(pulls)), make([]int32, len(pulls))
	for i, p := range pulls {
		repos[i], numbers[i] = p.Repo, int32(p.Number)
	}
	var next *time.Time
	if err := s.pool.QueryRow(ctx, sqlNextPoll, repos, numbers, poller, now.UTC(), takeover.Seconds()).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("read when the next poll is due: %w", err)
	}
	if next == nil {
		return time.Time{}, nil
	}
	return *next, nil
}

const sqlPrunePolls = `DELETE FROM followup_polls WHERE due_at < $1`

// PrunePolls deletes the polls due before before: pull requests no longer followed.
func (s *Store) PrunePolls(ctx context.Context, before time.Time) error {
	if _, err := s.pool.Exec(ctx, sqlPrunePolls, before.UTC()); err != nil {
		return fmt.Errorf("prune the polls: %w", err)
	}
	return nil
}

// githubPause is github_pauses' row for GitHub's REST API (one token per installation).
const githubPause = "github"

const sqlPauseGitHub = `
INSERT INTO github_pauses AS g (name, until, reason) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET until = $2, reason = $3 WHERE g.until < $2
RETURNING true`

// PauseGitHub pauses the polling of GitHub, on every replica, until until, for reason
// (migration 00190): true when this lengthened the pause (the caller says so, once), false
// when it already lasted as long.
func (s *Store) PauseGitHub(ctx context.Context, until time.Time, reason string) (bool, error) {
	var ok bool
	switch err := s.pool.QueryRow(ctx, sqlPauseGitHub, githubPause, until.UTC(), reason).Scan(&ok); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pause the polling of GitHub: %w", err)
	}
	return true, nil
}

const sqlGitHubPause = `SELECT until FROM github_pauses WHERE name = $1`

// GitHubPausedUntil is until when the polling of GitHub is paused (PauseGitHub; the zero time
// when it never was).
func (s *Store) GitHubPausedUntil(ctx context.Context) (time.Time, error) {
	var until time.Time
	switch err := s.pool.QueryRow(ctx, sqlGitHubPause, githubPause).Scan(&until); {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("read the pause of GitHub's polling: %w", err)
	}
	return until, nil
}
