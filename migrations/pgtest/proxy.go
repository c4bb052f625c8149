package pgtest

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy is a loopback TCP proxy in front of a test database that can stop forwarding without
// closing anything: the connections through it go silent, as after a failover that leaves a
// socket open to a server that no longer answers.
type Proxy struct {
	l       net.Listener
	target  string
	mu      sync.Mutex
	stalled bool
	resume  chan struct{} // closed at Close, which ends a stall
	conns   []net.Conn
	wg      sync.WaitGroup
	closed  bool
}

// NewProxy starts a proxy to the server of dsn (a URL) and returns it with the DSN that
// reaches the same database through it. It is closed when tb ends.
func NewProxy(tb testing.TB, dsn string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		tb.Fatalf("pgtest: proxy needs a URL DSN: %v", redact(dsn))
	}
	host := u.Host
	if !strings.Contains(host, ":") {
		host += ":5432"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, target: host, resume: make(chan struct{})}
	p.wg.Go(p.accept)
	tb.Cleanup(p.Close)
	u.Host = l.Addr().String()
	return p, u.String()
}

// Stall stops forwarding in both directions; the connections stay open.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Close ends every connection and the listener, and waits for the proxy's goroutines. It is
// idempotent (as slackemu.Server.Close: two test fixtures that share nothing else).
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.resume)
	_ = p.l.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c) })
		p.wg.Go(func() { p.pipe(c, s) })
	}
}

// pipe copies from src to dst until either fails; once stalled, what it reads is held back
// until Close.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		stalled := p.stalled
		p.mu.Unlock()
		if stalled {
			<-p.resume
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}
