package schedule_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/schedule"
)

// ticks are spec's ticks in [from, to).
func ticks(t *testing.T, spec string, from, to time.Time) []time.Time {
	t.Helper()
	s, err := schedule.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for n := s.Next(from.Add(-time.Nanosecond)); !n.IsZero() && n.Before(to); n = s.Next(n) {
		out = append(out, n)
	}
	return out
}

// A schedule follows its zone's wall clock: on the fall-back night 01:30 ticks once (its first
// occurrence), on the spring-forward night a 02:30 that does not exist ticks at 03:00, not
// never.
func TestSchedulesKeepTheWallClockAcrossDST(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	day := func(y int, m time.Month, d int) (time.Time, time.Time) {
		start := time.Date(y, m, d, 0, 0, 0, 0, ny)
		return start, start.AddDate(0, 0, 1)
	}
	from, to := day(2026, time.November, 1)
	got := ticks(t, "CRON_TZ=America/New_York 30 1 * * *", from, to)
	if len(got) != 1 || got[0].In(ny).Format("15:04 MST") != "01:30 EDT" {
		t.Errorf("fall back: ticks %v, want one at 01:30 EDT", got)
	}
	from, to = day(2026, time.March, 8)
	got = ticks(t, "CRON_TZ=America/New_York 30 2 * * *", from, to)
	if len(got) != 1 || got[0].In(ny).Format("15:04 MST") != "03:00 EDT" {
		t.Errorf("spring forward: ticks %v, want one at 03:00 EDT", got)
	}
	// Hourly across the fall-back night: one tick per wall-clock hour, none twice.
	from, to = day(2026, time.November, 1)
	if got := ticks(t, "CRON_TZ=America/New_York 0 * * * *", from, to); len(got) != 24 {
		t.Errorf("hourly on the 25-hour day: %d ticks, want one per wall-clock hour (24)", len(got))
	}
}

// A spec without CRON_TZ is UTC, whatever the replica's own TZ: replicas with different TZ
// tick one schedule at one hour. (Not parallel: it sets the process's time.Local.)
func TestScheduleWithoutAZoneIsUTC(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	saved := time.Local
	time.Local = ny
	defer func() { time.Local = saved }()
	s, err := schedule.Parse("30 1 * * *")
	if err != nil {
		t.Fatal(err)
	}
	// Times reach the scheduler in the process's zone (its clock, the database driver's).
	from := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).In(time.Local)
	if got, want := s.Next(from), time.Date(2026, 6, 1, 1, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("next tick %v, want %v (01:30 UTC)", got.UTC(), want)
	}
}

// /logbook schedule list says the tick that will come: an @every schedule's counted from
// when it was added (not from now), a zoned one's also on its zone's wall clock.
func TestListSaysTheNextTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{MinInterval: time.Minute})
	sc := e.add(s, "@every 1h", "hourly")
	e.clock.add(90 * time.Minute)
	first := sc.AddedAt.Add(time.Hour - time.Duration(sc.AddedAt.Nanosecond()))
	want := first.Add(time.Hour).UTC().Format("2006-01-02 15:04:05 UTC")
	if got := e.slash(s, admin, "schedule list"); !strings.Contains(got, "next tick "+want) {
		t.Errorf("list: %q; want the next tick %s", got, want)
	}
	e.add(s, "CRON_TZ=Europe/Paris 0 9 * * *", "standup")
	if got := e.slash(s, admin, "schedule list"); !strings.Contains(got, "(09:00 CET, Europe/Paris)") && !strings.Contains(got, "(09:00 CEST, Europe/Paris)") {
		t.Errorf("list: %q; want the zone's wall clock beside UTC", got)
	}
}

// A channel made private after its schedule was added gets no tick: logbook keeps no record
// of private conversations. The schedule is stopped, recorded with why.
func TestScheduleStopsWhenItsChannelTurnsPrivate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.replica("replica-a", schedule.Config{})
	sc := e.add(s, "@every 5s", "report")
	if _, err := e.emu.ConvertToPrivate(general, admin); err != nil {
		t.Fatal(err)
	}
	e.clock.add(5 * time.Second)
	pass(t, s)
	if len(e.tickPosts()) != 0 || len(e.runs(sc.ID)) != 0 {
		t.Fatalf("a schedule ticked in a private channel: %+v", e.runs(sc.ID))
	}
	all, err := e.store.Schedules(context.Background(), "", general, true)
	if err != nil || len(all) != 1 || !all[0].Removed || all[0].RemovedBy != "system" || !strings.Contains(all[0].RemovedWhy, "private") {
		t.Fatalf("records: %+v %v", all, err)
	}
}
