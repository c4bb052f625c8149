package review_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/review"
	"github.com/logbook/logbook/session"
)

// The pull request's head moves between the review's start (the diff the model read) and
// submit_review: the review is a comment, never an approval of a commit nobody reviewed
// (found by a security review).
func TestNoApprovalAfterTheHeadMoved(t *testing.T) {
	f := newFixture(t)
	ask := f.ask("review " + prURL)
	log := &storeLog{st: f.st, id: f.sess.ID}
	log.evs, _ = f.st.Events(context.Background(), f.sess.ID, session.Range{})
	o, err := f.part.Offer(context.Background(), part.Scope{Session: f.sess, Through: ask, Log: log, Logger: zerolog.Nop(),
		Channel: channel{"review_approve": "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := call(t, o, review.ToolDiff, "call_0", map[string]any{}); out.IsError || strings.Contains(out.Content, "backdoor") {
		t.Fatalf("diff %+v", out)
	}
	// The author pushes a second commit (same repository, no instruction file) meanwhile.
	f.gh.Push(1, c2, forgetest.File{Path: "auth.go", Patch: "@@ -1,0 +1,1 @@\n+func check() bool { return true } // backdoor"})
	out := call(t, o, review.ToolSubmit, "call_1", map[string]any{"summary": "Looks right.", "approve": true})
	pr, _ := f.api.PullState(context.Background(), forge.Repo{Owner: "acme", Name: "api"}, 1)
	_, reviews, _ := f.gh.Reviews(1)
	for _, r := range reviews {
		if r["state"] == "APPROVED" && pr.Head.SHA == c2 {
			t.Fatalf("APPROVED (review %v) while the pull request's head is %s, never reviewed; tool said %q", r["commit_id"], pr.Head.SHA, out.Content)
		}
	}
}

// Two threads review the same head (two channels on one repository, or a second mention):
// with logbook's login known, the review the first posted is found on GitHub and the second
// posts none (found by a security review).
func TestOneReviewPerHeadAcrossThreads(t *testing.T) {
	f := newFixture(t)
	_, o := f.turn(f.ask("review " + prURL))
	if out := call(t, o, review.ToolSubmit, "call_1", map[string]any{"summary": "first"}); out.IsError {
		t.Fatal(out)
	}
	ctx := context.Background()
	other, err := f.st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C2", ThreadTS: "1700000001.000100"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := f.st.Append(ctx, other.ID, session.NewEvent{Type: session.TypeUserMessage,
		Actor: session.Actor{Kind: session.ActorUser, ID: "U2"}, Payload: session.UserMessage{Channel: "C2", User: "U2", Text: "review " + prURL}})
	if err != nil {
		t.Fatal(err)
	}
	log := &storeLog{st: f.st, id: other.ID}
	log.evs, _ = f.st.Events(ctx, other.ID, session.Range{})
	o2, err := f.part.Offer(ctx, part.Scope{Session: other, Through: evs[0].Seq, Log: log, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if len(o2.Tools) > 0 {
		call(t, o2, review.ToolSubmit, "call_1", map[string]any{"summary": "second"})
	}
	if creates, _, _ := f.gh.Reviews(1); creates != 1 {
		t.Fatalf("logbook posted %d reviews of head %s", creates, c1[:7])
	}
}

// hostile is a GitHub API whose answers carry Slack control sequences.
type hostile struct {
	*forge.GitHub
	url, state string
}

func (h hostile) CreateReview(ctx context.Context, repo forge.Repo, n int, r forge.NewReview) (*forge.Review, error) {
	out, err := h.GitHub.CreateReview(ctx, repo, n, r)
	if out != nil && h.url != "" {
		out.HTMLURL = h.url
	}
	return out, err
}

func (h hostile) PullState(ctx context.Context, repo forge.Repo, n int) (*forge.PullState, error) {
	p, err := h.GitHub.PullState(ctx, repo, n)
	if p != nil && h.state != "" {
		p.State = h.state
	}
	return p, err
}

// A hostile GitHub (or Enterprise) answer never reaches Slack as markup: a review's html_url in
// the reply's footer and in the "reviewed already" note, and a pull request's state in the
// "is closed" note, are escaped or left out (found by a security review).
func TestGitHubAnswersNeverPingTheChannel(t *testing.T) {
	f := newFixture(t)
	f.part.Forge = hostile{GitHub: f.api, url: "https://github.com/acme/api/pull/1#r1> <!channel> <https://github.com/x"}
	log, o := f.turn(f.ask("review " + prURL))
	call(t, o, review.ToolSubmit, "call_1", map[string]any{"summary": "s"})
	_ = log
	lg := &storeLog{st: f.st, id: f.sess.ID}
	lg.evs, _ = f.st.Events(context.Background(), f.sess.ID, session.Range{})
	var bad []string
	for _, l := range f.part.Footer(part.Scope{Session: f.sess, Log: lg}) {
		if strings.Contains(l, "<!channel>") {
			bad = append(bad, "footer: "+l)
		}
	}
	_, o = f.turn(f.ask("review " + prURL))
	for _, n := range o.Notes {
		if strings.Contains(n, "<!channel>") {
			bad = append(bad, "note: "+n)
		}
	}
	g := newFixture(t)
	g.part.Forge = hostile{GitHub: g.api, state: "<!here> closed"}
	_, o = g.turn(g.ask("review " + prURL))
	for _, n := range o.Notes {
		if strings.Contains(n, "<!here>") {
			bad = append(bad, "note: "+n)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("GitHub's text reaches Slack as mrkdwn:\n%s", strings.Join(bad, "\n"))
	}
}
