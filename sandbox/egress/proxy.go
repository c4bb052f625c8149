package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
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

	"github.com/logbook/logbook/session/clip"
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
	// "git-receive-pack"), and for a push the repository took in part, which refs it
	// refused and why. A push is Allowed only when the repository took at least one ref.
	Reason string
	// BytesOut went from the sandbox to the host, BytesIn back into the sandbox.
	BytesOut, BytesIn int64
	Duration          time.Duration
	// Refs are the refs a push asked to update.
	Refs []string
	// Pushed are the refs the repository reported updated (report-status "ok"); a push
	// it refused, wholly or in part, says why in Reason.
	Pushed []string
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

	// Tests only: isPublic replaces public (to reach loopback servers by name), helloTimeout
	// bounds the wait for a tunnel's ClientHello (helloTimeout's 10 seconds).
	isPublic     func(netip.Addr) bool
	helloTimeout time.Duration
}

// Proxy serves one sandbox's connections. Serve it on a listener; Close ends everything.
//
// Every request carries the proxy's Secret, made at New: CONNECT and plain-http requests as
// the password of Proxy-Authorization (HTTP_PROXY=http://logbook:SECRET@…), requests to the
// repository in the path (GitPath). A proxy on a loopback port (the process provider, or a
// sandbox sharing the host's network) is reachable by every local process: only the sandbox
// it was made for knows the secret.
type Proxy struct {
	opt     Options
	srv     *http.Server
	secret  string
	slots   chan struct{} // requests being served
	records chan struct{} // Record calls at once: a flood waits, it does not pile up appends

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // hijacked tunnels, closed by Close
	wg     sync.WaitGroup        // tunnels and handlers
	open   sync.WaitGroup        // the server's connections, until closed or hijacked
	nconns int
	// recorded counts the records made; past maxRecords, records are summed up in
	// suppressed (by kind and verdict), given to Record at Close.
	recorded   int
	suppressed map[[2]string]*suppressedRecords
	// owned are the branches this session pushed (Remote.Owned, and since).
	owned map[string]bool
	// window is what Widen lets through besides Options.Allow, until its close (setup.go).
	window    Allowlist
	windowSet bool
}

type suppressedRecords struct {
	Connection
	n int
}

// Bounds on what one sandbox may hold open or have recorded.
const (
	maxOpenConns  = 256              // connections to the proxy at once
	idleTimeout   = 60 * time.Second // a kept-alive connection with no request
	tunnelGrace   = 30 * time.Second // a tunnel's other side, once one side is done
	maxRecordText = 256              // bytes of a record's Host and Reason
	maxRecordRefs = 20               // refs of a record
	maxRecords    = 1000             // records one by one per sandbox; the rest summed up
)

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
	if opt.isPublic == nil {
		opt.isPublic = public
	}
	if opt.helloTimeout <= 0 {
		opt.helloTimeout = helloTimeout
	}
	var key [16]byte
	if _, err := rand.Read(key[:]); err != nil {
		panic("egress: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	p := &Proxy{opt: opt, secret: hex.EncodeToString(key[:]), slots: make(chan struct{}, opt.MaxConnections),
		records: make(chan struct{}, 2), conns: map[net.Conn]struct{}{}, suppressed: map[[2]string]*suppressedRecords{},
		owned: map[string]bool{}}
	if opt.Git != nil {
		for _, b := range opt.Git.Owned {
			p.owned[b] = true
		}
	}
	if p.opt.Transport == nil {
		p.opt.Transport = &http.Transport{
			Proxy: nil, DialContext: (&net.Dialer{Timeout: opt.DialTimeout}).DialContext,
			ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second,
			// The sandbox's git decodes what the forge compressed; nothing is unpacked here.
			DisableCompression: true, IdleConnTimeout: 30 * time.Second,
		}
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: idleTimeout, ConnState: p.connState}
	return p
}

// Secret is what every request must carry (see Proxy).
func (p *Proxy) Secret() string { return p.secret }

// GitPath is the path the session's repository is served under: the sandbox's checkout
// reaches its origin as http://PROXY + GitPath (a git insteadOf rule).
func (p *Proxy) GitPath() string { return "/" + p.secret + GitPath }

// connState bounds the connections held open and tracks them, so Close can wait for their
// goroutines.
func (p *Proxy) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		p.mu.Lock()
		p.nconns++
		over := p.nconns > maxOpenConns
		p.open.Add(1)
		p.mu.Unlock()
		if over {
			_ = c.Close()
		}
	case http.StateClosed, http.StateHijacked:
		p.mu.Lock()
		p.nconns--
		p.mu.Unlock()
		p.open.Done()
	}
}

// record hands c to Options.Record, cut to size, at most two at a time.
func (p *Proxy) record(c Connection) {
	c.Host, c.Reason = clip.Text(c.Host, maxRecordText), clip.Text(c.Reason, maxRecordText)
	c.Refs, c.Pushed = cutRefs(c.Refs), cutRefs(c.Pushed)
	p.mu.Lock()
	if p.recorded >= maxRecords {
		key := [2]string{c.Kind, strconv.FormatBool(c.Allowed)}
		sum := p.suppressed[key]
		if sum == nil {
			sum = &suppressedRecords{Connection: Connection{Kind: c.Kind, Host: "*", Allowed: c.Allowed}}
			p.suppressed[key] = sum
		}
		sum.n++
		sum.BytesOut += c.BytesOut
		sum.BytesIn += c.BytesIn
		sum.Duration += c.Duration
		p.mu.Unlock()
		return
	}
	p.recorded++
	p.mu.Unlock()
	p.records <- struct{}{}
	defer func() { <-p.records }()
	p.opt.Record(c)
}

// cutRefs is refs cut to maxRecordRefs, each to maxRecordText. (A cut name ends in "...",
// which no ref name may hold: it is never taken for another branch.)
func cutRefs(refs []string) []string {
	if refs == nil {
		return nil
	}
	out := make([]string, 0, min(len(refs), maxRecordRefs+1))
	for i, r := range refs {
		if i == maxRecordRefs {
			out = append(out, fmt.Sprintf("... %d more", len(refs)-maxRecordRefs))
			break
		}
		out = append(out, clip.Text(r, maxRecordText))
	}
	return out
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
	p.open.Wait()
	p.mu.Lock()
	sums := p.suppressed
	p.suppressed = map[[2]string]*suppressedRecords{}
	p.mu.Unlock()
	for _, sum := range sums {
		c := sum.Connection
		c.Reason = fmt.Sprintf("%d more connections like this, summed up here: over %d in this sandbox are not recorded one by one", sum.n, maxRecords)
		p.opt.Record(c)
	}
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
		p.record(Connection{Kind: kindOf(r), Host: host, Port: port, Reason: "too many connections at once"})
		http.Error(w, "logbook egress proxy: too many connections at once", http.StatusServiceUnavailable)
		return
	}
	switch {
	case r.Method != http.MethodConnect && p.gitRequest(r.URL.Path) && (!r.URL.IsAbs() || IsLoopbackHost(r.URL.Hostname())):
		// The repository, asked directly or (NO_PROXY unset) of the proxy as a proxy.
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/"+p.secret)
		p.gitRemote(w, r)
	case r.Method != http.MethodConnect && !r.URL.IsAbs():
		p.record(Connection{Kind: KindHTTP, Host: r.Host, Reason: "not a proxy request"})
		http.Error(w, "logbook egress proxy: send requests through HTTP_PROXY/HTTPS_PROXY (absolute URLs or CONNECT)", http.StatusBadRequest)
	case !p.authorized(r):
		host, port := target(r)
		p.record(Connection{Kind: kindOf(r), Host: host, Port: port, Reason: "no proxy credentials (HTTP_PROXY carries them)"})
		w.Header().Set("Proxy-Authenticate", `Basic realm="logbook egress"`)
		http.Error(w, "logbook egress proxy: proxy credentials required (use HTTP_PROXY as set)", http.StatusProxyAuthRequired)
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	default:
		p.forward(w, r)
	}
}

// gitRequest reports whether path is under GitPath (the secret compared in constant time).
func (p *Proxy) gitRequest(path string) bool {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return false
	}
	secret, rest, _ := strings.Cut(rest, "/")
	return subtle.ConstantTimeCompare([]byte(secret), []byte(p.secret)) == 1 && strings.HasPrefix("/"+rest, GitPath+"/")
}

// authorized reports whether r carries the proxy's secret as its proxy password.
func (p *Proxy) authorized(r *http.Request) bool {
	auth, ok := strings.CutPrefix(r.Header.Get("Proxy-Authorization"), "Basic ")
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(auth))
	if err != nil {
		return false
	}
	_, pass, _ := strings.Cut(string(raw), ":")
	return subtle.ConstantTimeCompare([]byte(pass), []byte(p.secret)) == 1
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

// IsLoopbackHost reports whether h (a host, no port) is localhost or a loopback address.
func IsLoopbackHost(h string) bool {
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
		ok, byAddr = p.widened(host, port)
	}
	if !ok {
		return nil, refused("%s is not on the sandbox's egress allowlist", net.JoinHostPort(host, strconv.Itoa(port)))
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
			if !p.opt.isPublic(ip) {
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

// refuse records rec as refused for err and tells the sandbox: 403 for the policy, 502 for a
// dial that failed.
func (p *Proxy) refuse(w http.ResponseWriter, rec Connection, err error) {
	rec.Allowed, rec.Reason = false, err.Error()
	p.record(rec)
	status := http.StatusBadGateway
	if errors.As(err, new(refusedError)) {
		status = http.StatusForbidden
	}
	http.Error(w, "logbook egress proxy: "+err.Error(), status)
}

// connect is a CONNECT tunnel.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	host, port := target(r)
	rec := Connection{Kind: KindConnect, Host: host, Port: port}
	up, err := p.dial(r.Context(), host, port)
	if err != nil {
		p.refuse(w, rec, err)
		return
	}
	rec.Allowed = true
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		rec.Allowed, rec.Reason = false, "cannot tunnel over this connection"
		p.record(rec)
		http.Error(w, "logbook egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		rec.Allowed, rec.Reason = false, err.Error()
		p.record(rec)
		return
	}
	if !p.track(down) || !p.track(up) {
		up.Close()
		down.Close()
		p.untrack(down)
		rec.Allowed, rec.Reason = false, "the sandbox is closing"
		p.record(rec)
		return
	}
	defer p.untrack(down)
	defer p.untrack(up)
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		down.Close()
		p.record(rec)
		return
	}
	hello, err := p.checkHello(down, rw.Reader, host)
	if err != nil {
		up.Close()
		down.Close()
		rec.Allowed, rec.Reason, rec.Duration = false, err.Error(), time.Since(start)
		p.record(rec)
		return
	}
	var out, in atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The ClientHello, then what the client sent after it, already buffered, go first.
		n, _ := io.Copy(up, io.MultiReader(bytes.NewReader(hello), io.LimitReader(rw.Reader, int64(rw.Reader.Buffered())), down))
		out.Add(n)
		closeWrite(up)
		// The sandbox is done sending: the other side gets a while to finish, not forever.
		_ = up.SetReadDeadline(time.Now().Add(tunnelGrace))
	}()
	n, _ := io.Copy(down, up)
	in.Add(n)
	closeWrite(down)
	_ = down.SetReadDeadline(time.Now().Add(tunnelGrace))
	wg.Wait()
	up.Close()
	down.Close()
	rec.BytesOut, rec.BytesIn, rec.Duration = out.Load(), in.Load(), time.Since(start)
	p.record(rec)
}

// checkHello reads the ClientHello a tunnel to host starts with (br reads down) and returns
// it, to be sent on; or refuses the tunnel, with a TLS alert when it was TLS. A tunnel to a
// name must be TLS naming that name (SNI): through a shared front (a CDN) another would reach
// another site. A tunnel to an address (allowed only by a pattern naming it) carries
// anything, unread: TLS names no address (RFC 6066), and the pattern names the machine.
func (p *Proxy) checkHello(down net.Conn, br io.Reader, host string) ([]byte, error) {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil, nil
	}
	_ = down.SetReadDeadline(time.Now().Add(p.opt.helloTimeout))
	raw, hello, err := readClientHello(br)
	_ = down.SetReadDeadline(time.Time{})
	var name string
	if err == nil {
		name, err = serverName(hello)
	}
	want := strings.ToLower(strings.TrimSuffix(host, "."))
	if err == nil && strings.TrimSuffix(name, ".") != want {
		err = fmt.Errorf("the TLS ClientHello names %s, not %s, the host the tunnel was allowed for", clip.Text(name, maxRecordText), want)
	}
	if err != nil {
		if !errors.Is(err, errNotHello) {
			_, _ = down.Write(unrecognizedName)
		}
		return nil, fmt.Errorf("tunnel refused: %w", err)
	}
	return raw, nil
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
		p.record(rec)
		http.Error(w, "logbook egress proxy: "+rec.Reason, http.StatusBadRequest)
		return
	}
	up, err := p.dial(r.Context(), host, port)
	if err != nil {
		p.refuse(w, rec, err)
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
		p.record(rec)
		http.Error(w, "logbook egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	n := copyResponse(w, resp)
	rec.BytesOut, rec.BytesIn, rec.Duration = body.n, n, time.Since(start)
	p.record(rec)
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
