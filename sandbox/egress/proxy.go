package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kinds of Connection.
const (
	KindConnect = "connect" // an HTTP CONNECT tunnel (https and anything else over TCP)
	KindHTTP    = "http"    // a plain-http request, forwarded
	KindGit     = "git"     // a request to the session's repository, served by logbook
)

// Connection is one connection (for git, one request) the sandbox asked for, as recorded.
type Connection struct {
	Kind    string
	Host    string
	Port    int
	Allowed bool
	// Reason says why it was refused; for git, which service it was ("git-upload-pack",
	// "git-receive-pack").
	Reason string
	// BytesOut went from the sandbox to the host, BytesIn back into the sandbox.
	BytesOut, BytesIn int64
	Duration          time.Duration
	// Refs are the refs a push updated (or would have).
	Refs []string
}

// Resolver looks host names up (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Proxy.
type Options struct {
	// Allow is what may be reached; the zero value allows nothing.
	Allow Allowlist
	// Git, if set, is the session's repository, served under GitPath.
	Git *Remote
	// Record is called once per connection, when it ends (at once when refused). It must
	// not block for long; it is called from the connection's goroutine.
	Record func(Connection)
	// Resolver looks names up (net.DefaultResolver).
	Resolver Resolver
	// Transport carries the requests to the session's repository (a fresh http.Transport
	// without a proxy). It must not follow redirects (no http.RoundTripper does).
	Transport http.RoundTripper
	// MaxConnections bounds the connections open at once (64).
	MaxConnections int
	// DialTimeout bounds each dial (10 seconds).
	DialTimeout time.Duration
}

// Proxy serves one sandbox's connections. Serve it on a listener; Close ends everything.
type Proxy struct {
	opt   Options
	srv   *http.Server
	slots chan struct{}

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // hijacked tunnels, closed by Close
	wg     sync.WaitGroup        // tunnels and handlers
}

// New returns a proxy.
func New(opt Options) *Proxy {
	if opt.Resolver == nil {
		opt.Resolver = net.DefaultResolver
	}
	if opt.MaxConnections <= 0 {
		opt.MaxConnections = 64
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = 10 * time.Second
	}
	if opt.Record == nil {
		opt.Record = func(Connection) {}
	}
	p := &Proxy{opt: opt, slots: make(chan struct{}, opt.MaxConnections), conns: map[net.Conn]struct{}{}}
	if p.opt.Transport == nil {
		p.opt.Transport = &http.Transport{
			Proxy: nil, DialContext: (&net.Dialer{Timeout: opt.DialTimeout}).DialContext,
			ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second,
			// The sandbox's git decodes what the forge compressed; nothing is unpacked here.
			DisableCompression: true, IdleConnTimeout: 30 * time.Second,
		}
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	return p
}

// Serve serves connections on l until Close; it returns nil after Close.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close closes the listeners and every connection, and waits for their handlers (and so
// for their Record calls).
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	p.wg.Wait()
	if t, ok := p.opt.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return err
}

// enter counts a handler in, or reports that the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// ServeHTTP is the proxy: CONNECT tunnels, absolute-form plain-http requests, and the
// session's repository under GitPath.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		http.Error(w, "logbook egress proxy: closed", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		host, port := target(r)
		p.opt.Record(Connection{Kind: kindOf(r), Host: host, Port: port, Reason: "too many connections at once"})
		http.Error(w, "logbook egress proxy: too many connections at once", http.StatusServiceUnavailable)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs() && strings.HasPrefix(r.URL.Path, GitPath+"/") && isLoopbackHost(r.URL.Hostname()):
		// The repository's URL asked of the proxy as a proxy (NO_PROXY unset).
		p.gitRemote(w, r)
	case r.URL.IsAbs():
		p.forward(w, r)
	case strings.HasPrefix(r.URL.Path, GitPath+"/"):
		p.gitRemote(w, r)
	default:
		p.opt.Record(Connection{Kind: KindHTTP, Host: r.Host, Reason: "not a proxy request"})
		http.Error(w, "logbook egress proxy: send requests through HTTP_PROXY/HTTPS_PROXY (absolute URLs or CONNECT)", http.StatusBadRequest)
	}
}

func kindOf(r *http.Request) string {
	if r.Method == http.MethodConnect {
		return KindConnect
	}
	return KindHTTP
}

// target is the host and port a request asks for.
func target(r *http.Request) (string, int) {
	hostport := r.Host
	if r.URL.IsAbs() {
		hostport = r.URL.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
		switch r.URL.Scheme {
		case "https":
			port = "443"
		default:
			port = "80"
		}
	}
	n, _ := strconv.Atoi(port)
	return strings.Trim(host, "[]"), n
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// dial connects to host:port if the allowlist lets it: a name is resolved here and dialed
// by address, so what was checked is what is reached.
func (p *Proxy) dial(ctx context.Context, host string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 || host == "" {
		return nil, refused("%s:%d is not a host and port", host, port)
	}
	ok, byAddr := p.opt.Allow.allows(host, port)
	if !ok {
		return nil, refused("%s is not allowed (LOGBOOK_SANDBOX_EGRESS)", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	ctx, cancel := context.WithTimeout(ctx, p.opt.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if byAddr {
		ip, _ := netip.ParseAddr(host)
		addrs = []netip.Addr{ip}
	} else {
		found, err := p.opt.Resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, refused("%s: %v", host, err)
		}
		for _, ip := range found {
			if !public(ip) {
				return nil, refused("%s resolves to %s, a non-public address; only a pattern naming the address reaches it", host, ip)
			}
		}
		addrs = found
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s: %w", host, errNoAddress)
	}
	var d net.Dialer
	var last error
	for _, ip := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// connect is a CONNECT tunnel.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	host, port := target(r)
	rec := Connection{Kind: KindConnect, Host: host, Port: port}
	up, err := p.dial(r.Context(), host, port)
	if err != nil {
		rec.Reason = err.Error()
		p.opt.Record(rec)
		status := http.StatusBadGateway
		if errors.As(err, new(errRefused)) {
			status = http.StatusForbidden
		}
		http.Error(w, "logbook egress proxy: "+err.Error(), status)
		return
	}
	rec.Allowed = true
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		rec.Allowed, rec.Reason = false, "cannot tunnel over this connection"
		p.opt.Record(rec)
		http.Error(w, "logbook egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		rec.Allowed, rec.Reason = false, err.Error()
		p.opt.Record(rec)
		return
	}
	if !p.track(down) {
		up.Close()
		down.Close()
		return
	}
	defer p.untrack(down)
	if !p.track(up) {
		up.Close()
		down.Close()
		return
	}
	defer p.untrack(up)
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		down.Close()
		p.opt.Record(rec)
		return
	}
	var out, in atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// What the client sent after its CONNECT line, already buffered, goes first.
		n, _ := io.Copy(up, io.MultiReader(io.LimitReader(rw.Reader, int64(rw.Reader.Buffered())), down))
		out.Add(n)
		closeWrite(up)
	}()
	n, _ := io.Copy(down, up)
	in.Add(n)
	closeWrite(down)
	wg.Wait()
	up.Close()
	down.Close()
	rec.BytesOut, rec.BytesIn, rec.Duration = out.Load(), in.Load(), time.Since(start)
	p.opt.Record(rec)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// hopHeaders are not forwarded (RFC 9110 section 7.6.1), nor are the sandbox's own
// credentials for the proxy.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward is a plain-http request to an allowed host.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	host, port := target(r)
	rec := Connection{Kind: KindHTTP, Host: host, Port: port}
	if r.URL.Scheme != "http" {
		rec.Reason = "only http:// is forwarded; https goes through CONNECT"
		p.opt.Record(rec)
		http.Error(w, "logbook egress proxy: "+rec.Reason, http.StatusBadRequest)
		return
	}
	up, err := p.dial(r.Context(), host, port)
	if err != nil {
		rec.Reason = err.Error()
		p.opt.Record(rec)
		status := http.StatusBadGateway
		if errors.As(err, new(errRefused)) {
			status = http.StatusForbidden
		}
		http.Error(w, "logbook egress proxy: "+err.Error(), status)
		return
	}
	rec.Allowed = true
	// One request per dialed connection: the connection checked is the one used.
	t := &http.Transport{Proxy: nil, DisableKeepAlives: true, DisableCompression: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if up == nil {
				return nil, errors.New("connection already used")
			}
			c := up
			up = nil
			return c, nil
		}}
	defer t.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	body := &countReader{r: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = body
	}
	resp, err := t.RoundTrip(out)
	if up != nil {
		up.Close()
	}
	if err != nil {
		rec.Reason, rec.BytesOut, rec.Duration = "upstream: "+err.Error(), body.n, time.Since(start)
		p.opt.Record(rec)
		http.Error(w, "logbook egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	n := copyResponse(w, resp)
	rec.BytesOut, rec.BytesIn, rec.Duration = body.n, n, time.Since(start)
	p.opt.Record(rec)
}

// copyResponse writes resp to w, flushing as it goes, and returns the body bytes written.
func copyResponse(w http.ResponseWriter, resp *http.Response) int64 {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(flushWriter{w}, resp.Body)
	return n
}

type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countReader) Close() error {
	if rc, ok := c.r.(io.Closer); ok {
		return rc.Close()
	}
	return nil
}
