// Package forgetest is a fake GitHub for tests: the two REST calls create_pull_request makes
// (list and create pull requests), as GitHub documents them, refusing what GitHub refuses —
// a wrong token, a wrong body, a head branch the repository does not have, a second open pull
// request from one branch. For a followed pull request (checks.go) it also serves a pull
// request, its head's check runs and statuses, its reviews and review comments, and a check
// run's annotations, in GitHub's REST shapes, and sends webhooks signed as GitHub signs them.
// For reviews (reviews.go) it keeps the commits pushed to a pull request, serves its files and
// a comparison of two of its commits, and takes a review with inline comments, refusing one on
// a line outside the diff as GitHub does (422, "Line could not be resolved").
//
// Like GitHub it answers every request with its token's rate limit (x-ratelimit-limit,
// -remaining, -used, -reset; 5,000 an hour unless SetRateLimit says otherwise), refuses a
// request once none remain (403, "API rate limit exceeded") until the reset, and answers a
// followed pull request's reads with an ETag and, to a request whose If-None-Match holds it,
// 304 Not Modified, which costs nothing against the limit (limits.go).
package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options say what the fake serves.
type Options struct {
	// Token is the one token it takes (Authorization: Bearer Token).
	Token string
	// Repo is owner/name, the one repository it knows.
	Repo string
	// Branches are branches the repository has besides main; HasBranch, if set, is asked too
	// (a real git server's branches).
	Branches  []string
	HasBranch func(string) bool
	// HeadSHA, if set, gives a branch's head commit (a real git server's) unless SetHead set
	// one; Login is the token's account (GET /user; default logbook-bot).
	HeadSHA func(string) string
	Login   string
	// Now is the fake's clock, for the rate limit's window and reset (nil: time.Now).
	Now func() time.Time
}

// Server is a running fake.
type Server struct {
	URL string

	opt      Options
	mu       sync.Mutex
	branches map[string]bool
	pulls    []map[string]any
	creates  int
	dropNext bool
	hold     chan struct{}
	created  chan struct{}
	checks   checkState
	reviews  reviewState
	limits   limitState
}

// New starts a fake GitHub until the test ends.
func New(tb testing.TB, opt Options) *Server {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Server{opt: opt, branches: map[string]bool{"main": true}, checks: newCheckState(), limits: newLimitState(opt.Now())}
	for _, b := range opt.Branches {
		s.branches[b] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// DropNext makes the next create succeed and the connection drop without an answer.
func (s *Server) DropNext() {
	s.mu.Lock()
	s.dropNext = true
	s.mu.Unlock()
}

// HoldNext makes the next create succeed and its answer wait until the returned release is
// called (or the caller goes away); created is closed once the pull request exists.
func (s *Server) HoldNext() (created <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, r := make(chan struct{}), make(chan struct{})
	s.hold, s.created = r, c
	var once sync.Once
	return c, func() { once.Do(func() { close(r) }) }
}

// State is how many pull requests were created, and all of them.
func (s *Server) State() (creates int, pulls []map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates, append([]map[string]any(nil), s.pulls...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			s.mu.Unlock()
		}
	}
	defer unlock()
	fail := func(status int, msg string) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"})
	}
	if r.Header.Get("Authorization") != "Bearer "+s.opt.Token {
		fail(401, "Bad credentials")
		return
	}
	lw, ok := s.admit(w, r)
	if !ok {
		return
	}
	w = lw
	owner, _, _ := strings.Cut(s.opt.Repo, "/")
	if s.serveReviews(w, r, fail) || s.serveChecks(w, r, fail) {
		return
	}
	if r.URL.Path != "/repos/"+s.opt.Repo+"/pulls" {
		fail(404, "Not Found")
		return
	}
	switch r.Method {
	case http.MethodGet:
		head := r.URL.Query().Get("head")
		out := []map[string]any{}
		for _, p := range s.pulls {
			if owner+":"+p["head"].(map[string]any)["ref"].(string) == head {
				out = append(out, p)
			}
		}
		json.NewEncoder(w).Encode(out)
	case http.MethodPost:
		var in struct {
			Title, Head, Base, Body *string
		}
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&in) != nil || in.Title == nil || in.Head == nil || in.Base == nil {
			fail(422, "Validation Failed")
			return
		}
		if !s.branches[*in.Head] && (s.opt.HasBranch == nil || !s.opt.HasBranch(*in.Head)) {
			w.WriteHeader(422)
			json.NewEncoder(w).Encode(map[string]any{"message": "Validation Failed", "errors": []map[string]any{{"resource": "PullRequest", "field": "head", "code": "invalid"}}})
			return
		}
		for _, p := range s.pulls {
			if p["head"].(map[string]any)["ref"] == *in.Head && p["state"] == "open" {
				w.WriteHeader(422)
				json.NewEncoder(w).Encode(map[string]any{"message": "Validation Failed", "errors": []map[string]any{{"message": "A pull request already exists for " + owner + ":" + *in.Head + "."}}})
				return
			}
		}
		s.creates++
		n := len(s.pulls) + 1
		p := map[string]any{"number": n, "html_url": fmt.Sprintf("https://github.com/%s/pull/%d", s.opt.Repo, n), "state": "open",
			"merged": false, "head": map[string]any{"ref": *in.Head, "repo": map[string]any{"full_name": s.opt.Repo}},
			"base": map[string]any{"ref": *in.Base, "repo": map[string]any{"full_name": s.opt.Repo}}, "title": *in.Title, "body": deref(in.Body),
			"user": map[string]any{"login": s.login(), "type": "User"}, "author_association": "MEMBER"}
		s.pulls = append(s.pulls, p)
		if s.dropNext {
			s.dropNext = false
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		if hold := s.hold; hold != nil {
			s.hold = nil
			close(s.created)
			unlock()
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(p)
	default:
		fail(404, "Not Found")
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
