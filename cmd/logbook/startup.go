package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/logbook/logbook/session"
)

// Start-up (issue 33): a replica whose database does not answer yet stays up, unready, and
// retries with backoff; its /healthz answers (it is alive: restarting it would not bring the
// database back) and its /readyz says why it is not ready.

// startBackoff is the first wait between two attempts; each doubles it, up to startBackoffMax.
const (
	startBackoff    = 250 * time.Millisecond
	startBackoffMax = 30 * time.Second
)

// startDelay is the wait before attempt n+1 (n from 1): exponential, capped, with jitter in
// [d/2, d) so that replicas started together do not knock together. r is a number in [0, 1).
func startDelay(n int, r float64) time.Duration {
	d := startBackoff
	for i := 1; i < n && d < startBackoffMax; i++ {
		d *= 2
	}
	d = min(d, startBackoffMax)
	return d/2 + time.Duration(r*float64(d/2))
}

// startState is what /readyz says while serve starts.
type startState struct{ reason atomic.Pointer[string] }

func (s *startState) set(reason string) { s.reason.Store(&reason) }
func (s *startState) get() string {
	if r := s.reason.Load(); r != nil {
		return *r
	}
	return "starting"
}

// retrier retries start-up steps that fail because the database cannot be reached.
type retrier struct {
	log   zerolog.Logger
	state *startState
	// after waits (nil: time.After); rand gives jitter in [0, 1) (nil: math/rand). Tests
	// inject both.
	after func(time.Duration) <-chan time.Time
	rand  func() float64
}

// do runs step until it succeeds, fails for a reason other than an unreachable database
// (returned at once: a wrong password, a missing database or schema, a configuration that
// does not fit), or ctx ends.
func (r retrier) do(ctx context.Context, what string, step func(context.Context) error) error {
	after, rnd := r.after, r.rand
	if after == nil {
		after = time.After
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	for n := 1; ; n++ {
		err := step(ctx)
		if err == nil {
			if n > 1 {
				r.log.Info().Int("attempts", n).Msg(what + ": connected")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !unreachable(err) {
			return err
		}
		d := startDelay(n, rnd())
		r.state.set(fmt.Sprintf("starting: %s: the database is unreachable (attempt %d, next in %s): %v", what, n, d.Round(time.Millisecond), err))
		r.log.Warn().Err(err).Int("attempt", n).Dur("retry_in", d).Msg(what + ": the database is unreachable; not ready, retrying")
		select {
		case <-after(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unreachable says err means the database cannot be reached now but may be later: no answer
// (refused, timed out, reset), a server starting or shutting down, or one with no slot free.
// A server that answered with anything else (authentication, a missing database, a refused
// startup parameter) is not retried.
func unreachable(err error) bool {
	if errors.Is(err, session.ErrStartupRefused) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P03", // cannot_connect_now: starting up, in recovery
			"53300",          // too_many_connections
			"53000",          // insufficient_resources
			"57P01", "57P02", // admin_shutdown, crash_shutdown
			"08000", "08003", "08006", "08001": // connection exceptions
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded)
}

// httpServer serves from before the databases are open: first start's answers, then, once
// everything is built, the real handler (route).
type httpServer struct {
	srv     *http.Server
	ln      net.Listener
	handler atomic.Pointer[http.Handler]
	done    chan struct{}
	err     error // Serve's, once done is closed
	once    sync.Once
	stopErr error
}

// httpReadTimeout bounds the reading of a whole request, body included: a sender trickling a
// hook's body (at most LOGBOOK_HOOK_MAX_BODY) cannot hold a connection longer.
const httpReadTimeout = 30 * time.Second

// startHTTP serves ln at once with first.
func startHTTP(ln net.Listener, first http.Handler) *httpServer {
	s := &httpServer{ln: ln, done: make(chan struct{})}
	s.handler.Store(&first)
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*s.handler.Load()).ServeHTTP(w, r) }),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: httpReadTimeout}
	go func() {
		s.err = s.srv.Serve(ln)
		close(s.done)
	}()
	return s
}

// route makes h the handler of every later request.
func (s *httpServer) route(h http.Handler) { s.handler.Store(&h) }

// run waits until ctx ends, then shuts the server down; it returns early with Serve's error.
func (s *httpServer) run(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return s.stop()
	}
}

// stop shuts the server down (within 5 s) and waits for it; later calls return the first's
// result.
func (s *httpServer) stop() error {
	s.once.Do(func() {
		sh, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.stopErr = s.srv.Shutdown(sh)
		<-s.done
		if !errors.Is(s.err, http.ErrServerClosed) {
			s.stopErr = s.err
		}
	})
	return s.stopErr
}

// startingHandler answers while serve starts: alive, not ready, and why.
func startingHandler(state *startState) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, state.get(), http.StatusServiceUnavailable)
	})
	return mux
}
