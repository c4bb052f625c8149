package forge

import (
	"container/list"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// How the client spares the token's rate limit (issue 48). GitHub allows 5,000 requests an
// hour per token and says, on every answer, how many remain (x-ratelimit-remaining) and when
// the count starts again (x-ratelimit-reset, Unix seconds). Rate is the latest it said; a
// refusal for a limit — the primary one exhausted, or a secondary one (429 or 403 with
// retry-after) — is a *RateLimitError saying when to ask again.
//
// A GET is conditional: the client keeps the ETag and body of each answer (per URL, at most
// cacheBytes of them, the least recently used dropped first) and sends If-None-Match; GitHub's
// 304 Not Modified does not count against the rate limit, and the kept body is the answer.

// Rate is what GitHub's latest answer said of the token's rate limit.
type Rate struct {
	Limit     int       // requests per window (x-ratelimit-limit)
	Remaining int       // left in the window (x-ratelimit-remaining)
	Reset     time.Time // when the window starts again (x-ratelimit-reset)
}

// Known reports whether an answer has said it.
func (r Rate) Known() bool { return r.Limit > 0 }

// RateLimitError is GitHub's refusal of a request for a rate limit: the primary one exhausted
// (Reset when it starts again) or a secondary one (RetryAfter, from retry-after; 0 when GitHub
// did not say).
type RateLimitError struct {
	Status     int
	Secondary  bool
	Reset      time.Time
	RetryAfter time.Duration
	Message    string
}

func (e *RateLimitError) Error() string {
	if e.Secondary {
		return fmt.Sprintf("GitHub's secondary rate limit (HTTP %d, retry after %s): %s", e.Status, e.RetryAfter, e.Message)
	}
	return fmt.Sprintf("GitHub's rate limit is used up until %s (HTTP %d): %s", e.Reset.UTC().Format(time.RFC3339), e.Status, e.Message)
}

// Unwrap is the refusal as an *Error: GitHub's words and status, as callers that do not tell
// rate limits apart (create_pull_request) say them.
func (e *RateLimitError) Unwrap() error { return &Error{Status: e.Status, Message: e.Message} }

// secondaryWait is how long to wait after a secondary limit that gave no retry-after: GitHub
// asks for at least a minute.
const secondaryWait = time.Minute

// Until is when to ask GitHub again, the time now.
func (e *RateLimitError) Until(now time.Time) time.Time {
	switch {
	case e.RetryAfter > 0:
		return now.Add(e.RetryAfter)
	case !e.Secondary && e.Reset.After(now):
		return e.Reset
	}
	return now.Add(secondaryWait)
}

// Rate is what GitHub's latest answer said of the token's rate limit (zero: none said it).
func (g *GitHub) Rate() Rate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rate
}

// readRate reads the rate limit's headers of an answer; ok false when it has none.
func readRate(h http.Header) (Rate, bool) {
	limit, err1 := strconv.Atoi(h.Get("X-RateLimit-Limit"))
	remaining, err2 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	reset, err3 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || limit <= 0 {
		return Rate{}, false
	}
	return Rate{Limit: limit, Remaining: remaining, Reset: time.Unix(reset, 0)}, true
}

// rateLimited is the *RateLimitError an answer with status is, or nil: a 429, or a 403 with
// retry-after or with none of the primary limit remaining.
func rateLimited(status int, h http.Header, rate Rate, rateKnown bool, msg string) *RateLimitError {
	if status != http.StatusForbidden && status != http.StatusTooManyRequests {
		return nil
	}
	e := &RateLimitError{Status: status, Message: msg}
	if s := h.Get("Retry-After"); s != "" {
		secs, err := strconv.Atoi(s)
		if err == nil && secs >= 0 {
			e.Secondary, e.RetryAfter = true, time.Duration(secs)*time.Second
			return e
		}
	}
	if rateKnown && rate.Remaining == 0 {
		e.Reset = rate.Reset
		return e
	}
	if status == http.StatusTooManyRequests {
		e.Secondary = true
		return e
	}
	return nil // a 403 that is not about the rate: permissions
}

// cacheBytes bounds the bodies kept for conditional requests.
const cacheBytes = 16 << 20

// etagCache keeps the ETag and body of GET answers by URL, least recently used first out.
type etagCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // of *cached, most recently used at the front
	byURL map[string]*list.Element
}

type cached struct {
	url  string
	etag string
	next string // the Link header's next page, kept with the answer
	body []byte
}

func newETagCache(max int) *etagCache {
	return &etagCache{max: max, order: list.New(), byURL: map[string]*list.Element{}}
}

// get returns the kept answer of url (nil: none).
func (c *etagCache) get(url string) *cached {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byURL[url]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached)
}

// put keeps url's answer body under etag, dropping the least recently used past the bound.
func (c *etagCache) put(url, etag, next string, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byURL[url]; ok {
		c.size -= len(el.Value.(*cached).body)
		c.order.Remove(el)
		delete(c.byURL, url)
	}
	if etag == "" || len(body) > c.max {
		return
	}
	c.byURL[url] = c.order.PushFront(&cached{url: url, etag: etag, next: next, body: body})
	c.size += len(body)
	for c.size > c.max {
		el := c.order.Back()
		old := el.Value.(*cached)
		c.size -= len(old.body)
		c.order.Remove(el)
		delete(c.byURL, old.url)
	}
}
