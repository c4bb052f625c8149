package forge_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
)

// A head with more check runs than one page holds (GitHub gives at most 100 a page) is read
// whole: a failing check past the first page is not lost, so the head is not declared green.
func TestCheckRunsReadsEveryPage(t *testing.T) {
	t.Parallel()
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api"})
	const sha = "0123456789abcdef0123456789abcdef01234567"
	for i := range 150 {
		conclusion := "success"
		if i == 0 { // the oldest: GitHub lists newest first, so it is on the last page
			conclusion = "failure"
		}
		gh.AddCheckRun(sha, forgetest.Check{Name: fmt.Sprintf("job-%03d", i), Conclusion: conclusion})
	}
	repo, err := forge.ParseRepo("acme/api")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := forge.NewGitHub(gh.URL, "ghp_test", nil).CheckRuns(context.Background(), repo, sha)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, r := range runs {
		if r.Conclusion == "failure" {
			failed++
		}
	}
	if len(runs) != 150 || failed != 1 {
		t.Fatalf("read %d check runs, %d failed; want all 150 and the one failure", len(runs), failed)
	}
}

// A pull request's reviews and review comments are read whole, following GitHub's Link
// header page after page: logbook's review past the first 100 is not lost.
func TestReviewsReadsEveryPage(t *testing.T) {
	t.Parallel()
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", Branches: []string{"feature"}})
	api := forge.NewGitHub(gh.URL, "ghp_test", nil)
	repo, err := forge.ParseRepo("acme/api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.CreatePull(context.Background(), repo, "feature", "t", "b"); err != nil {
		t.Fatal(err)
	}
	for i := range 230 {
		gh.AddReview(1, forgetest.Reviewer{Login: fmt.Sprintf("u%d", i), Type: "User"}, "COMMENTED", fmt.Sprintf("review %d", i),
			forgetest.Comment{Path: "a.go", Line: 1, Body: fmt.Sprintf("comment %d", i)})
	}
	for range 2 { // the second read is answered from the conditional cache: its pages too
		reviews, err := api.Reviews(context.Background(), repo, 1)
		if err != nil || len(reviews) != 230 || reviews[229].Body != "review 229" {
			t.Fatalf("read %d reviews (%v)", len(reviews), err)
		}
		comments, err := api.ReviewComments(context.Background(), repo, 1)
		if err != nil || len(comments) != 230 || comments[229].Body != "comment 229" {
			t.Fatalf("read %d comments (%v)", len(comments), err)
		}
	}
}
