package forge

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Review events GitHub takes for a submitted review. logbook posts COMMENT, and APPROVE only
// where the channel allows it; it never requests changes.
const (
	EventComment = "COMMENT"
	EventApprove = "APPROVE"
)

// PullFile is one file a pull request (or a comparison of two commits) changes: its path and
// GitHub's "patch", the unified diff's hunks ("" for a binary or too large file).
type PullFile struct {
	Filename string `json:"filename"`
	Status   string `json:"status"` // added, removed, modified, renamed, ...
	Patch    string `json:"patch"`
}

// NewReview is a review to submit: on commit CommitID, with Event (EventComment or
// EventApprove), Body, and inline comments.
type NewReview struct {
	CommitID string          `json:"commit_id"`
	Body     string          `json:"body"`
	Event    string          `json:"event"`
	Comments []ReviewLineNew `json:"comments,omitempty"`
}

// ReviewLineNew is an inline comment of a new review: on Line of Path's new version (Side
// RIGHT).
type ReviewLineNew struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Side string `json:"side"`
	Body string `json:"body"`
}

// PullFiles returns the files pull request number changes, with their patches (the first 300,
// GitHub's cap on a page of three).
func (g *GitHub) PullFiles(ctx context.Context, repo Repo, number int) ([]PullFile, error) {
	var all []PullFile
	for page := 1; page <= 3; page++ {
		var out []PullFile
		if err := g.do(ctx, http.MethodGet, repo.path()+"/pulls/"+strconv.Itoa(number)+"/files?per_page=100&page="+strconv.Itoa(page), nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out...)
		if len(out) < 100 {
			break
		}
	}
	return all, nil
}

// Compare returns the files changed from base to head (GET /repos/{o}/{r}/compare/{base}...{head}).
func (g *GitHub) Compare(ctx context.Context, repo Repo, base, head string) ([]PullFile, error) {
	var out struct {
		Files []PullFile `json:"files"`
	}
	if err := g.do(ctx, http.MethodGet, repo.path()+"/compare/"+url.PathEscape(base)+"..."+url.PathEscape(head), nil, &out); err != nil {
		return nil, err
	}
	return out.Files, nil
}

// CreateReview submits a review of pull request number (POST /repos/{o}/{r}/pulls/{n}/reviews).
// GitHub refuses (422) a comment on a line outside the diff: "Line could not be resolved".
func (g *GitHub) CreateReview(ctx context.Context, repo Repo, number int, r NewReview) (*Review, error) {
	for i := range r.Comments {
		if r.Comments[i].Side == "" {
			r.Comments[i].Side = "RIGHT"
		}
	}
	var out Review
	if err := g.do(ctx, http.MethodPost, repo.path()+"/pulls/"+strconv.Itoa(number)+"/reviews", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
