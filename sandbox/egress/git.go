package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// gitRequest maps a smart-HTTP request path under GitPath to its service, or "" when it is
// not one git's smart protocol makes.
func gitRequest(r *http.Request) (suffix, service string) {
	suffix = strings.TrimPrefix(r.URL.Path, GitPath)
	switch {
	case r.Method == http.MethodGet && suffix == "/info/refs":
		switch s := r.URL.Query().Get("service"); s {
		case "git-upload-pack", "git-receive-pack":
			return suffix, s
		}
	case r.Method == http.MethodPost && (suffix == "/git-upload-pack" || suffix == "/git-receive-pack"):
		return suffix, suffix[1:]
	}
	return "", ""
}

// forwardedGitHeaders are the sandbox's request headers the forge gets; nothing else (no
// credentials or cookies of the sandbox's own).
var forwardedGitHeaders = []string{"Accept", "Accept-Language", "Content-Type", "Content-Encoding", "Content-Length", "Git-Protocol", "User-Agent"}

// gitRemote serves the session's repository: fetches and pushes go to Remote.URL with the
// credentials added; pushes only to unprotected branches.
func (p *Proxy) gitRemote(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	g := p.opt.Git
	rec := Connection{Kind: KindGit}
	if g == nil {
		rec.Reason = "this sandbox has no repository"
		p.record(rec)
		http.Error(w, "logbook egress proxy: "+rec.Reason, http.StatusNotFound)
		return
	}
	up, err := url.Parse(g.URL)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		rec.Reason = "the repository URL cannot be served"
		p.record(rec)
		http.Error(w, "logbook egress proxy: "+rec.Reason, http.StatusBadGateway)
		return
	}
	rec.Host = up.Hostname()
	rec.Port, _ = strconv.Atoi(up.Port())
	if rec.Port == 0 {
		rec.Port = map[string]int{"http": 80, "https": 443}[up.Scheme]
	}
	suffix, service := gitRequest(r)
	if service == "" {
		rec.Reason = fmt.Sprintf("%s %s is not a request of git's smart HTTP protocol", r.Method, r.URL.Path)
		p.record(rec)
		http.Error(w, "logbook egress proxy: "+rec.Reason, http.StatusForbidden)
		return
	}
	rec.Reason = service
	if r.Method == http.MethodGet {
		rec.Reason += " (refs advertised)"
	}
	body := &countReader{r: r.Body}
	var reqBody io.Reader = body
	var pushing []command
	if suffix == "/git-receive-pack" {
		// The command list comes first and must come soon; the pack after it may take long.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(commandsTimeout))
		cmds, raw, err := readCommands(bufio.NewReaderSize(body, 64<<10), r.Header.Get("Content-Encoding"))
		_ = rc.SetReadDeadline(time.Time{})
		if err == nil && len(cmds) == 0 && !bytes.Equal(raw.consumed, []byte("0000")) {
			err = errors.New("the push updates no ref")
		}
		// A body of a lone flush updates nothing: it is git's probe before a large push
		// (over http.postBuffer), and goes on.
		for _, c := range cmds {
			rec.Refs = append(rec.Refs, c.ref)
		}
		if err == nil {
			err = p.allowPush(cmds)
		}
		if err != nil {
			rec.Reason = "push refused: " + err.Error()
			_ = rc.SetReadDeadline(time.Now().Add(commandsTimeout))
			_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<30))
			rec.BytesOut, rec.Duration = body.n, time.Since(start)
			p.record(rec)
			refusePush(w, cmds, err.Error())
			return
		}
		reqBody = io.MultiReader(bytes.NewReader(raw.consumed), raw.rest)
		pushing = cmds
	}
	target := strings.TrimSuffix(g.URL, "/") + suffix
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, reqBody)
	if err != nil {
		rec.Reason = err.Error()
		p.record(rec)
		http.Error(w, "logbook egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	for _, h := range forwardedGitHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			out.Header[h] = v
		}
	}
	out.ContentLength = r.ContentLength
	if r.Method == http.MethodGet {
		out.Body, out.ContentLength = nil, 0
	}
	if name, value, ok := strings.Cut(g.Header, ":"); ok && g.Header != "" {
		out.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	resp, err := p.opt.Transport.RoundTrip(out)
	if err != nil {
		// The error names the URL, never the header.
		rec.Allowed, rec.Reason = true, service+": "+err.Error()
		rec.BytesOut, rec.Duration = body.n, time.Since(start)
		p.record(rec)
		http.Error(w, "logbook egress proxy: the repository did not answer", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rec.Allowed = true
	if pushing != nil && resp.StatusCode == http.StatusOK {
		p.pushed(pushing)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusProxyAuthRequired {
		// The sandbox must not be asked for credentials it does not have.
		rec.Reason = service + ": the repository refused logbook's credentials (HTTP " + strconv.Itoa(resp.StatusCode) + ")"
		rec.BytesOut, rec.Duration = body.n, time.Since(start)
		p.record(rec)
		http.Error(w, "logbook egress proxy: the repository refused logbook's credentials", http.StatusForbidden)
		return
	}
	for _, h := range []string{"Content-Type", "Content-Encoding", "Content-Length", "Cache-Control", "Expires", "Pragma", "Location"} {
		if v := resp.Header.Values(h); len(v) > 0 {
			w.Header()[h] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(flushWriter{w}, resp.Body)
	rec.BytesOut, rec.BytesIn, rec.Duration = body.n, n, time.Since(start)
	p.record(rec)
}

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
		f := strings.Fields(text)
		if len(f) != 3 {
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

// pushed marks the branches of a push the repository accepted as this session's.
func (p *Proxy) pushed(cmds []command) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cmds {
		if branch, ok := strings.CutPrefix(c.ref, "refs/heads/"); ok {
			p.owned[branch] = true
		}
	}
}

// refusePush answers a refused push in git's receive-pack protocol, so the sandbox's git
// says "[remote rejected] ... (reason)"; without report-status, a 403.
func refusePush(w http.ResponseWriter, cmds []command, why string) {
	caps := ""
	if len(cmds) > 0 {
		caps = " " + cmds[0].caps + " "
	}
	if !strings.Contains(caps, " report-status ") && !strings.Contains(caps, " report-status-v2 ") {
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
	if !strings.Contains(caps, " side-band-64k ") && !strings.Contains(caps, " side-band ") {
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
