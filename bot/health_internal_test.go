package bot

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
)

func TestHealth(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := &Health{now: func() time.Time { return now }}
	step := func(d time.Duration) { now = now.Add(d) }
	if h.Err() != nil {
		t.Fatal("a new Health is unhealthy")
	}
	h.appendFailed()
	if h.Err() != ErrLogUnwritable {
		t.Fatal("healthy after a failed append")
	}
	step(time.Second)
	h.appendSucceeded()
	if h.Err() != nil {
		t.Fatal("unhealthy after the next append succeeded")
	}
	step(time.Second)
	h.appendFailed()
	step(healthWindow - time.Millisecond)
	if h.Err() == nil {
		t.Fatal("healthy within the window of a failure")
	}
	step(time.Millisecond)
	if h.Err() != nil {
		t.Fatal("a failure still counts after the window, with no traffic since")
	}
	var none *Health
	none.appendFailed()
	if none.Err() != nil {
		t.Fatal("a nil Health is unhealthy")
	}
}

// fakeLag is a standby's lag as a test sets it.
type fakeLag struct {
	lag session.Lag
	err error
}

func (f fakeLag) Lag(context.Context) (session.Lag, error) { return f.lag, f.err }

// /readyz's standby line says how far behind it is, or that it does not answer.
func TestStandbyStatus(t *testing.T) {
	for _, c := range []struct {
		sb   fakeLag
		want string
	}{
		{fakeLag{lag: session.Lag{Recovery: true}}, "standby: lag_bytes=0 lag_seconds=0.000 replay_paused=false\n"},
		{fakeLag{lag: session.Lag{Bytes: 8976, Seconds: 0.6834, Paused: true, Recovery: true}},
			"standby: lag_bytes=8976 lag_seconds=0.683 replay_paused=true\n"},
		{fakeLag{err: fmt.Errorf("read: %w", session.ErrStandbyUnavailable)}, "standby: unreachable (reads go to the primary)\n"},
		{fakeLag{err: errors.New("primary down")}, "standby: lag unknown (the primary did not say its WAL position)\n"},
	} {
		if got := StandbyStatus(context.Background(), c.sb); got != c.want {
			t.Errorf("StandbyStatus(%+v) = %q, want %q", c.sb, got, c.want)
		}
	}
}
