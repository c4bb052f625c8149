package bot

import "time"

// Clock is the time source of cells, the runner and delivery. Tests inject their own to
// move time on without sleeping; the zero value of every config means the wall clock.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func clockOr(c Clock) Clock {
	if c == nil {
		return wallClock{}
	}
	return c
}
