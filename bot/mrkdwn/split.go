package mrkdwn

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultLimit is the part size, in runes, Split uses when asked for limit
// <= 0: under Slack's recommended 4,000 characters per message and far under
// the 40,000 hard limit (msg_too_long).
const DefaultLimit = 3900

// minLimit is the smallest limit Split honours; smaller limits are raised to
// it so a part always has room for a reopened and a closed ``` fence.
const minLimit = 16

// Split cuts text into parts of at most limit runes each (limit <= 0 means
// DefaultLimit; limits below 16 are raised to 16), for posting in order as
// separate messages. It prefers to cut after a blank line, then at a line
// end, then after a space, then between runes, choosing the latest such cut
// that keeps a part at least half full. It never cuts inside a rune and
// avoids cutting inside a grapheme (before a combining mark, variation
// selector, skin-tone modifier or zero-width joiner, after a joiner, or
// between a pair of regional-indicator flags).
//
// Code fences (lines starting, after optional spaces, with ``` ) are never
// broken: a part that ends inside a fence gets "\n" + the fence appended and
// the next part starts with the fence again, so each part renders on its own
// and, for balanced input, holds an even number of fence lines. Inside a
// fence, line cuts are made before the newline, so the reopened block starts
// with the line break and no blank line appears. Cuts are never placed inside
// a fence line itself, unless a fence line with its closing fence does not
// fit in the limit; only then may a part break the fence pairing.
//
// Join(Split(text, n)) == text for every text. Split("") is nil. Parts are
// not trimmed and may begin or end with newlines.
func Split(text string, limit int) []string {
	if text == "" {
		return nil
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = max(limit, minLimit)
	ix := indexLines(text)
	var parts []string
	for s := 0; s < len(text); {
		e := ix.cut(s, limit)
		var b strings.Builder
		if st := ix.stateAt(s); st.open {
			b.WriteString(fence(st.n))
		}
		b.WriteString(text[s:e])
		if st := ix.stateAt(e); st.open && e < len(text) {
			b.WriteString("\n" + fence(st.n))
		}
		parts = append(parts, b.String())
		s = e
	}
	return parts
}

// Join is the exact inverse of Split: it drops the fences Split added (a
// closing "\n```" at the end of a part that ends inside a code block, and the
// "```" that reopens it at the start of the next part) and concatenates.
func Join(parts []string) string {
	var b strings.Builder
	var sc fenceScanner
	for i, p := range parts {
		if st := sc.state(); i > 0 && st.open && strings.HasPrefix(p, fence(st.n)) {
			p = p[st.n:]
		}
		if i < len(parts)-1 {
			p = sc.dropCloser(p, parts[i+1])
		}
		sc.feed(p)
		b.WriteString(p)
	}
	return b.String()
}

func fence(n int) string { return strings.Repeat("`", n) }

// fenceState is whether a line starts inside a ``` code block, and the
// length of the backtick run that opened it.
type fenceState struct {
	open bool
	n    int
}

// next returns the state after line (without its "\n").
func (f fenceState) next(line string) fenceState {
	n, rest, ok := fenceRun(line)
	if !ok {
		return f
	}
	if !f.open {
		if strings.Contains(rest, "`") { // "```x``` text" is inline code
			return f
		}
		return fenceState{open: true, n: n}
	}
	if n >= f.n && strings.TrimSpace(rest) == "" {
		return fenceState{}
	}
	return f
}

// fenceRun reports whether line starts (after spaces or tabs) with three or
// more backticks, and returns the run length and what follows it.
func fenceRun(line string) (n int, rest string, ok bool) {
	t := strings.TrimLeft(line, " \t")
	for n < len(t) && t[n] == '`' {
		n++
	}
	return n, t[n:], n >= 3
}

// fenceScanner tracks fence state over text fed in pieces.
type fenceScanner struct {
	st      fenceState
	partial string // the current, unfinished line
}

func (s *fenceScanner) feed(p string) {
	for {
		i := strings.IndexByte(p, '\n')
		if i < 0 {
			s.partial += p
			return
		}
		s.st = s.st.next(strings.TrimSuffix(s.partial+p[:i], "\r"))
		s.partial = ""
		p = p[i+1:]
	}
}

// state is the state at the start of the current line.
func (s *fenceScanner) state() fenceState { return s.st }

// dropCloser removes the "\n```" Split appends to a part p that ends inside
// a code block; next is the following part, which must reopen the block.
func (s *fenceScanner) dropCloser(p, next string) string {
	m := 0
	for m < len(p) && p[len(p)-1-m] == '`' {
		m++
	}
	if m < 3 || len(p) <= m || p[len(p)-1-m] != '\n' {
		return p
	}
	body := p[:len(p)-1-m]
	probe := *s
	probe.feed(body)
	if st := probe.state(); st.open && st.n == m && strings.HasPrefix(next, fence(m)) {
		return body
	}
	return p
}

// lineIndex holds, for each line of a text, its start offset, the fence
// state at its start, and whether it is a fence line.
type lineIndex struct {
	text      string
	starts    []int
	states    []fenceState
	fenceLike []bool
}

func indexLines(text string) *lineIndex {
	ix := &lineIndex{text: text}
	var st fenceState
	for start := 0; ; {
		end := strings.IndexByte(text[start:], '\n')
		line := text[start:]
		if end >= 0 {
			line = text[start : start+end]
		}
		_, _, like := fenceRun(line)
		ix.starts = append(ix.starts, start)
		ix.states = append(ix.states, st)
		ix.fenceLike = append(ix.fenceLike, like)
		if end < 0 {
			return ix
		}
		st = st.next(strings.TrimSuffix(line, "\r"))
		start += end + 1
	}
}

func (ix *lineIndex) line(p int) int {
	return sort.Search(len(ix.starts), func(k int) bool { return ix.starts[k] > p }) - 1
}

// stateAt is the fence state of the line holding byte offset p (for p just
// after a "\n", the next line).
func (ix *lineIndex) stateAt(p int) fenceState {
	return ix.states[ix.line(p)]
}

// Cut classes, best first.
const (
	cutParagraph = iota
	cutLine
	cutWord
	cutRune
	numCuts
)

// cut returns the end offset of the part starting at s.
func (ix *lineIndex) cut(s, limit int) int {
	text := ix.text
	prefix := 0
	if st := ix.stateAt(s); st.open {
		prefix = st.n
	}
	type cand struct{ p, runes int }
	var best [numCuts]cand
	forced := cand{p: -1}
	for i := range best {
		best[i].p = -1
	}
	runes := 0
	k := ix.line(s)
	for p := s; p < len(text); {
		r, w := utf8.DecodeRuneInString(text[p:])
		p += w
		runes++
		if prefix+runes > limit {
			break
		}
		if p == len(text) {
			return p
		}
		for k+1 < len(ix.starts) && ix.starts[k+1] <= p {
			k++
		}
		next, _ := utf8.DecodeRuneInString(text[p:])
		st := ix.states[k]
		closer := 0
		if st.open {
			closer = st.n + 1
		}
		if prefix+runes+closer > limit {
			continue
		}
		forced = cand{p, runes}
		atLineStart := ix.starts[k] == p
		if !atLineStart && ix.fenceLike[k] {
			continue // never inside a fence line
		}
		if !atLineStart && startsFence(text[p:]) {
			continue // the next part would start with a fence line the text does not have
		}
		if !graphemeBoundary(r, next, text[:p-w]) {
			continue
		}
		c := cutRune
		switch {
		case atLineStart && !st.open && strings.HasSuffix(text[:p], "\n\n"):
			c = cutParagraph
		case atLineStart && !st.open, st.open && next == '\n':
			c = cutLine
		case r == ' ' || r == '\t':
			c = cutWord
		}
		best[c] = cand{p, runes}
	}
	half := (limit - prefix) / 2
	for _, c := range best {
		if c.p > s && c.runes >= half {
			return c.p
		}
	}
	far := cand{p: -1}
	for _, c := range best {
		if c.p > s && c.p > far.p {
			far = c
		}
	}
	switch {
	case far.p > s:
		return far.p
	case forced.p > s:
		return forced.p
	}
	_, w := utf8.DecodeRuneInString(text[s:])
	return s + w
}

// graphemeBoundary reports whether a cut between r (with before being the
// text up to r) and next keeps user-perceived characters
// whole, approximately: it does not split a combining sequence, an emoji
// modifier or ZWJ sequence, or a regional-indicator pair.
func graphemeBoundary(r, next rune, before string) bool {
	switch {
	case next < 0x300: // nothing below U+0300 joins the previous character
		return !(r == '\r' && next == '\n') && r != 0x200D
	case r == 0x200D: // zero-width joiner
		return false
	case next == 0x200D, next == 0x20E3,
		next >= 0xFE00 && next <= 0xFE0F,
		next >= 0x1F3FB && next <= 0x1F3FF,
		next >= 0xE0020 && next <= 0xE007F,
		next >= 0xE0100 && next <= 0xE01EF,
		unicode.In(next, unicode.Mn, unicode.Me, unicode.Mc):
		return false
	case isRegionalIndicator(r) && isRegionalIndicator(next):
		// Cut only after an even number of indicators (a complete flag).
		count := 1
		for b := before; ; {
			q, w := utf8.DecodeLastRuneInString(b)
			if w == 0 || !isRegionalIndicator(q) {
				break
			}
			count++
			b = b[:len(b)-w]
		}
		return count%2 == 0
	}
	return true
}

// startsFence reports whether s begins, after spaces or tabs, with ```.
func startsFence(s string) bool {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return strings.HasPrefix(s[i:], "```")
}

func isRegionalIndicator(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }
