package slacktext

import "strings"

// Token is one Slack control sequence "<target|label>".
type Token struct {
	Target   string // text before the first '|': "@U1", "#C1", "!here", "https://x"
	Label    string // text after the first '|', if HasLabel
	HasLabel bool
}

// Scan reads a Slack control sequence at the start of s (which must begin with '<') and
// returns it and its byte length; n == 0 means s does not start with one. Recognised targets:
// "@ID" (user), "#ID" (channel), "!word" with an optional "^…" (special mentions, user
// groups, dates) and "scheme:rest" (URLs, mailto:). Anything else, such as "<script>", is not
// a token and is literal text. A token never spans lines.
func Scan(s string) (tok Token, n int) {
	if len(s) < 3 || s[0] != '<' {
		return Token{}, 0
	}
	end := strings.IndexAny(s[1:], "<>\n")
	if end < 0 || s[1+end] != '>' {
		return Token{}, 0
	}
	body := s[1 : 1+end]
	target, label, hasLabel := strings.Cut(body, "|")
	if !validTarget(target) {
		return Token{}, 0
	}
	return Token{Target: target, Label: label, HasLabel: hasLabel}, end + 2
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
	if colon < 0 || colon == len(t)-1 || !ValidScheme(t[:colon]) {
		return false
	}
	return !strings.ContainsAny(t, " \t\r")
}

// ValidScheme reports whether s is a URI scheme as CommonMark autolinks accept it: a letter,
// then 1–31 letters, digits, '+', '.' or '-'.
func ValidScheme(s string) bool {
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
