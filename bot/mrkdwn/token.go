package mrkdwn

import "strings"

// token is one Slack control sequence "<target|label>" found in text.
type token struct {
	target   string // text before the first '|': "@U1", "#C1", "!here", "https://x"
	label    string // text after the first '|', if hasLabel
	hasLabel bool
}

// scanToken reads a Slack control sequence at the start of s (which must
// begin with '<') and returns it and its byte length; n == 0 means s does not
// start with one. Recognised targets: "@ID" (user), "#ID" (channel), "!word"
// with an optional "^…" (special mentions, user groups, dates) and
// "scheme:rest" (URLs, mailto:). Anything else, such as "<script>", is not a
// token and is literal text.
func scanToken(s string) (tok token, n int) {
	if len(s) < 3 || s[0] != '<' {
		return token{}, 0
	}
	end := strings.IndexAny(s[1:], "<>\n")
	if end < 0 || s[1+end] != '>' {
		return token{}, 0
	}
	body := s[1 : 1+end]
	target, label, hasLabel := strings.Cut(body, "|")
	if !validTarget(target) {
		return token{}, 0
	}
	return token{target: target, label: label, hasLabel: hasLabel}, end + 2
}

func validTarget(t string) bool {
	if t == "" {
		return false
	}
	switch t[0] {
	case '@', '#':
		if len(t) < 2 {
			return false
		}
		for i := 1; i < len(t); i++ {
			if c := t[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
		return true
	case '!':
		// "!here", "!subteam^S1", "!date^1700000000^{date_short} at {time}":
		// a word, then anything after '^' (date formats contain spaces).
		word, _, hasArg := strings.Cut(t[1:], "^")
		if word == "" || !hasArg && strings.ContainsAny(word, " \t") {
			return false
		}
		for i := 0; i < len(word); i++ {
			if c := word[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
		return true
	}
	colon := strings.IndexByte(t, ':')
	if colon < 0 || colon == len(t)-1 || !validScheme(t[:colon]) {
		return false
	}
	return !strings.ContainsAny(t, " \t\r")
}

// validScheme reports whether s is a URI scheme as CommonMark autolinks
// accept it: a letter, then 1–31 letters, digits, '+', '.' or '-'.
func validScheme(s string) bool {
	if len(s) < 2 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter || !letter && !(c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

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

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
