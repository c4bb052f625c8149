package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// What a followed pull request is made of, as GitHub's REST API answers it (issue 32): the
// pull request, its head's check runs and commit statuses, its reviews and review comments, a
// check run's annotations. Check runs, reviews and review comments are read page after page
// (100 a page, bounded); the rest is one page.

// User is a GitHub account: Type "Bot" for an app's or another bot's.
type User struct {
	Login string `json:"login"`
	Type  string `json:"type"`
}

// IsBot reports an account GitHub marks as a bot (an app's "name[bot]").
func (u User) IsBot() bool { return u.Type == "Bot" }

// PullState is a pull request as GET /repos/{o}/{r}/pulls/{n} answers it.
type PullState struct {
	Number  int    `json:"number"`
	State   string `json:"state"` // open, closed
	Merged  bool   `json:"merged"`
	HTMLURL string `json:"html_url"`
	// User is who opened it.
	User User `json:"user"`
	Head struct {
		Ref  string   `json:"ref"`
		SHA  string   `json:"sha"`
		Repo RepoName `json:"repo"`
	} `json:"head"`
	Base struct {
		Ref  string   `json:"ref"`
		Repo RepoName `json:"repo"`
	} `json:"base"`
}

// RepoName is a repository as a pull request's head or base names it ("owner/name"; empty
// when the fork was deleted).
type RepoName struct {
	FullName string `json:"full_name"`
}

// FromFork reports whether the pull request's head is in another repository than its base
// (a fork, or a deleted one).
func (p *PullState) FromFork() bool {
	return !strings.EqualFold(p.Head.Repo.FullName, p.Base.Repo.FullName) || p.Head.Repo.FullName == ""
}

// CheckRun is one check run of a commit.
type CheckRun struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	HeadSHA    string `json:"head_sha"`
	Status     string `json:"status"`     // queued, in_progress, completed
	Conclusion string `json:"conclusion"` // success, failure, neutral, cancelled, skipped, timed_out, action_required, stale
	HTMLURL    string `json:"html_url"`
	DetailsURL string `json:"details_url"`
	Output     struct {
		Title            string `json:"title"`
		Summary          string `json:"summary"`
		Text             string `json:"text"`
		AnnotationsCount int    `json:"annotations_count"`
	} `json:"output"`
}

// Annotation is one annotation of a check run.
type Annotation struct {
	Path            string `json:"path"`
	StartLine       int    `json:"start_line"`
	AnnotationLevel string `json:"annotation_level"` // notice, warning, failure
	Title           string `json:"title"`
	Message         string `json:"message"`
}

// Status is one commit status (a context's newest).
type Status struct {
	Context     string `json:"context"`
	State       string `json:"state"` // error, failure, pending, success
	Description string `json:"description"`
	TargetURL   string `json:"target_url"`
}

// CombinedStatus is a commit's combined status.
type CombinedStatus struct {
	State      string   `json:"state"`
	SHA        string   `json:"sha"`
	TotalCount int      `json:"total_count"`
	Statuses   []Status `json:"statuses"`
}

// Review is a pull request review. AuthorAssociation is the author's relation to the
// repository as GitHub states it: OWNER, MEMBER, COLLABORATOR (people who may push or
// administer), CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, MANNEQUIN or NONE.
type Review struct {
	ID                int64  `json:"id"`
	User              User   `json:"user"`
	State             string `json:"state"` // APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED, PENDING
	Body              string `json:"body"`
	HTMLURL           string `json:"html_url"`
	CommitID          string `json:"commit_id"`
	AuthorAssociation string `json:"author_association"`
}

// ReviewComment is a comment on a pull request's diff.
type ReviewComment struct {
	ID       int64  `json:"id"`
	ReviewID int64  `json:"pull_request_review_id"`
	User     User   `json:"user"`
	Path     string `json:"path"`
	Line     int    `json:"line"`
	OrigLine int    `json:"original_line"`
	Body     string `json:"body"`
	// InReplyTo is the comment this one answers (0: it starts a thread).
	InReplyTo int64 `json:"in_reply_to_id"`
	// AuthorAssociation is as Review's.
	AuthorAssociation string `json:"author_association"`
}

func (r Repo) path() string {
	return "/repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name)
}

// PullState returns pull request number of repo.
func (g *GitHub) PullState(ctx context.Context, repo Repo, number int) (*PullState, error) {
	var p PullState
	if err := g.do(ctx, http.MethodGet, repo.path()+"/pulls/"+strconv.Itoa(number), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// maxCheckPages bounds the pages of check runs read for one head (100 runs a page).
const maxCheckPages = 20

// CheckRuns returns the check runs of ref (a commit SHA or a branch), every page of them: a
// failing run past the first page must not let the head look green. More than maxCheckPages
// pages is an error, never a partial answer.
func (g *GitHub) CheckRuns(ctx context.Context, repo Repo, ref string) ([]CheckRun, error) {
	var all []CheckRun
	for page := 1; ; page++ {
		var out struct {
			TotalCount int        `json:"total_count"`
			CheckRuns  []CheckRun `json:"check_runs"`
		}
		path := repo.path() + "/commits/" + url.PathEscape(ref) + "/check-runs?per_page=100&page=" + strconv.Itoa(page)
		if err := g.do(ctx, http.MethodGet, path, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.CheckRuns...)
		switch {
		case len(all) >= out.TotalCount || len(out.CheckRuns) == 0:
			return all, nil
		case page == maxCheckPages:
			return nil, fmt.Errorf("%s has more than %d check runs", ref, maxCheckPages*100)
		}
	}
}

// Annotations returns the annotations of check run id (the first 50).
func (g *GitHub) Annotations(ctx context.Context, repo Repo, id int64) ([]Annotation, error) {
	var out []Annotation
	if err := g.do(ctx, http.MethodGet, repo.path()+"/check-runs/"+strconv.FormatInt(id, 10)+"/annotations?per_page=50", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Status returns the combined status of ref.
func (g *GitHub) Status(ctx context.Context, repo Repo, ref string) (*CombinedStatus, error) {
	var out CombinedStatus
	if err := g.do(ctx, http.MethodGet, repo.path()+"/commits/"+url.PathEscape(ref)+"/status?per_page=100", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reviews returns the reviews of pull request number, every page.
func (g *GitHub) Reviews(ctx context.Context, repo Repo, number int) ([]Review, error) {
	return getAll[Review](ctx, g, repo.path()+"/pulls/"+strconv.Itoa(number)+"/reviews?per_page=100")
}

// ReviewComments returns the review comments of pull request number, every page.
func (g *GitHub) ReviewComments(ctx context.Context, repo Repo, number int) ([]ReviewComment, error) {
	return getAll[ReviewComment](ctx, g, repo.path()+"/pulls/"+strconv.Itoa(number)+"/comments?per_page=100")
}

// Login returns the login of the token's account (GET /user). An installation token cannot
// ask (GitHub answers 403): the caller then knows its account by its reviews' bot type only.
func (g *GitHub) Login(ctx context.Context) (string, error) {
	var u User
	if err := g.do(ctx, http.MethodGet, "/user", nil, &u); err != nil {
		return "", err
	}
	return u.Login, nil
}
