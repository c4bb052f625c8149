package bot

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
)

// Agent runs one turn of a session; *brain.Brain is the real one.
type Agent interface {
	Run(ctx context.Context, t brain.Turn) (brain.Reply, error)
}

// Titler names a session once its first reply has reached the thread, so the title's model
// call never delays that reply; *brain.Brain is one (with brain.Config.DeferTitle).
type Titler interface {
	Title(ctx context.Context, t brain.Turn, reply session.Event)
}

// RunnerConfig configures a Runner. Zero values take defaults.
type RunnerConfig struct {
	Owner        string        // lease owner name; default host:pid:random
	Host         string        // for cell_woken; default os.Hostname
	IdleTimeout  time.Duration // a cell exits after this long without work; default 10m
	LeaseTTL     time.Duration // lease length, renewed at a third of it; default 30s
	PollInterval time.Duration // how often to look for sessions with work nobody runs; default 5s
	// OrphanInterval, when set, is how often to look for sessions with work whose lease
	// belongs to a dead replica (its liveness claim is free): a cheap query, so that such a
	// session resumes here within about this long. Default none: the poll (PollInterval) finds
	// those sessions too, in a fleet the watch (WatchPeers) asks for the scan the moment a
	// peer dies, and the LISTEN connection's catch-up poll after a restart takes what a dead
	// process left (issue 53: a scan every 500 ms was two of an idle replica's eleven
	// transactions a second).
	OrphanInterval time.Duration
	// WatchPeers holds one more connection of the replica's own (logbook-watch), blocked on
	// one live peer's liveness claim (session.WatchPeers), so that a dead peer's sessions are
	// taken here the moment PostgreSQL frees its claim, not on the next orphan scan (issue 33:
	// a kill -9's turns resumed about 0.1 s later that way). For a fleet: serve sets it when
	// LOGBOOK_REPLICAS is above 1. Needs Deps.DatabaseURL.
	WatchPeers bool
	// ClaimCheck is how often the connection holding the liveness claim proves it is alive
	// with a round trip, which must answer within ClaimCheck too (on Clock); when it does not,
	// the claim is taken as lost and the turns run under it are cancelled; default 5s.
	ClaimCheck time.Duration
	// DrainTimeout bounds a graceful stop (Run's ctx ends): idle cells hand their sessions
	// over at once, running turns may finish for this long, then they are cut short and
	// handed over (lease released, a peer woken through NOTIFY); default 20s.
	DrainTimeout time.Duration
	// MaxReplies caps the replies of one thread per ReplyWindow (default a minute; a turn over
	// the cap waits, then answers every message the thread got meanwhile in one reply): a
	// safety net against bot-to-bot loops (LOGBOOK_THREAD_REPLIES_PER_MINUTE). Default 10;
	// negative: no cap.
	MaxReplies  int
	ReplyWindow time.Duration
	// WakeWindow bounds how far back the poll and wake look for unfinished work; default 7 days.
	WakeWindow time.Duration
	// WakeLimit (LOGBOOK_WAKE_LIMIT) is the most cells the start, the poll and the dead-owner
	// poll have woken and not yet seen idle at once: a replica that comes back to a backlog
	// works through it this many sessions at a time, oldest first, instead of waking them all
	// together. Cells woken by a message or a peer's signal do not count. Default 32; negative:
	// no limit.
	WakeLimit int
	Where     brain.Where // workspace and bot name for the system prompt; channel and thread are filled per session
	// ThreadReplies says which messages of a session's thread are answered (default
	// RepliesAddressed); the rest are recorded with a not_addressed marker.
	ThreadReplies ThreadReplies
	// Footer is the line under final replies (LOGBOOK_REPLY_FOOTER; default none).
	Footer Footer
	// Live is how a turn shows itself while it runs (LOGBOOK_STREAM and friends).
	Live LiveConfig
	// MidTurn says what becomes of a message written while a turn runs (LOGBOOK_MIDTURN):
	// MidTurnSteer (the default) hands it to the model at its next call in the same turn;
	// MidTurnQueue keeps it for the next turn.
	MidTurn string
	// Approval is the tool approval policy (LOGBOOK_TOOL_APPROVAL, LOGBOOK_TOOL_APPROVERS,
	// LOGBOOK_APPROVAL_TIMEOUT); the zero value allows every tool.
	Approval ApprovalConfig
	// Peer, when set (LOGBOOK_PEER_ADDR), is where peers post this replica's wakes: while it
	// holds its liveness claim the runner records its address and token
	// (session.Store.RecordPeer), and a peer routing a follow-up here posts it there instead
	// of a NOTIFY that wakes every replica (issue 53). Needs Deps.DatabaseURL. Any runner posts
	// to peers that have one, whether or not it has one itself.
	Peer *peerwake.Inbox
	// Heartbeat, when set (LOGBOOK_LIVENESS=heartbeat), holds the liveness claim as a row
	// renewed through the pool, living this long past each renewal
	// (session.Store.HoldHeartbeat), instead of a lock on a LISTEN connection of the
	// replica's own: a fleet behind PgBouncer then holds no connection per replica to
	// PostgreSQL itself (issue 53). The runner LISTENs for nothing and watches no peer: wakes
	// come over HTTP (needs Peer), the poll finds what a lost one missed, and a dead peer's
	// sessions are found once its row expires. Deps.DatabaseURL is not needed.
	Heartbeat time.Duration
}

// Probe is told of a cell's milestones as they happen: test signals, and dev's status. Each
// func may be nil and must not block.
type Probe struct {
	// TurnDone: a turn's turn_completed is in the log (status "ok" or "error").
	TurnDone func(id session.ID, turnSeq int64, status string)
	// CellExited: a cell let go of its session ("idle", "backlog": its turn for a backlog
	// was done and more sessions waited, "shutdown", "drain": handed over on a graceful stop, "error", "lease_lost", "held": another replica holds it,
	// "claim_lost": the runner could no longer prove its liveness claim).
	CellExited func(id session.ID, reason string)
	// ClaimLost: the runner's liveness claim ended while it ran (err says why).
	ClaimLost func(err error)
}

func (p *Probe) claimLost(err error) {
	if p != nil && p.ClaimLost != nil {
		p.ClaimLost(err)
	}
}

func (p *Probe) turnDone(id session.ID, seq int64, status string) {
	if p != nil && p.TurnDone != nil {
		p.TurnDone(id, seq, status)
	}
}

func (p *Probe) cellExited(id session.ID, reason string) {
	if p != nil && p.CellExited != nil {
		p.CellExited(id, reason)
	}
}

// Runner owns the cells of this process: it starts one per signalled session, wakes
// sessions with unfinished turns on start and by polling, and listens for other replicas'
// signals through PostgreSQL NOTIFY.
type Runner struct {
	log   zerolog.Logger
	store *session.Store
	dbURL string // for the dedicated LISTEN connection; empty: no listener (poll only)
	cfg   RunnerConfig
	deps  *cellDeps

	// base is the cells' context: cancelled when Run's context ends.
	base   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	cells   map[session.ID]*Cell
	stopped bool
	wg      sync.WaitGroup
	notify  chan signal
	// admitted counts the cells the start and the polls woke that have not been idle yet
	// (RunnerConfig.WakeLimit); backlog says a poll left pending sessions for want of room,
	// and refill asks Run to poll again once half the room is free.
	admitted int
	backlog  bool
	refill   chan struct{}
	// catchUp asks Run for the poll that follows a heartbeat claim taken (again): the
	// renewals must not wait behind it.
	catchUp chan struct{}
	// behind says the polls are working through a backlog: the last poll for pending
	// sessions found more than WakeLimit left room for, and none since found fewer. An
	// admitted cell that settles while it is set leaves at once instead of idling for
	// IdleTimeout (#53: a 20,000-session backlog kept every answered session's cell and lease
	// for ten minutes: 12,300 leases filled the server's lock table).
	behind bool
	// orphaned asks Run to look for a dead replica's sessions now: the watch saw a peer die.
	orphaned chan struct{}

	// claimed is true while this runner holds its liveness claim (the LISTEN connection's
	// lock, or a heartbeat row), and current is that claim (a new one each time it is taken;
	// guarded by claimMu); firstClaim is closed when it is first held.
	claimMu    sync.Mutex
	claimed    atomic.Bool
	current    *heldClaim
	wasClaimed atomic.Bool // the last LISTEN connection held the claim (it connected)
	firstClaim chan struct{}
	claimOnce  sync.Once
	// draining is closed when a graceful stop begins.
	draining chan struct{}
}

// NewRunner returns a Runner.
func NewRunner(d Deps, cfg RunnerConfig) *Runner {
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Owner == "" {
		cfg.Owner = fmt.Sprintf("%s:%d:%d", cfg.Host, os.Getpid(), time.Now().UnixNano()%1e6)
	}
	cfg.IdleTimeout = nonZero(cfg.IdleTimeout, 10*time.Minute)
	cfg.LeaseTTL = nonZero(cfg.LeaseTTL, 30*time.Second)
	cfg.PollInterval = nonZero(cfg.PollInterval, 5*time.Second)
	cfg.DrainTimeout = nonZero(cfg.DrainTimeout, 20*time.Second)
	cfg.ClaimCheck = nonZero(cfg.ClaimCheck, 5*time.Second)
	cfg.WakeWindow = nonZero(cfg.WakeWindow, 7*24*time.Hour)
	if cfg.WakeLimit == 0 {
		cfg.WakeLimit = DefaultWakeLimit
	}
	if cfg.MaxReplies == 0 {
		cfg.MaxReplies = 10
	}
	cfg.ReplyWindow = nonZero(cfg.ReplyWindow, time.Minute)
	if cfg.MidTurn == "" {
		cfg.MidTurn = MidTurnSteer
	}
	if cfg.ThreadReplies == "" {
		cfg.ThreadReplies = RepliesAddressed
	}
	d.Clock = clockOr(d.Clock)
	base, cancel := context.WithCancel(context.Background())
	r := &Runner{base: base, cancel: cancel, log: d.Log, store: d.Store, dbURL: d.DatabaseURL, cfg: cfg,
		cells: map[session.ID]*Cell{}, notify: make(chan signal, 1024), refill: make(chan struct{}, 1), catchUp: make(chan struct{}, 1), orphaned: make(chan struct{}, 1), draining: make(chan struct{}),
		firstClaim: make(chan struct{})}
	r.deps = &cellDeps{Deps: d, cfg: cfg, claim: r.claim, draining: r.draining, peers: peerwake.NewSender(peerwake.SenderOptions{}),
		renewer: newRenewer(cmp.Or(d.GatewayStore, d.Store), d.Clock, cfg.LeaseTTL, d.Log), meters: telemetry.NewMetrics(d.Meter)}
	if d.DatabaseURL != "" || r.heartbeats() {
		r.deps.firstClaim = r.firstClaim
	}
	return r
}

func nonZero(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// DefaultWakeLimit is RunnerConfig.WakeLimit's default: enough cells at once to keep a
// backlog moving at the pace of the model calls, few enough that their appends and lease
// renewals stay a small share of a connection pool and of Postgres (ten replicas: 320).
const DefaultWakeLimit = 32

// Signal tells the session's cell there is new work, and wakes only the replica that runs
// it: a cell running here is poked, with no statement at all; otherwise the notifier asks the
// database for the session's live lease owner, which alone is signalled (NOTIFY naming it),
// and when no other replica holds one the cell starts here (this replica stored the work, so
// it is awake already). It never blocks.
func (r *Runner) Signal(id session.ID) { r.route(signal{id: id}) }

// Stored is Signal for a message the gateway stored. opened says that append stored the
// session's first event, so no replica can hold its lease yet (none was signalled, and no
// poll found work in an empty log): its cell starts here at once, with no question to the database about who
// runs it (issue 33: a burst of new threads waited in line for those round trips). Should a
// peer take the lease meanwhile (its poll found the message), the cell here finds it held
// and routes the signal to that peer.
func (r *Runner) Stored(id session.ID, opened bool) {
	if opened && r.wake(id, "message") {
		return
	}
	r.route(signal{id: id})
}

// signal is a session to route to the replica that runs it; again says it is routed a
// second time (its cell here found the lease held by a replica the first routing missed).
type signal struct {
	id    session.ID
	again bool
}

func (r *Runner) route(s signal) {
	if r.poke(s.id) {
		return
	}
	select {
	case r.notify <- s:
	default:
		r.wake(s.id, "message") // the notifier is behind: the lease decides who runs it
	}
}

// poke pokes the session's cell if one runs here, and reports whether one does.
func (r *Runner) poke(id session.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cells[id]
	if ok {
		select {
		case c.poke <- struct{}{}:
		default:
		}
	}
	return ok
}

// Active returns the number of cells running in this process.
func (r *Runner) Active() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cells)
}

// Evict asks every idle cell to exit now, as the idle timeout would (for `logbook dev`).
func (r *Runner) Evict() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cells {
		select {
		case c.evict <- struct{}{}:
		default:
		}
	}
}

// wake pokes the session's cell, starting one if none runs here (and the runner is not
// stopping: a draining cell is still poked, so it hands over the work it learns of). It
// reports whether the session has a cell here now.
func (r *Runner) wake(id session.ID, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wakeLocked(id, reason, false, false)
}

// admit is wake for the start and the polls: a new cell counts against WakeLimit, and none
// starts once the limit is reached (the session waits for the next poll). It reports whether
// the session has a cell now.
func (r *Runner) admit(id session.ID, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cells[id]; !ok && r.cfg.WakeLimit > 0 && r.admitted >= r.cfg.WakeLimit {
		r.backlog = true
		return false
	}
	return r.wakeLocked(id, reason, r.cfg.WakeLimit > 0, false)
}

// wakeLocked is wake under r.mu; counted says the cell counts against WakeLimit, routed that
// it was routed here a second time (see signal).
func (r *Runner) wakeLocked(id session.ID, reason string, counted, routed bool) bool {
	if c, ok := r.cells[id]; ok {
		select {
		case c.poke <- struct{}{}:
		default:
		}
		return true
	}
	if r.stopped {
		return false
	}
	c := &Cell{deps: r.deps, id: id, reason: reason, poke: make(chan struct{}, 1), evict: make(chan struct{}, 1)}
	if counted {
		r.admitted++
		c.settled = r.settled
		c.backlog = r.isBehind
	}
	r.cells[id] = c
	r.deps.Metrics.cellsActive.Inc()
	r.wg.Go(func() {
		c.run(r.base)
		r.mu.Lock()
		delete(r.cells, id)
		pending := len(c.poke) > 0 // a signal that reached the cell as it was exiting
		r.mu.Unlock()
		r.deps.Metrics.cellsActive.Dec()
		switch {
		case c.exit == "held" && (pending || reason == "message") && !routed:
			// Another replica took the session after the routing found nobody: signal it
			// (once: a second miss is left to the poll).
			r.route(signal{id: id, again: true})
		case pending && c.exit != "held":
			r.wake(id, "message")
		case c.exit == "lease_lost":
			// The renewals failed (or the lease was found gone): the lease is still ours for a
			// moment, or free; take it again here at once rather than leave the session to
			// another replica's poll once it expires (issue 33: sessions moved between live
			// replicas). A peer that took it meanwhile keeps it: the new cell exits "held".
			r.wake(id, "retake")
		}
	})
	return true
}

// settled is called once by each admitted cell when it has no work left (it waits idle) or
// exits: its room goes to the next pending session, and once half the room is free while a
// backlog waits, Run polls again without waiting for the poll interval.
func (r *Runner) settled() {
	r.mu.Lock()
	r.admitted--
	again := r.backlog && r.admitted <= r.cfg.WakeLimit/2
	if again {
		r.backlog = false
	}
	r.mu.Unlock()
	if again {
		select {
		case r.refill <- struct{}{}:
		default:
		}
	}
}

// room is how many more cells the polls may wake now (-1: no limit), and the sessions that
// have a cell here (a poll skips them).
func (r *Runner) room() (int, []session.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	running := make([]session.ID, 0, len(r.cells))
	for id := range r.cells {
		running = append(running, id)
	}
	if r.cfg.WakeLimit <= 0 {
		return -1, running
	}
	n := r.cfg.WakeLimit - r.admitted
	if n <= 0 {
		r.backlog = true
	}
	return max(n, 0), running
}

// Run wakes sessions with unfinished work, then listens and polls until ctx ends. Then it
// drains (see RunnerConfig.DrainTimeout) and returns after every cell has exited: each
// releases its lease and, when its session still has work, wakes a peer through NOTIFY (and
// a turn cut short is resumed from the log by whoever takes the session next).
func (r *Runner) Run(ctx context.Context) error {
	// The LISTEN connection holds the liveness claim: it must outlive the drain, or peers
	// would take the sessions of turns still finishing here.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopBg()
	for range notifiers {
		wg.Go(func() { r.notifier(bg) })
	}
	// The leases are renewed until the drain is over (bg ends after it).
	wg.Go(func() { r.deps.renewer.run(bg) })
	switch {
	case r.heartbeats():
		wg.Go(func() { r.heartbeat(bg) })
	case r.dbURL != "":
		wg.Go(func() { r.listen(bg) })
		if r.cfg.WatchPeers {
			wg.Go(func() { r.watch(ctx) })
		}
	default:
		r.poll(ctx, "wake")
	} // else the claim's catch-up wakes them, once the claim is held: leases taken before
	// it would be unclaimed, and wait out their TTL should this process die.
	// Each timer is renewed only when it fires: the frequent dead-owner poll must not put
	// the slow poll off forever.
	polls := r.deps.Clock.After(r.cfg.PollInterval)
	var orphans <-chan time.Time // none without OrphanInterval: the poll finds dead owners' sessions too
	if r.cfg.OrphanInterval > 0 {
		orphans = r.deps.Clock.After(r.cfg.OrphanInterval)
	}
	for {
		select {
		case <-ctx.Done():
			r.drain()
			r.forgetPeer(ctx)
			r.deps.peers.CloseIdle()
			return nil
		case <-polls:
			r.poll(ctx, "poll")
			polls = r.deps.Clock.After(r.cfg.PollInterval)
		case <-orphans:
			r.orphans(ctx)
			orphans = r.deps.Clock.After(r.cfg.OrphanInterval)
		case <-r.orphaned:
			r.orphans(ctx)
		case <-r.refill:
			r.poll(ctx, "poll") // room was made for a backlog
		case <-r.catchUp:
			r.poll(ctx, "heartbeat_catch_up")
		}
	}
}

// drain stops the runner gracefully: no new cells; idle cells hand over at once; running turns
// get DrainTimeout to finish, then are cancelled. It returns once every cell has exited.
func (r *Runner) drain() {
	r.mu.Lock()
	r.stopped = true
	n := len(r.cells)
	r.mu.Unlock()
	close(r.draining)
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	// The deadline is the operator's, on the wall clock (an injected test clock may stand still).
	timer := time.NewTimer(r.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		r.log.Warn().Int("cells", r.Active()).Dur("drain_timeout", r.cfg.DrainTimeout).
			Msg("drain: turns still running; cutting them short and handing them over")
	}
	r.cancel()
	<-done
	r.log.Info().Int("cells", n).Msg("drained: every session handed over")
}

// orphans wakes the sessions with work whose lease belongs to a dead replica, oldest first,
// as many as WakeLimit leaves room for.
func (r *Runner) orphans(ctx context.Context) {
	r.wakeSome(ctx, "orphan", r.store.OrphanedWith, "look for sessions of dead replicas")
}

// poll wakes the sessions with a user message no completed turn answered, unless another
// replica holds its lease: oldest first, as many as WakeLimit leaves room for (the rest wait
// for the room their cells leave, or the next poll).
func (r *Runner) poll(ctx context.Context, reason string) {
	r.wakeSome(ctx, reason, r.store.PendingWith, "look for sessions with unfinished turns")
	if r.heartbeats() || reason == "listen_catch_up" {
		r.pokePending(ctx)
	}
}

// pokePending pokes the waiting cells here whose sessions have work they have not heard of: a
// wake posted to this replica that failed goes by a NOTIFY, which a replica with a heartbeat
// claim does not hear (so its every poll looks), and a NOTIFY sent while the LISTEN
// connection reconnected reached nobody (so the catch-up poll looks). A poked cell reads its
// log. Cells running a turn read it when the turn ends, and are left alone.
func (r *Runner) pokePending(ctx context.Context) {
	r.mu.Lock()
	waiting := make([]session.ID, 0, len(r.cells))
	for id, c := range r.cells {
		if c.waiting.Load() {
			waiting = append(waiting, id)
		}
	}
	r.mu.Unlock()
	ids, err := r.store.PendingAmong(ctx, r.cfg.WakeWindow, waiting)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("look for work the cells here have not heard of")
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if c, ok := r.cells[id]; ok {
			select {
			case c.poke <- struct{}{}:
			default:
			}
		}
	}
}

func (r *Runner) wakeSome(ctx context.Context, reason string,
	list func(context.Context, string, time.Duration, session.WakeOptions) ([]session.ID, error), what string) {
	room, running := r.room()
	if room == 0 {
		r.deps.Metrics.wakesDeferred.Inc()
		return
	}
	ids, err := list(ctx, r.cfg.Owner, r.cfg.WakeWindow, session.WakeOptions{Limit: max(room, 0), Skip: running})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg(what)
		}
		return
	}
	full := room > 0 && len(ids) == room
	for _, id := range ids {
		if !r.admit(id, reason) {
			full = true
		}
	}
	r.mu.Lock()
	if full {
		r.backlog, r.behind = true, true
	} else if reason != "orphan" {
		// Every pending session found has room: the backlog is worked through. (An orphan
		// scan sees only dead replicas' sessions, so it cannot tell.)
		r.behind = false
	}
	r.mu.Unlock()
	if full {
		r.deps.Metrics.wakesDeferred.Inc()
	}
}

// isBehind reports whether the polls are working through a backlog (Runner.behind).
func (r *Runner) isBehind() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.behind
}

// notifiers is how many notifier goroutines route signals at once. Each signal costs a
// round trip (NotifyOwner); one goroutine made a burst of new threads wait in line behind
// each other's round trips (issue 33: forty first mentions at once, the last cell started
// 1.5 s after its message was stored).
const notifiers = 4

// notifier routes signalled sessions with no cell here: to the replica that holds the
// session's live lease (one NOTIFY, which only that replica reads), or, when none does, to a
// cell here. A stopping runner starts no cell: it signals every peer instead, and one takes
// the session. Several run at once (notifiers); two signals of one session routed together
// meet in wakeLocked, which starts one cell.
func (r *Runner) notifier(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-r.notify:
			id := s.id
			route, err := r.store.NotifyOwner(ctx, id, r.cfg.Owner, true)
			if err != nil && ctx.Err() == nil {
				r.log.Debug().Err(err).Msg("notify the lease owner; running the session here")
			}
			if route.Owner != "" {
				if err := r.deps.wakeDirect(ctx, id, route); err != nil && ctx.Err() == nil {
					r.log.Warn().Err(err).Msg("could not signal the replica that runs the session; the poll finds the work")
				}
				continue
			}
			if r.isStopped() {
				if err := r.store.Notify(ctx, id, r.cfg.Owner); err != nil && ctx.Err() == nil {
					r.log.Debug().Err(err).Msg("notify; the other replicas' poll will find the session")
				}
				continue
			}
			r.mu.Lock()
			r.wakeLocked(id, "message", false, s.again)
			r.mu.Unlock()
		}
	}
}

func (r *Runner) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// listen keeps a dedicated connection LISTENing for other replicas' signals. After every
// (re)connect it LISTENs first, then polls, so nothing signalled while it was away is lost
// (LISTEN is per connection: a NOTIFY sent before the new LISTEN reaches nobody); correctness
// never depends on NOTIFY.
func (r *Runner) listen(ctx context.Context) {
	r.reconnecting(ctx, "LISTEN connection lost; reconnecting", func() (bool, error) {
		err := r.listenOnce(ctx)
		return r.wasClaimed.Swap(false), err // it had connected: an outage starts the backoff again
	})
}

// reconnecting runs once until ctx ends: after each failure it logs msg and waits, 100 ms
// at first, doubling to 10 s; a run that reports it was healthy starts the backoff again.
func (r *Runner) reconnecting(ctx context.Context, msg string, once func() (healthy bool, err error)) {
	const first = 100 * time.Millisecond
	backoff := first
	for ctx.Err() == nil {
		healthy, err := once()
		if ctx.Err() != nil {
			return
		}
		if healthy {
			backoff = first
		}
		r.log.Warn().Err(err).Dur("retry_in", backoff).Msg(msg)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// listenOnce holds the LISTEN connection, which also holds the runner's liveness claim: cells
// take leases as claimed only while it is held, and those leases' cells are cancelled the
// moment it ends — the connection failed, or failed its check (a failover may have freed the
// claim on a new primary): peers may take the sessions at once, so nothing more may be done
// in them here.
func (r *Runner) listenOnce(ctx context.Context) error {
	var err error
	defer func() { r.loseClaim(ctx, err) }()
	opt := session.ListenOptions{CheckEvery: r.cfg.ClaimCheck, After: r.deps.Clock.After}
	err = session.ListenClaimed(ctx, r.dbURL, r.cfg.Owner, opt, func() {
		r.holdClaim(newHeldClaim())
		r.recordPeer(ctx)
		r.poll(ctx, "listen_catch_up")
	}, r.heard)
	return err
}

// heldClaim is one taking of the runner's liveness claim: lost is closed when it ends, and
// until is until when it is trusted (a heartbeat claim's; nil: a lock's, trusted while its
// connection answers). A cell keeps the one its lease was taken with: a claim taken again
// does not vouch for the cells of the one before.
type heldClaim struct {
	lost  chan struct{}
	until atomic.Pointer[time.Time]
}

func newHeldClaim() *heldClaim { return &heldClaim{lost: make(chan struct{})} }

// trustedUntil is until when the claim is trusted (the zero time: no such bound).
func (h *heldClaim) trustedUntil() time.Time {
	if t := h.until.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// distrust ends a heartbeat claim's trust at once (a lock's has none to end).
func (h *heldClaim) distrust() {
	if h.until.Load() != nil {
		past := time.Unix(0, 1)
		h.until.Store(&past)
	}
}

// holdClaim records that the liveness claim is held (again), as h: cells take their leases
// as claimed from now until loseClaim.
func (r *Runner) holdClaim(h *heldClaim) {
	r.claimMu.Lock()
	r.current = h
	r.claimed.Store(true)
	r.claimMu.Unlock()
	r.wasClaimed.Store(true)
	r.claimOnce.Do(func() { close(r.firstClaim) })
}

// heartbeats says the liveness claim is a heartbeat row (RunnerConfig.Heartbeat; NewService
// refuses one without a peer inbox).
func (r *Runner) heartbeats() bool { return r.cfg.Heartbeat > 0 && r.cfg.Peer != nil }

// heartbeat keeps the liveness claim as a heartbeat row until ctx ends, taking it again
// after it is lost.
func (r *Runner) heartbeat(ctx context.Context) {
	r.reconnecting(ctx, "liveness claim's heartbeat lost; taking it again", func() (bool, error) {
		err := r.heartbeatOnce(ctx)
		return r.wasClaimed.Swap(false), err
	})
}

// heartbeatOnce holds the liveness claim as a heartbeat row (session.Store.HoldHeartbeat),
// which also records where peers post this replica's wakes; the cells run under it are
// cancelled the moment it ends, as listenOnce's.
func (r *Runner) heartbeatOnce(ctx context.Context) error {
	var err error
	defer func() { r.loseClaim(ctx, err) }()
	in := r.cfg.Peer
	h := newHeldClaim()
	opt := session.HeartbeatOptions{TTL: r.cfg.Heartbeat, After: r.deps.Clock.After, Now: r.deps.Clock.Now,
		Trusted: func(until time.Time) { h.until.Store(&until) },
		Failed: func(err error) {
			r.log.Warn().Err(err).Msg("could not renew the liveness claim's heartbeat; trying again while it is trusted")
		}}
	// Through the gateway's pool, as the lease renewals: the cells' work must not hold a
	// renewal back until the claim's trust runs out.
	err = cmp.Or(r.deps.GatewayStore, r.store).HoldHeartbeat(ctx, r.cfg.Owner, in.Addr(), in.Token(), opt, func() {
		r.holdClaim(h)
		if !r.isStopped() {
			in.Attach(r.heard)
		}
		select {
		case r.catchUp <- struct{}{}:
		default: // one is asked for already
		}
	})
	return err
}

// heard takes a peer's signal for session id, by NOTIFY or posted to the peer inbox.
func (r *Runner) heard(id session.ID, sender string) {
	if sender == r.cfg.Owner {
		return // our own signal; the cell was poked in process
	}
	if !r.wake(id, "notify") {
		// Stopping: a peer's hand-over (sent to this replica alone) is passed on, as the
		// notifier passes on what a stopping runner cannot run.
		r.route(signal{id: id})
	}
}

// recordPeer says where peers post this replica's wakes (RunnerConfig.Peer), now that it
// holds its liveness claim (again), and takes the wakes posted there. Without it, or should
// the record fail, peers NOTIFY this replica: nothing is lost, each NOTIFY only costs every
// replica a transaction.
func (r *Runner) recordPeer(ctx context.Context) {
	in := r.cfg.Peer
	if in == nil || r.isStopped() {
		return // a stopping runner takes no new sessions: peers NOTIFY it meanwhile
	}
	in.Attach(r.heard)
	if err := r.store.RecordPeer(ctx, r.cfg.Owner, in.Addr(), in.Token()); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Str("peer_addr", in.Addr()).Msg("could not record this replica's peer address; peers will NOTIFY it instead")
	}
}

// forgetPeer takes this replica's peer address back once it has drained: peers NOTIFY it
// (and find it runs nothing) until it ends.
func (r *Runner) forgetPeer(ctx context.Context) {
	in := r.cfg.Peer
	if r.heartbeats() {
		in.Attach(nil) // its row is its claim: deleted when the heartbeat ends, after Run
		return
	}
	if in == nil || r.dbURL == "" {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.store.ForgetPeer(fctx, r.cfg.Owner); err != nil {
		r.log.Debug().Err(err).Msg("forget this replica's peer address; the next replica to start does")
	}
	in.Attach(nil)
}

// watch keeps the watch on a peer's liveness claim (session.WatchPeers) until ctx ends,
// reconnecting with a backoff: each death it sees asks Run for an orphan scan at once. A
// stopping runner takes no sessions, so the watch ends with Run's ctx, before the drain.
func (r *Runner) watch(ctx context.Context) {
	r.reconnecting(ctx, "the watch on a peer's liveness claim failed; the orphan scan goes on", func() (bool, error) {
		began := time.Now()
		err := session.WatchPeers(ctx, r.dbURL, r.cfg.Owner, session.WatchOptions{After: r.deps.Clock.After}, func(pid int) {
			r.log.Info().Int("peer_backend_pid", pid).Msg("a peer's liveness claim ended; taking its sessions")
			select {
			case r.orphaned <- struct{}{}:
			default: // a scan is asked for already
			}
		})
		return time.Since(began) > 10*time.Second, err // it had worked for a while
	})
}

// claim reports whether the liveness claim is held now, and the claim (the last one held,
// when none is).
func (r *Runner) claim() (bool, *heldClaim) {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	return r.claimed.Load(), r.current
}

// loseClaim records that the liveness claim ended (err says why): the cells whose leases
// were taken with it stop.
func (r *Runner) loseClaim(ctx context.Context, err error) {
	r.claimMu.Lock()
	held := r.claimed.Swap(false)
	if held {
		r.current.distrust() // before the cells are cancelled: they write nothing more meanwhile
		close(r.current.lost)
	}
	r.claimMu.Unlock()
	if r.cfg.Peer != nil {
		// Without the claim a cell takes no lease it could hold: peers' posts are refused
		// (503), and their senders NOTIFY, which the next LISTEN connection catches up on.
		r.cfg.Peer.Attach(nil)
	}
	if !held || ctx.Err() != nil {
		return
	}
	how := "its LISTEN connection failed or did not answer"
	if r.heartbeats() {
		how = "its heartbeat was not renewed in time or had expired"
	}
	r.log.Warn().Err(err).Int("cells", r.Active()).
		Msg("liveness claim lost: " + how + "; cancelling the turns run under it")
	r.deps.Metrics.claimsLost.Inc()
	r.deps.Probe.claimLost(err)
}
