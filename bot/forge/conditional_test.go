package forge_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
)

// A read asks again with the ETag of the last answer: what did not change is answered 304,
// free against the rate limit, and read from the kept answer; what changed is read anew.
// Every answer's x-ratelimit-* is what Rate says.
func TestConditionalReads(t *testing.T) {
	t.Parallel()
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api"})
	const sha = "0123456789abcdef0123456789abcdef01234567"
	gh.AddCheckRun(sha, forgetest.Check{Name: "build", Conclusion: "success"})
	repo, _ := forge.ParseRepo("acme/api")
	g := forge.NewGitHub(gh.URL, "ghp_test", nil)
	ctx := context.Background()
	for i := range 3 {
		runs, err := g.CheckRuns(ctx, repo, sha)
		if err != nil || len(runs) != 1 || runs[0].Name != "build" {
			t.Fatalf("read %d: %+v, %v", i, runs, err)
		}
	}
	if c := gh.Counts(); c.Requests != 3 || c.NotModified != 2 {
		t.Fatalf("%+v, want 3 requests of which 2 answered 304", c)
	}
	gh.AddCheckRun(sha, forgetest.Check{Name: "test", Conclusion: "failure"})
	if runs, err := g.CheckRuns(ctx, repo, sha); err != nil || len(runs) != 2 {
		t.Fatalf("after a change: %+v, %v", runs, err)
	}
	if c := gh.Counts(); c.NotModified != 2 || c.Charged() != 2 {
		t.Fatalf("after a change: %+v, want it read anew", c)
	}
	if r := g.Rate(); !r.Known() || r.Limit != 5000 || r.Remaining != 4998 {
		t.Fatalf("rate %+v, want 4998 of 5000 left", r)
	}
}

// GitHub's refusals for its rate limits are *forge.RateLimitError, saying when to ask again:
// the primary limit at x-ratelimit-reset, a secondary one after retry-after. A 403 about
// anything else is an *forge.Error.
func TestRateLimitRefusals(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", Now: func() time.Time { return now }})
	repo, _ := forge.ParseRepo("acme/api")
	g := forge.NewGitHub(gh.URL, "ghp_test", nil)
	ctx := context.Background()
	reset := now.Add(17 * time.Minute)
	gh.SetRateLimit(5000, 0, reset)
	_, err := g.Status(ctx, repo, "main")
	var rl *forge.RateLimitError
	if !errors.As(err, &rl) || rl.Secondary || rl.Status != http.StatusForbidden || !rl.Until(now).Equal(reset) {
		t.Fatalf("used up: %v (%+v), want a refusal until %s", err, rl, reset)
	}
	if fe := (*forge.Error)(nil); !errors.As(err, &fe) || fe.Status != http.StatusForbidden || !strings.Contains(fe.Message, "rate limit exceeded") {
		t.Fatalf("used up, as an *forge.Error: %v", err)
	}
	gh.SetRateLimit(5000, 100, reset)
	gh.LimitNext(1, 90*time.Second)
	_, err = g.Status(ctx, repo, "main")
	if !errors.As(err, &rl) || !rl.Secondary || !rl.Until(now).Equal(now.Add(90*time.Second)) {
		t.Fatalf("secondary: %v (%+v), want a refusal for 90s", err, rl)
	}
	if _, err := g.Status(ctx, repo, "main"); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	if r := g.Rate(); r.Remaining != 99 || !r.Reset.Equal(reset) {
		t.Fatalf("rate %+v", r)
	}
}
