package bot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/logbook/logbook/session"
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

// standbyLag is what the readiness line and the watch need of a standby (session.Standby).
type standbyLag interface {
	Lag(ctx context.Context) (session.Lag, error)
}

// StandbyStatus is /readyz's line about the standby of LOGBOOK_READ_DATABASE_URL: how far it
// lags, or that it does not answer (reads then go to the primary; the replica stays ready).
func StandbyStatus(ctx context.Context, sb standbyLag) string {
	l, err := sb.Lag(ctx)
	switch {
	case errors.Is(err, session.ErrStandbyUnavailable):
		return "standby: unreachable (reads go to the primary)\n"
	case err != nil:
		return "standby: lag unknown (the primary did not say its WAL position)\n"
	}
	return fmt.Sprintf("standby: lag_bytes=%d lag_seconds=%.3f replay_paused=%t\n", l.Bytes, l.Seconds, l.Paused)
}

// WatchStandby measures the standby's lag every interval until ctx ends (serve's part
// "standby"), so its gauges stay current and a standby that answers again is noticed
// between reads. A failed measurement is the observer's to report; it never ends the watch.
func WatchStandby(ctx context.Context, sb standbyLag, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m, cancel := context.WithTimeout(ctx, every)
		sb.Lag(m) //nolint:errcheck // reported through the standby's observer
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
