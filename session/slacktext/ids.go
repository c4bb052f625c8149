package slacktext

import "strings"

// IsChannelID reports whether s reads as a Slack conversation id: C…, D… or G…, then
// upper-case letters and digits.
func IsChannelID(s string) bool {
	if len(s) < 2 || !strings.ContainsRune("CDG", rune(s[0])) {
		return false
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// IsUserID reports whether s reads as a Slack user id: U… or W…, then upper-case letters and
// digits, at most 20 in all.
func IsUserID(s string) bool {
	if len(s) < 3 || len(s) > 20 || (s[0] != 'U' && s[0] != 'W') {
		return false
	}
	return strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == ""
}
