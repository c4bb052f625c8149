package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reads on a streaming standby (issue 33).
//
// The standby is PostgreSQL's own: a hot standby made with pg_basebackup that streams and
// replays the primary's WAL. Reads that may lag (search, the list of sessions, exports of a
// closed window once the window is final) go to it as it is. A read that must show what was
// committed before it began — a transcript opened from the link under a reply that was just
// posted — first asks the primary how far its WAL is flushed (pg_current_wal_flush_lsn(): one
// round trip, no table read, and every commit that returned to its caller is at or below it)
// and waits, at most MaxWait, until the standby has replayed that far
// (pg_last_wal_replay_lsn()). Caught up, the standby's snapshot holds every event committed
// before the read began, the reply included; not caught up in time, the read goes to the
// primary. No link, cookie or event carries a position: the guarantee covers every write
// that finished before the read started, whoever made it.
//
// A standby that does not answer (refused, reset, shut down, a statement cancelled by a
// recovery conflict) makes the read go to the primary, never fail; the standby is then
// skipped for Retry before it is tried again. A primary that does not answer when a
// read-your-writes read asks its position leaves the read to the standby as it is: the
// primary could not have served it either.

// LSN is a position in PostgreSQL's write-ahead log, in bytes.
type LSN uint64

// ParseLSN parses PostgreSQL's text form of a pg_lsn, e.g. 16/B374D848.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse WAL position %q: want hex/hex", s)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF) }

// Consistency says what a read needs from the standby.
type Consistency int

const (
	// ReadAny reads the standby as far as it has replayed (search, lists, final windows).
	ReadAny Consistency = iota
	// ReadYourWrites reads what every transaction committed before the read began wrote: the
	// standby once it has replayed that far (waiting at most MaxWait), else the primary.
	ReadYourWrites
)

// Servers and reasons StandbyObserver.Read reports.
const (
	ServerStandby = "standby"
	ServerPrimary = "primary"
	// FallbackLagging: the standby had not replayed the primary's position within MaxWait.
	FallbackLagging = "lagging"
	// FallbackUnreachable: the standby did not answer (or was skipped after it did not).
	FallbackUnreachable = "unreachable"
)

// ErrStandbyLagging is CatchUp's answer when the standby has not replayed the primary's
// position within MaxWait.
var ErrStandbyLagging = errors.New("the standby has not replayed the primary's WAL position in time")

// ErrStandbyUnavailable wraps the error of a standby that does not answer (or that is being
// skipped since it did not).
var ErrStandbyUnavailable = errors.New("the standby is unavailable")

// StandbyObserver hears what a Standby does, for metrics and log lines. Its methods must not
// block.
type StandbyObserver interface {
	// Read reports which server served a read, and for the primary why (FallbackLagging,
	// FallbackUnreachable).
	Read(server, reason string)
	// Lag reports each measurement of the standby's lag.
	Lag(Lag)
	// Unreachable reports that the standby stopped answering (once, until it answers again).
	Unreachable(err error)
	// Reachable reports that a standby that had stopped answering answers again.
	Reachable()
}

// StandbyOptions configure NewStandby. Zero values take defaults.
type StandbyOptions struct {
	// MaxWait bounds a read-your-writes read's wait for the standby (default 2s); past it the
	// read goes to the primary.
	MaxWait time.Duration
	// Retry is how long a standby that did not answer is skipped (default 5s).
	Retry time.Duration
	// Observer hears reads, lags and the standby's reachability; nil: nobody.
	Observer StandbyObserver
	// Now is the clock of Retry (default time.Now).
	Now func() time.Time
}

// DefaultStandbyMaxWait is StandbyOptions.MaxWait's default.
const DefaultStandbyMaxWait = 2 * time.Second

// Standby routes reads between a streaming standby and its primary. It is safe for
// concurrent use. A nil *Standby routes every read to the primary.
type Standby struct {
	primary, standby *pgxpool.Pool
	maxWait, retry   time.Duration
	obs              StandbyObserver
	now              func() time.Time

	mu        sync.Mutex
	down      bool
	downUntil time.Time
}

// NewStandby returns the router of reads between standby and its primary, two pools.
func NewStandby(primary, standby *pgxpool.Pool, opts StandbyOptions) *Standby {
	s := &Standby{primary: primary, standby: standby,
		maxWait: cmp.Or(opts.MaxWait, DefaultStandbyMaxWait), retry: cmp.Or(opts.Retry, 5*time.Second),
		obs: opts.Observer, now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	return s
}

type nopObserver struct{}

func (nopObserver) Read(string, string) {}
func (nopObserver) Lag(Lag)             {}
func (nopObserver) Unreachable(error)   {}
func (nopObserver) Reachable()          {}

// Primary and StandbyPool are the two pools.
func (s *Standby) Primary() *pgxpool.Pool     { return s.primary }
func (s *Standby) StandbyPool() *pgxpool.Pool { return s.standby }

// Lag is how far the standby is behind its primary.
type Lag struct {
	Primary  LSN // the primary's flushed WAL position
	Replayed LSN // the standby's replayed position
	// Bytes is Primary - Replayed (0 when caught up).
	Bytes int64
	// Seconds is how old the newest transaction the standby replayed is, by the standby's
	// clock, when it is behind (0 when caught up: an idle primary makes no newer ones).
	Seconds float64
	// Paused says replay is paused (pg_wal_replay_pause()).
	Paused bool
	// Recovery is false when the "standby" is not in recovery (a primary, or promoted): it
	// then counts as caught up with itself.
	Recovery bool
}

const sqlPrimaryLSN = `SELECT pg_current_wal_flush_lsn()::text`

const sqlStandbyLSN = `
SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END::text,
       pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END,
       coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, 0)`

type replayState struct {
	lsn      LSN
	recovery bool
	paused   bool
	age      float64
}

func (s *Standby) primaryLSN(ctx context.Context) (LSN, error) {
	var txt string
	if err := s.primary.QueryRow(ctx, sqlPrimaryLSN).Scan(&txt); err != nil {
		return 0, fmt.Errorf("read the primary's WAL position: %w", err)
	}
	return ParseLSN(txt)
}

// replayed asks the standby how far it has replayed. A standby that does not answer within
// the probe's bound (MaxWait, at least a second: a stalled server keeps its sockets open) is
// unavailable; the caller's own cancellation is only that.
func (s *Standby) replayed(ctx context.Context) (replayState, error) {
	var st replayState
	var txt *string
	probe, cancel := context.WithTimeout(ctx, max(s.maxWait, time.Second))
	defer cancel()
	if err := s.standby.QueryRow(probe, sqlStandbyLSN).Scan(&txt, &st.recovery, &st.paused, &st.age); err != nil {
		if ctx.Err() != nil {
			return st, fmt.Errorf("read the standby's replayed WAL position: %w", err)
		}
		return st, s.unavailable(fmt.Errorf("read the standby's replayed WAL position: %w", err))
	}
	if txt == nil { // in recovery from an archive, before anything was replayed
		return st, nil
	}
	l, err := ParseLSN(*txt)
	st.lsn = l
	return st, err
}

// Lag measures how far the standby is behind: one round trip to each server. Errors: the
// primary's, wrapped; a standby that does not answer wraps ErrStandbyUnavailable.
func (s *Standby) Lag(ctx context.Context) (Lag, error) {
	p, err := s.primaryLSN(ctx)
	if err != nil {
		return Lag{}, err
	}
	st, err := s.replayed(ctx)
	if err != nil {
		return Lag{}, err
	}
	s.answered()
	l := lagOf(p, st)
	s.obs.Lag(l)
	return l, nil
}

func lagOf(primary LSN, st replayState) Lag {
	l := Lag{Primary: primary, Replayed: st.lsn, Paused: st.paused, Recovery: st.recovery}
	if st.recovery && st.lsn < primary {
		l.Bytes = int64(primary - st.lsn)
		l.Seconds = max(st.age, 0)
	}
	return l
}

// CatchUp returns nil once the standby has replayed every transaction the primary had
// committed when CatchUp was called; ErrStandbyLagging when it has not within MaxWait; an
// error wrapping ErrStandbyUnavailable when the standby does not answer. A primary that does
// not answer is its error, wrapped.
func (s *Standby) CatchUp(ctx context.Context) error {
	if s.skipping() {
		return fmt.Errorf("%w (skipped for now: it did not answer)", ErrStandbyUnavailable)
	}
	target, err := s.primaryLSN(ctx)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(s.maxWait)
	delay := time.Millisecond
	for {
		st, err := s.replayed(ctx)
		if err != nil {
			return err
		}
		s.answered()
		if !st.recovery || st.lsn >= target {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			s.obs.Lag(lagOf(target, st))
			return fmt.Errorf("%w: replayed %s of %s within %s", ErrStandbyLagging, st.lsn, target, s.maxWait)
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// route is the server a read of consistency c starts on, and, for the primary, why.
func (s *Standby) route(ctx context.Context, c Consistency) (string, string) {
	if p, ok := ctx.Value(pinKey{s}).(pin); ok {
		return p.server, p.reason
	}
	if s.skipping() {
		return ServerPrimary, FallbackUnreachable
	}
	if c == ReadAny {
		return ServerStandby, ""
	}
	err := s.CatchUp(ctx)
	switch {
	case err == nil:
		return ServerStandby, ""
	case errors.Is(err, ErrStandbyLagging):
		return ServerPrimary, FallbackLagging
	case errors.Is(err, ErrStandbyUnavailable):
		return ServerPrimary, FallbackUnreachable
	default:
		// The primary did not say where it is: it could not serve the read either.
		return ServerStandby, ""
	}
}

type pinKey struct{ s *Standby }

type pin struct{ server, reason string }

// Pin decides once, for every read made with the returned context, which server serves it
// (as for consistency c): a page that makes several reads waits for the standby once, and
// reads one server. A standby that fails a pinned read still hands it to the primary.
func (s *Standby) Pin(ctx context.Context, c Consistency) context.Context {
	if s == nil {
		return ctx
	}
	server, reason := s.route(ctx, c)
	return context.WithValue(ctx, pinKey{s}, pin{server, reason})
}

// ReadFrom runs read with onStandby when the standby can serve a read of consistency c, else
// with onPrimary (see the package's notes on standbys above). A standby that fails the read
// because it does not answer hands the read to the primary: read must have no effect it
// cannot repeat. A nil s reads the primary.
func ReadFrom[T any](ctx context.Context, s *Standby, c Consistency, onStandby, onPrimary T, read func(T) error) error {
	if s == nil {
		return read(onPrimary)
	}
	server, reason := s.route(ctx, c)
	if server == ServerPrimary {
		s.obs.Read(ServerPrimary, reason)
		return read(onPrimary)
	}
	err := read(onStandby)
	if err != nil && ctx.Err() == nil && standbyFailed(err) {
		s.unavailable(err)
		s.obs.Read(ServerPrimary, FallbackUnreachable)
		return read(onPrimary)
	}
	if err == nil {
		s.answered()
	}
	s.obs.Read(ServerStandby, "")
	return err
}

// skipping reports whether the standby is skipped after it did not answer.
func (s *Standby) skipping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down && s.now().Before(s.downUntil)
}

// unavailable marks the standby down for Retry and returns err wrapping
// ErrStandbyUnavailable.
func (s *Standby) unavailable(err error) error {
	s.mu.Lock()
	was := s.down
	s.down, s.downUntil = true, s.now().Add(s.retry)
	s.mu.Unlock()
	if !was {
		s.obs.Unreachable(err)
	}
	if errors.Is(err, ErrStandbyUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStandbyUnavailable, err)
}

// answered marks the standby up.
func (s *Standby) answered() {
	s.mu.Lock()
	was := s.down
	s.down = false
	s.mu.Unlock()
	if was {
		s.obs.Reachable()
	}
}

// standbyFailed says err is the standby's failure to serve, not the read's own: no
// connection, a connection lost, the server shutting down or refusing connections, or a
// statement cancelled because replay needed what it read (a recovery conflict, 40001).
func standbyFailed(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") ||
			pgErr.Code == "40001" || pgErr.Code == "53300"
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err) ||
		errors.Is(err, ErrStandbyUnavailable)
}

// Reads are a session's transcript reads (the web pages', the CLI's) on the standby, read
// your writes: a Store on each server, routed by the Standby. A nil Standby reads the
// primary.
type Reads struct {
	standby              *Standby
	onStandby, onPrimary *Store
}

// Reads returns the transcript reads over s's two pools; a nil s returns nil.
func (s *Standby) Reads() *Reads {
	if s == nil {
		return nil
	}
	return &Reads{standby: s, onStandby: NewStore(s.standby, Options{}), onPrimary: NewStore(s.primary, Options{})}
}

// Pin decides the server of every read made with the returned context at once (see
// Standby.Pin): a page's reads wait for the standby once and come from one server.
func (r *Reads) Pin(ctx context.Context) context.Context { return r.standby.Pin(ctx, ReadYourWrites) }

// Forks is Store.Forks, read your writes.
func (r *Reads) Forks(ctx context.Context, parent ID) ([]Fork, error) {
	var out []Fork
	err := ReadFrom(ctx, r.standby, ReadYourWrites, r.onStandby, r.onPrimary, func(st *Store) (err error) {
		out, err = st.Forks(ctx, parent)
		return err
	})
	return out, err
}

// Session is Store.Session, read your writes.
func (r *Reads) Session(ctx context.Context, id ID) (Session, error) {
	var out Session
	err := ReadFrom(ctx, r.standby, ReadYourWrites, r.onStandby, r.onPrimary, func(st *Store) (err error) {
		out, err = st.Session(ctx, id)
		return err
	})
	return out, err
}

// Events is Store.Events, read your writes.
func (r *Reads) Events(ctx context.Context, id ID, rg Range) ([]Event, error) {
	var out []Event
	err := ReadFrom(ctx, r.standby, ReadYourWrites, r.onStandby, r.onPrimary, func(st *Store) (err error) {
		out, err = st.Events(ctx, id, rg)
		return err
	})
	return out, err
}

// HasFile is Store.HasFile, read your writes.
func (r *Reads) HasFile(ctx context.Context, id ID, sha string) (bool, error) {
	var out bool
	err := ReadFrom(ctx, r.standby, ReadYourWrites, r.onStandby, r.onPrimary, func(st *Store) (err error) {
		out, err = st.HasFile(ctx, id, sha)
		return err
	})
	return out, err
}

// NotesByID is Store.NotesByID, read your writes.
func (r *Reads) NotesByID(ctx context.Context, team, channel string, ids []int64) ([]Note, error) {
	var out []Note
	err := ReadFrom(ctx, r.standby, ReadYourWrites, r.onStandby, r.onPrimary, func(st *Store) (err error) {
		out, err = st.NotesByID(ctx, team, channel, ids)
		return err
	})
	return out, err
}
