package cronspec

import (
	"testing"
	"time"
)

// A spec names its zone or is UTC; @every is an interval on no wall clock; a bad zone or an
// empty spec is refused.
func TestParse(t *testing.T) {
	t.Parallel()
	s, err := Parse("0 9 * * *", nil)
	if err != nil || s.Location != time.UTC {
		t.Fatalf("no zone: %v %v", s, err)
	}
	if _, ok := s.Every(); ok {
		t.Error("a wall-clock spec says it is an interval")
	}
	s, err = Parse("CRON_TZ=Europe/Paris @every 90m", nil)
	if err != nil || s.Location.String() != "Europe/Paris" {
		t.Fatalf("zoned interval: %v %v", s, err)
	}
	if d, ok := s.Every(); !ok || d != 90*time.Minute {
		t.Errorf("Every = %v %v", d, ok)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := s.Next(from); !got.Equal(from.Add(90 * time.Minute)) {
		t.Errorf("interval next = %v", got)
	}
	for _, bad := range []string{"", "CRON_TZ=Nowhere/Atlantis 0 9 * * *", "CRON_TZ=UTC", "61 * * * *"} {
		if _, err := Parse(bad, nil); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
}
