package forgetest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// limitState is the token's rate limit as GitHub keeps it (a window of an hour from the first
// request, Limit requests in it), the secondary limits to answer, and what was asked.
type limitState struct {
	mu        sync.Mutex
	limit     int
	remaining int
	reset     time.Time
	fixed     bool // SetRateLimit set the window: it does not refill
	secondary int  // requests still to refuse as a secondary rate limit
	retry     time.Duration
	total     Counts
	byPull    map[int]*Counts
}

func newLimitState(now time.Time) limitState {
	return limitState{limit: 5000, remaining: 5000, reset: now.Add(time.Hour), byPull: map[int]*Counts{}}
}

// Counts are the requests the fake answered with the right token.
type Counts struct {
	Requests    int // all of them
	NotModified int // answered 304 Not Modified (free against the rate limit)
	Limited     int // refused for a rate limit (primary or secondary)
}

// Charged are the requests that counted against the rate limit: those not answered 304.
func (c Counts) Charged() int { return c.Requests - c.NotModified }

// Counts are the requests answered so far, all of them.
func (s *Server) Counts() Counts {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	return s.limits.total
}

// CountsOf are the requests about pull request number answered so far: the pull request, its
// reviews and review comments, its head's check runs and status, their annotations.
func (s *Server) CountsOf(number int) Counts {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	if c := s.limits.byPull[number]; c != nil {
		return *c
	}
	return Counts{}
}

// SetRateLimit makes the token's limit limit, with remaining left until reset (then limit
// again, for an hour at a time).
func (s *Server) SetRateLimit(limit, remaining int, reset time.Time) {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	s.limits.limit, s.limits.remaining, s.limits.reset = limit, remaining, reset
}

// LimitNext refuses the next n requests as GitHub refuses those over a secondary rate limit:
// 429 with retry-after (whole seconds) and the primary limit's headers unchanged.
func (s *Server) LimitNext(n int, retryAfter time.Duration) {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	s.limits.secondary, s.limits.retry = n, retryAfter
}

// admit counts r (held s.mu) and answers it itself when a rate limit refuses it; otherwise w
// is wrapped so that its answer carries the rate limit's headers and, unless it is a 304,
// is charged against it.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool) {
	pull := s.pullOfRequest(r)
	l := &s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.opt.Now()
	if !now.Before(l.reset) {
		l.remaining, l.reset = l.limit, now.Add(time.Hour)
	}
	l.total.Requests++
	c := l.byPull[pull]
	if c == nil {
		c = &Counts{}
		l.byPull[pull] = c
	}
	c.Requests++
	refuse := func(status int, msg string) (http.ResponseWriter, bool) {
		l.total.Limited++
		c.Limited++
		l.headers(w.Header())
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"message": msg,
			"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"})
		return nil, false
	}
	switch {
	case l.secondary > 0:
		l.secondary--
		w.Header().Set("Retry-After", strconv.Itoa(int(l.retry/time.Second)))
		return refuse(http.StatusTooManyRequests, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
	case l.remaining <= 0:
		return refuse(http.StatusForbidden, "API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, please include the request ID.")
	}
	return &limitedWriter{ResponseWriter: w, s: s, counts: c}, true
}

func (l *limitState) headers(h http.Header) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(l.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(l.remaining, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(l.limit-max(l.remaining, 0)))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(l.reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

// limitedWriter charges an answer and sets the rate limit's headers when its status is written.
type limitedWriter struct {
	http.ResponseWriter
	s       *Server
	counts  *Counts
	written bool
}

func (lw *limitedWriter) WriteHeader(status int) {
	if !lw.written {
		lw.written = true
		l := &lw.s.limits
		l.mu.Lock()
		if status == http.StatusNotModified {
			l.total.NotModified++
			lw.counts.NotModified++
		} else {
			l.remaining--
		}
		l.headers(lw.Header())
		l.mu.Unlock()
	}
	lw.ResponseWriter.WriteHeader(status)
}

func (lw *limitedWriter) Write(b []byte) (int, error) {
	if !lw.written {
		lw.WriteHeader(http.StatusOK)
	}
	return lw.ResponseWriter.Write(b)
}

// Hijack drops the connection (DropNext): the request was charged all the same.
func (lw *limitedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !lw.written {
		lw.written = true
		l := &lw.s.limits
		l.mu.Lock()
		l.remaining--
		l.mu.Unlock()
	}
	return lw.ResponseWriter.(http.Hijacker).Hijack()
}

// answerConditional writes v as JSON with an ETag of its bytes, as GitHub does, or 304 Not
// Modified with no body when r's If-None-Match names that ETag.
func (s *Server) answerConditional(w http.ResponseWriter, r *http.Request, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	sum := sha256.Sum256(body)
	etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "private, max-age=60, s-maxage=60")
	w.Header().Set("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP")
	for _, tag := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if tag = strings.TrimSpace(tag); tag == etag || tag == "*" || strings.TrimPrefix(tag, "W/") == strings.TrimPrefix(etag, "W/") {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(append(body, '\n'))
}

// pullOfRequest is the pull request r is about (held s.mu; 0: none, or not known).
func (s *Server) pullOfRequest(r *http.Request) int {
	rest, ok := strings.CutPrefix(r.URL.Path, "/repos/"+s.opt.Repo+"/")
	if !ok {
		return 0
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) >= 2 && parts[0] == "pulls":
		n, _ := strconv.Atoi(parts[1])
		return n
	case len(parts) == 3 && parts[0] == "commits":
		return s.pullAtHead(s.ref(parts[1]))
	case len(parts) == 3 && parts[0] == "check-runs":
		id, _ := strconv.ParseInt(parts[1], 10, 64)
		for _, run := range s.checks.runs {
			if run["id"] == id {
				return s.pullAtHead(run["head_sha"].(string))
			}
		}
	}
	return 0
}

// pullAtHead is the number of the pull request whose head is sha (0: none).
func (s *Server) pullAtHead(sha string) int {
	for _, p := range s.pulls {
		if s.head(p["head"].(map[string]any)["ref"].(string)) == sha {
			return p["number"].(int)
		}
	}
	return 0
}
