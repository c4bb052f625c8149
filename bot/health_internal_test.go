package bot

import (
	"testing"
	"time"
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
