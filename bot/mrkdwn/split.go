package mrkdwn

import (
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/logbook/logbook/session/slacktext"
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
// Inline markup stays whole: Split does not cut inside an entity (&amp;),
// a <…> token (<url|label>, <@U1>) or a `code span`, unless one alone is
// too long for a part. It avoids cutting inside a *bold*, _italic_ or
// ~strike~ pair on a line; if it must, it closes the pair before the
// part's trailing spaces and reopens it at the start of the next part
// ("*a b* " + "*c*"), so both parts render. It never cuts between two
// marker characters, nor where a marker ends a part and another starts the
// next, so Join can tell the added markers apart.
//
// Code fences (lines starting, after optional spaces, with ``` ) are never
// broken: a part that ends inside a fence gets "\n" + the fence appended and
// the next part starts with the fence again, so each part renders on its own
// and, for balanced input, holds an even number of fence lines. Inside a
// fence, line cuts are made before the newline, so the reopened block starts
// with the line break and no blank line appears. A cut inside a long code
// line ends the part with "\n```\n" and starts the next with "```\n", so the
// rest of the line is never glued onto the reopening fence. Cuts are never
// placed inside a fence line itself, unless a fence line with its closing
// fence does not fit in the limit; only then may a part break the fence
// pairing.
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
		b.WriteString(ix.reopen(s))
		body := text[s:e]
		closer := ix.closer(e)
		if closer != "" && !ix.stateAt(e).open {
			// Emphasis closers go before the trailing spaces: "*a *" is no bold.
			trimmed := strings.TrimRight(body, " \t")
			b.WriteString(trimmed + closer + body[len(trimmed):])
		} else {
			b.WriteString(body + closer)
		}
		parts = append(parts, b.String())
		s = e
	}
	return parts
}

// Join is the exact inverse of Split: it drops what Split added (the fences
// that close and reopen a code block across parts, and the markers that
// close and reopen a bold, italic or strike pair) and concatenates.
func Join(parts []string) string {
	var b strings.Builder
	var sc fenceScanner
	reopen := 0 // bytes Split put at the start of the current part
	for i, p := range parts {
		if reopen > 0 && len(p) >= reopen {
			p = p[reopen:]
		}
		reopen = 0
		if i < len(parts)-1 {
			p, reopen = sc.dropCloser(p, parts[i+1])
			if reopen == 0 {
				p, reopen = dropMarkers(p, parts[i+1])
			}
		}
		sc.feed(p)
		b.WriteString(p)
	}
	return b.String()
}

// dropMarkers removes the emphasis markers Split puts before the trailing
// spaces of p when it cuts inside a pair, and returns how many bytes of
// next reopen them. Split never leaves a marker at both sides of a cut
// otherwise.
func dropMarkers(p, next string) (string, int) {
	trimmed := strings.TrimRight(p, " \t")
	r := len(trimmed)
	for r > 0 && isMarker(trimmed[r-1]) {
		r--
	}
	closers := trimmed[r:]
	l := 0
	for l < len(next) && isMarker(next[l]) {
		l++
	}
	if closers == "" || l != len(closers) || reverse(closers) != next[:l] {
		return p, 0
	}
	return trimmed[:r] + p[len(trimmed):], l
}

func isMarker(c byte) bool { return c == '*' || c == '_' || c == '~' }

func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
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

// dropCloser removes the fence Split appends to a part p that ends inside
// a code block ("\n```", or "\n```\n" after a cut inside a code line) and
// returns how many bytes of next, the following part, reopen the block
// (0: p was not closed by Split).
func (s *fenceScanner) dropCloser(p, next string) (string, int) {
	mid := strings.HasSuffix(p, "`\n")
	q := p
	if mid {
		q = p[:len(p)-1]
	}
	m := 0
	for m < len(q) && q[len(q)-1-m] == '`' {
		m++
	}
	if m < 3 || len(q) <= m || q[len(q)-1-m] != '\n' {
		return p, 0
	}
	body := q[:len(q)-1-m]
	reopen := fence(m)
	if mid {
		reopen += "\n"
	}
	probe := *s
	probe.feed(body)
	if st := probe.state(); st.open && st.n == m && strings.HasPrefix(next, reopen) {
		return body, len(reopen)
	}
	return p, 0
}

// lineIndex holds, for each line of a text, its start offset, the fence
// state at its start, and whether it is a fence line; and the inline spans
// a cut should not go into.
type lineIndex struct {
	text      string
	starts    []int
	states    []fenceState
	fenceLike []bool
	atoms     []interval // entities, <…> tokens, code spans: sorted, disjoint
	pairs     []interval // emphasis pairs, sorted by start; may nest
}

// interval is text[start:end]; a cut at p is inside it if start < p < end.
// For a pair, marker is its character.
type interval struct {
	start, end int
	marker     byte
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
		ix.scanInline(start, line, st.open || like)
		if end < 0 {
			return ix
		}
		st = st.next(strings.TrimSuffix(line, "\r"))
		start += end + 1
	}
}

// scanInline records the atoms and emphasis pairs of one line starting at
// offset off. In code only entities count.
func (ix *lineIndex) scanInline(off int, line string, code bool) {
	if !strings.ContainsAny(line, "&<`*_~") {
		return
	}
	first := len(ix.atoms)
	for i := 0; i < len(line); {
		n := 0
		switch line[i] {
		case '&':
			n = entityLen(line[i:])
		case '<':
			if !code {
				_, n = slacktext.Scan(line[i:])
			}
		case '`':
			if !code {
				n = codeSpanLen(line[i:])
			}
		}
		if n > 1 {
			ix.atoms = append(ix.atoms, interval{start: off + i, end: off + i + n})
			i += n
			continue
		}
		i++
	}
	if code || !strings.ContainsAny(line, "*_~") {
		return
	}
	atoms := ix.atoms[first:]
	inAtom := func(i int) bool {
		for _, a := range atoms {
			if a.start <= off+i && off+i < a.end {
				return true
			}
		}
		return false
	}
	var pairs []interval
	for _, m := range []byte("*_~") {
		for i := 0; i < len(line); i++ {
			if line[i] != m || inAtom(i) || !opensPair(line, i) {
				continue
			}
			for j := i + 2; j < len(line); j++ {
				if line[j] == m && !inAtom(j) && closesPair(line, j) {
					pairs = append(pairs, interval{start: off + i, end: off + j + 1, marker: m})
					i = j
					break
				}
			}
		}
	}
	sort.Slice(pairs, func(a, b int) bool { return pairs[a].start < pairs[b].start })
	ix.pairs = append(ix.pairs, pairs...)
}

// opensPair and closesPair approximate Slack: a marker opens after the line
// start or a non-word character and before a non-space, and closes after a
// non-space and before the line end or a non-word character.
func opensPair(line string, i int) bool {
	m := line[i]
	if i+1 >= len(line) || line[i+1] == m || line[i+1] == ' ' || line[i+1] == '\t' || line[i+1] == '\r' {
		return false
	}
	if i == 0 {
		return true
	}
	prev, _ := utf8.DecodeLastRuneInString(line[:i])
	return prev != rune(m) && !isWordRune(prev)
}

func closesPair(line string, j int) bool {
	m := line[j]
	if prev := line[j-1]; prev == m || prev == ' ' || prev == '\t' {
		return false
	}
	if j+1 == len(line) {
		return true
	}
	next, _ := utf8.DecodeRuneInString(line[j+1:])
	return next != rune(m) && !isWordRune(next)
}

// entityLen is the length of an entity ("&amp;", "&#123;", "&copy;") at
// the start of s, or 0.
func entityLen(s string) int {
	for i := 1; i < len(s) && i <= 32; i++ {
		c := s[i]
		switch {
		case c == ';':
			if i > 1 {
				return i + 1
			}
			return 0
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '#' && i == 1:
		default:
			return 0
		}
	}
	return 0
}

// codeSpanLen is the length of a code span (a backtick run, content, the
// same run) at the start of s, within the line, or 0.
func codeSpanLen(s string) int {
	n := 0
	for n < len(s) && s[n] == '`' {
		n++
	}
	for i := n; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		if j-i == n {
			return j
		}
		i = j
	}
	return 0
}

func (ix *lineIndex) line(p int) int {
	return sort.Search(len(ix.starts), func(k int) bool { return ix.starts[k] > p }) - 1
}

// stateAt is the fence state of the line holding byte offset p (for p just
// after a "\n", the next line).
func (ix *lineIndex) stateAt(p int) fenceState {
	return ix.states[ix.line(p)]
}

// openPairs returns the markers of the pairs a cut at p falls inside, in
// the order they open, if Split closes and reopens them there (see
// pairCut); else "".
func (ix *lineIndex) openPairs(p int) string {
	if !ix.pairCut(p) {
		return ""
	}
	return ix.pairsAround(p)
}

// pairsAround returns the markers of the pairs p falls inside, in the order
// they open.
func (ix *lineIndex) pairsAround(p int) string {
	if p <= 0 || p >= len(ix.text) || len(ix.pairs) == 0 {
		return ""
	}
	k := sort.Search(len(ix.pairs), func(i int) bool { return ix.pairs[i].start >= p })
	var m []byte
	for i := k - 1; i >= 0 && ix.pairs[i].start >= ix.starts[ix.line(p)]; i-- {
		if ix.pairs[i].end > p {
			m = append(m, ix.pairs[i].marker)
		}
	}
	slices.Reverse(m)
	return string(m)
}

// pairCut reports whether markers closed before p and reopened at p render
// and can be told apart by Join: a non-space, non-marker character must
// follow p and end the text before it, spaces aside.
func (ix *lineIndex) pairCut(p int) bool {
	t := ix.text
	if p <= 0 || p >= len(t) || len(ix.pairs) == 0 {
		return false
	}
	if c := t[p]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || isMarker(c) {
		return false
	}
	trimmed := strings.TrimRight(t[ix.starts[ix.line(p)]:p], " \t")
	return trimmed != "" && !isMarker(trimmed[len(trimmed)-1])
}

// reopen is what Split puts before the part starting at p: a fence (and a
// line break if p is inside a code line) or emphasis markers.
func (ix *lineIndex) reopen(p int) string {
	if p == 0 {
		return ""
	}
	if st := ix.stateAt(p); st.open {
		if ix.text[p] != '\n' {
			return fence(st.n) + "\n"
		}
		return fence(st.n)
	}
	return ix.openPairs(p)
}

// closer is what Split puts at the end of a part ending at p, before any
// trailing spaces for emphasis markers.
func (ix *lineIndex) closer(p int) string {
	if p >= len(ix.text) {
		return ""
	}
	if st := ix.stateAt(p); st.open {
		if ix.text[p] != '\n' {
			return "\n" + fence(st.n) + "\n"
		}
		return "\n" + fence(st.n)
	}
	return reverse(ix.openPairs(p))
}

// ambiguousFences reports whether line k-1 closes a code block with
// exactly its opening fence and line k is that fence again: the text then
// reads like a part closed by Split after a cut inside a code line
// ("\n```\n") and the next part reopening it ("```\n").
func (ix *lineIndex) ambiguousFences(k int) bool {
	prev := ix.states[k-1]
	if !prev.open || ix.states[k].open {
		return false
	}
	f := fence(prev.n)
	return ix.lineText(k-1) == f && ix.lineText(k) == f
}

// lineText is line k without its "\n".
func (ix *lineIndex) lineText(k int) string {
	end := len(ix.text)
	if k+1 < len(ix.starts) {
		end = ix.starts[k+1] - 1
	}
	return ix.text[ix.starts[k]:end]
}

// Cut classes, best first.
const (
	cutParagraph = iota
	cutLine
	cutWord
	cutRune
	numCuts
)

// cut returns the end offset of the part starting at s: the best place the scan found, else
// (nothing fits) one rune, or more until Join can undo the cut.
func (ix *lineIndex) cut(s, limit int) int {
	prefix := len(ix.reopen(s))
	cs, whole := ix.cutCandidates(s, limit, prefix)
	if whole {
		return len(ix.text)
	}
	if p := cs.choose(s, (limit-prefix)/2); p > s {
		return p
	}
	text := ix.text
	_, w := utf8.DecodeRuneInString(text[s:])
	e := s + w
	for e < len(text) && isMarker(text[e-1]) && isMarker(text[e]) {
		e++
	}
	return e
}

// cand is a place a part may end: its offset (-1: none) and the runes before it in the part.
type cand struct{ p, runes int }

// cutCandidates are the last places of each kind where a part starting at some offset may
// end: by cut class (best), and the worse ones used only when no class fits.
type cutCandidates struct {
	best                                       [numCuts]cand
	forced, inPair, inPairWord, inAtom, anyCut cand
}

// cutCandidates scans the part starting at s up to limit runes (after the prefix that reopens
// its markup) for the places it may end; whole is true when the rest of the text fits.
func (ix *lineIndex) cutCandidates(s, limit, prefix int) (cs cutCandidates, whole bool) {
	text := ix.text
	cs.forced, cs.inPair, cs.inPairWord, cs.inAtom, cs.anyCut = cand{p: -1}, cand{p: -1}, cand{p: -1}, cand{p: -1}, cand{p: -1}
	for i := range cs.best {
		cs.best[i].p = -1
	}
	runes := 0
	k := ix.line(s)
	a := sort.Search(len(ix.atoms), func(i int) bool { return ix.atoms[i].end > s })
	for p := s; p < len(text); {
		r, w := utf8.DecodeRuneInString(text[p:])
		p += w
		runes++
		if prefix+runes > limit {
			break
		}
		if p == len(text) {
			return cs, true
		}
		for k+1 < len(ix.starts) && ix.starts[k+1] <= p {
			k++
		}
		for a < len(ix.atoms) && ix.atoms[a].end <= p {
			a++
		}
		next, _ := utf8.DecodeRuneInString(text[p:])
		st := ix.states[k]
		atLineStart := ix.starts[k] == p
		closer := 0
		if st.open {
			closer = st.n + 1
			if next != '\n' {
				closer++
			}
		}
		if prefix+runes+closer > limit {
			continue
		}
		if st.open && atLineStart {
			continue // the cut before this line's "\n" is better, and the fences stay whole
		}
		if atLineStart && k > 0 && ix.fenceLike[k] && ix.ambiguousFences(k) {
			continue // Join would take the text's fences here for Split's
		}
		if !st.open && len(ix.pairs) > 0 {
			if pm := ix.pairsAround(p); pm != "" {
				if ix.pairCut(p) && prefix+runes+len(pm) <= limit && graphemeBoundary(r, next, text[:p-w]) {
					cs.inPair = cand{p, runes}
					if r == ' ' || r == '\t' {
						cs.inPairWord = cs.inPair
					}
				}
				continue
			}
		}
		if !st.open && isMarker(text[p]) {
			if t := strings.TrimRight(text[s:p], " \t"); t != "" && isMarker(t[len(t)-1]) {
				continue // Join would take the markers for Split's
			}
		}
		if c := text[p]; !atLineStart && (ix.fenceLike[k] || (c == '`' || c == ' ' || c == '\t') && startsFence(text[p:])) {
			// Never inside a fence line, nor where the next part would start
			// with a fence line the text does not have.
			cs.anyCut = cand{p, runes}
			continue
		}
		if a < len(ix.atoms) && ix.atoms[a].start < p {
			cs.inAtom = cand{p, runes}
			continue
		}
		cs.forced = cand{p, runes}
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
		cs.best[c] = cand{p, runes}
	}
	return cs, false
}

// choose picks the end of the part starting at s: the best class that leaves the part at least
// half full, else the farthest of any class, else the worse candidates in order; <= s: none.
func (cs cutCandidates) choose(s, half int) int {
	for _, c := range cs.best {
		if c.p > s && c.runes >= half {
			return c.p
		}
	}
	far := cand{p: -1}
	for _, c := range cs.best {
		if c.p > s && c.p > far.p {
			far = c
		}
	}
	inPair := cs.inPair
	if cs.inPairWord.p > s && cs.inPairWord.runes >= half {
		inPair = cs.inPairWord
	}
	for _, c := range []cand{far, inPair, cs.forced, cs.inAtom, cs.anyCut} {
		if c.p > s {
			return c.p
		}
	}
	return -1
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
