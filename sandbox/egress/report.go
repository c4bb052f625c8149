package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/logbook/logbook/session/clip"
)

// Bounds on what the proxy reads of the repository's answers.
const (
	maxReportBytes   = 16 << 20         // a push's answer, read to find its report
	maxAdvertBytes   = 256 << 20        // a refs advertisement, read to find which branches exist
	advertTimeout    = 30 * time.Second // asking for the refs advertisement
	maxReportOptions = 4                // report-status-v2 option lines after one "ok"
)

// pktStream splits a byte stream into pkt-lines as it arrives, holding at most one.
type pktStream struct{ buf []byte }

// next returns the next whole pkt-line's payload (flush true for a flush-pkt), or ok false
// when more bytes are needed.
func (s *pktStream) next() (payload []byte, flush, ok bool, err error) {
	if len(s.buf) < 4 {
		return nil, false, false, nil
	}
	n, err := strconv.ParseUint(string(s.buf[:4]), 16, 16)
	switch {
	case err != nil:
		return nil, false, false, errors.New("not in pkt-line format")
	case n == 0:
		s.buf = s.buf[4:]
		return nil, true, true, nil
	case n < 4:
		return nil, false, false, fmt.Errorf("a special pkt-line %04x where none belongs", n)
	case len(s.buf) < int(n):
		return nil, false, false, nil
	}
	payload = s.buf[4:n:n]
	s.buf = s.buf[n:]
	return payload, false, true, nil
}

// refResult is what the repository reported of one ref of a push.
type refResult struct {
	reported, ok bool
	why          string // why it was refused
}

// pushReport reads a receive-pack answer as it streams by (an io.Writer, for a TeeReader):
// its report-status or report-status-v2 pkt-lines, inside side-band packets when the push
// asked for them. Only a report read whole, with "unpack ok", counts; in it, only the refs
// reported "ok" (and not renamed by a v2 "option refname") are pushed.
type pushReport struct {
	sideband bool
	outer    pktStream // the answer; with side-band, its band-1 data is inner
	inner    pktStream
	read     int64
	unpack   string   // "" until read; "ok" when the pack was taken
	refs     []string // the push's, in its order
	results  map[string]*refResult
	last     *refResult // the ref of the last "ok", which v2 options follow
	options  int
	done     bool // the report's closing flush was read
	err      error
}

func newPushReport(cmds []command) *pushReport {
	r := &pushReport{results: map[string]*refResult{}}
	if len(cmds) > 0 {
		r.sideband = hasCapability(cmds[0].caps, "side-band-64k") || hasCapability(cmds[0].caps, "side-band")
	}
	for _, c := range cmds {
		if r.results[c.ref] == nil {
			r.refs = append(r.refs, c.ref)
			r.results[c.ref] = &refResult{}
		}
	}
	return r
}

// Write takes the next bytes of the answer; it never fails (the answer goes on to the
// sandbox whatever the report says).
func (r *pushReport) Write(b []byte) (int, error) {
	if r.err != nil || r.done {
		return len(b), nil
	}
	r.read += int64(len(b))
	if r.read > maxReportBytes {
		r.err = fmt.Errorf("the answer is over %d bytes", maxReportBytes)
		return len(b), nil
	}
	r.outer.buf = append(r.outer.buf, b...)
	r.err = r.drain()
	return len(b), nil
}

func (r *pushReport) drain() error {
	for !r.done {
		payload, flush, ok, err := r.outer.next()
		if err != nil || !ok {
			return err
		}
		if !r.sideband {
			if flush {
				r.done = true
				return nil
			}
			if err := r.line(payload); err != nil {
				return err
			}
			continue
		}
		if flush {
			return errors.New("the answer ends before its report")
		}
		if len(payload) == 0 {
			return errors.New("an empty side-band packet")
		}
		switch payload[0] {
		case 1:
			r.inner.buf = append(r.inner.buf, payload[1:]...)
			if err := r.drainInner(); err != nil {
				return err
			}
		case 2: // progress, for the sandbox's git to show
		case 3:
			return fmt.Errorf("the repository's error: %s", strings.TrimSpace(string(payload[1:])))
		default:
			return fmt.Errorf("side-band %d is not one of git's", payload[0])
		}
	}
	return nil
}

func (r *pushReport) drainInner() error {
	for !r.done {
		payload, flush, ok, err := r.inner.next()
		if err != nil || !ok {
			return err
		}
		if flush {
			r.done = true
			return nil
		}
		if err := r.line(payload); err != nil {
			return err
		}
	}
	return nil
}

// line reads one line of the report.
func (r *pushReport) line(b []byte) error {
	text := strings.TrimSuffix(string(b), "\n")
	if r.unpack == "" {
		status, ok := strings.CutPrefix(text, "unpack ")
		if !ok || status == "" {
			return fmt.Errorf("the report starts with %q, not unpack", clip.Text(text, maxRecordText))
		}
		r.unpack = status
		return nil
	}
	verb, rest, _ := strings.Cut(text, " ")
	switch verb {
	case "ok", "ng":
		ref, why, _ := strings.Cut(rest, " ")
		res := r.results[ref]
		if res == nil || res.reported {
			return fmt.Errorf("the report names %q, not a ref of the push or twice", clip.Text(ref, maxRecordText))
		}
		res.reported, res.ok, res.why, r.last, r.options = true, verb == "ok", why, nil, 0
		if res.ok {
			r.last = res
		} else if res.why == "" {
			res.why = "refused"
		}
	case "option":
		r.options++
		if r.last == nil || r.options > maxReportOptions {
			return errors.New("a report-status-v2 option where none belongs")
		}
		if name, value, _ := strings.Cut(rest, " "); name == "refname" {
			// The repository updated another ref than the one asked (a proc-receive hook):
			// not the ref the proxy checked, so not counted.
			r.last.ok, r.last.why = false, "updated as "+value+" instead"
		}
	default:
		return fmt.Errorf("the report holds %q", clip.Text(text, maxRecordText))
	}
	return nil
}

// outcome is what a push's record says, the answer read (status is its HTTP status):
// allowed when the repository took at least one ref, why the others were not taken, and the
// refs it took.
func (r *pushReport) outcome(status int) (allowed bool, reason string, pushed []string) {
	var why string
	switch {
	case status != http.StatusOK:
		why = fmt.Sprintf("the repository answered HTTP %d", status)
	case r.err != nil:
		why = "the repository's report cannot be read: " + r.err.Error()
	case !r.done:
		why = "the repository's answer ends before its report does"
	case r.unpack != "ok":
		why = "the repository could not unpack it: " + r.unpack
	}
	if why != "" {
		return false, "push not confirmed, no ref counts as pushed: " + why, nil
	}
	var problems []string
	for _, ref := range r.refs {
		switch res := r.results[ref]; {
		case res.ok:
			pushed = append(pushed, ref)
		case res.reported:
			problems = append(problems, ref+" refused by the repository: "+res.why)
		default:
			problems = append(problems, ref+" not in the repository's report")
		}
	}
	switch {
	case len(problems) == 0:
		return true, "git-receive-pack", pushed
	case len(pushed) == 0:
		return false, "push refused: " + strings.Join(problems, "; "), nil
	}
	return true, "git-receive-pack, in part: " + strings.Join(problems, "; "), pushed
}

// allowCreates refuses a "create" (old id all zeros) of a branch under Remote.BranchPrefix
// that exists upstream and is not this session's: it is an update, and needs ownership.
// The repository's refs advertisement says which exist; a branch made between it and the
// push is refused by the repository itself (its old id is not zeros), and not counted.
func (p *Proxy) allowCreates(ctx context.Context, base string, cmds []command) error {
	g := p.opt.Git
	want := map[string]string{}
	for _, c := range cmds {
		branch := strings.TrimPrefix(c.ref, "refs/heads/")
		if g.BranchPrefix != "" && strings.Trim(c.old, "0") == "" && !p.owns(branch) {
			want[c.ref] = branch
		}
	}
	if len(want) == 0 {
		return nil
	}
	exists, err := p.advertisedRefs(ctx, base, want)
	if err != nil {
		return fmt.Errorf("which branches exist cannot be checked: %w", err)
	}
	for _, c := range cmds {
		if exists[c.ref] {
			return fmt.Errorf("%s exists and was not pushed from this thread: push a new branch under %s", want[c.ref], g.BranchPrefix)
		}
	}
	return nil
}

// advertisedRefs asks the repository for its receive-pack refs advertisement and reports
// which of want's refs it holds.
func (p *Proxy) advertisedRefs(ctx context.Context, base string, want map[string]string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, advertTimeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/info/refs?service=git-receive-pack", nil)
	if err != nil {
		return nil, err
	}
	p.addCredentials(out)
	resp, err := p.opt.Transport.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the repository answered HTTP %d", resp.StatusCode)
	}
	br := bufio.NewReader(io.LimitReader(resp.Body, maxAdvertBytes))
	line, flush, err := readPkt(br)
	if err == nil && strings.HasPrefix(line, "# service=") {
		// Smart HTTP's preamble, ended by a flush.
		if _, flush, err = readPkt(br); err == nil && !flush {
			err = errors.New("no flush after its preamble")
		}
		if err == nil {
			line, flush, err = readPkt(br)
		}
	}
	exists := map[string]bool{}
	for ; ; line, flush, err = readPkt(br) {
		switch {
		case err != nil:
			return nil, fmt.Errorf("the refs advertisement: %w", err)
		case flush:
			return exists, nil
		}
		line, _, _ = strings.Cut(strings.TrimSuffix(line, "\n"), "\x00")
		if _, ref, ok := strings.Cut(line, " "); ok && want[ref] != "" {
			exists[ref] = true
		}
	}
}

// readPkt reads one pkt-line: its payload, or flush.
func readPkt(br *bufio.Reader) (string, bool, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return "", false, errors.New("cut short")
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	switch {
	case err != nil || (n > 0 && n < 4):
		return "", false, errors.New("not in pkt-line format")
	case n == 0:
		return "", true, nil
	}
	b := make([]byte, n-4)
	if _, err := io.ReadFull(br, b); err != nil {
		return "", false, errors.New("cut short")
	}
	return string(b), false, nil
}
