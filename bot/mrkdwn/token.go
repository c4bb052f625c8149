package mrkdwn

import "strings"

// scanBareURL reads a bare http(s) URL at s[i:], as GFM's autolink extension
// would: it must start a word, runs to whitespace or one of "<>`[]", and
// drops trailing punctuation and an unbalanced ')'. n == 0 means none.
func scanBareURL(s string, i int) (n int) {
	rest := s[i:]
	if !(hasPrefixFold(rest, "https://") || hasPrefixFold(rest, "http://")) {
		return 0
	}
	if i > 0 {
		if c := s[i-1]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return 0
		}
	}
	end := strings.IndexAny(rest, " \t\r\n<>`[]\u00a0")
	if end < 0 {
		end = len(rest)
	}
	u := rest[:end]
	for len(u) > 0 {
		last := u[len(u)-1]
		if strings.IndexByte("?!.,:;*_~'\"", last) >= 0 {
			u = u[:len(u)-1]
			continue
		}
		if last == ')' && strings.Count(u, ")") > strings.Count(u, "(") {
			u = u[:len(u)-1]
			continue
		}
		break
	}
	if strings.Index(u, "://")+3 >= len(u) {
		return 0
	}
	return len(u)
}

// scanDestURL reads an http(s) URL at s[i:] that starts a link destination
// ("](" precedes it): it runs to white space or to the ')' that closes the
// destination, whatever follows that, so "[x](https://a.b)'s" keeps its
// link. n == 0 means none.
func scanDestURL(s string, i int) (n int) {
	rest := s[i:]
	if !(hasPrefixFold(rest, "https://") || hasPrefixFold(rest, "http://")) {
		return 0
	}
	depth := 0
	end := len(rest)
scan:
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '\\': // an escaped ')' does not close the destination
			j++
		case ' ', '\t', '\r', '\n', '<', '>', '`':
			end = j
			break scan
		case '(':
			depth++
		case ')':
			if depth == 0 {
				end = j
				break scan
			}
			depth--
		}
	}
	if strings.Index(rest[:end], "://")+3 >= end {
		return 0
	}
	return end
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
