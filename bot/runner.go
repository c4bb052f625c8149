package bot

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
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
	// OrphanInterval is how often to look for sessions with work whose lease belongs to a dead
	// replica (its liveness claim is free): a cheap query, so that such a session resumes
	// here within about this long; default 500ms.
	OrphanInterval time.Duration
	// ClaimCheck is how often the connection holding the liveness claim proves it is alive
	// with a round trip, which must answer within ClaimCheck too (on Clock); when it does not,
	// the claim is taken as lost and the turns run under it are cancelled; default 5s.
	ClaimCheck time.Duration
	// DrainTimeout bounds a graceful stop (Run's ctx ends): idle cells hand their sessions
	// over at once, running turns may finish for this long, then they are cut short and
	// handed over (lease released, a peer woken through NOTIFY); default 20s.
	DrainTimeout time.Duration
	// MaxReplies caps the replies of one thread per ReplyWindow (default a minute; a turn over
	// the cap waits): a safety net against bot-to-bot loops. Default 10; negative: no cap.
	MaxReplies  int
	ReplyWindow time.Duration
	// WakeWindow bounds how far back the poll and wake look for unfinished work; default 7 days.
	WakeWindow time.Duration
	Where      brain.Where // workspace and bot name for the system prompt; channel and thread are filled per session
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
	// Repos names each channel's repository (LOGBOOK_REPOS, /logbook repo), for
	// create_pull_request; nil: none.
	Repos *ChannelRepos
}

// Probe is told of a cell's milestones as they happen: test signals, and dev's status. Each
// func may be nil and must not block.
type Probe struct {
	// TurnDone: a turn's turn_completed is in the log (status "ok" or "error").
	TurnDone func(id session.ID, turnSeq int64, status string)
	// CellExited: a cell let go of its session ("idle", "shutdown", "drain": handed over
	// on a graceful stop, "error", "lease_lost", "held": another replica holds it,
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
	notify  chan session.ID

	// claimed is true while the LISTEN connection holds this runner's liveness claim, and
	// claimLost is closed when that claim ends (a new channel for each claim; guarded by
	// claimMu); firstClaim is closed when it is first held.
	claimMu    sync.Mutex
	claimed    atomic.Bool
	claimLost  chan struct{}
	wasClaimed atomic.Bool // the last LISTEN connection held the claim (it connected)
	firstClaim chan struct{}
	claimOnce  sync.Once
	// draining is closed when a graceful stop begins.
	draining chan struct{}
}

// HandsFactory provides a session's sandbox lazily; nil disables sandbox tools.
type HandsFactory func(log appendLog, sess session.Session) *Hands

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
	cfg.OrphanInterval = nonZero(cfg.OrphanInterval, 500*time.Millisecond)
	cfg.DrainTimeout = nonZero(cfg.DrainTimeout, 20*time.Second)
	cfg.ClaimCheck = nonZero(cfg.ClaimCheck, 5*time.Second)
	cfg.WakeWindow = nonZero(cfg.WakeWindow, 7*24*time.Hour)
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
		cells: map[session.ID]*Cell{}, notify: make(chan session.ID, 1024), draining: make(chan struct{}),
		firstClaim: make(chan struct{})}
	r.deps = &cellDeps{Deps: d, cfg: cfg, claim: r.claim, draining: r.draining}
	if d.DatabaseURL != "" {
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

// Signal tells the session's cell there is new work: in this process at once, and to other
// replicas through NOTIFY. It never blocks.
func (r *Runner) Signal(id session.ID) {
	r.wake(id, "message")
	select {
	case r.notify <- id:
	default: // the poll catches it
	}
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
// stopping: a draining cell is still poked, so it hands over the work it learns of).
func (r *Runner) wake(id session.ID, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.cells[id]; ok {
		select {
		case c.poke <- struct{}{}:
		default:
		}
		return
	}
	if r.stopped {
		return
	}
	c := &Cell{deps: r.deps, id: id, reason: reason, poke: make(chan struct{}, 1), evict: make(chan struct{}, 1),
		carried: carried{copied: map[string]bool{}}}
	r.cells[id] = c
	r.deps.Metrics.cellsActive.Inc()
	r.wg.Go(func() {
		c.run(r.base)
		r.mu.Lock()
		delete(r.cells, id)
		pending := len(c.poke) > 0 // a signal that reached the cell as it was exiting
		r.mu.Unlock()
		r.deps.Metrics.cellsActive.Dec()
		if pending {
			r.wake(id, "message")
		}
	})
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
	wg.Go(func() { r.notifier(bg) })
	if r.dbURL != "" {
		wg.Go(func() { r.listen(bg) })
	}
	if r.dbURL == "" {
		r.poll(ctx, "wake")
	} // else the listener's catch-up wakes them, once the claim is held: leases taken before
	// it would be unclaimed, and wait out their TTL should this process die.
	// Each timer is renewed only when it fires: the frequent dead-owner poll must not put
	// the slow poll off forever.
	polls, orphans := r.deps.Clock.After(r.cfg.PollInterval), r.deps.Clock.After(r.cfg.OrphanInterval)
	for {
		select {
		case <-ctx.Done():
			r.drain()
			return nil
		case <-polls:
			r.poll(ctx, "poll")
			polls = r.deps.Clock.After(r.cfg.PollInterval)
		case <-orphans:
			r.orphans(ctx)
			orphans = r.deps.Clock.After(r.cfg.OrphanInterval)
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

// orphans wakes every session with work whose lease belongs to a dead replica.
func (r *Runner) orphans(ctx context.Context) {
	ids, err := r.store.Orphaned(ctx, r.cfg.Owner, r.cfg.WakeWindow)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("look for sessions of dead replicas")
		}
		return
	}
	for _, id := range ids {
		r.wake(id, "orphan")
	}
}

// poll wakes every session with a user message no completed turn answered, unless another
// replica holds its lease.
func (r *Runner) poll(ctx context.Context, reason string) {
	ids, err := r.store.Pending(ctx, r.cfg.Owner, r.cfg.WakeWindow)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("look for sessions with unfinished turns")
		}
		return
	}
	for _, id := range ids {
		r.wake(id, reason)
	}
}

// notifier sends NOTIFY for signalled sessions so the replica that holds one wakes its cell.
func (r *Runner) notifier(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-r.notify:
			// The payload names the sender, whose own listener ignores it.
			if err := r.store.Notify(ctx, id, r.cfg.Owner); err != nil && ctx.Err() == nil {
				r.log.Debug().Err(err).Msg("notify; the other replicas' poll will find the session")
			}
		}
	}
}

// listen keeps a dedicated connection LISTENing for other replicas' signals. After every
// (re)connect it LISTENs first, then polls, so nothing signalled while it was away is lost
// (LISTEN is per connection: a NOTIFY sent before the new LISTEN reaches nobody); correctness
// never depends on NOTIFY.
func (r *Runner) listen(ctx context.Context) {
	const first = 100 * time.Millisecond
	backoff := first
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if r.wasClaimed.Swap(false) {
			backoff = first // it had connected: an outage starts the backoff again
		}
		r.log.Warn().Err(err).Dur("retry_in", backoff).Msg("LISTEN connection lost; reconnecting")
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
		r.claimMu.Lock()
		r.claimLost = make(chan struct{})
		r.claimed.Store(true)
		r.claimMu.Unlock()
		r.wasClaimed.Store(true)
		r.claimOnce.Do(func() { close(r.firstClaim) })
		r.poll(ctx, "listen_catch_up")
	}, func(id session.ID, sender string) {
		if sender == r.cfg.Owner {
			return // our own signal; the cell was poked in process
		}
		r.wake(id, "notify")
	})
	return err
}

// claim reports whether the liveness claim is held now, and a channel closed when it ends.
func (r *Runner) claim() (bool, <-chan struct{}) {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	return r.claimed.Load(), r.claimLost
}

// loseClaim records that the liveness claim ended (err says why): the cells whose leases
// were taken with it stop.
func (r *Runner) loseClaim(ctx context.Context, err error) {
	r.claimMu.Lock()
	held := r.claimed.Swap(false)
	if held {
		close(r.claimLost)
	}
	r.claimMu.Unlock()
	if !held || ctx.Err() != nil {
		return
	}
	r.log.Warn().Err(err).Int("cells", r.Active()).
		Msg("liveness claim lost: its LISTEN connection failed or did not answer; cancelling the turns run under it")
	r.deps.Metrics.claimsLost.Inc()
	r.deps.Probe.claimLost(err)
}
