// Package connectors offers the tools of MCP servers (the Model Context Protocol, through the
// official Go SDK) to a channel's turns, as tools named mcp__<server>__<tool>.
//
// # Lifecycle
//
// cmd/logbook loads LOGBOOK_MCP_CONFIG once ([Load]) and builds one [Connectors]. A session's
// cell asks it for a [Session] bound to the session's channel and sandbox and closes it when
// the cell ends (before its sandbox). A Session connects to a server on first use: a remote
// server (streamable HTTP, or the older HTTP+SSE where that is all it offers) is called by
// logbook itself, with the server's headers added here, outside the sandbox; a local (stdio)
// server is started inside the session's sandbox ([Sandbox].Start), so its network goes
// through the sandbox's egress proxy, and its env reaches that process only. The tool lists
// are fetched once per Session and cached; a notifications/tools/list_changed from a server
// drops its list, and the next [Session.Tools] fetches it again.
//
// # OAuth
//
// A remote server with an oauth key is connected per channel by an admin on the web pages
// ([Connectors.StartOAuth], [Connectors.TakeOAuth], [Connectors.FinishOAuth]: authorization
// code with PKCE and the resource parameter). The endpoints are the file's, or discovered
// from the server (discover.go: RFC 9728, then RFC 8414 or OpenID Connect discovery, through
// the go-sdk's oauthex and auth packages). A connect begun and not finished is kept in the
// database, sealed, under its state's hash, so its callback may land on any replica, once.
// The token is stored sealed with LOGBOOK_SECRET_KEY ([SecretKey], [TokenStore]), refreshed
// here by Options.Now when it expires and stored again, and added as Authorization: Bearer
// to the server's requests by logbook, never given to the sandbox or the model.
//
// # Errors
//
// Nothing here fails a turn: a server that cannot be started or reached is left out of
// [Session.Tools] (with a log line; the part says so under the reply, once per thread, and
// the replica leaves it out of the channel's threads for a back-off, health.go), and a call
// that fails, times out or finds its server gone is a [Result] with IsError that the model
// reads. Values the file took from the environment (tokens in
// headers or URLs) are scrubbed from every message and log line.
package connectors

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// Prefix begins every tool name this package offers: mcp__<server>__<tool>.
const Prefix = "mcp__"

// IsTool reports whether name is a connector tool's name.
func IsTool(name string) bool { return strings.HasPrefix(name, Prefix) }

// Sandbox starts a local server's process in the session's sandbox (hands.Hands).
type Sandbox interface {
	Start(ctx context.Context, req sandbox.StartRequest) (*sandbox.Process, error)
}

// Options are the parts a Connectors works with; zero values take the defaults noted.
type Options struct {
	Logger zerolog.Logger
	// Transport carries the requests to remote servers (nil: a transport of each connection's
	// own, closed with it). The servers' headers are added to each request on its way out.
	Transport http.RoundTripper
	// ConnectTimeout bounds connecting to a server and listing its tools (default 20s);
	// CallTimeout bounds one tool call (default 2m).
	ConnectTimeout, CallTimeout time.Duration
	// RetryAfter is how long the threads of a channel leave out a server that could not be
	// started or reached before one tries again when listing tools (default 1m), doubling
	// with each failure in a row up to 16 times that, so a failing server does not cost every
	// model call and every new thread its ConnectTimeout. A call of its tool always tries.
	RetryAfter time.Duration
	// Now is the clock (default time.Now); OAuth tokens expire by it.
	Now func() time.Time
	// Tokens and Key keep the OAuth tokens of servers with oauth, sealed with Key
	// (LOGBOOK_SECRET_KEY); nil: such servers cannot be connected.
	Tokens TokenStore
	Key    *SecretKey
	// Descriptions keeps what each channel's servers' tools say they do, so a description
	// that changes is told (nil: changes are not watched).
	Descriptions Descriptions
}

// Descriptions keeps what each channel's servers' tools say they do (*session.Store has it):
// NoteToolDescriptions keeps a server's list as a session listed it and returns the tools
// whose description changed since the channel's sessions last listed them, each to one
// session only.
type Descriptions interface {
	NoteToolDescriptions(ctx context.Context, channel, server string, tools []session.ToolDescription, at time.Time) ([]session.ToolDescriptionChange, error)
}

// Connectors is the configured MCP servers. It is safe for concurrent use.
type Connectors struct {
	cfg  Config
	opts Options
	log  zerolog.Logger
	disc discovered // OAuth endpoints discovered, by server
	// health is the servers' recent failures on this replica, per channel: a thread leaves a
	// failing server out without trying until its back-off ends.
	health health
}

// New returns the connectors of cfg.
func New(cfg Config, opts Options) *Connectors {
	opts.ConnectTimeout = cmp.Or(opts.ConnectTimeout, 20*time.Second)
	opts.CallTimeout = cmp.Or(opts.CallTimeout, 2*time.Minute)
	opts.RetryAfter = cmp.Or(opts.RetryAfter, time.Minute)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Connectors{cfg: cfg, opts: opts, log: opts.Logger.With().Str("component", "mcp").Logger(), disc: discovered{m: map[string]discovery{}}}
}

// Servers is every configured server, by name.
func (c *Connectors) Servers() []Server { return c.cfg.Servers }

// Offered is the servers offered in the channel with this id and name.
func (c *Connectors) Offered(channelID, channelName string) []Server {
	var out []Server
	for _, s := range c.cfg.Servers {
		if s.inChannel(channelID, channelName) {
			out = append(out, s)
		}
	}
	return out
}

// redact scrubs the configured secrets from s.
func (c *Connectors) redact(s string) string {
	for _, v := range c.cfg.Secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// Session returns the connectors of one session in a channel: the servers offered there,
// connected on first use. sb runs its local servers (nil: local servers are unavailable).
// Close it when the session's cell ends.
func (c *Connectors) Session(channelID, channelName string, sb Sandbox, log zerolog.Logger) *Session {
	s := &Session{c: c, sb: sb, channel: channelID, log: log.With().Str("component", "mcp").Logger(), conns: map[string]*conn{}}
	for _, srv := range c.Offered(channelID, channelName) {
		s.servers = append(s.servers, srv)
	}
	return s
}

// MaxDescription bounds a server's description of a tool, in bytes, as the model gets it:
// every call of every thread in the channel carries it.
const MaxDescription = 1 << 10

// Tool is one tool offered to the model.
type Tool struct {
	Name        string // mcp__<server>__<tool>, as the model sees it
	Server      string
	Tool        string // the server's own name of the tool
	Description string
	Schema      map[string]any // a JSON Schema of type object
	ReadOnly    bool           // the server marks it read-only (readOnlyHint): safe to repeat
	Approve     bool           // the file's approve names it: a person approves each call

	full string // the description as the server sent it
}

// Result is what a call did, for the model: its text, and the images it returned (the
// brain shows those the model APIs take as images, and names the rest with type and size).
type Result struct {
	Content string
	IsError bool
	Images  []Image
}

// Image is an image a tool returned (MCP ImageContent), decoded.
type Image struct {
	MIMEType string // as the server declared it
	Data     []byte
}

// Session is one session's connectors. Its methods are safe for concurrent use.
type Session struct {
	c       *Connectors
	sb      Sandbox
	channel string // the channel's id
	log     zerolog.Logger
	servers []Server

	mu      sync.Mutex
	conns   map[string]*conn
	dialing map[string]*sync.Mutex
	down    map[string]string // the servers left out of the tools, and why
	changed []Change          // descriptions changed, not yet taken (Changes)
	closed  bool
}

// Change is a tool whose description changed since the channel's sessions first listed it:
// a server that rewrites what its tool tells the model after it was trusted (a "rug pull").
type Change struct {
	Server string
	Name   string // as the model calls it
	session.ToolDescriptionChange
}

// Changes takes the description changes this session's listings met since the last call.
func (s *Session) Changes() []Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.changed
	s.changed = nil
	return out
}

// Offers reports whether any server is offered in the session's channel.
func (s *Session) Offers() bool { return len(s.servers) > 0 }

// Tools is the tools offered to the model: every reachable server's, filtered by the file's
// tools patterns, each list fetched once and then cached until the server says it changed. A
// server that cannot be started or reached, or lists its tools with an error, is left out
// with a log line, and with its reason in [Session.Unavailable]; so is a tool whose name or
// schema a model API would refuse. A server that failed in the channel on this replica is
// left out without trying until its back-off (Options.RetryAfter) ends.
func (s *Session) Tools(ctx context.Context) []Tool {
	var out []Tool
	for _, srv := range s.servers {
		if f, ok := s.c.health.last(srv.Name, s.channel); ok && s.c.opts.Now().Before(f.Until) {
			s.setDown(srv.Name, f.Error)
			continue
		}
		tools, err := s.toolsOf(ctx, srv)
		if err != nil {
			why := s.c.reason(srv, err)
			f := s.c.health.failed(srv.Name, s.channel, why, s.c.opts.Now(), s.c.opts.RetryAfter)
			s.setDown(srv.Name, why)
			s.log.Warn().Str("server", srv.Name).Str("error", why).Time("retry_after", f.Until).Msg("MCP server unreachable: its tools are not offered")
			continue
		}
		s.c.health.ok(srv.Name, s.channel)
		s.setDown(srv.Name, "")
		out = append(out, tools...)
	}
	return out
}

// setDown records why the server is left out of the session's tools ("": it is not).
func (s *Session) setDown(server, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if why == "" {
		delete(s.down, server)
		return
	}
	if s.down == nil {
		s.down = map[string]string{}
	}
	s.down[server] = why
}

// Unavailable is the servers the last [Session.Tools] left out because they could not be
// started or reached, with why, in the file's order.
func (s *Session) Unavailable() []Down {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Down
	for _, srv := range s.servers {
		if why, ok := s.down[srv.Name]; ok {
			out = append(out, Down{Server: srv.Name, Transport: srv.Transport, Remote: srv.Remote(), Error: why})
		}
	}
	return out
}

// Down is a server left out of a session's tools, and why (secrets scrubbed).
type Down struct {
	Server, Transport string
	Remote            bool
	Error             string
}

// Approve reports whether a call of the tool named name needs an approval card (the file's
// approve patterns; LOGBOOK_TOOL_APPROVAL is the turn's to apply).
func (s *Session) Approve(name string) bool {
	srv, tool, ok := s.split(name)
	return ok && srv.needsApproval(tool, name)
}

// split finds the server and tool of an offered name; the tool is the server's own name
// when the list holds it (names are sanitised for the model), else the name's tail.
func (s *Session) split(name string) (Server, string, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return Server{}, "", false
	}
	server, tool, ok := strings.Cut(rest, "__")
	if !ok {
		return Server{}, "", false
	}
	for _, srv := range s.servers {
		if srv.Name != server {
			continue
		}
		s.mu.Lock()
		if c := s.conns[server]; c != nil {
			for _, t := range c.tools {
				if t.Name == name {
					tool = t.Tool
				}
			}
		}
		s.mu.Unlock()
		return srv, tool, true
	}
	return Server{}, "", false
}

// Call calls the tool named name (mcp__<server>__<tool>) with input, a JSON object. Every
// failure — a server not offered here, unreachable, an error, a timeout — is a Result with
// IsError; only ctx's end stops it early.
func (s *Session) Call(ctx context.Context, name string, input json.RawMessage) Result {
	srv, tool, ok := s.split(name)
	if !ok {
		return Result{Content: fmt.Sprintf("%s is not offered in this channel", name), IsError: true}
	}
	if !srv.offers(tool) {
		return Result{Content: fmt.Sprintf("%s is not allowed by the connector's tools patterns", name), IsError: true}
	}
	args := map[string]any{}
	if len(input) > 0 && string(input) != "null" {
		if err := json.Unmarshal(input, &args); err != nil {
			return Result{Content: "the tool input is not a JSON object: " + err.Error(), IsError: true}
		}
	}
	c, err := s.connect(ctx, srv)
	if err != nil {
		return Result{Content: fmt.Sprintf("MCP server %s is unreachable: %s", srv.Name, s.c.redact(err.Error())), IsError: true}
	}
	callCtx, cancel := context.WithTimeout(ctx, s.c.opts.CallTimeout)
	defer cancel()
	res, err := c.cs.CallTool(callCtx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if errors.Is(err, mcp.ErrSessionMissing) {
		// The server no longer knows the session (it restarted, or the session expired): it
		// refused the call unread, so the same call — under the same approval — is made once
		// more on a new session.
		s.log.Info().Str("server", srv.Name).Msg("MCP server lost the session; connecting again and repeating the call once")
		s.drop(srv.Name, c)
		if c, err = s.connect(ctx, srv); err != nil {
			return Result{Content: fmt.Sprintf("MCP server %s is unreachable: %s", srv.Name, s.c.redact(err.Error())), IsError: true}
		}
		res, err = c.cs.CallTool(callCtx, &mcp.CallToolParams{Name: tool, Arguments: args})
	}
	switch {
	case err != nil && ctx.Err() == nil && callCtx.Err() != nil:
		return Result{Content: fmt.Sprintf("MCP server %s did not answer %s within %s; the call's outcome is unknown", srv.Name, tool, s.c.opts.CallTimeout), IsError: true}
	case err != nil:
		s.drop(srv.Name, c) // a broken connection is made again on the next use
		return Result{Content: fmt.Sprintf("MCP server %s failed the call of %s: %s", srv.Name, tool, clipText(s.c.redact(c.sent.scrub(err.Error())), 500)), IsError: true}
	}
	text, images := render(res)
	// Whatever logbook added to the requests is not the server's to hand back: an echoed
	// token would reach the model, the log, transcripts and the pages.
	return Result{Content: s.c.redact(c.sent.scrub(text)), IsError: res.IsError, Images: images}
}

// Close ends every connection and stops the local servers. It is idempotent.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[string]*conn{}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// toolNamePart is what a model API takes in a tool's name.
var toolNamePart = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// maxToolName is the longest tool name the model APIs take.
const maxToolName = 64

// offered turns a server's tool list into the tools offered: filtered by the patterns, named
// for the model, with a schema the APIs take; left-out tools get a log line.
func (s *Session) offered(srv Server, list []*mcp.Tool) []Tool {
	var out []Tool
	for _, t := range list {
		if t == nil || !srv.offers(t.Name) {
			continue
		}
		name := Prefix + srv.Name + "__" + toolNamePart.ReplaceAllString(t.Name, "_")
		if len(name) > maxToolName || t.Name == "" {
			s.log.Warn().Str("server", srv.Name).Str("tool", t.Name).Msg("MCP tool left out: its name mcp__<server>__<tool> is longer than the 64 characters the model APIs take")
			continue
		}
		if slices.ContainsFunc(out, func(o Tool) bool { return o.Name == name }) {
			s.log.Warn().Str("server", srv.Name).Str("tool", t.Name).Msg("MCP tool left out: its name collides with another tool's once made safe for the model APIs")
			continue
		}
		schema, why := modelSchema(t.InputSchema)
		if schema == nil {
			s.log.Warn().Str("server", srv.Name).Str("tool", t.Name).Str("why", why).Msg("MCP tool left out: its input schema cannot be given to the model")
			continue
		}
		if why != "" {
			s.log.Info().Str("server", srv.Name).Str("tool", t.Name).Str("why", why).Msg("MCP tool's input schema simplified for the model APIs")
		}
		tool := Tool{Name: name, Server: srv.Name, Tool: t.Name, Description: clipText(cmp.Or(t.Description, t.Title), MaxDescription), Schema: schema,
			full: cmp.Or(t.Description, t.Title)}
		if t.Annotations != nil {
			tool.ReadOnly = t.Annotations.ReadOnlyHint
		}
		tool.Approve = srv.needsApproval(t.Name, name)
		out = append(out, tool)
	}
	return out
}

// maxSchema is the largest input schema offered as is, in bytes of JSON.
const maxSchema = 32 << 10

// modelSchema is schema as the model APIs take it: a JSON object of type object, without the
// combinators (oneOf, anyOf, allOf, not, enum) Anthropic refuses at its top level. why says
// what was simplified (""), or, with a nil schema, why none can be offered.
func modelSchema(schema any) (map[string]any, string) {
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, "the schema is not JSON: " + err.Error()
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		if string(data) == "null" {
			return map[string]any{"type": "object"}, "no input schema: an object of any properties"
		}
		return nil, "the schema is not a JSON object"
	}
	var why []string
	if len(data) > maxSchema {
		return map[string]any{"type": "object", "additionalProperties": true},
			fmt.Sprintf("the schema is %d bytes, over %d: replaced by an object of any properties", len(data), maxSchema)
	}
	if t, ok := m["type"]; ok && t != "object" {
		return nil, fmt.Sprintf("the schema's type is %v, not object", t)
	}
	m["type"] = "object"
	for _, k := range []string{"oneOf", "anyOf", "allOf", "not", "enum", "const"} {
		if _, ok := m[k]; ok {
			delete(m, k)
			why = append(why, "top-level "+k+" removed")
		}
	}
	if _, ok := m["properties"].(map[string]any); !ok {
		if _, has := m["properties"]; has {
			why = append(why, "properties not an object: removed")
		}
		delete(m, "properties")
	}
	return m, strings.Join(why, "; ")
}

// render is a call's result for the model: text kept; images returned apart (in order); audio
// and blobs named with their type and size; resource links named.
func render(res *mcp.CallToolResult) (string, []Image) {
	var parts []string
	var images []Image
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			images = append(images, Image{MIMEType: c.MIMEType, Data: c.Data})
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s %s]", c.Name, c.URI, c.MIMEType))
		case *mcp.EmbeddedResource:
			parts = append(parts, renderResource(c.Resource))
		default:
			parts = append(parts, fmt.Sprintf("[%T content, not shown]", c))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n"), images
}

func renderResource(r *mcp.ResourceContents) string {
	switch {
	case r == nil:
		return "[empty resource]"
	case r.Text != "":
		return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
	default:
		return fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", r.URI, r.MIMEType, len(r.Blob))
	}
}

// clipText keeps at most n bytes of s, on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + "…"
}

var errClosed = errors.New("the session's connectors are closed")
