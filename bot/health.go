package bot

import (
	"errors"
	"sync"
	"time"
)

// Health is what the gateway knows of its ability to write the log, for readiness (serve's
// /readyz): an append that failed, and no append since that succeeded, makes the replica
// unready. A failure counts for healthWindow after it happened: without traffic nothing else
// would ever clear it, and readiness also probes the database itself.
type Health struct {
	mu          sync.Mutex
	lastFailure time.Time
	lastSuccess time.Time
	now         func() time.Time
}

// healthWindow is how long an append failure not followed by a success keeps the replica unready.
const healthWindow = 30 * time.Second

// ErrLogUnwritable is Health.Err's answer while the gateway cannot append to the log.
var ErrLogUnwritable = errors.New("the gateway's last append to the log failed")

// NewHealth returns a Health with nothing failed.
func NewHealth() *Health { return &Health{now: time.Now} }

// Err returns ErrLogUnwritable while the gateway's latest append failed (within the last 30
// seconds), else nil. A nil Health is always healthy.
func (h *Health) Err() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastFailure.After(h.lastSuccess) && h.now().Sub(h.lastFailure) < healthWindow {
		return ErrLogUnwritable
	}
	return nil
}

func (h *Health) appendFailed()    { h.appended(false) }
func (h *Health) appendSucceeded() { h.appended(true) }

// appended records when an append last succeeded or failed; a nil Health records nothing.
func (h *Health) appended(ok bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok {
		h.lastSuccess = h.now()
	} else {
		h.lastFailure = h.now()
	}
}
