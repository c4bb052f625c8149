package connectors

import (
	"path"
	"strings"
	"sync"
	"time"
)

// maxBackoff bounds how many RetryAfters a failing server is left out for after consecutive
// failures: RetryAfter, then twice that, four times, … up to maxBackoff times.
const maxBackoff = 16

// Failure is the last failure to start or reach a server from a channel, as this replica saw
// it: when, why (secrets scrubbed), how many times in a row, and until when threads leave it
// out without trying.
type Failure struct {
	At    time.Time
	Error string
	Count int
	Until time.Time
}

// health is what this replica remembers of each server's failures, per channel (a server's
// OAuth token, and a local server's sandbox, are the channel's), so that a new thread does
// not wait ConnectTimeout again for a server known to be failing. Safe for concurrent use.
type health struct {
	mu sync.Mutex
	m  map[healthKey]Failure
}

type healthKey struct{ server, channel string }

// failed records a failure at now and returns it; the back-off doubles with each consecutive
// failure, from retry up to maxBackoff times retry.
func (h *health) failed(server, channel, why string, now time.Time, retry time.Duration) Failure {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[healthKey]Failure{}
	}
	k := healthKey{server, channel}
	f := h.m[k]
	f.Count++
	wait := retry << min(f.Count-1, 4) // 1, 2, 4, 8, 16 RetryAfters
	wait = min(wait, maxBackoff*retry)
	f.At, f.Error, f.Until = now, why, now.Add(wait)
	h.m[k] = f
	return f
}

// ok forgets the server's failures in channel.
func (h *health) ok(server, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, healthKey{server, channel})
}

// last is the server's last failure in channel, if it has not since been reached.
func (h *health) last(server, channel string) (Failure, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.m[healthKey{server, channel}]
	return f, ok
}

// LastFailure is the last failure to start or reach the server from the channel on this
// replica, if it has not since been reached.
func (c *Connectors) LastFailure(server, channel string) (Failure, bool) {
	return c.health.last(server, channel)
}

// hint is what to add to a local server's start error when its command fetches its package
// from the network as it starts (npx -y, uvx): the sandbox's network is off.
func hint(srv Server) string {
	if srv.Remote() {
		return ""
	}
	switch path.Base(srv.Command) {
	case "npx", "uvx", "pipx", "bunx":
		return "; " + path.Base(srv.Command) + " downloads the server's package as it starts, and the sandbox has no network unless LOGBOOK_SANDBOX_EGRESS allows the registry: install the server ahead of time (docs/connectors.md)"
	}
	return ""
}

// reason is err's text for a person: scrubbed, clipped, with the hint for srv.
func (c *Connectors) reason(srv Server, err error) string {
	return clipText(strings.TrimSpace(c.redact(err.Error())), 300) + hint(srv)
}
