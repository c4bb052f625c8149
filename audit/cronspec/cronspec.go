// Package cronspec reads cron specs whose fire times follow a zone's wall clock without DST
// skips or doubles: a wall time that does not exist (spring forward) fires at the first
// instant after the gap, one that occurs twice (fall back) fires once, at its first
// occurrence. A spec without a zone is UTC, whatever the process's TZ. The audit exports and
// the channels' schedules both tick by it.
package cronspec

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

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

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse parses a cron spec: five fields, or six with seconds first, or a descriptor
// (@daily, @every 1h). A "CRON_TZ=Zone " or "TZ=Zone " prefix sets the zone, otherwise loc
// (nil: UTC, never the process's own TZ).
func Parse(text string, loc *time.Location) (*Spec, error) {
	if loc == nil {
		loc = time.UTC
	}
	rest := strings.TrimSpace(text)
	if strings.HasPrefix(rest, "CRON_TZ=") || strings.HasPrefix(rest, "TZ=") {
		zone, after, _ := strings.Cut(rest[strings.Index(rest, "=")+1:], " ")
		l, err := time.LoadLocation(zone)
		if err != nil {
			return nil, fmt.Errorf("parse schedule %q: time zone: %v", text, err)
		}
		loc, rest = l, strings.TrimSpace(after)
	}
	if rest == "" {
		return nil, fmt.Errorf("parse schedule %q: empty spec", text)
	}
	if strings.HasPrefix(rest, "@every") {
		// Intervals are absolute durations: no wall clock involved.
		s, err := parser.Parse(rest)
		if err != nil {
			return nil, fmt.Errorf("parse schedule %q: %v", text, err)
		}
		return &Spec{text: text, wall: s, Location: loc}, nil
	}
	s, err := parser.Parse("CRON_TZ=UTC " + rest)
	if err != nil {
		return nil, fmt.Errorf("parse schedule %q: %v", text, err)
	}
	return &Spec{text: text, wall: s, Location: loc}, nil
}

func (s *Spec) String() string { return s.text }

// Every is the interval of an @every spec; false for a spec on the wall clock.
func (s *Spec) Every() (time.Duration, bool) {
	cd, ok := s.wall.(cron.ConstantDelaySchedule)
	return cd.Delay, ok
}

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
