package mrkdwn

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/yuin/goldmark/util"
)

// EscapeText escapes the three characters Slack treats as control characters
// in message text: & → &amp;, < → &lt;, > → &gt;. Nothing else is changed, so
// an apostrophe stays an apostrophe (never &#39;). Use it for user-derived
// fragments (names, titles, file paths) spliced into a message that is sent
// with slack.MsgOptionText(text, false).
func EscapeText(s string) string { return escapeControl(s, false) }

// escapeCode escapes code (span, block or table cell content) for Slack,
// which parses & < > inside code as well: "<@U1>" in code would mention
// and "map<K,V>" would lose "<K,V>". An "&amp;", "&lt;" or "&gt;" already in
// the code is taken as escaped and kept, so converting the output again
// changes nothing; the price is that code which means those five
// characters literally shows "&", "<" or ">" instead.
func escapeCode(s string) string { return escapeControl(s, true) }

// escapeControl escapes & < > as EscapeText does; with keepEntities, an "&amp;", "&lt;" or
// "&gt;" already there is kept as it is (escapeCode).
func escapeControl(s string, keepEntities bool) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			if rest := s[i+1:]; keepEntities && (strings.HasPrefix(rest, "amp;") || strings.HasPrefix(rest, "lt;") || strings.HasPrefix(rest, "gt;")) {
				b.WriteByte('&')
			} else {
				b.WriteString("&amp;")
			}
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// escapeMarkdownText escapes literal Markdown text for Slack. A character
// reference (&amp; &copy; &#39; …) means its character in Markdown, so it is
// decoded and the result escaped; "&amp;", "&lt;" and "&gt;" therefore come
// out unchanged, which keeps already-converted text stable. A reference whose
// character is Markdown punctuation (&#42; is "*") is kept as text (its "&"
// escaped), because decoding it would let a second conversion read it as
// markup. Any other "&" becomes "&amp;".
func escapeMarkdownText(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case '<':
			b.WriteString("&lt;")
			i++
		case '>':
			b.WriteString("&gt;")
			i++
		case '&':
			decoded, n := charRef(s[i:])
			if n > 0 && safeDecoded(decoded) {
				b.WriteString(escapeControl(decoded, false))
				i += n
				continue
			}
			b.WriteString("&amp;")
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
}

// safeDecoded reports whether a decoded character reference may be written
// as its character without changing how Markdown reads the text.
func safeDecoded(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return false
		}
		if r < 0x80 && isASCIIPunct(byte(r)) && !strings.ContainsRune(`'"&<>`, r) {
			return false
		}
	}
	return true
}

func isASCIIPunct(c byte) bool {
	return strings.IndexByte("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", c) >= 0
}

// charRef decodes an HTML character reference at the start of s ("&name;",
// "&#123;", "&#x1F;") and returns its characters and byte length, or n == 0.
func charRef(s string) (decoded string, n int) {
	if len(s) < 3 || s[0] != '&' {
		return "", 0
	}
	end := strings.IndexByte(s, ';')
	if end < 0 || end > 40 {
		return "", 0
	}
	body := s[1:end]
	if body == "" {
		return "", 0
	}
	if body[0] == '#' {
		num := body[1:]
		base := 10
		if num != "" && (num[0] == 'x' || num[0] == 'X') {
			num, base = num[1:], 16
		}
		if num == "" || len(num) > 7 {
			return "", 0
		}
		v, err := strconv.ParseUint(num, base, 32)
		if err != nil {
			return "", 0
		}
		r := rune(v)
		if r == 0 || !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		return string(r), end + 1
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return "", 0
		}
	}
	e, ok := util.LookUpHTML5EntityByName(body)
	if !ok {
		return "", 0
	}
	return string(e.Characters), end + 1
}

// Link is Slack's <url|text> link for a URL from elsewhere (a forge's answer, say): text
// escaped (EscapeText, and "|" is safe in it), the link only when url is https and holds
// nothing that could end it or open another (<, >, |, a space or a control character); else
// text alone, escaped, so nothing from url reaches Slack's markup.
func Link(url, text string) string {
	if !strings.HasPrefix(url, "https://") || strings.ContainsFunc(url, func(r rune) bool {
		return r <= ' ' || r == 0x7f || r == '<' || r == '>' || r == '|'
	}) {
		return EscapeText(text)
	}
	return "<" + strings.ReplaceAll(url, "&", "&amp;") + "|" + EscapeText(text) + ">"
}
