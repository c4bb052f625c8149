package connectors

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// errOtherOrigin is a request to a remote server that would have left its configured origin:
// a redirect elsewhere, or an HTTP+SSE endpoint event that names another host.
var errOtherOrigin = errors.New("refused: the MCP server sent logbook to another origin, and logbook sends its headers and token to the configured origin only")

// originOf is rawURL's scheme://host[:port], the unit credentials are scoped to.
func originOf(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("the server's url %q is not absolute", rawURL)
	}
	return origin(u), nil
}

// origin is u's scheme://host[:port], lower-cased, without the scheme's default port.
func origin(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" || scheme == "https" && port == "443" || scheme == "http" && port == "80" {
		return scheme + "://" + host
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// sameOrigin is an http.Client's CheckRedirect that follows a redirect only within origin.
func sameOrigin(o string) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if origin(req.URL) != o {
			return fmt.Errorf("%w (a redirect to %s)", errOtherOrigin, origin(req.URL))
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// outbound is the last layer of a remote server's requests before the network: a request
// for another origin is refused (and logged) before anything is sent, whatever sent it there
// (a redirect, an HTTP+SSE endpoint event); every credential the layers above added — the
// Authorization header (a configured one or the OAuth token) and the configured headers — is
// kept in sent, to scrub from the server's answers.
type outbound struct {
	base   http.RoundTripper
	origin string
	server string
	set    map[string]string // the configured headers
	sent   *credentials
	log    zerolog.Logger
}

func (o outbound) RoundTrip(r *http.Request) (*http.Response, error) {
	if got := origin(r.URL); got != o.origin {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		o.log.Warn().Str("server", o.server).Str("origin", o.origin).Str("to", got).
			Msg("refused a request to another origin: the MCP server redirected logbook or named another endpoint")
		return nil, fmt.Errorf("%w (%s)", errOtherOrigin, got)
	}
	o.sent.add(r.Header.Get("Authorization"))
	for k := range o.set {
		o.sent.add(r.Header.Get(k))
	}
	return o.base.RoundTrip(r)
}

// credentials are the values logbook put on requests to one server. Safe for concurrent use.
type credentials struct {
	mu   sync.Mutex
	vals []string // longest first
}

// add keeps v (and a bearer token's token alone).
func (c *credentials) add(v string) {
	v = strings.TrimSpace(v)
	if len(v) < 4 {
		return // too short to scrub without mangling the text
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range []string{v, strings.TrimSpace(strings.TrimPrefix(v, "Bearer "))} {
		if len(w) >= 4 && !slices.Contains(c.vals, w) {
			c.vals = append(c.vals, w)
		}
	}
	slices.SortFunc(c.vals, func(a, b string) int { return len(b) - len(a) })
}

// scrubbed is err with every kept credential replaced in its text (errors.Is and As still
// see err): a server that echoes the token it was sent in an error must not get it into the
// thread's notice, the log or /logbook mcp.
func (c *credentials) scrubbed(err error) error {
	if err == nil {
		return nil
	}
	return scrubbedError{text: c.scrub(err.Error()), err: err}
}

type scrubbedError struct {
	text string
	err  error
}

func (e scrubbedError) Error() string { return e.text }
func (e scrubbedError) Unwrap() error { return e.err }

// scrub is s with every kept credential replaced.
func (c *credentials) scrub(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.vals {
		s = strings.ReplaceAll(s, v, "[credential removed]")
	}
	return s
}
