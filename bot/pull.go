package bot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/session"
)

// Forge is what create_pull_request needs of the forge (*forge.GitHub).
type Forge interface {
	FindPull(ctx context.Context, repo forge.Repo, branch string) (*forge.Pull, error)
	CreatePull(ctx context.Context, repo forge.Repo, branch, title, body string) (*forge.Pull, error)
}

// Followup is what create_pull_request needs of pull requests followed (*followup.Follower):
// the followup_subscribed event recorded with a pull request, so that its failed checks and
// reviews wake the session (issue 32).
type Followup interface {
	Subscription(pr session.PullRequest, requester string) session.NewEvent
}

// Repos maps channels to their repository (LOGBOOK_REPOS): CHANNEL=owner/name[@base] entries,
// and *=… for every other channel.
type Repos map[string]forge.Repo

// ParseRepos reads a LOGBOOK_REPOS value.
func ParseRepos(s string) (Repos, error) {
	r := Repos{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		channel, spec, ok := strings.Cut(entry, "=")
		channel = strings.TrimSpace(channel)
		if !ok || (channel != "*" && !validChannelID(channel)) {
			return nil, fmt.Errorf("%q: want CHANNEL=owner/name[@branch] or *=owner/name[@branch]", entry)
		}
		repo, err := forge.ParseRepo(spec)
		if err != nil {
			return nil, err
		}
		r[channel] = repo
	}
	return r, nil
}

// For returns channel's repository.
func (r Repos) For(channel string) (forge.Repo, bool) {
	if repo, ok := r[channel]; ok {
		return repo, true
	}
	repo, ok := r["*"]
	return repo, ok
}

var forgeActor = session.Actor{Kind: session.ActorSystem, ID: "forge"}

// pullRequest is the brain's Turn.PullRequest: it opens a pull request from branch into the
// channel's repository, exactly once per repository and branch — the log is asked first, then
// GitHub (an open pull request from the branch is the one), and only then one is
// created; an ambiguous failure is checked with GitHub before anything is said. The result is
// recorded (pull_request) and the reply's footer links it. The body links the transcript.
func (t *turn) pullRequest(ctx context.Context, callID, branch, title, body string) (string, error) {
	r, ok, err := t.cfg.Repos.For(ctx, t.sess.Key.Team, t.sess.Key.Channel)
	switch {
	case err != nil:
		return "", errors.New("the channel's repository cannot be read right now; try again later")
	case !ok || !r.OnForge:
		return "", errors.New("this channel has no repository on GitHub (LOGBOOK_REPOS, /logbook repo)")
	}
	repo := r.Forge
	if !forge.ValidBranch(branch) || branch == repo.Base {
		return "", fmt.Errorf("%q cannot be the pull request's branch (it must be a pushed branch other than %s)", branch, repo.Base)
	}
	if pr, ok := pullRecorded(t.flog.snapshot(), repo.String(), branch); ok {
		return fmt.Sprintf("pull request #%d from %s was opened in this thread already: %s", pr.Number, branch, pr.URL), nil
	}
	record := func(p *forge.Pull, found bool) (string, error) {
		pr := session.PullRequest{CallID: callID, Repo: repo.String(), Branch: branch, Base: repo.Base, Number: p.Number, URL: p.HTMLURL, Found: found}
		evs := []session.NewEvent{{Type: session.TypePullRequest, Actor: forgeActor,
			IdempotencyKey: "pull_request/" + repo.String() + "/" + branch, Payload: pr}}
		if t.features.Followup != nil && slices.Contains(pushedIn(t.flog.snapshot()), branch) {
			// Followed from now on, by the thread that owns the branch (its sandbox pushed it:
			// only it may push the fixes; another thread that finds the pull request does
			// not follow it). The subscription is stored with the pull request, or neither is.
			evs = append(evs, t.features.Followup.Subscription(pr, t.state.lastUserMsg.User))
		}
		if _, err := t.flog.Append(ctx, evs...); err != nil {
			t.log.Error().Err(err).Str("url", p.HTMLURL).Msg("create_pull_request: could not record the pull request")
			return "", errors.New("the pull request could not be recorded; it is " + p.HTMLURL)
		}
		verb := "opened"
		if found {
			verb = "found, already there:"
		}
		return fmt.Sprintf("pull request #%d %s %s", p.Number, verb, p.HTMLURL), nil
	}
	existing, err := t.features.Forge.FindPull(ctx, repo, branch)
	if err != nil {
		return "", forgeFailure(err)
	}
	if existing != nil {
		return record(existing, true)
	}
	if link := t.cfg.Footer.PublicURL; link != "" {
		body = strings.TrimRight(body, "\n") + "\n\n---\nOpened by logbook from a Slack thread: [transcript](" + TranscriptURL(link, t.sess.ID) + ")"
	}
	created, err := t.features.Forge.CreatePull(ctx, repo, branch, title, body)
	if err != nil {
		var fe *forge.Error
		// No answer (it may have been created), or GitHub's 422 when another session opened
		// one meanwhile: GitHub says which.
		if !errors.As(err, &fe) || fe.Status == 422 {
			// No answer: it may have been created. GitHub says.
			if again, ferr := t.features.Forge.FindPull(ctx, repo, branch); ferr == nil && again != nil {
				return record(again, false)
			}
		}
		return "", forgeFailure(err)
	}
	return record(created, false)
}

// forgeFailure is what the model is told of a failed call to the forge: GitHub's own words
// (they name the branch or the commits), never the token or a URL with it.
func forgeFailure(err error) error {
	var fe *forge.Error
	if errors.As(err, &fe) {
		return fmt.Errorf("GitHub refused: %s (HTTP %d)", fe.Message, fe.Status)
	}
	return errors.New("GitHub did not answer; try again later")
}

// pullRecorded finds the recorded pull request of repo and branch.
func pullRecorded(evs []session.Event, repo, branch string) (session.PullRequest, bool) {
	return firstRecord(evs, session.Range{Types: []session.Type{session.TypePullRequest}}, func(pr session.PullRequest) bool {
		return pr.Repo == repo && pr.Branch == branch
	})
}

// pullNotes are the reply's footer lines linking the pull requests this turn opened.
func (t *turn) pullNotes() []string {
	var notes []string
	for _, e := range session.Select(t.flog.snapshot(), session.Range{From: t.state.turnSeq + 1, Types: []session.Type{session.TypePullRequest}}) {
		var pr session.PullRequest
		if e.Decode(&pr) == nil && strings.HasPrefix(pr.URL, "https://") {
			notes = append(notes, fmt.Sprintf(":twisted_rightwards_arrows: <%s|%s#%d> (%s)", pr.URL, pr.Repo, pr.Number, pr.Branch))
		}
	}
	return notes
}
