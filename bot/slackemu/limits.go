package slackemu

import (
	"math"
	"time"
)

// MethodFault makes Web API calls fail. Faults are matched in the order injected.
type MethodFault struct {
	// Method is the Web API method, e.g. "chat.postMessage".
	Method string `json:"method"`
	// Error is the Slack error code answered with HTTP 200 {"ok":false,"error":Error}
	// (used when Status is 0 or 200).
	Error string `json:"error"`
	// Status, if not 0 or 200, is the HTTP status answered instead; 429 carries
	// Retry-After: RetryAfter (seconds, default 1) and {"ok":false,"error":"ratelimited"}.
	Status     int `json:"status"`
	RetryAfter int `json:"retry_after"`
	// Times is how many calls fail; values < 1 mean every call until ClearFaults.
	Times int `json:"times"`
	// After is how many matching calls pass untouched before the fault applies: After 1
	// fails the second call (of several chat.delete calls, say) and not the first.
	After int `json:"after"`
	// ApplyFirst runs the method for real before answering with the fault: an
	// ambiguous failure (the message is posted, the client sees an error).
	ApplyFirst bool `json:"apply_first"`
	// Drop closes the connection without an answer instead (Error and Status are then
	// ignored): the client sees a transport error such as EOF. With ApplyFirst the call is
	// performed first, e.g. files.completeUploadExternal shares the file, then the answer is lost.
	Drop bool `json:"drop"`
	// Hold, when set, holds the matching call (counted and recorded as it arrives) until
	// Hold is closed, then applies it as if no fault were injected — unless Error, Status or
	// Drop say otherwise. A test orders two clients' calls with it.
	Hold <-chan struct{} `json:"-"`
}

// InjectMethodFault makes the next matching Web API calls fail as f describes.
func (s *Server) InjectMethodFault(f MethodFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mfaults = append(s.mfaults, &f)
}

// InjectDeliveryFault alters the next matching Socket Mode envelopes as f describes.
func (s *Server) InjectDeliveryFault(f DeliveryFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dfaults = append(s.dfaults, &f)
}

// ClearFaults removes every injected method, delivery and download fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mfaults, s.dfaults, s.dlfaults = nil, nil, nil
}

// SetRateLimit sets method's limit; a zero RateLimit removes it.
func (s *Server) SetRateLimit(method string, l RateLimit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Burst < 1 {
		delete(s.limits, method)
	} else {
		s.limits[method] = l
	}
	for k := range s.buckets {
		delete(s.buckets, k)
	}
}

func (s *Server) takeMethodFaultLocked(method string) *MethodFault {
	f, _ := takeFault(&s.mfaults, func(f *MethodFault) bool {
		if f.Method != method {
			return false
		}
		if f.After > 0 {
			f.After-- // a call let through: it counts, the fault waits
			return false
		}
		return true
	}, func(f *MethodFault) *int { return &f.Times })
	return f
}

// takeFault returns the first fault of *faults that matches, counting one use of it: a fault
// whose count (*times) is used up leaves the list; a count below 1 lasts until ClearFaults.
func takeFault[F any](faults *[]F, matches func(F) bool, times func(F) *int) (F, bool) {
	for i, f := range *faults {
		if !matches(f) {
			continue
		}
		if n := times(f); *n > 0 {
			*n--
			if *n == 0 {
				*faults = append((*faults)[:i:i], (*faults)[i+1:]...)
			}
		}
		return f, true
	}
	var none F
	return none, false
}

// bucket is a token bucket for one method (and channel).
type bucket struct {
	tokens float64
	last   time.Time
}

// rateLimitLocked takes a token for method (and channel when the limit is per
// channel). It returns 0 when allowed, or the whole seconds (≥ 1) until a token is due.
func (s *Server) rateLimitLocked(method, channel string, now time.Time) int {
	l, ok := s.limits[method]
	if !ok || l.Burst < 1 {
		return 0
	}
	key := method
	if l.PerChannel {
		key += "/" + channel
	}
	b := s.buckets[key]
	if b == nil {
		b = &bucket{tokens: float64(l.Burst), last: now}
		s.buckets[key] = b
	}
	if l.Every > 0 {
		b.tokens = math.Min(float64(l.Burst), b.tokens+float64(now.Sub(b.last))/float64(l.Every))
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	if l.Every <= 0 {
		return 60
	}
	wait := time.Duration((1 - b.tokens) * float64(l.Every))
	return max(1, int(math.Ceil(wait.Seconds())))
}
