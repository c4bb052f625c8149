package audit

import (
	"fmt"
	"strings"
	"time"

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

// Spec is a parsed cron schedule whose fire times follow the wall clock of its zone without
// DST skips or doubles: a wall time that does not exist (spring forward) fires at the first
// instant after the gap, and a wall time that occurs twice (fall back) fires once, at its
// first occurrence. It implements cron.Schedule.
type Spec struct {
	text string
	wall cron.Schedule // the spec evaluated on wall-clock fields expressed in UTC
	// Location is the zone whose wall clock the spec follows.
	Location *time.Location
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSpec parses a cron spec: five fields, or six with seconds first, or a descriptor
// (@daily, @every 1h). A "CRON_TZ=Zone " or "TZ=Zone " prefix sets the zone, otherwise loc
// (nil: UTC). Errors wrap ErrInvalid.
func ParseSpec(text string, loc *time.Location) (*Spec, error) {
	if loc == nil {
		loc = time.UTC
	}
	rest := strings.TrimSpace(text)
	if strings.HasPrefix(rest, "CRON_TZ=") || strings.HasPrefix(rest, "TZ=") {
		zone, after, _ := strings.Cut(rest[strings.Index(rest, "=")+1:], " ")
		l, err := time.LoadLocation(zone)
		if err != nil {
			return nil, fmt.Errorf("parse schedule %q: %w: time zone: %v", text, ErrInvalid, err)
		}
		loc, rest = l, strings.TrimSpace(after)
	}
	if rest == "" {
		return nil, fmt.Errorf("parse schedule %q: %w: empty spec", text, ErrInvalid)
	}
	if strings.HasPrefix(rest, "@every") {
		// Intervals are absolute durations: no wall clock involved.
		s, err := cronParser.Parse(rest)
		if err != nil {
			return nil, fmt.Errorf("parse schedule %q: %w: %v", text, ErrInvalid, err)
		}
		return &Spec{text: text, wall: s, Location: loc}, nil
	}
	s, err := cronParser.Parse("CRON_TZ=UTC " + rest)
	if err != nil {
		return nil, fmt.Errorf("parse schedule %q: %w: %v", text, ErrInvalid, err)
	}
	return &Spec{text: text, wall: s, Location: loc}, nil
}

func (s *Spec) String() string { return s.text }

// Next returns the first fire time strictly after t, or the zero time if there is none.
func (s *Spec) Next(t time.Time) time.Time {
	if _, every := s.wall.(cron.ConstantDelaySchedule); every {
		return s.wall.Next(t)
	}
	lt := t.In(s.Location)
	naive := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC)
	for range 1000 {
		w := s.wall.Next(naive)
		if w.IsZero() {
			return time.Time{}
		}
		inst := wallToInstant(w, s.Location)
		if inst.After(t) {
			return inst
		}
		naive = w
	}
	return time.Time{}
}

// wallToInstant maps wall-clock fields (carried in a UTC time) to an instant in loc: a wall
// time in a spring-forward gap becomes the first instant after the gap, an ambiguous one its
// first occurrence.
func wallToInstant(w time.Time, loc *time.Location) time.Time {
	inst := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	if !sameWall(inst.In(loc), w) {
		return gapEnd(w, loc)
	}
	// Ambiguous wall time: prefer the earlier of the two instants.
	for _, d := range []time.Duration{-2 * time.Hour, -time.Hour, -30 * time.Minute} {
		if earlier := inst.Add(d); sameWall(earlier.In(loc), w) {
			return earlier
		}
	}
	return inst
}

func sameWall(t, w time.Time) bool {
	return t.Year() == w.Year() && t.Month() == w.Month() && t.Day() == w.Day() &&
		t.Hour() == w.Hour() && t.Minute() == w.Minute() && t.Second() == w.Second()
}

// gapEnd finds the first instant whose wall clock in loc is at or after w (the end of a
// spring-forward gap that swallowed w), by searching minute by minute over at most a day.
func gapEnd(w time.Time, loc *time.Location) time.Time {
	lo := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, time.UTC).Add(-26 * time.Hour)
	hi := lo.Add(52 * time.Hour)
	wallOf := func(t time.Time) time.Time {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	}
	// Binary search on instants for the first whose wall clock is >= w. Wall clock is
	// monotonic except at fall-back, which is not near a gap.
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if wallOf(mid).Before(w) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi.Truncate(time.Second)
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
