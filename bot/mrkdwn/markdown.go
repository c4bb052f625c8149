package mrkdwn

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"github.com/logbook/logbook/session/slacktext"
)

// maxPasses bounds the fixpoint loop in FromMarkdown.
const maxPasses = 4

// Fixed pieces of the rendered output.
const (
	bullet     = "•"
	rule       = "──────────"
	nestIndent = "\u00a0\u00a0\u00a0\u00a0" // NBSP: not Markdown indentation, so it survives a re-parse
)

// FromMarkdown converts model-written Markdown (CommonMark + GFM
// strikethrough and tables) into Slack mrkdwn for a message's text field,
// sent with slack.MsgOptionText(text, false). See the package documentation
// for the mapping. The result never ends with a newline.
//
// The conversion is idempotent: FromMarkdown(FromMarkdown(x)) ==
// FromMarkdown(x). Slack tokens the model writes (<#C…|name>,
// <url|label>, <mailto:…>) pass through unchanged; mentions — of a person
// (<@U…>, <@W…>), a group (<!subteam^…>) or everyone (<!here>, "@channel")
// — are made inert (see "Mentions").
func FromMarkdown(md string) string { return fromMarkdown(md, false) }

// FromMarkdownMentioning is FromMarkdown for text logbook writes itself (a
// canned reply naming the person who should look): its user mentions
// <@U…> stay live. Broadcasts are inert all the same. Never for model text.
func FromMarkdownMentioning(md string) string { return fromMarkdown(md, true) }

func fromMarkdown(md string, users bool) string {
	out := convertWith(normalizeNewlines(md), users)
	// One conversion is normally already a fixpoint; the loop catches rare
	// inputs whose output still contains something Markdown would rewrite.
	for range maxPasses - 1 {
		next := convertWith(out, users)
		if next == out {
			return out
		}
		out = next
	}
	return out
}

// normalizeNewlines turns the CommonMark line endings "\r\n" and a lone
// "\r" into "\n", the only line break Slack and the rest of this package know.
func normalizeNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

func newParser() parser.Parser {
	// Raw HTML is not special in Slack: drop the HTML block and inline parsers
	// so "<div>" stays literal text (and is escaped).
	blocks := filterOut(parser.DefaultBlockParsers(), parser.NewHTMLBlockParser())
	inlines := filterOut(parser.DefaultInlineParsers(), parser.NewRawHTMLParser())
	inlines = filterOut(inlines, parser.NewEmphasisParser())
	inlines = append(inlines,
		util.Prioritized(&emphasisParser{proc: &emphasisProcessor{char: '*'}}, 500),
		util.Prioritized(&emphasisParser{proc: &emphasisProcessor{char: '_'}}, 501),
	)
	p := parser.NewParser(
		parser.WithBlockParsers(blocks...),
		parser.WithInlineParsers(inlines...),
		parser.WithParagraphTransformers(parser.DefaultParagraphTransformers()...),
	)
	p.AddOptions(
		parser.WithBlockParsers(util.Prioritized(extension.NewFootnoteBlockParser(), 999)),
		parser.WithInlineParsers(
			util.Prioritized(strikeParser{}, 500),
			util.Prioritized(extension.NewFootnoteParser(), 101),
			util.Prioritized(extension.NewTaskCheckBoxParser(), 0),
		),
		parser.WithParagraphTransformers(util.Prioritized(extension.NewTableParagraphTransformer(), 200)),
		parser.WithASTTransformers(
			util.Prioritized(extension.NewTableASTTransformer(), 0),
			util.Prioritized(extension.NewFootnoteASTTransformer(), 999),
		),
	)
	return p
}

func filterOut(vs []util.PrioritizedValue, drop any) []util.PrioritizedValue {
	out := make([]util.PrioritizedValue, 0, len(vs))
	for _, v := range vs {
		if v.Value == drop {
			continue
		}
		out = append(out, v)
	}
	return out
}

// emphasisProcessor is goldmark's emphasis delimiter processor split per
// character, so the resulting node remembers whether it was written with
// '*' or '_' (goldmark's own node does not).
type emphasisProcessor struct{ char byte }

func (p *emphasisProcessor) IsDelimiter(b byte) bool { return b == p.char }

func (p *emphasisProcessor) CanOpenCloser(opener, closer *parser.Delimiter) bool {
	return opener.Char == closer.Char
}

func (p *emphasisProcessor) OnMatch(consumes int) ast.Node {
	n := ast.NewEmphasis(consumes)
	n.SetAttributeString(markerAttr, p.char)
	return n
}

const markerAttr = "mrkdwn-marker"

type emphasisParser struct{ proc *emphasisProcessor }

func (s *emphasisParser) Trigger() []byte { return []byte{s.proc.char} }

func (s *emphasisParser) Parse(parent ast.Node, block text.Reader, pc parser.Context) ast.Node {
	before := block.PrecendingCharacter()
	line, segment := block.PeekLine()
	node := parser.ScanDelimiter(line, before, 1, s.proc)
	if node == nil {
		return nil
	}
	node.Segment = segment.WithStop(segment.Start + node.OriginalLength)
	block.Advance(node.OriginalLength)
	pc.PushDelimiter(node)
	return node
}

// strikeProcessor pairs "~" runs as GFM specifies: an opener closes only
// with a run of the same length ("~~a ~/x~~" is one strike holding a "~").
// goldmark's own processor pairs any two runs and drops the odd tilde.
type strikeProcessor struct{}

func (strikeProcessor) IsDelimiter(b byte) bool { return b == '~' }

func (strikeProcessor) CanOpenCloser(opener, closer *parser.Delimiter) bool {
	return opener.Char == closer.Char && opener.OriginalLength == closer.OriginalLength
}

func (strikeProcessor) OnMatch(consumes int) ast.Node { return east.NewStrikethrough() }

type strikeParser struct{}

func (strikeParser) Trigger() []byte { return []byte{'~'} }

func (strikeParser) Parse(parent ast.Node, block text.Reader, pc parser.Context) ast.Node {
	before := block.PrecendingCharacter()
	line, segment := block.PeekLine()
	node := parser.ScanDelimiter(line, before, 1, strikeProcessor{})
	if node == nil || node.OriginalLength > 2 || before == '~' {
		return nil
	}
	node.Segment = segment.WithStop(segment.Start + node.OriginalLength)
	block.Advance(node.OriginalLength)
	pc.PushDelimiter(node)
	return node
}

// convert is one Markdown → mrkdwn pass.
func convert(md string) string { return convertWith(md, false) }

// convertWith is one pass; users keeps user mentions live.
func convertWith(md string, users bool) string {
	prot, src := protect(md, users)
	p := newParser()
	doc := p.Parse(text.NewReader([]byte(src)))
	r := &renderer{src: []byte(src), prot: prot}
	return neutralizeBroadcasts(strings.TrimRight(r.blocks(doc), "\n"))
}

// zwsp is U+200B ZERO WIDTH SPACE: invisible, but it ends a word for Slack.
const zwsp = "\u200b"

// broadcastWords are the "@word"s Slack may turn into a channel-wide ping.
var broadcastWords = [...]string{"here", "channel", "everyone"}

// neutralizeBroadcasts puts a zero-width space after the "@" of every
// "@here", "@channel" and "@everyone" (any case, as a whole word), anywhere
// in s, code included: shown the same, but never a ping. "ops@here.com"
// and "@hereafter" are left alone.
func neutralizeBroadcasts(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '@' || i > 0 && isWordByte(s[i-1]) {
			continue
		}
		for _, w := range broadcastWords {
			end := i + 1 + len(w)
			if end <= len(s) && strings.EqualFold(s[i+1:end], w) {
				if next, _ := utf8.DecodeRuneInString(s[end:]); end == len(s) || !isWordRune(next) {
					b.WriteString(s[last : i+1])
					b.WriteString(zwsp)
					last = i + 1
				}
				break
			}
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == '+'
}

// isAlnum reports whether r is a letter, digit or combining mark: next to
// one, a formatting marker is inside a word for Slack.
func isAlnum(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// protected holds the spans FromMarkdown passes through unparsed: Slack
// tokens and bare URLs. In the parsed text each is replaced by a placeholder
// marker+index+marker, where marker is a private-use rune absent from the
// input, so Markdown cannot split or reinterpret them.
type protected struct {
	marker rune
	spans  []span
	users  bool // user mentions stay live (FromMarkdownMentioning)
}

type span struct {
	raw   string // as written: what code shows (escaped)
	text  string // what prose shows: raw, or a mention made inert
	isURL bool   // a bare URL (escaped in text), not a Slack token (kept verbatim)
}

func protect(md string, users bool) (protected, string) {
	marker := rune(0xE000)
	for strings.ContainsRune(md, marker) && marker < 0xF8FF {
		marker++
	}
	pr := protected{marker: marker, users: users}
	if strings.ContainsRune(md, marker) { // every private-use rune is taken: protect nothing
		pr.marker = -1
		return pr, md
	}
	var b strings.Builder
	for i := 0; i < len(md); {
		// "](<url>)" is an angle-bracket link destination, not a Slack link.
		if md[i] == '<' && !strings.HasSuffix(md[:i], "](") {
			if tok, n := slacktext.Scan(md[i:]); n > 0 {
				pr.addToken(&b, md[i:i+n], tok)
				i += n
				continue
			}
		}
		if md[i] == 'h' || md[i] == 'H' {
			n := scanBareURL(md, i)
			if strings.HasSuffix(md[:i], "](") {
				n = scanDestURL(md, i)
			}
			if n > 0 {
				pr.add(&b, md[i:i+n], true)
				i += n
				continue
			}
		}
		b.WriteByte(md[i])
		i++
	}
	return pr, b.String()
}

func (p *protected) add(b *strings.Builder, raw string, isURL bool) {
	p.addSpan(b, span{raw: raw, text: raw, isURL: isURL})
}

// addToken protects a Slack token. A broadcast (<!here>, <!channel>,
// <!everyone>, <!subteam^…>, any "!" token but a date) is shown in prose as
// inert text ("@\u200bhere"), never as markup: model output must not ping.
func (p *protected) addToken(b *strings.Builder, raw string, tok slacktext.Token) {
	sp := span{raw: raw, text: raw}
	word, arg, _ := strings.Cut(tok.Target[1:], "^")
	if tok.Target[0] == '!' && !strings.EqualFold(word, "date") {
		name := word
		if strings.EqualFold(word, "subteam") {
			id, _, _ := strings.Cut(arg, "^")
			name = cmpOr(strings.TrimPrefix(tok.Label, "@"), id, word)
		}
		sp.text = "@" + zwsp + name
	}
	if tok.Target[0] == '@' && !p.users {
		// A person's mention from the model: who it names came from the conversation,
		// or from text an outsider wrote (a review, a CI log). Shown, never a ping.
		sp.text = "@" + zwsp + cmpOr(strings.TrimPrefix(tok.Label, "@"), tok.Target[1:])
	}
	p.addSpan(b, sp)
}

func (p *protected) addSpan(b *strings.Builder, sp span) {
	b.WriteRune(p.marker)
	b.WriteString(strconv.Itoa(len(p.spans)))
	b.WriteRune(p.marker)
	p.spans = append(p.spans, sp)
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

type expandMode int

const (
	expandRaw   expandMode = iota // code: original bytes
	expandText                    // prose: tokens verbatim, URLs escaped
	expandLabel                   // inside a link label: everything escaped
)

// expand replaces placeholders in s; between placeholders it calls lit.
func (p *protected) expand(b *strings.Builder, s string, mode expandMode, lit func(*strings.Builder, string)) {
	for {
		i := -1
		if p.marker >= 0 {
			i = strings.IndexRune(s, p.marker)
		}
		if i < 0 {
			lit(b, s)
			return
		}
		ml := utf8.RuneLen(p.marker)
		j := strings.IndexRune(s[i+ml:], p.marker)
		idx, err := -1, error(nil)
		if j >= 0 {
			idx, err = strconv.Atoi(s[i+ml : i+ml+j])
		}
		if j < 0 || err != nil || idx < 0 || idx >= len(p.spans) {
			// A stray marker cannot come from protect; keep it as text.
			lit(b, s[:i+ml])
			s = s[i+ml:]
			continue
		}
		lit(b, s[:i])
		sp := p.spans[idx]
		switch {
		case mode == expandRaw:
			b.WriteString(sp.raw)
		case mode == expandText && !sp.isURL:
			b.WriteString(sp.text)
		default:
			escapeMarkdownText(b, sp.text)
		}
		s = s[i+ml+j+ml:]
	}
}

func (p *protected) expandString(s string, mode expandMode) string {
	var b strings.Builder
	p.expand(&b, s, mode, func(b *strings.Builder, t string) { b.WriteString(t) })
	return b.String()
}

type renderer struct {
	src  []byte
	prot protected
}

// blocks renders the block children of n, separated by one newline, or by a
// blank line where the source had one.
func (r *renderer) blocks(n ast.Node) string {
	var b strings.Builder
	first := true
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		s := r.block(c)
		if s == "" && c.Kind() != ast.KindListItem {
			continue
		}
		if !first {
			b.WriteString(r.separator(c, s))
		}
		first = false
		b.WriteString(s)
	}
	return b.String()
}

// separator is what goes before block c, rendered as s: a blank line if the
// source had one. A table is always set off by a blank line (goldmark builds
// it from a paragraph and the table node has no position); so is a block
// whose first line would turn the line before it into a setext heading
// ("===" after "*Title*"), and any block after a quote (a "• item" line
// right after "> note" would be read as part of the quote).
func (r *renderer) separator(c ast.Node, s string) string {
	_, table := c.(*east.Table)
	_, notes := c.(*east.FootnoteList)
	_, afterQuote := c.PreviousSibling().(*ast.Blockquote)
	if table || notes || afterQuote || r.blankBefore(c) || setextLine(s) {
		return "\n\n"
	}
	return "\n"
}

// blankBefore reports whether the source line before block c's first line is
// blank (empty, or only spaces and quote markers). goldmark's
// HasBlankPreviousLines is not used when the position is known: it is also
// set on the block after a fenced code block.
func (r *renderer) blankBefore(c ast.Node) bool {
	pos := c.Pos()
	if pos < 0 || pos > len(r.src) {
		return c.HasBlankPreviousLines()
	}
	i := bytes.LastIndexByte(r.src[:pos], '\n')
	if i < 0 {
		return false
	}
	j := bytes.LastIndexByte(r.src[:i], '\n')
	return len(bytes.Trim(r.src[j+1:i], " \t\r>")) == 0
}

// setextLine reports whether the first line of s is a setext heading
// underline: up to three spaces, then only '=' or only '-', then spaces.
func setextLine(s string) bool {
	line, _, _ := strings.Cut(s, "\n")
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	t = strings.TrimRight(t, " \t")
	return t != "" && (strings.Trim(t, "=") == "" || strings.Trim(t, "-") == "")
}

func (r *renderer) block(n ast.Node) string {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		return r.inlines(n, ctx{})
	case *ast.Heading:
		s := r.inlines(n, ctx{bold: true})
		if strings.TrimSpace(s) == "" {
			return ""
		}
		if !wrappable(s, "*") {
			return s
		}
		return "*" + s + "*"
	case *ast.ThematicBreak:
		return rule
	case *ast.FencedCodeBlock, *ast.CodeBlock:
		return r.codeBlock(n)
	case *ast.Blockquote:
		return prefixLines(r.blocks(n), "> ", ">")
	case *ast.List:
		return r.list(n)
	case *east.Table:
		return r.table(n)
	case *east.FootnoteList:
		var notes []string
		for fn := n.FirstChild(); fn != nil; fn = fn.NextSibling() {
			idx := 0
			if f, ok := fn.(*east.Footnote); ok {
				idx = f.Index
			}
			notes = append(notes, "["+strconv.Itoa(idx)+"] "+r.blocks(fn))
		}
		return strings.Join(notes, "\n")
	default:
		if n.Type() == ast.TypeBlock && n.FirstChild() != nil && n.FirstChild().Type() == ast.TypeInline {
			return r.inlines(n, ctx{})
		}
		return r.blocks(n)
	}
}

func (r *renderer) codeBlock(n ast.Node) string {
	var content strings.Builder
	lines := n.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		content.Write(seg.Value(r.src))
	}
	body := escapeCode(r.prot.expandString(content.String(), expandRaw))
	return Fence(body)
}

// Fence wraps body in a Markdown code fence that nothing in body can close: ```, or one
// backtick more than the longest run of backticks in body when that run is three or longer.
// A non-empty body that does not end in a newline gets one before the closing fence. The
// code blocks of Slack messages and the file text the model is shown (bot/brain) are both
// fenced by it.
func Fence(body string) string {
	fence := strings.Repeat("`", max(3, longestRun(body, '`')+1))
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	return fence + "\n" + body + fence
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	best, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			cur++
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}

func prefixLines(s, prefix, emptyPrefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l == "" {
			lines[i] = emptyPrefix
		} else {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}

func (r *renderer) list(l *ast.List) string {
	var b strings.Builder
	num := l.Start
	i := 0
	for item := l.FirstChild(); item != nil; item = item.NextSibling() {
		if i > 0 {
			b.WriteString("\n")
			if !l.IsTight {
				b.WriteString("\n")
			}
		}
		marker := bullet
		if l.IsOrdered() {
			// Keep the delimiter ('.' or ')'): "1) a\n\n3. b" is two lists, and
			// writing both with '.' would merge them on a second pass.
			marker = strconv.Itoa(num) + string(l.Marker)
			num++
		}
		body := r.listItem(item)
		switch {
		case body == "":
			b.WriteString(marker)
		case startsFence(body):
			// After "• " a fence is no fence: it must start its own line.
			b.WriteString(marker + "\n" + body)
		default:
			b.WriteString(marker + " " + body)
		}
		i++
	}
	return b.String()
}

// listItem renders an item's blocks. Continuation lines are not indented
// (Markdown would strip the indentation on a re-parse); nested lists are
// indented with non-breaking spaces, which Markdown keeps as text.
func (r *renderer) listItem(item ast.Node) string {
	var b strings.Builder
	first := true
	for c := item.FirstChild(); c != nil; c = c.NextSibling() {
		s := r.block(c)
		if s == "" {
			continue
		}
		if _, nested := c.(*ast.List); nested && !first {
			s = indentOutsideCode(s, nestIndent)
		}
		if !first {
			b.WriteString(r.separator(c, s))
		}
		first = false
		b.WriteString(s)
	}
	return b.String()
}

// indentOutsideCode prefixes the non-empty lines of s with indent, except
// code block lines: an indented fence is no longer a fence for Slack.
func indentOutsideCode(s, indent string) string {
	lines := strings.Split(s, "\n")
	var st fenceState
	for i, l := range lines {
		next := st.next(l)
		if l != "" && !st.open && !next.open {
			lines[i] = indent + l
		}
		st = next
	}
	return strings.Join(lines, "\n")
}

// table renders a GFM table as aligned columns inside a code block, padding
// cells by estimated display width.
func (r *renderer) table(t *east.Table) string {
	var rows [][]string
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			cells = append(cells, strings.TrimSpace(r.plain(cell)))
		}
		rows = append(rows, cells)
	}
	var widths []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 1)
			}
			widths[i] = max(widths[i], displayWidth(c))
		}
	}
	var b strings.Builder
	for ri, row := range rows {
		writeRow(&b, row, widths)
		if ri == 0 {
			sep := make([]string, len(widths))
			for i, w := range widths {
				sep[i] = strings.Repeat("-", w)
			}
			writeRow(&b, sep, widths)
		}
	}
	return Fence(b.String())
}

func writeRow(b *strings.Builder, row []string, widths []int) {
	b.WriteString("|")
	for i, w := range widths {
		c := ""
		if i < len(row) {
			c = row[i]
		}
		b.WriteString(" " + EscapeText(c) + strings.Repeat(" ", max(0, w-displayWidth(c))) + " |")
	}
	b.WriteString("\n")
}

// plain renders inline content as unformatted text (for table cells, which
// sit inside a code block): escapes and references decoded, links as
// "label (url)".
func (r *renderer) plain(n ast.Node) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		switch c := c.(type) {
		case *ast.Text:
			if !entering {
				return ast.WalkContinue, nil
			}
			v := c.Segment.Value(r.src)
			if !c.IsRaw() {
				v = util.UnescapePunctuations(v)
				v = util.ResolveNumericReferences(v)
				v = util.ResolveEntityNames(v)
			}
			b.WriteString(r.prot.expandString(string(v), expandRaw))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteString(" ")
			}
		case *ast.String:
			if entering {
				b.WriteString(r.prot.expandString(string(c.Value), expandRaw))
			}
		case *ast.Link:
			if !entering {
				b.WriteString(" (" + r.prot.expandString(string(c.Destination), expandRaw) + ")")
			}
		case *ast.Image:
			if !entering {
				b.WriteString(" (" + r.prot.expandString(string(c.Destination), expandRaw) + ")")
			}
		case *ast.AutoLink:
			if entering {
				b.Write(c.Label(r.src))
			}
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// ctx is the inline formatting already open around a node.
type ctx struct {
	bold, italic, strike, label bool
}

func (r *renderer) inlines(n ast.Node, c ctx) string {
	var b strings.Builder
	afterMarker := false // b ends with a closing marker wrap added
	for ch := n.FirstChild(); ch != nil; ch = ch.NextSibling() {
		if !isFormat(ch) {
			if !afterMarker {
				r.inline(&b, ch, c)
				continue
			}
			var t strings.Builder
			r.inline(&t, ch, c)
			if first, _ := utf8.DecodeRuneInString(t.String()); isAlnum(first) {
				b.WriteString(zwsp)
			}
			b.WriteString(t.String())
			afterMarker = t.Len() == 0 && afterMarker
			continue
		}
		s, wrapped := r.format(ch, c)
		if wrapped {
			// Slack formats only at word boundaries: "he*l*lo" is no bold.
			last, _ := utf8.DecodeLastRuneInString(b.String())
			if afterMarker || isAlnum(last) {
				b.WriteString(zwsp)
			}
		}
		b.WriteString(s)
		afterMarker = wrapped || s == "" && afterMarker
	}
	return b.String()
}

func isFormat(n ast.Node) bool {
	switch n.(type) {
	case *ast.Emphasis, *east.Strikethrough:
		return true
	}
	return false
}

// format renders emphasis or strikethrough and reports whether it wrapped
// it in markers.
func (r *renderer) format(n ast.Node, c ctx) (string, bool) {
	switch n := n.(type) {
	case *ast.Emphasis:
		marker, _ := n.AttributeString(markerAttr)
		if n.Level >= 2 || marker == byte('*') {
			return r.wrap(n, "*", c.bold, ctx{bold: true, italic: c.italic, strike: c.strike, label: c.label})
		}
		return r.wrap(n, "_", c.italic, ctx{bold: c.bold, italic: true, strike: c.strike, label: c.label})
	case *east.Strikethrough:
		return r.wrap(n, "~", c.strike, ctx{bold: c.bold, italic: c.italic, strike: true, label: c.label})
	}
	return "", false
}

func (r *renderer) literal(b *strings.Builder, s string, c ctx) {
	mode := expandText
	if c.label {
		mode = expandLabel
	}
	r.prot.expand(b, s, mode, escapeMarkdownText)
}

func (r *renderer) inline(b *strings.Builder, n ast.Node, c ctx) {
	switch n := n.(type) {
	case *ast.Text:
		r.literal(b, string(n.Segment.Value(r.src)), c)
		switch {
		case (n.HardLineBreak() || n.SoftLineBreak()) && c.label:
			b.WriteString(" ") // a link label must stay on one line
		case n.HardLineBreak() || n.SoftLineBreak():
			if strings.HasSuffix(b.String(), `\`) {
				// A "\" ending a line would be a hard break on a second pass.
				b.WriteString(zwsp)
			}
			b.WriteString("\n")
		}
	case *ast.String:
		r.literal(b, string(n.Value), c)
	case *ast.CodeSpan:
		b.WriteString(r.codeSpan(n)) // escaped, so also safe inside <url|label>
	case *ast.Emphasis, *east.Strikethrough:
		s, _ := r.format(n, c)
		b.WriteString(s)
	case *ast.Link:
		r.link(b, string(n.Destination), r.inlines(n, ctx{label: true}), c)
	case *ast.Image:
		r.link(b, string(n.Destination), r.inlines(n, ctx{label: true}), c)
	case *east.FootnoteLink:
		b.WriteString("[" + strconv.Itoa(n.Index) + "]")
	case *east.FootnoteBacklink:
	case *east.TaskCheckBox:
		if n.IsChecked {
			b.WriteString("☑ ")
		} else {
			b.WriteString("☐ ")
		}
	case *ast.AutoLink:
		label := string(n.Label(r.src))
		if n.AutoLinkType == ast.AutoLinkEmail {
			b.WriteString("<mailto:" + escapeURL(label) + "|" + EscapeText(label) + ">")
			return
		}
		b.WriteString("<" + escapeURL(string(n.URL(r.src))) + ">")
	default:
		if n.HasChildren() {
			for ch := n.FirstChild(); ch != nil; ch = ch.NextSibling() {
				r.inline(b, ch, c)
			}
		}
	}
}

// wrap renders n's children between marker characters, unless the same
// formatting is already open (Slack cannot nest it).
func (r *renderer) wrap(n ast.Node, marker string, open bool, inner ctx) (string, bool) {
	s := r.inlines(n, inner)
	if open || !wrappable(s, marker) {
		return s, false
	}
	return marker + s + marker, true
}

// wrappable reports whether marker+s+marker reads as formatting: Slack (and
// Markdown, on a second pass) needs non-space text next to the markers, and
// a marker character there would merge with ours.
func wrappable(s, marker string) bool {
	if s == "" {
		return false
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	return !unicode.IsSpace(first) && !unicode.IsSpace(last) &&
		!strings.HasPrefix(s, marker) && !strings.HasSuffix(s, marker)
}

func (r *renderer) link(b *strings.Builder, dest, label string, c ctx) {
	d := []byte(r.prot.expandString(dest, expandRaw))
	d = util.UnescapePunctuations(d)
	d = util.ResolveNumericReferences(d)
	d = util.ResolveEntityNames(d)
	url := string(d)
	if c.label || !hasScheme(url) {
		// Slack cannot link a relative URL or nest a link in a label.
		b.WriteString(label)
		return
	}
	if strings.TrimSpace(label) == "" || label == EscapeText(url) {
		b.WriteString("<" + escapeURL(url) + ">")
		return
	}
	b.WriteString("<" + escapeURL(url) + "|" + label + ">")
}

// hasScheme reports whether u is an absolute URL ("scheme:rest"), which is
// all Slack can link.
func hasScheme(u string) bool {
	colon := strings.IndexByte(u, ':')
	return colon >= 0 && slacktext.ValidScheme(u[:colon]) && colon+1 < len(u)
}

// escapeURL makes a URL safe inside "<url|label>": & < > as entities,
// '|' and whitespace percent-encoded.
func escapeURL(u string) string {
	var b strings.Builder
	for i := 0; i < len(u); i++ {
		switch c := u[i]; c {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("%3C")
		case '>':
			b.WriteString("%3E")
		case '|':
			b.WriteString("%7C")
		case ' ':
			b.WriteString("%20")
		case '\n', '\r', '\t':
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// codeSpan returns the span exactly as written: its backtick runs (found in
// the source next to the content) around its raw content.
func (r *renderer) codeSpan(n *ast.CodeSpan) string {
	var content strings.Builder
	first, last := -1, -1
	for ch := n.FirstChild(); ch != nil; ch = ch.NextSibling() {
		t, ok := ch.(*ast.Text)
		if !ok {
			continue
		}
		if first < 0 {
			first = t.Segment.Start
		}
		last = t.Segment.Stop
		content.Write(t.Segment.Value(r.src))
	}
	if first < 0 {
		return ""
	}
	open, pad := r.runBefore(first)
	closeRun, padAfter := r.runAfter(last)
	body := escapeCode(r.prot.expandString(content.String(), expandRaw))
	return strings.Repeat("`", open) + pad + body + padAfter + strings.Repeat("`", closeRun)
}

func (r *renderer) runBefore(i int) (int, string) {
	pad := ""
	if i > 0 && r.src[i-1] == ' ' {
		pad, i = " ", i-1
	}
	n := 0
	for i > 0 && r.src[i-1] == '`' {
		n++
		i--
	}
	if n == 0 {
		return 1, pad
	}
	return n, pad
}

func (r *renderer) runAfter(i int) (int, string) {
	pad := ""
	if i < len(r.src) && r.src[i] == ' ' {
		pad, i = " ", i+1
	}
	n := 0
	for i < len(r.src) && r.src[i] == '`' {
		n++
		i++
	}
	if n == 0 {
		return 1, pad
	}
	return n, pad
}
