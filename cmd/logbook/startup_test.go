package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// The waits between start attempts double from 250ms up to 30s, each with jitter in [d/2, d).
func TestStartDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n        int
		r        float64
		min, max time.Duration
	}{
		{1, 0, 125 * time.Millisecond, 125 * time.Millisecond},
		{1, 0.999, 125 * time.Millisecond, 250 * time.Millisecond},
		{2, 0, 250 * time.Millisecond, 250 * time.Millisecond},
		{3, 0.5, 750 * time.Millisecond, 750 * time.Millisecond},
		{8, 0, 15 * time.Second, 15 * time.Second}, // 250ms·2^7 = 32s: capped at 30s
		{50, 0.999, 15 * time.Second, 30 * time.Second},
	} {
		if d := startDelay(c.n, c.r); d < c.min || d > c.max {
			t.Errorf("startDelay(%d, %v) = %s, want in [%s, %s]", c.n, c.r, d, c.min, c.max)
		}
	}
}

// unreachable: no answer, a server starting up or full is retried; an answer that waiting
// does not change is not.
func TestStartRetriesOnlyAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("connect to database: %w", &pgconn.PgError{Code: "57P03"}), true},
		{&pgconn.PgError{Code: "53300"}, true},
		{context.DeadlineExceeded, true},
		{&pgconn.PgError{Code: "28P01"}, false}, // wrong password
		{&pgconn.PgError{Code: "3D000"}, false}, // no such database
		{fmt.Errorf("%w: x", session.ErrStartupRefused), false},
		{errors.New("the database schema is missing"), false},
		{errors.New("database connections do not fit"), false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A step that fails with an unreachable database is retried on the injected clock with
// growing waits, the reason shown for /readyz; it ends at the first success, at once on an
// error waiting does not cure, and when ctx ends.
func TestStartRetrier(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	var waits []time.Duration
	state := &startState{}
	var reasons []string
	r := retrier{log: zerolog.Nop(), state: state, rand: func() float64 { return 0 },
		after: func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			reasons = append(reasons, state.get())
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		}}
	attempts := 0
	err := r.do(context.Background(), "database", func(context.Context) error {
		if attempts++; attempts < 4 {
			return refused
		}
		return nil
	})
	if err != nil || attempts != 4 {
		t.Fatalf("err %v after %d attempts, want success at the 4th", err, attempts)
	}
	if want := []time.Duration{125 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}; fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	if !strings.Contains(reasons[2], "database: the database is unreachable (attempt 3, next in 500ms): dial tcp: connection refused") {
		t.Errorf("reason while waiting: %q", reasons[2])
	}

	waits, attempts = nil, 0
	wrong := &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}
	if err := r.do(context.Background(), "database", func(context.Context) error { attempts++; return wrong }); !errors.Is(err, wrong) || attempts != 1 || len(waits) != 0 {
		t.Errorf("a wrong password: err %v after %d attempts and %d waits, want it at once", err, attempts, len(waits))
	}

	// ctx ends while it waits: the clock never fires.
	ctx, cancel := context.WithCancel(context.Background())
	r.after = func(time.Duration) <-chan time.Time { cancel(); return nil }
	if err := r.do(ctx, "database", func(context.Context) error { return refused }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while waiting: %v", err)
	}
}

// The HTTP server bounds the reading of a whole request, not only its headers: a sender
// trickling a body cannot hold a connection for ever.
func TestHTTPServerBoundsTheBody(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := startHTTP(ln, nil)
	defer s.stop()
	if s.srv.ReadTimeout <= 0 || s.srv.ReadTimeout > time.Minute || s.srv.ReadHeaderTimeout <= 0 {
		t.Fatalf("ReadTimeout %v, ReadHeaderTimeout %v", s.srv.ReadTimeout, s.srv.ReadHeaderTimeout)
	}
}
