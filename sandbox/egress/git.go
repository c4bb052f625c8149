package egress

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/logbook/logbook/session/clip"
)

// GitPath is where, after the proxy's secret (Proxy.GitPath), the proxy serves the session's
// repository: the sandbox's checkout reaches its origin as http://PROXY/SECRET/session.git (a
// git insteadOf rule), and the proxy carries each smart-HTTP request on to Remote.URL with
// Remote.Header added.
const GitPath = "/session.git"

// Remote is the session's repository as the proxy serves it.
type Remote struct {
	// URL is the repository (http or https), as checked out.
	URL string
	// Header is the HTTP header with the credentials ("Authorization: Basic ..."), added to
	// requests upstream only; "" for none. It never reaches the sandbox: the sandbox's git
	// has nothing to print, to ask for, or to send elsewhere.
	Header string
	// Protected are branches the sandbox may not push to (the default branch). Pushes may
	// only update branches (refs/heads/...), and never delete one.
	Protected []string
	// BranchPrefix, if set, is the only place pushes may go ("logbook/": the sandbox's own
	// branches, never a person's).
	BranchPrefix string
	// Owned are the branches this session pushed before (its earlier sandboxes'): with
	// BranchPrefix set, an existing branch may be updated only if it is one of them or the
	// proxy let a push to it through since; new branches may always be made.
	Owned []string
}

// Bounds on a push's command list, read (and held) before anything is sent on.
const (
	maxCommands     = 100
	maxCommandBytes = 256 << 10
	maxRefLength    = 1024
	commandsTimeout = 30 * time.Second
)

// String hides Header.
func (r *Remote) String() string { return "egress.Remote{" + r.URL + "}" }

// GoString hides Header.
func (r *Remote) GoString() string { return r.String() }

// gitRoute is a smart-HTTP request of the session's repository, as the proxy forwards it:
// what is recorded is what is sent.
type gitRoute struct {
	// suffix is the path under the repository ("/info/refs", "/git-upload-pack", ...).
	suffix string
	// service is "git-upload-pack" or "git-receive-pack".
	service string
	// query is the query sent on ("service=..." or "").
	query string
}

// parseGitRoute maps a request under GitPath to the one git's smart protocol makes, or says
// why it is not one. Nothing ambiguous goes on: no escaped path, no query but a lone
// service= on a refs advertisement, none on a POST; the query forwarded is made from the
// value parsed, not copied.
func parseGitRoute(r *http.Request) (gitRoute, error) {
	suffix := strings.TrimPrefix(r.URL.Path, GitPath)
	notGit := fmt.Errorf("%s %s is not a request of git's smart HTTP protocol", r.Method, clip.Text(r.URL.EscapedPath(), maxRecordText))
	if r.URL.RawPath != "" {
		return gitRoute{}, notGit
	}
	switch {
	case r.Method == http.MethodGet && suffix == "/info/refs":
		q, err := url.ParseQuery(r.URL.RawQuery)
		s := q.Get("service")
		if err != nil || len(q) != 1 || len(q["service"]) != 1 || (s != "git-upload-pack" && s != "git-receive-pack") {
			return gitRoute{}, fmt.Errorf("GET %s?%s: a refs advertisement takes one query parameter, service=git-upload-pack or service=git-receive-pack", suffix, clip.Text(r.URL.RawQuery, maxRecordText))
		}
		return gitRoute{suffix: suffix, service: s, query: "service=" + s}, nil
	case r.Method == http.MethodPost && (suffix == "/git-upload-pack" || suffix == "/git-receive-pack"):
		if r.URL.RawQuery != "" || r.URL.ForceQuery {
			return gitRoute{}, fmt.Errorf("POST %s takes no query", suffix)
		}
		return gitRoute{suffix: suffix, service: suffix[1:]}, nil
	}
	return gitRoute{}, notGit
}

// forwardedGitHeaders are the sandbox's request headers the forge gets; nothing else (no
// credentials or cookies of the sandbox's own).
var forwardedGitHeaders = []string{"Accept", "Accept-Language", "Content-Type", "Content-Encoding", "Content-Length", "Git-Protocol", "User-Agent"}

// gitRemote serves the session's repository: fetches and pushes go to Remote.URL with the
// credentials added; pushes only to branches the sandbox may update, and only the refs the
// repository reports updated count as the session's.
func (p *Proxy) gitRemote(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := Connection{Kind: KindGit}
	base, status, err := p.upstream(&rec)
	if err != nil {
		p.gitRefuse(w, rec, err, status)
		return
	}
	route, err := parseGitRoute(r)
	if err != nil {
		p.gitRefuse(w, rec, err, http.StatusForbidden)
		return
	}
	rec.Reason = route.service
	if r.Method == http.MethodGet {
		rec.Reason += " (refs advertised)"
	}
	body := &countReader{r: r.Body}
	var reqBody io.Reader = body
	var push *admittedPush
	if route.suffix == "/git-receive-pack" {
		if push, err = p.admitPush(w, r, body, base); err != nil {
			rec.Reason, rec.Refs = "push refused: "+err.Error(), push.refs()
			rec.BytesOut, rec.Duration = body.n, time.Since(start)
			p.record(rec)
			refusePush(w, push.cmds, err.Error())
			return
		}
		reqBody, rec.Refs = push.body, push.refs()
	}
	var report *pushReport // nil: nothing to count (not a push, or git's probe)
	if push != nil && len(push.cmds) > 0 {
		report = newPushReport(push.cmds)
	}
	resp, err := p.sendUpstream(r, base+route.suffix, route.query, reqBody)
	if err != nil {
		// The error names the URL, never the header.
		rec.Allowed, rec.Reason = report == nil, route.service+": "+err.Error()
		rec.BytesOut, rec.Duration = body.n, time.Since(start)
		p.record(rec)
		http.Error(w, "logbook egress proxy: the repository did not answer", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rec.Allowed = true
	rec.BytesIn = relayGitResponse(w, resp, report)
	rec.BytesOut, rec.Duration = body.n, time.Since(start)
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusProxyAuthRequired:
		rec.Allowed, rec.Reason = report == nil, route.service+": the repository refused logbook's credentials (HTTP "+strconv.Itoa(resp.StatusCode)+")"
	case report != nil:
		rec.Allowed, rec.Reason, rec.Pushed = report.outcome(resp.StatusCode)
		p.pushed(rec.Pushed)
	}
	p.record(rec)
}

// gitRefuse records rec as refused for err and tells the sandbox so.
func (p *Proxy) gitRefuse(w http.ResponseWriter, rec Connection, err error, status int) {
	rec.Allowed, rec.Reason = false, err.Error()
	p.record(rec)
	http.Error(w, "logbook egress proxy: "+rec.Reason, status)
}

// upstream is the repository's URL (without a trailing slash), its host and port put in
// rec; or why it cannot be served, with the status to answer.
func (p *Proxy) upstream(rec *Connection) (string, int, error) {
	g := p.opt.Git
	if g == nil {
		return "", http.StatusNotFound, errors.New("this sandbox has no repository")
	}
	up, err := url.Parse(g.URL)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" || up.RawQuery != "" || up.Fragment != "" {
		return "", http.StatusBadGateway, errors.New("the repository URL cannot be served")
	}
	rec.Host = up.Hostname()
	rec.Port, _ = strconv.Atoi(up.Port())
	if rec.Port == 0 {
		rec.Port = map[string]int{"http": 80, "https": 443}[up.Scheme]
	}
	return strings.TrimSuffix(g.URL, "/"), 0, nil
}

// sendUpstream sends the sandbox's request r on to target?query with the credentials added
// and only forwardedGitHeaders of its own.
func (p *Proxy) sendUpstream(r *http.Request, target, query string, body io.Reader) (*http.Response, error) {
	if query != "" {
		target += "?" + query
	}
	if r.Method == http.MethodGet {
		body = nil
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, body)
	if err != nil {
		return nil, err
	}
	for _, h := range forwardedGitHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			out.Header[h] = v
		}
	}
	if r.Method != http.MethodGet {
		out.ContentLength = r.ContentLength
	}
	p.addCredentials(out)
	return p.opt.Transport.RoundTrip(out)
}

// addCredentials sets Remote.Header on a request upstream.
func (p *Proxy) addCredentials(out *http.Request) {
	if name, value, ok := strings.Cut(p.opt.Git.Header, ":"); ok {
		out.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
}

// relayGitResponse writes the repository's answer to the sandbox, reading a push's report
// as it goes by (to its end, should the sandbox stop reading), and returns the body bytes
// relayed. A 401 or 407 is answered 403: the sandbox must not be asked for credentials it
// does not have.
func relayGitResponse(w http.ResponseWriter, resp *http.Response, report *pushReport) int64 {
	var src io.Reader = resp.Body
	if report != nil {
		src = io.TeeReader(resp.Body, report)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusProxyAuthRequired {
		http.Error(w, "logbook egress proxy: the repository refused logbook's credentials", http.StatusForbidden)
		return 0
	}
	for _, h := range []string{"Content-Type", "Content-Encoding", "Content-Length", "Cache-Control", "Expires", "Pragma", "Location"} {
		if v := resp.Header.Values(h); len(v) > 0 {
			w.Header()[h] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	n, err := io.Copy(flushWriter{w}, src)
	if report != nil && err != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(src, maxReportBytes))
	}
	return n
}

// admittedPush is a push let through: its commands, and the body to send on.
type admittedPush struct {
	cmds []command
	body io.Reader
}

func (a *admittedPush) refs() []string {
	if a == nil {
		return nil
	}
	refs := make([]string, len(a.cmds))
	for i, c := range a.cmds {
		refs[i] = c.ref
	}
	return refs
}

// admitPush reads a push's command list (it must come soon; the pack after it may take
// long) and checks it; a refused push is read to its end (bounded), so the sandbox's git
// hears why. The push is returned, with its commands, refused or not.
func (p *Proxy) admitPush(w http.ResponseWriter, r *http.Request, body *countReader, base string) (*admittedPush, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(commandsTimeout))
	// One encoding, the one read here, is what the repository decodes too.
	encoding := strings.Join(r.Header.Values("Content-Encoding"), ", ")
	cmds, raw, err := readCommands(bufio.NewReaderSize(body, 64<<10), encoding)
	_ = rc.SetReadDeadline(time.Time{})
	push := &admittedPush{cmds: cmds, body: io.MultiReader(bytes.NewReader(raw.consumed), raw.rest)}
	// A body of a lone flush updates nothing: it is git's probe before a large push (over
	// http.postBuffer), and goes on.
	if err == nil && len(cmds) == 0 && !bytes.Equal(raw.consumed, []byte("0000")) {
		err = errors.New("the push updates no ref")
	}
	if err == nil && len(cmds) > 0 && !hasCapability(cmds[0].caps, "report-status") && !hasCapability(cmds[0].caps, "report-status-v2") {
		err = errors.New("the push must ask for report-status: only the refs the repository reports updated count as pushed")
	}
	if err == nil {
		err = p.allowPush(cmds)
	}
	if err == nil {
		err = p.allowCreates(r.Context(), base, cmds)
	}
	if err != nil {
		_ = rc.SetReadDeadline(time.Now().Add(commandsTimeout))
		_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<30))
		return push, err
	}
	return push, nil
}

func hasCapability(caps, name string) bool { return slices.Contains(strings.Fields(caps), name) }

// command is one ref update of a push.
type command struct {
	old, new, ref string
	caps          string
}

// rawBody is what readCommands consumed, to be sent on, and the rest of the body.
type rawBody struct {
	consumed []byte
	rest     io.Reader
}

// readCommands reads a receive-pack request's command list (pkt-lines up to the first
// flush) and returns them with the bytes read, to be sent on unchanged.
func readCommands(br *bufio.Reader, encoding string) ([]command, rawBody, error) {
	raw := rawBody{rest: br}
	if encoding != "" && encoding != "identity" {
		return nil, raw, fmt.Errorf("a push body in %q encoding is not understood", encoding)
	}
	var cmds []command
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return cmds, raw, errors.New("the push's command list is cut short")
		}
		if len(raw.consumed)+len(hdr) > maxCommandBytes {
			return cmds, raw, fmt.Errorf("the push's command list is over %d bytes", maxCommandBytes)
		}
		raw.consumed = append(raw.consumed, hdr[:]...)
		n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
		if err != nil {
			return cmds, raw, errors.New("the push's command list is not in pkt-line format")
		}
		if n == 0 {
			break // flush: the packfile (or push options) follow
		}
		if n < 4 || n > 65520 {
			return cmds, raw, errors.New("the push's command list is not in pkt-line format")
		}
		if len(raw.consumed)+int(n-4) > maxCommandBytes {
			return cmds, raw, fmt.Errorf("the push's command list is over %d bytes", maxCommandBytes)
		}
		start := len(raw.consumed)
		raw.consumed = append(raw.consumed, make([]byte, n-4)...)
		if _, err := io.ReadFull(br, raw.consumed[start:]); err != nil {
			return cmds, raw, errors.New("the push's command list is cut short")
		}
		text, caps, _ := strings.Cut(strings.TrimSuffix(string(raw.consumed[start:]), "\n"), "\x00")
		if strings.HasPrefix(text, "shallow ") {
			continue
		}
		// Exactly as receive-pack reads it: "OLD NEW REF", single spaces, object ids in hex.
		f := strings.Split(text, " ")
		if len(f) != 3 || !objectID(f[0]) || len(f[1]) != len(f[0]) || !objectID(f[1]) || f[2] == "" {
			return cmds, raw, fmt.Errorf("the push sends %q, which logbook does not let through", clip.Text(text, maxRecordText))
		}
		if len(f[2]) > maxRefLength {
			return cmds, raw, fmt.Errorf("the push names a ref over %d bytes", maxRefLength)
		}
		if len(cmds) == maxCommands {
			return cmds, raw, fmt.Errorf("the push updates more than %d refs", maxCommands)
		}
		cmds = append(cmds, command{old: f[0], new: f[1], ref: f[2], caps: caps})
	}
	return cmds, raw, nil
}

// objectID reports whether s is a SHA-1 or SHA-256 object id in lower-case hex.
func objectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// allowPush checks every update: branches only, never a protected one, never a deletion.
func (p *Proxy) allowPush(cmds []command) error {
	g := p.opt.Git
	for _, c := range cmds {
		branch, ok := strings.CutPrefix(c.ref, "refs/heads/")
		switch {
		case !ok:
			return fmt.Errorf("%s is not a branch; only branches may be pushed", c.ref)
		case strings.Trim(c.new, "0") == "":
			return fmt.Errorf("deleting %s is not allowed", branch)
		}
		for _, p := range g.Protected {
			if branch == p {
				return fmt.Errorf("%s is protected; push a branch of your own and open a pull request", branch)
			}
		}
		if g.BranchPrefix != "" && !strings.HasPrefix(branch, g.BranchPrefix) {
			return fmt.Errorf("%s is not one of the sandbox's branches: push to a branch under %s (e.g. %sfix-the-test)", branch, g.BranchPrefix, g.BranchPrefix)
		}
		if g.BranchPrefix != "" && strings.Trim(c.old, "0") != "" && !p.owns(branch) {
			return fmt.Errorf("%s exists and was not pushed from this thread: push a new branch under %s", branch, g.BranchPrefix)
		}
	}
	return nil
}

// owns reports whether this session pushed branch before.
func (p *Proxy) owns(branch string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned[branch]
}

// pushed marks the branches the repository reported updated as this session's.
func (p *Proxy) pushed(refs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ref := range refs {
		if branch, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
			p.owned[branch] = true
		}
	}
}

// refusePush answers a refused push in git's receive-pack protocol, so the sandbox's git
// says "[remote rejected] ... (reason)"; without report-status, a 403.
func refusePush(w http.ResponseWriter, cmds []command, why string) {
	caps := ""
	if len(cmds) > 0 {
		caps = cmds[0].caps
	}
	if !hasCapability(caps, "report-status") && !hasCapability(caps, "report-status-v2") {
		http.Error(w, "logbook egress proxy: push refused: "+why, http.StatusForbidden)
		return
	}
	why = strings.NewReplacer("\n", " ", "\x00", " ").Replace(why)
	var report bytes.Buffer
	report.WriteString(pkt("unpack ok\n"))
	for _, c := range cmds {
		report.WriteString(pkt("ng " + c.ref + " " + why + "\n"))
	}
	report.WriteString("0000")
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	if !hasCapability(caps, "side-band-64k") && !hasCapability(caps, "side-band") {
		_, _ = w.Write(report.Bytes())
		return
	}
	var out bytes.Buffer
	out.WriteString(pkt("\x02logbook: push refused: " + why + "\n"))
	b := report.Bytes()
	for len(b) > 0 {
		n := min(len(b), 900)
		out.WriteString(pkt("\x01" + string(b[:n])))
		b = b[n:]
	}
	out.WriteString("0000")
	_, _ = w.Write(out.Bytes())
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
