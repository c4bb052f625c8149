package slacktext

import "testing"

func TestIDs(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{"C0123ABC": true, "G01": true, "D9": true, "U01": false, "c0123": false, "C01-2": false, "C": false} {
		if got := IsChannelID(s); got != want {
			t.Errorf("IsChannelID(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"U0123ABC": true, "W012": true, "U1": false, "C0123": false, "U0123abc": false, "U" + "0123456789012345678901": false} {
		if got := IsUserID(s); got != want {
			t.Errorf("IsUserID(%q) = %v, want %v", s, got, want)
		}
	}
}
