package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/logbook/logbook/session"
)

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
		if got := standbyStatus(context.Background(), c.sb); got != c.want {
			t.Errorf("standbyStatus(%+v) = %q, want %q", c.sb, got, c.want)
		}
	}
}

// fakeLag is a standby's lag as a test sets it.
type fakeLag struct {
	lag session.Lag
	err error
}

func (f fakeLag) Lag(context.Context) (session.Lag, error) { return f.lag, f.err }
