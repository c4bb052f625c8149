package audit

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// robfig/cron skips a 02:00 job on the spring-forward day and runs a 01:30 job twice on
// the fall-back day; Spec does neither.
func TestSpecNextAcrossDST(t *testing.T) {
	t.Parallel()
	la := mustLoad(t, "America/Los_Angeles")
	cases := []struct {
		spec string
		loc  *time.Location
		from time.Time
		want []time.Time
	}{
		{"0 2 * * *", la, time.Date(2025, 3, 9, 1, 30, 0, 0, la), []time.Time{
			time.Date(2025, 3, 9, 10, 0, 0, 0, time.UTC), // 03:00 PDT: the first instant after the gap
			time.Date(2025, 3, 10, 9, 0, 0, 0, time.UTC), // 02:00 PDT
		}},
		{"CRON_TZ=America/Los_Angeles 0 2 * * *", nil, time.Date(2025, 3, 8, 3, 0, 0, 0, la), []time.Time{
			time.Date(2025, 3, 9, 10, 0, 0, 0, time.UTC),
			time.Date(2025, 3, 10, 9, 0, 0, 0, time.UTC),
		}},
		{"30 1 * * *", la, time.Date(2025, 11, 2, 0, 30, 0, 0, la), []time.Time{
			time.Date(2025, 11, 2, 8, 30, 0, 0, time.UTC), // 01:30 PDT, the first occurrence
			time.Date(2025, 11, 3, 9, 30, 0, 0, time.UTC), // next day 01:30 PST: no second run on the 2nd
		}},
		{"0 30 1 * * *", la, time.Date(2025, 11, 2, 1, 10, 0, 0, la).Add(time.Hour), []time.Time{ // 01:10 PST, after the first 01:30
			time.Date(2025, 11, 3, 9, 30, 0, 0, time.UTC),
		}},
		{"CRON_TZ=UTC 0 2 * * *", nil, time.Date(2025, 3, 9, 1, 30, 0, 0, time.UTC), []time.Time{
			time.Date(2025, 3, 9, 2, 0, 0, 0, time.UTC),
			time.Date(2025, 3, 10, 2, 0, 0, 0, time.UTC),
		}},
		{"@every 90m", la, time.Date(2025, 3, 9, 1, 0, 0, 0, time.UTC), []time.Time{
			time.Date(2025, 3, 9, 2, 30, 0, 0, time.UTC),
			time.Date(2025, 3, 9, 4, 0, 0, 0, time.UTC),
		}},
	}
	for _, tc := range cases {
		s, err := ParseSpec(tc.spec, tc.loc)
		if err != nil {
			t.Fatal(err)
		}
		at := tc.from
		for i, want := range tc.want {
			at = s.Next(at)
			if !at.Equal(want) {
				t.Errorf("%q fire %d after %s = %s, want %s", tc.spec, i+1, tc.from, at.UTC(), want)
			}
		}
	}
	// What robfig/cron alone does, so the test shows the difference.
	raw, _ := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse("CRON_TZ=America/Los_Angeles 0 2 * * *")
	if got := raw.Next(time.Date(2025, 3, 9, 1, 30, 0, 0, la)); got.Day() != 10 {
		t.Logf("robfig/cron no longer skips 2025-03-09 (fires %s)", got)
	}
	for _, bad := range []string{"", "CRON_TZ=Mars/Base 0 2 * * *", "61 * * * *", "CRON_TZ=UTC"} {
		if _, err := ParseSpec(bad, nil); err == nil {
			t.Errorf("ParseSpec(%q) accepted a bad spec", bad)
		}
	}
}

// The windows of a month tile it: contiguous half-open windows in UTC, one per local day,
// across both 2025 DST changes.
func TestWindowsTileAMonthAcrossDST(t *testing.T) {
	t.Parallel()
	la := mustLoad(t, "America/Los_Angeles")
	cases := []struct {
		spec       string
		start, end time.Time
		days       int
	}{
		{"CRON_TZ=America/Los_Angeles 0 2 * * *", time.Date(2025, 3, 1, 2, 0, 0, 0, la), time.Date(2025, 4, 1, 2, 0, 0, 0, la), 31},
		{"CRON_TZ=America/Los_Angeles 30 1 * * *", time.Date(2025, 11, 1, 1, 30, 0, 0, la), time.Date(2025, 12, 1, 1, 30, 0, 0, la), 30},
		{"CRON_TZ=UTC 0 2 * * *", time.Date(2025, 3, 1, 2, 0, 0, 0, time.UTC), time.Date(2025, 4, 1, 2, 0, 0, 0, time.UTC), 31},
		{"CRON_TZ=America/Los_Angeles 0 * * * *", time.Date(2025, 3, 9, 0, 0, 0, 0, la), time.Date(2025, 3, 10, 0, 0, 0, 0, la), 23},
		{"CRON_TZ=America/Los_Angeles 0 * * * *", time.Date(2025, 11, 2, 0, 0, 0, 0, la), time.Date(2025, 11, 3, 0, 0, 0, 0, la), 24},
	}
	for _, tc := range cases {
		s, err := ParseSpec(tc.spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		ws := windowsDue(s, tc.start, tc.end, 1000)
		if len(ws) != tc.days {
			t.Errorf("%s: %d windows, want %d: %v", tc.spec, len(ws), tc.days, ws)
			continue
		}
		if !ws[0].Start.Equal(tc.start) || !ws[len(ws)-1].End.Equal(tc.end) {
			t.Errorf("%s: windows cover %s..%s, want %s..%s", tc.spec, ws[0].Start, ws[len(ws)-1].End, tc.start, tc.end)
		}
		seen := map[string]bool{}
		var total time.Duration
		for i, w := range ws {
			if !w.End.After(w.Start) || w.Start.Location() != time.UTC {
				t.Errorf("%s: window %d %s is empty or not UTC", tc.spec, i, w)
			}
			if i > 0 && !w.Start.Equal(ws[i-1].End) {
				t.Errorf("%s: gap or overlap between %s and %s", tc.spec, ws[i-1], w)
			}
			total += w.End.Sub(w.Start)
			local := w.Start.In(s.Location)
			key := local.Format("2006-01-02T15")
			if seen[key] {
				t.Errorf("%s: two windows start at local %s", tc.spec, key)
			}
			seen[key] = true
		}
		if total != tc.end.Sub(tc.start) {
			t.Errorf("%s: windows add up to %s, want %s", tc.spec, total, tc.end.Sub(tc.start))
		}
	}
}

func TestWindowsDueWithoutHistoryIsTheLastFullPeriod(t *testing.T) {
	t.Parallel()
	s, _ := ParseSpec("0 2 * * *", nil)
	now := time.Date(2025, 3, 9, 1, 0, 0, 0, time.UTC)
	ws := windowsDue(s, time.Time{}, now, 10)
	want := Window{Start: time.Date(2025, 3, 7, 2, 0, 0, 0, time.UTC), End: time.Date(2025, 3, 8, 2, 0, 0, 0, time.UTC)}
	if len(ws) != 1 || ws[0] != want {
		t.Fatalf("first windows %v, want [%s]", ws, want)
	}
	if ws := windowsDue(s, want.End, now, 10); len(ws) != 0 {
		t.Errorf("nothing is due before the next fire: %v", ws)
	}
	if ws := windowsDue(s, want.End.Add(-5*24*time.Hour), now, 3); len(ws) != 3 {
		t.Errorf("catch-up capped at 3: %v", ws)
	}
}
