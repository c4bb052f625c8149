// Package wait holds the ctx-aware pause that bot's packages retry and pace with (brain's
// retries and offline pace, files' download retries): a leaf, importing the standard library
// only, so any of them may use it.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends: nil after d, else ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
