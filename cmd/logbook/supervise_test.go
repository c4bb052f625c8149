package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// One service that fails cancels the others; supervise returns once they have all returned,
// with the failure under the service's name.
func TestSuperviseOneFailureStopsTheRest(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var returned atomic.Int32
	waits := func(ctx context.Context) error {
		<-ctx.Done()
		returned.Add(1)
		return ctx.Err()
	}
	err := supervise(t.Context(), service{name: "indexer", run: waits},
		service{name: "http", run: func(context.Context) error { return boom }}, service{name: "audit", run: waits})
	if !errors.Is(err, boom) || err.Error() != "http: boom" {
		t.Errorf("supervise: %v, want http: boom", err)
	}
	if n := returned.Load(); n != 2 {
		t.Errorf("supervise returned with %d of the other 2 services returned", n)
	}
}

// A service that returns nil leaves the others running; ending ctx ends them all, and a
// service that ends because its ctx did (context.Canceled, wrapped or not) is no error.
func TestSuperviseEndOfCtxIsNoError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var running atomic.Int32
		waits := func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return fmt.Errorf("drain: %w", ctx.Err())
		}
		errc := make(chan error, 1)
		go func() {
			errc <- supervise(ctx, service{name: "bot", run: waits}, service{name: "once", run: func(context.Context) error { return nil }},
				service{name: "http", run: waits})
		}()
		synctest.Wait()
		if n := running.Load(); n != 2 {
			t.Fatalf("%d services running after one returned nil, want 2", n)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("supervise after ctx ended: %v, want nil", err)
		}
		if n := running.Load(); n != 0 {
			t.Errorf("supervise returned with %d services running", n)
		}
	})
}
