package egress

import "errors"

// ErrWidened is returned by Widen while an earlier window is still open.
var ErrWidened = errors.New("egress: a window is already open")

// Widen lets the proxy also reach extra's hosts until close is called: a window for a step
// that needs more than the sandbox's allowlist (the channel's setup command fetching
// packages, LOGBOOK_SETUP_EGRESS). Connections are recorded as any other; a tunnel opened
// in the window is not cut when it closes (the step it served has ended by then). One
// window at a time.
func (p *Proxy) Widen(extra Allowlist) (close func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.windowSet {
		return nil, ErrWidened
	}
	p.window, p.windowSet = extra, true
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.window, p.windowSet = Allowlist{}, false
	}, nil
}

// widened reports whether the open window (if any) lets host:port through.
func (p *Proxy) widened(host string, port int) (ok, byAddr bool) {
	p.mu.Lock()
	w, set := p.window, p.windowSet
	p.mu.Unlock()
	if !set {
		return false, false
	}
	return w.allows(host, port)
}
