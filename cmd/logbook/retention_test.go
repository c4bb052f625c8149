package main

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/logbook/logbook/audit"
)

// What ParseRetention's errors suggest, it accepts: every example period in the message parses.
func TestRetentionMessageMatchesWhatIsAccepted(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"0d", "-3d", "soon", "2x"} {
		_, err := audit.ParseRetention(bad)
		if !errors.Is(err, audit.ErrInvalid) {
			t.Fatalf("ParseRetention(%q): %v, want ErrInvalid", bad, err)
		}
		_, advice, ok := strings.Cut(err.Error(), ": use ")
		if !ok {
			t.Fatalf("ParseRetention(%q): %q gives no advice", bad, err)
		}
		examples := regexp.MustCompile(`\b\d+[a-z]+\b`).FindAllString(advice, -1)
		if len(examples) < 3 {
			t.Fatalf("ParseRetention(%q): %q gives %d examples, want days, hours and minutes", bad, err, len(examples))
		}
		for _, ex := range examples {
			if d, err := audit.ParseRetention(ex); err != nil || d <= 0 {
				t.Errorf("the message for %q suggests %q, which ParseRetention refuses: %v", bad, ex, err)
			}
		}
	}
}
