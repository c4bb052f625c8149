package audit

import (
	"fmt"
	"time"

	"github.com/logbook/logbook/audit/cronspec"
	"github.com/robfig/cron/v3"
)

// Window is a half-open time range [Start, End), in UTC.
type Window struct {
	Start time.Time
	End   time.Time
}

func (w Window) String() string {
	return w.Start.UTC().Format(time.RFC3339) + "/" + w.End.UTC().Format(time.RFC3339)
}

// key names the window in object keys: 20250309T100000Z_20250310T090000Z.
func (w Window) key() string {
	const f = "20060102T150405Z"
	return w.Start.UTC().Format(f) + "_" + w.End.UTC().Format(f)
}

// Spec is a parsed cron schedule that follows its zone's wall clock (cronspec.Spec).
type Spec = cronspec.Spec

// ParseSpec parses a cron spec (cronspec.Parse): loc nil is UTC. Errors wrap ErrInvalid.
func ParseSpec(text string, loc *time.Location) (*Spec, error) {
	s, err := cronspec.Parse(text, loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s, nil
}

// previousFires returns the last two fire times at or before now (older first), or fewer
// when the schedule has not fired that often within two years.
func previousFires(s cron.Schedule, now time.Time) []time.Time {
	for back := time.Minute; back <= 2*366*24*time.Hour; back *= 2 {
		var fires []time.Time
		t := now.Add(-back)
		for n := 0; n < 100000; n++ {
			t = s.Next(t)
			if t.IsZero() || t.After(now) {
				break
			}
			fires = append(fires, t)
			if len(fires) > 2 {
				fires = fires[1:]
			}
		}
		if len(fires) == 2 {
			return fires
		}
	}
	return nil
}

// windowsDue returns the windows to export at now: from the end of the last succeeded window
// (zero: never ran, then the last full period) to the latest fire time at or before now, cut
// at fire times, at most max of them (the rest are caught up on later ticks).
func windowsDue(s cron.Schedule, lastEnd, now time.Time, max int) []Window {
	start := lastEnd
	if start.IsZero() {
		fires := previousFires(s, now)
		if len(fires) < 2 {
			return nil
		}
		start = fires[0]
	}
	var out []Window
	for len(out) < max {
		end := s.Next(start)
		if end.IsZero() || end.After(now) {
			break
		}
		out = append(out, Window{Start: start.UTC(), End: end.UTC()})
		start = end
	}
	return out
}
