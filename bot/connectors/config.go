package connectors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Server is one MCP server of the file: remote (URL, Headers) or local (Command, Args, Env),
// with logbook's own keys. Every string is already expanded.
type Server struct {
	Name string
	// Transport is "http" (streamable HTTP, falling back to the older HTTP+SSE when the server
	// offers only that), "sse" (HTTP+SSE only) or "stdio" (a local command).
	Transport string
	URL       string
	Headers   map[string]string
	Command   string
	Args      []string
	Env       map[string]string
	// Channels are the channel ids (C0123ABCD) or names (#ops, ops) where the server is
	// offered; none: nowhere.
	Channels []string
	// Allow and Deny are patterns (path.Match syntax) of the server's own tool names: a tool is
	// offered when it matches an Allow pattern (or Allow is empty) and no Deny pattern.
	Allow, Deny []string
	// Approve are patterns of tools whose calls need an approval card, matched against the
	// server's tool name and the name the model sees (mcp__<server>__<tool>).
	Approve []string
	// OAuth, when set, has logbook add an OAuth access token (Authorization: Bearer) to the
	// server's requests: an admin connects the server once per channel on the web pages.
	OAuth *OAuth
}

// OAuth is a remote server's OAuth client (the file's "oauth" key): the authorization code
// flow with PKCE at AuthURL and TokenURL, each discovered from the server when left out
// (RFC 9728, then RFC 8414 or OpenID Connect discovery); Scopes, when left out, are those
// the server's metadata asks for.
type OAuth struct {
	ClientID     string
	ClientSecret string // may be empty: a public client
	AuthURL      string
	TokenURL     string
	Scopes       []string
}

// Remote reports whether logbook itself calls the server (outside the sandbox).
func (s Server) Remote() bool { return s.Transport != TransportStdio }

// Transports of Server.Transport.
const (
	TransportHTTP  = "http"
	TransportSSE   = "sse"
	TransportStdio = "stdio"
)

// Config is the parsed LOGBOOK_MCP_CONFIG file. Secrets are the values the file took from
// the environment: they are scrubbed from every error and log line the package writes.
type Config struct {
	Servers []Server // by name
	Secrets []string
}

var serverName = regexp.MustCompile(`^[a-z0-9_-]+$`)

// rawServer is a server as the file has it; unknown keys are refused.
type rawServer struct {
	Type     string            `json:"type"`
	URL      string            `json:"url"`
	Headers  map[string]string `json:"headers"`
	Command  string            `json:"command"`
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Channels []string          `json:"channels"`
	Tools    *struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	} `json:"tools"`
	Approve []string  `json:"approve"`
	OAuth   *rawOAuth `json:"oauth"`
}

type rawOAuth struct {
	ClientID     string   `json:"client_id"`
	ClientSecret string   `json:"client_secret"`
	AuthURL      string   `json:"authorization_url"`
	TokenURL     string   `json:"token_url"`
	Scopes       []string `json:"scopes"`
}

// ConfigError names the server and the key of the file that is wrong.
type ConfigError struct {
	File, Server, Key string
	Err               error
}

func (e *ConfigError) Error() string {
	where := e.File
	if e.Server != "" {
		where += ": server " + e.Server
	}
	if e.Key != "" {
		where += ": key " + e.Key
	}
	return where + ": " + e.Err.Error()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Load reads and checks the file at path (LOGBOOK_MCP_CONFIG), expanding ${NAME} (and
// ${NAME:-default}) from getenv. Errors are *ConfigError: a file that cannot be read or is not
// JSON of the shape {"mcpServers": {...}}, an unknown key, a ${NAME} that is unset, a server
// name that is not [a-z0-9_-]+, a server that is neither remote nor local, a bad pattern.
func Load(file string, getenv func(string) string) (Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Config{}, &ConfigError{File: file, Err: err}
	}
	return Parse(file, data, getenv)
}

// Parse is Load of data, named file in errors.
func Parse(file string, data []byte, getenv func(string) string) (Config, error) {
	var top struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := strictDecode(data, &top); err != nil {
		return Config{}, &ConfigError{File: file, Err: err}
	}
	if top.Servers == nil {
		return Config{}, &ConfigError{File: file, Key: "mcpServers", Err: errors.New("missing: want {\"mcpServers\": {\"<name>\": {...}}}")}
	}
	var cfg Config
	names := make([]string, 0, len(top.Servers))
	for name := range top.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s, secrets, err := parseServer(name, top.Servers[name], getenv)
		if err != nil {
			err.File = file
			return Config{}, err
		}
		cfg.Servers = append(cfg.Servers, s)
		cfg.Secrets = append(cfg.Secrets, secrets...)
	}
	return cfg, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// unknownKey is the key json's DisallowUnknownFields complained of, or "".
func unknownKey(err error) string {
	k, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return ""
	}
	return strings.Trim(k, `"`)
}

func parseServer(name string, raw json.RawMessage, getenv func(string) string) (Server, []string, *ConfigError) {
	bad := func(key string, err error) (Server, []string, *ConfigError) {
		return Server{}, nil, &ConfigError{Server: name, Key: key, Err: err}
	}
	if !serverName.MatchString(name) {
		return bad("", errors.New("the server name must match [a-z0-9_-]+ (it becomes part of the tool names mcp__<server>__<tool>)"))
	}
	var r rawServer
	if err := strictDecode(raw, &r); err != nil {
		if k := unknownKey(err); k != "" {
			return bad(k, errors.New("unknown key (known: type, url, headers, command, args, env, channels, tools, approve, oauth)"))
		}
		return bad("", err)
	}
	if key := localReference(r); key != "" {
		return bad(key, errors.New("a local server runs in the sandbox, where the agent's commands can read its command line and "+
			"environment: it cannot take values from logbook's environment (${NAME}). Give it literal settings, or serve it "+
			"remotely (url, headers) so that logbook adds its secrets outside the sandbox"))
	}
	x := expander{getenv: getenv}
	s := Server{Name: name, Channels: r.Channels, Approve: r.Approve}
	s.URL = x.expand("url", r.URL)
	s.Command = x.expand("command", r.Command)
	for i, a := range r.Args {
		s.Args = append(s.Args, x.expand(fmt.Sprintf("args[%d]", i), a))
	}
	s.Headers = x.expandMap("headers", r.Headers)
	s.Env = x.expandMap("env", r.Env)
	if r.OAuth != nil {
		s.OAuth = &OAuth{ClientID: x.expand("oauth.client_id", r.OAuth.ClientID), ClientSecret: x.expand("oauth.client_secret", r.OAuth.ClientSecret),
			AuthURL: x.expand("oauth.authorization_url", r.OAuth.AuthURL), TokenURL: x.expand("oauth.token_url", r.OAuth.TokenURL), Scopes: r.OAuth.Scopes}
	}
	if x.err != nil {
		return bad(x.key, x.err)
	}
	if r.Tools != nil {
		s.Allow, s.Deny = r.Tools.Allow, r.Tools.Deny
	}
	if key, err := s.check(r.Type); err != nil {
		return bad(key, err)
	}
	return s, x.secrets, nil
}

// localReference is the key of a local server's command, args or env that names logbook's
// environment (${NAME}, with or without a default), "" when none does or the server is remote.
func localReference(r rawServer) string {
	if r.Command == "" {
		return ""
	}
	if reference.MatchString(r.Command) {
		return "command"
	}
	for i, a := range r.Args {
		if reference.MatchString(a) {
			return fmt.Sprintf("args[%d]", i)
		}
	}
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if reference.MatchString(r.Env[k]) {
			return "env." + k
		}
	}
	return ""
}

// check settles the transport and checks the patterns and channels; it returns the key at
// fault.
func (s *Server) check(typ string) (string, error) {
	switch {
	case s.URL != "" && s.Command != "":
		return "url", errors.New("a server is remote (url) or local (command), not both")
	case s.URL == "" && s.Command == "":
		return "", errors.New("a server needs url (remote) or command (local)")
	case s.URL != "":
		if len(s.Args) > 0 || len(s.Env) > 0 {
			return "args", errors.New("args and env are for local servers (command)")
		}
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return "url", errors.New("want an http:// or https:// URL")
		}
		switch typ {
		case "", "http", "streamable-http", "streamableHttp":
			s.Transport = TransportHTTP
		case "sse":
			s.Transport = TransportSSE
		default:
			return "type", fmt.Errorf("%q: a remote server's type is http or sse", typ)
		}
	default:
		if len(s.Headers) > 0 {
			return "headers", errors.New("headers are for remote servers (url)")
		}
		if typ != "" && typ != "stdio" {
			return "type", fmt.Errorf("%q: a local server's type is stdio", typ)
		}
		s.Transport = TransportStdio
	}
	for key, pats := range map[string][]string{"tools.allow": s.Allow, "tools.deny": s.Deny, "approve": s.Approve} {
		for _, p := range pats {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return key, fmt.Errorf("%q is not a pattern (path.Match syntax: *, ?, [a-z])", p)
			}
		}
	}
	if key, err := s.checkOAuth(); err != nil {
		return key, err
	}
	for _, c := range s.Channels {
		if strings.TrimSpace(strings.TrimPrefix(c, "#")) == "" {
			return "channels", errors.New("an empty channel")
		}
	}
	return "", nil
}

// checkOAuth checks the oauth key: a remote server's, with a client id; the endpoints, when
// given, are URLs.
func (s *Server) checkOAuth() (string, error) {
	o := s.OAuth
	switch {
	case o == nil:
		return "", nil
	case !s.Remote():
		return "oauth", errors.New("oauth is for remote servers (url): logbook adds the token to its own calls")
	case o.ClientID == "":
		return "oauth.client_id", errors.New("missing")
	}
	for key, u := range map[string]string{"oauth.authorization_url": o.AuthURL, "oauth.token_url": o.TokenURL} {
		// Either may be left out: it is then discovered from the server (discover.go).
		if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return key, errors.New("want an http:// or https:// URL")
		}
	}
	if s.Headers["Authorization"] != "" || s.Headers["authorization"] != "" {
		return "headers.Authorization", errors.New("a server with oauth gets its Authorization header from the token")
	}
	return "", nil
}

// NeedsSecretKey reports whether a server uses OAuth, whose tokens are stored sealed with
// LOGBOOK_SECRET_KEY.
func (c Config) NeedsSecretKey() bool {
	for _, s := range c.Servers {
		if s.OAuth != nil {
			return true
		}
	}
	return false
}

// expander expands ${NAME} and ${NAME:-default}; the first failure is kept with its key.
type expander struct {
	getenv  func(string) string
	secrets []string
	key     string
	err     error
}

// minSecret is the shortest expanded value scrubbed from messages: shorter ones (a port, a
// flag) would blot out ordinary text, and are no secrets worth the name.
const minSecret = 8

var reference = regexp.MustCompile(`\$\{([^}]*)\}`)
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (x *expander) expand(key, s string) string {
	if x.err != nil {
		return ""
	}
	return reference.ReplaceAllStringFunc(s, func(ref string) string {
		inner := ref[2 : len(ref)-1]
		name, def, hasDef := strings.Cut(inner, ":-")
		if !envName.MatchString(name) {
			x.fail(key, fmt.Errorf("%q is not a variable name", ref))
			return ""
		}
		v := x.getenv(name)
		if v == "" && !hasDef {
			x.fail(key, fmt.Errorf("${%s} is not set in logbook's environment", name))
			return ""
		}
		if v == "" {
			return def
		}
		if len(v) >= minSecret && !slices.Contains(x.secrets, v) {
			x.secrets = append(x.secrets, v)
		}
		return v
	})
}

func (x *expander) expandMap(key string, m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = x.expand(key+"."+k, v)
	}
	return out
}

func (x *expander) fail(key string, err error) {
	if x.err == nil {
		x.key, x.err = key, err
	}
}

// offers reports whether the server's tool named tool may be offered.
func (s Server) offers(tool string) bool {
	if len(s.Allow) > 0 && !matchAny(s.Allow, tool) {
		return false
	}
	return !matchAny(s.Deny, tool)
}

// needsApproval reports whether a call of tool needs an approval card.
func (s Server) needsApproval(tool, exposed string) bool {
	return matchAny(s.Approve, tool) || matchAny(s.Approve, exposed)
}

// inChannel reports whether the server is offered in the channel with this id and name.
func (s Server) inChannel(id, name string) bool {
	for _, c := range s.Channels {
		c = strings.TrimPrefix(strings.TrimSpace(c), "#")
		if c == id || (name != "" && strings.EqualFold(c, strings.TrimPrefix(name, "#"))) {
			return true
		}
	}
	return false
}

func matchAny(pats []string, s string) bool {
	for _, p := range pats {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
