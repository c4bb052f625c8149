package forge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// ToolPullRequest opens a pull request on the channel's repository.
const ToolPullRequest = "create_pull_request"

// Opener is what create_pull_request needs of the forge (*GitHub).
type Opener interface {
	FindPull(ctx context.Context, repo Repo, branch string) (*Pull, error)
	CreatePull(ctx context.Context, repo Repo, branch, title, body string) (*Pull, error)
}

// Pulls is the agent's create_pull_request tool, as a turn part: offered in the turns of a
// channel whose repository is on GitHub, and the reply's footer links each pull request the
// turn opened.
type Pulls struct {
	Forge Opener
	// Repo is the channel's repository on GitHub; ok false: it has none there.
	Repo func(ctx context.Context, team, channel string) (repo Repo, ok bool, err error)
	// Follow, when set, is the followup_subscribed event recorded with a pull request whose
	// branch the thread's own sandbox pushed, so that its failed checks and reviews wake the
	// session (bot/followup).
	Follow func(pr session.PullRequest, requester string) session.NewEvent
	// Transcript is a session's transcript link for the pull request's body ("": none).
	Transcript func(id session.ID) string
	// People, when set, says who a Slack user is (bot/directory's Person: a name and the
	// profile's email, "" when Slack does not show it). The person who asked — the author of
	// the message the turn answers, from the log — is named in the pull request's body, and
	// where their email is known the agent is told to end its commits with a Co-authored-by
	// trailer for them, which the body carries too.
	People func(ctx context.Context, user string) (name, email string, err error)
}

// asker is who asked for what the turn ships.
type asker struct {
	name    string // as the log has it (the message's display name), else People's
	trailer string // "Co-authored-by: Name <email>"; "" when the email is not known
}

var forgeActor = session.Actor{Kind: session.ActorSystem, ID: "forge"}

// Offer offers the tool when the channel's repository is on GitHub; a repository that cannot
// be read is logged, and the turn goes without the tool.
func (p *Pulls) Offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	var o part.Offer
	if _, ok, err := p.Repo(ctx, s.Session.Key.Team, s.Session.Key.Channel); err != nil {
		s.Logger.Warn().Err(err).Msg("the channel's repository cannot be read: no create_pull_request this turn")
		return o, nil
	} else if !ok {
		return o, nil
	}
	who := p.asker(ctx, s)
	o.Tools = []brain.Tool{brain.NewTool(pullRequestSpec(who.trailer), func(ctx context.Context, use brain.ToolUse) brain.Outcome {
		var in struct{ Branch, Title, Body string }
		if err := use.Decode(&in); err != nil {
			return brain.Failure("%v", err)
		}
		if strings.TrimSpace(in.Branch) == "" || strings.TrimSpace(in.Title) == "" {
			return brain.Failure("branch and title are required")
		}
		res, err := p.open(ctx, s, who, use.ID, strings.TrimSpace(in.Branch), strings.TrimSpace(in.Title), in.Body)
		if err != nil {
			return brain.Failure("%s", clip.Text(err.Error(), 300))
		}
		return brain.Outcome{Content: res}
	})}
	return o, nil
}

// asker is who asked, from the log: the author of the turn's last message (its display name
// as stored), and People's name and email for the trailer.
func (p *Pulls) asker(ctx context.Context, s part.Scope) asker {
	var a asker
	if s.Requester == "" {
		return a
	}
	for _, e := range session.Select(s.Log.Snapshot(), session.Range{To: s.Through, Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Decode(&m) == nil && m.User == s.Requester && m.UserName != "" {
			a.name = m.UserName
		}
	}
	if p.People == nil {
		return a
	}
	name, email, err := p.People(ctx, s.Requester)
	if err != nil {
		s.Logger.Debug().Err(err).Msg("create_pull_request: who asked is not known beyond the log")
		return a
	}
	if a.name == "" {
		a.name = name
	}
	if n, e := trailerText(name), strings.TrimSpace(email); n != "" && validEmail(e) {
		a.trailer = "Co-authored-by: " + n + " <" + e + ">"
	}
	return a
}

// trailerText is a name as a trailer holds it: one line, no angle brackets, backticks or @,
// at most 100 characters.
func trailerText(s string) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r == '<' || r == '>' || r == '`' || r == '@' || r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)), " ")
	return clip.Text(s, 100)
}

// validEmail accepts an address a trailer can carry: one @, no spaces, brackets or quotes.
func validEmail(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && len(s) <= 254 && !strings.ContainsAny(s, " \t\r\n<>\"'`,;") &&
		!strings.Contains(domain, "@")
}

// inertName is a person's name as GitHub Markdown shows it: one line, no @mention, no markup.
func inertName(s string) string {
	s = trailerText(s)
	return strings.NewReplacer("[", "\\[", "]", "\\]", "*", "\\*", "_", "\\_").Replace(s)
}

// pullRequestSpec is create_pull_request; trailer, when known, is the Co-authored-by line
// the agent's commits end with.
func pullRequestSpec(trailer string) brain.ToolSpec {
	desc := "Open a pull request on this channel's repository from a branch already pushed to it, " +
		"against the repository's default branch. Opening it again for the same branch returns the same pull request. " +
		"The workspace is the repository's checkout: commit, then push with `git push origin HEAD:logbook/<name>` " +
		"(the sandbox may push only branches under logbook/)."
	if trailer != "" {
		desc += " End each commit message with the trailer line `" + trailer + "` (the person who asked; `git commit --trailer`)."
	}
	return brain.ToolSpec{
		Name:        ToolPullRequest,
		Description: desc,
		Schema: brain.ObjectSchema(map[string]any{
			"branch": brain.Prop("string", "the pushed branch with the changes"),
			"title":  brain.Prop("string", "the pull request's title"),
			"body":   brain.Prop("string", "what changed and why, in Markdown"),
		}, "branch", "title"),
	}
}

// open opens a pull request from branch into the channel's repository, exactly once per
// repository and branch — the log is asked first, then GitHub (an open pull request from the
// branch is the one), and only then one is created; an ambiguous failure is checked with
// GitHub before anything is said. The result is recorded (pull_request) and the reply's
// footer links it. The body links the transcript.
func (p *Pulls) open(ctx context.Context, s part.Scope, who asker, callID, branch, title, body string) (string, error) {
	repo, ok, err := p.Repo(ctx, s.Session.Key.Team, s.Session.Key.Channel)
	switch {
	case err != nil:
		return "", errors.New("the channel's repository cannot be read right now; try again later")
	case !ok:
		return "", errors.New("this channel has no repository on GitHub (LOGBOOK_REPOS, /logbook repo)")
	}
	if !ValidBranch(branch) || branch == repo.Base {
		return "", fmt.Errorf("%q cannot be the pull request's branch (it must be a pushed branch other than %s)", branch, repo.Base)
	}
	if pr, ok := pullRecorded(s.Log.Snapshot(), repo.String(), branch); ok {
		return fmt.Sprintf("pull request #%d from %s was opened in this thread already: %s", pr.Number, branch, pr.URL), nil
	}
	record := func(pull *Pull, found bool) (string, error) {
		pr := session.PullRequest{CallID: callID, Repo: repo.String(), Branch: branch, Base: repo.Base, Number: pull.Number, URL: pull.HTMLURL, Found: found}
		evs := []session.NewEvent{{Type: session.TypePullRequest, Actor: forgeActor,
			IdempotencyKey: "pull_request/" + repo.String() + "/" + branch, Payload: pr}}
		if p.Follow != nil && slices.Contains(Pushed(s.Log.Snapshot()), branch) {
			// Followed from now on, by the thread that owns the branch (its sandbox pushed it:
			// only it may push the fixes; another thread that finds the pull request does
			// not follow it). The subscription is stored with the pull request, or neither is.
			evs = append(evs, p.Follow(pr, s.Requester))
		}
		if _, err := s.Log.Append(ctx, evs...); err != nil {
			s.Logger.Error().Err(err).Str("url", pull.HTMLURL).Msg("create_pull_request: could not record the pull request")
			return "", errors.New("the pull request could not be recorded; it is " + pull.HTMLURL)
		}
		verb := "opened"
		if found {
			verb = "found, already there:"
		}
		return fmt.Sprintf("pull request #%d %s %s", pull.Number, verb, pull.HTMLURL), nil
	}
	// The model's words reach GitHub inert: no @mention, no marker, no attribution of its own.
	title, body = Outbound(title), Outbound(withoutAttribution(body))
	existing, err := p.Forge.FindPull(ctx, repo, branch)
	if err != nil {
		return "", forgeFailure(err)
	}
	if existing != nil {
		return record(existing, true)
	}
	link := ""
	if p.Transcript != nil {
		link = p.Transcript(s.Session.ID)
	}
	if link != "" || who.name != "" {
		line := "Opened by logbook from a Slack thread"
		if who.name != "" {
			line += ", asked for by " + inertName(who.name)
		}
		if link != "" {
			line += ": [transcript](" + link + ")"
		}
		body = strings.TrimRight(body, "\n") + "\n\n---\n" + line
		if who.trailer != "" {
			body += "\n\n" + who.trailer
		}
	}
	created, err := p.Forge.CreatePull(ctx, repo, branch, title, body)
	if err != nil {
		var fe *Error
		// No answer (it may have been created), or GitHub's 422 when another session opened
		// one meanwhile: GitHub says which.
		if !errors.As(err, &fe) || fe.Status == 422 {
			if again, ferr := p.Forge.FindPull(ctx, repo, branch); ferr == nil && again != nil {
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
	var fe *Error
	if errors.As(err, &fe) {
		return fmt.Errorf("GitHub refused: %s (HTTP %d)", fe.Message, fe.Status)
	}
	return errors.New("GitHub did not answer; try again later")
}

// pullRecorded finds the recorded pull request of repo and branch.
func pullRecorded(evs []session.Event, repo, branch string) (session.PullRequest, bool) {
	return session.FirstRecord(evs, session.Range{Types: []session.Type{session.TypePullRequest}}, func(pr session.PullRequest) bool {
		return pr.Repo == repo && pr.Branch == branch
	})
}

// Footer is the reply's lines linking the pull requests the turn opened (part.Footer).
func (p *Pulls) Footer(s part.Scope) []string {
	var notes []string
	for _, e := range session.Select(s.Log.Snapshot(), session.Range{From: s.Turn + 1, Types: []session.Type{session.TypePullRequest}}) {
		var pr session.PullRequest
		if e.Decode(&pr) == nil && strings.HasPrefix(pr.URL, "https://") {
			// The branch is the model's, the URL GitHub's: neither may carry Slack markup.
			notes = append(notes, fmt.Sprintf(":twisted_rightwards_arrows: %s (%s)",
				mrkdwn.Link(pr.URL, fmt.Sprintf("%s#%d", pr.Repo, pr.Number)), mrkdwn.EscapeText(pr.Branch)))
		}
	}
	return notes
}

// Pushed are the branches the egress_connection events among evs record as pushed to the
// repository (it reported them updated): the session's own.
func Pushed(evs []session.Event) []string {
	var owned []string
	for _, e := range evs {
		if e.Type != session.TypeEgressConnection {
			continue
		}
		var c session.EgressConnection
		if e.Decode(&c) == nil && c.Kind == egress.KindGit && c.Allowed {
			for _, ref := range c.Pushed {
				if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
					owned = append(owned, b)
				}
			}
		}
	}
	return owned
}
