package connectors

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// conn is one session's connection to one server: the SDK's client session, the local
// server's process (stdio), and the tool list as last fetched.
type conn struct {
	cs    *mcp.ClientSession
	proc  *sandbox.Process // local servers only
	http  *http.Transport  // remote servers only: closed with the connection
	ended chan struct{}    // closed once the client session has ended
	stop  context.CancelFunc

	stale atomic.Bool // the server said its tools changed (notifications/tools/list_changed)
	tools []Tool      // the tools as last listed, nil until then; under Session.mu
	// sent is every credential logbook put on a request to the server (remote servers), to
	// scrub from what the server answers.
	sent credentials
}

func (c *conn) alive() bool {
	select {
	case <-c.ended:
		return false
	default:
		return true
	}
}

// close ends the client session, stops the local server's process and waits for both.
func (c *conn) close() {
	_ = c.cs.Close()
	c.stop()
	if c.proc != nil {
		_ = c.proc.Close()
	}
	<-c.ended
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
}

// connect returns the live connection to srv, connecting (again) when there is none or the
// last one broke.
func (s *Session) connect(ctx context.Context, srv Server) (*conn, error) {
	lock := s.dialLock(srv.Name)
	lock.Lock()
	defer lock.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	old := s.conns[srv.Name]
	s.mu.Unlock()
	if old != nil && old.alive() {
		return old, nil
	}
	if old != nil {
		s.drop(srv.Name, old)
	}
	ctx, cancel := context.WithTimeout(ctx, s.c.opts.ConnectTimeout)
	defer cancel()
	c, err := s.dial(ctx, srv)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.close()
		return nil, errClosed
	}
	s.conns[srv.Name] = c
	s.mu.Unlock()
	s.log.Info().Str("server", srv.Name).Str("transport", srv.Transport).Msg("MCP server connected")
	return c, nil
}

// dialLock serialises the connecting to one server.
func (s *Session) dialLock(name string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dialing == nil {
		s.dialing = map[string]*sync.Mutex{}
	}
	if s.dialing[name] == nil {
		s.dialing[name] = &sync.Mutex{}
	}
	return s.dialing[name]
}

// drop forgets c (when it is still srv's connection) and closes it.
func (s *Session) drop(name string, c *conn) {
	s.mu.Lock()
	if s.conns[name] == c {
		delete(s.conns, name)
	}
	s.mu.Unlock()
	c.close()
}

// dial connects to srv: a remote server over streamable HTTP (HTTP+SSE when that fails, or
// when the file says sse), a local one over the stdio of a process in the sandbox.
func (s *Session) dial(ctx context.Context, srv Server) (*conn, error) {
	c := &conn{ended: make(chan struct{})}
	client := mcp.NewClient(&mcp.Implementation{Name: "logbook", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.stale.Store(true) },
		Capabilities:           &mcp.ClientCapabilities{},
	})
	// The connection outlives the call that made it: its streams end with close, not ctx.
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = stop
	// ...unless ctx ends while it is being made.
	unbind := context.AfterFunc(ctx, stop)
	defer unbind()
	var err error
	switch srv.Transport {
	case TransportStdio:
		err = s.dialLocal(ctx, client, srv, c)
	default:
		err = s.dialRemote(ctx, life, client, srv, c)
	}
	if err != nil {
		stop()
		if c.proc != nil {
			_ = c.proc.Close()
		}
		if c.http != nil {
			c.http.CloseIdleConnections()
		}
		return nil, c.sent.scrubbed(err)
	}
	go func() {
		_ = c.cs.Wait()
		close(c.ended)
	}()
	return c, nil
}

func (s *Session) dialRemote(ctx, life context.Context, client *mcp.Client, srv Server, c *conn) error {
	c.http = http.DefaultTransport.(*http.Transport).Clone()
	var base http.RoundTripper = c.http
	if s.c.opts.Transport != nil {
		base = s.c.opts.Transport
	}
	tokenBase := base // the authorization server is another origin, by design
	origin, err := originOf(srv.URL)
	if err != nil {
		return err
	}
	// The last layer before the network: requests go to the server's own origin only, with
	// what the layers above added (the headers, the OAuth token), which it keeps to scrub.
	base = outbound{base: base, origin: origin, server: srv.Name, set: srv.Headers, sent: &c.sent, log: s.log}
	var rt http.RoundTripper = headers{base: base, set: srv.Headers}
	if srv.OAuth != nil {
		// The bearer token is added here, by logbook: it never reaches the sandbox or the model.
		src, err := s.tokenSource(ctx, srv, &http.Client{Transport: tokenBase})
		if err != nil {
			return err
		}
		rt = &oauth2.Transport{Source: src, Base: rt}
	}
	hc := &http.Client{Transport: rt, CheckRedirect: sameOrigin(origin)}
	if srv.Transport == TransportHTTP {
		c.cs, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: 1}, nil)
		if err == nil {
			return nil
		}
		s.log.Info().Str("server", srv.Name).Str("error", s.c.redact(err.Error())).Msg("MCP server refused streamable HTTP; trying HTTP+SSE")
	}
	var sseErr error
	c.cs, sseErr = client.Connect(ctx, lasting{life: life, t: &mcp.SSEClientTransport{Endpoint: srv.URL, HTTPClient: hc}}, nil)
	if sseErr == nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("streamable HTTP: %w; HTTP+SSE: %v", err, sseErr)
	}
	return sseErr
}

func (s *Session) dialLocal(ctx context.Context, client *mcp.Client, srv Server, c *conn) error {
	if s.sb == nil {
		return errors.New("local MCP servers run in the session's sandbox, and this deployment has none")
	}
	env := make([]string, 0, len(srv.Env))
	for k, v := range srv.Env {
		env = append(env, k+"="+v)
	}
	proc, err := s.sb.Start(ctx, sandbox.StartRequest{Argv: append([]string{srv.Command}, srv.Args...), Env: env})
	if err != nil {
		return fmt.Errorf("start %s in the sandbox: %w", srv.Command, err)
	}
	c.proc = proc
	c.cs, err = client.Connect(ctx, &mcp.IOTransport{Reader: proc.Stdout, Writer: proc.Stdin}, nil)
	if err != nil {
		if tail := proc.Stderr(); tail != "" {
			return fmt.Errorf("%w (its stderr ends: %s)", err, clipText(tail, 300))
		}
		return err
	}
	return nil
}

// toolsOf is srv's offered tools: the cached list, or a fresh one when there is none yet or
// the server said it changed.
func (s *Session) toolsOf(ctx context.Context, srv Server) ([]Tool, error) {
	c, err := s.connect(ctx, srv)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	tools := c.tools
	s.mu.Unlock()
	if tools != nil && !c.stale.Load() {
		return tools, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.c.opts.ConnectTimeout)
	defer cancel()
	c.stale.Store(false)
	var list []*mcp.Tool
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			c.stale.Store(true)
			return nil, c.sent.scrubbed(fmt.Errorf("list tools: %w", err))
		}
		list = append(list, t)
	}
	tools = s.offered(srv, list)
	if tools == nil {
		tools = []Tool{}
	}
	changes := s.note(ctx, srv, tools)
	s.mu.Lock()
	c.tools = tools
	s.changed = append(s.changed, changes...)
	s.mu.Unlock()
	return tools, nil
}

// note keeps what srv's tools say they do in the session's channel and returns those whose
// description changed since. A store that fails costs the watch, not the tools: logged.
func (s *Session) note(ctx context.Context, srv Server, tools []Tool) []Change {
	store := s.c.opts.Descriptions
	if store == nil || len(tools) == 0 {
		return nil
	}
	list := make([]session.ToolDescription, 0, len(tools))
	names := map[string]string{}
	for _, t := range tools {
		list = append(list, session.ToolDescription{Tool: t.Tool, Full: t.full, Description: t.Description})
		names[t.Tool] = t.Name
	}
	found, err := store.NoteToolDescriptions(ctx, s.channel, srv.Name, list, s.c.opts.Now())
	if err != nil {
		s.log.Warn().Err(err).Str("server", srv.Name).Msg("MCP tool descriptions not compared with what the channel saw before")
		return nil
	}
	var out []Change
	for _, f := range found {
		s.log.Warn().Str("server", srv.Name).Str("tool", f.Tool).Time("first_seen", f.FirstSeen).
			Msg("MCP server changed what its tool says it does since the channel first listed it")
		out = append(out, Change{Server: srv.Name, Name: names[f.Tool], ToolDescriptionChange: f})
	}
	return out
}

// headers adds a server's headers to every request, outside the sandbox.
type headers struct {
	base http.RoundTripper
	set  map[string]string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.set) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.set {
			r.Header.Set(k, v)
		}
	}
	return h.base.RoundTrip(r)
}

// lasting connects t with life instead of the caller's ctx: the SSE transport holds its
// stream open with the context it connects with.
type lasting struct {
	life context.Context
	t    mcp.Transport
}

func (l lasting) Connect(context.Context) (mcp.Connection, error) { return l.t.Connect(l.life) }
