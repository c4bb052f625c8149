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
	keep, mark, whole := budget(s, n)
	if whole {
		return s
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + mark
}

// Tail is Text from the other end: s when it is at most n bytes long, else Marker followed by
// the longest suffix of s that starts on a character boundary and fits with it in n bytes.
func Tail(s string, n int) string {
	keep, mark, whole := budget(s, n)
	if whole {
		return s
	}
	i := len(s) - keep
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return mark + s[i:]
}

// budget says whether s fits in n bytes (n < 0 counts as 0), and otherwise how many bytes of
// s may stand beside the marker, and the marker ("" when n leaves no room for it).
func budget(s string, n int) (keep int, mark string, whole bool) {
	n = max(n, 0)
	switch {
	case len(s) <= n:
		return len(s), "", true
	case n < len(Marker):
		return n, "", false
	}
	return n - len(Marker), Marker, false
}
