// Package clip shortens text for display and records without splitting a character: the one
// cut that error messages, event payloads, Slack cards, logs and the search index share. It
// imports nothing of logbook, so every package may use it.
package clip

import "unicode/utf8"

// Marker ends text that was cut.
const Marker = "…"

// Text returns s when it is at most n bytes long, else the longest prefix of s that ends on a
// character boundary and leaves room for Marker, followed by Marker: at most n bytes in all,
// and so at most n characters, whichever a limit counts. It never splits a multi-byte
// character. When n leaves no room for Marker the prefix comes alone; n < 0 counts as 0.
func Text(s string, n int) string {
	n = max(n, 0)
	if len(s) <= n {
		return s
	}
	mark := Marker
	if n < len(mark) {
		mark = ""
	}
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}

// Tail is Text from the other end: s when it is at most n bytes long, else Marker followed by
// the longest suffix of s that starts on a character boundary and fits with it in n bytes.
func Tail(s string, n int) string {
	n = max(n, 0)
	if len(s) <= n {
		return s
	}
	mark := Marker
	if n < len(mark) {
		mark = ""
	}
	i := len(s) - (n - len(mark))
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return mark + s[i:]
}
