package bot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/peerwake"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// cellDeps is what every cell of a runner works with, built once by NewRunner.
type cellDeps struct {
	Deps
	cfg RunnerConfig
	// claim reports whether the runner holds its liveness claim now, and that claim (its
	// channel closed when it ends, its trust); firstClaim (nil: the runner has no claim) is
	// closed once it was first held.
	claim      func() (bool, *heldClaim)
	firstClaim <-chan struct{}
	// draining is closed when the runner stops gracefully.
	draining <-chan struct{}
	// renewer renews the leases of all the runner's cells.
	renewer *renewer
	// meters are the OpenTelemetry instruments of turns (Deps.Meter).
	meters *telemetry.Metrics
	// peers posts wakes to the replicas that take them over HTTP (RunnerConfig.Peer).
	peers *peerwake.Sender
}

// Cell runs one session: a single-owner actor. Its state lives in one goroutine; signals
// arrive on poke; an idle timer ends it. See the package documentation for its lifecycle.
type Cell struct {
	deps   *cellDeps
	id     session.ID
	reason string
	poke   chan struct{}
	evict  chan struct{}
	// waiting is true while the cell runs no turn: from before it reads its log until it finds
	// work there (Runner.pokePending).
	waiting atomic.Bool
	// settled, when set (a cell the start or a poll woke, counted against WakeLimit), is
	// called once when the cell first has no work left, or exits; exit is why it exited,
	// for the runner once run returns.
	settled func()
	exit    string
	// backlog, when set (an admitted cell), reports whether the runner is working through a
	// backlog: the cell then leaves as soon as its work is done ("backlog") instead of idling
	// with its lease for IdleTimeout, so a backlog's cells and leases end with it.
	backlog func() bool

	log   zerolog.Logger
	sess  session.Session
	flog  *cellLog
	hands *hands.Hands
	parts *part.Cell // what the turns' parts keep for the cell's length
	// carried is what the cell's turns hand on to the next: its cell_woken (appended with the
	// cell's first write, alone or with the turn_started it wakes for), the queued markers,
	// the files copied into its sandbox.
	carried carried
	// fence is the lease's deadline on the cell's clock, which every Slack call of its turns
	// checks first (fence.go); the renewer moves it on.
	fence *leaseFence
	// titling is the session's title being written in the background (turn.title), so the
	// next turn need not wait for the title's model call; the cell waits for it before it
	// lets go of the lease. At most one at a time (titleBusy).
	titling   sync.WaitGroup
	titleBusy atomic.Bool
}

var (
	errLeaseLost = errors.New("lease lost")
	// errClaimLost: the liveness claim the lease was taken with ended.
	errClaimLost = errors.New("liveness claim lost")
)

// maxTurnFailures is how many times in a row a cell retries a failing turn before it exits
// and leaves the session to the poll.
const maxTurnFailures = 6

func (c *Cell) run(ctx context.Context) {
	d := c.deps
	exit := "error"
	defer func() {
		c.exit = exit
		c.settle()
		d.Probe.cellExited(c.id, exit)
	}()
	c.log = d.Log.With().Str("session_id", c.id.String()).Logger()
	if d.firstClaim != nil {
		// A cell woken as the process starts (a message) waits a moment for the claim: a
		// lease taken without it would hold the session for its whole TTL should the process
		// die.
		select {
		case <-d.firstClaim:
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
	acquiredAt := d.Clock.Now()
	claimed, hc := d.claim()
	// The session, its lease and its log in one round trip (issue 33: a takeover's cells
	// queue for each one behind the replica's other turns).
	sess, lease, evs, err := d.Store.LeaseSession(ctx, c.id, d.cfg.Owner, d.cfg.LeaseTTL, session.LeaseOptions{Claimed: claimed})
	if errors.Is(err, session.ErrNotFound) {
		c.log.Warn().Err(err).Msg("cell: read session")
		return
	}
	c.sess = sess
	if errors.Is(err, session.ErrLeaseHeld) {
		d.Metrics.leaseAcquires.WithLabelValues("held").Inc()
		c.log.Debug().Msg("cell: another replica holds the session")
		exit = "held"
		return
	}
	if err != nil {
		d.Metrics.leaseAcquires.WithLabelValues("error").Inc()
		c.log.Warn().Err(err).Msg("cell: take lease")
		return
	}
	d.Metrics.leaseAcquires.WithLabelValues("taken").Inc()
	if lease.Epoch > 1 && c.reason != "message" && c.reason != "notify" {
		d.Metrics.leaseSteals.Inc()
	}
	c.flog = newCellLog(d.Store, c.id, lease.Epoch)
	c.flog.prime(evs)
	c.carried.wake = c.wokenEvent(lease.Epoch)
	c.log = c.log.With().Int64("epoch", lease.Epoch).Logger()

	// The lease is renewed in the background; losing it cancels everything the cell does.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewDone := make(chan struct{})
	var handOver bool // set on a graceful stop with work left: a peer is woken once the lease is released
	// The lease is trusted until a local deadline measured from before the call that took it,
	// so a skewed database clock cannot stretch it.
	validUntil := acquiredAt.Add(d.cfg.LeaseTTL)
	if !claimed {
		hc = nil // a lease taken without the claim holds for its TTL alone
	}
	// Slack writes stop where renew gives the lease up (a quarter of the TTL before it ends).
	c.fence = newLeaseFence(d.Clock, validUntil, d.cfg.LeaseTTL/4, lease.Epoch)
	var claimLost <-chan struct{}
	if hc != nil {
		c.fence.claimUntil, claimLost = hc.trustedUntil, hc.lost
	}
	ctx = withFence(ctx, c.fence)
	// The runner's renewer renews the lease with all of this replica's others (renewer.go).
	hold := &leaseHold{lease: lease, validUntil: validUntil, fence: c.fence, cancel: cancel, log: c.log}
	d.renewer.keep(hold)
	// An append refused as fenced (any of the cell's: the turn's, the view's, the agent's)
	// says the lease is lost before renew may learn it: no more Slack writes, and the loop
	// stops rather than run the turn again beside the new owner. The cell is not cancelled
	// here: a Slack call under way finishes, so the view learns the ts of what it made and
	// removes it (its record is fenced) instead of leaving a message nobody can name.
	c.flog.fenced = c.fence.close
	go func() {
		defer close(renewDone)
		c.watchClaim(ctx, cancel, claimLost)
	}()
	defer func() {
		d.renewer.drop(hold)
		cancel(nil)
		<-renewDone
		rel, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		if err := d.Store.ReleaseLease(rel, lease); err != nil {
			c.log.Warn().Err(err).Msg("cell: release lease")
			return
		}
		if handOver {
			// Only after the release: the peer's cell takes the lease at once.
			if err := d.handOver(rel, c.id); err != nil {
				c.log.Warn().Err(err).Msg("cell: hand over; a peer's poll will find the session")
			}
		}
	}()

	d.Metrics.rehydrations.Inc()
	if d.Features.Hands != nil {
		c.hands = d.Features.Hands(c.flog, sess)
	}
	c.parts = &part.Cell{Log: c.log}
	reason := c.loop(ctx)
	c.titling.Wait() // its append needs the lease; a lost lease has cancelled it already
	exit, handOver = c.leave(ctx, reason)
}

// leave ends the cell after its loop returned reason: the work tree's changes saved while the
// lease is still ours, then cell_evicted (with cell_woken when the cell wrote nothing before).
// It returns the cell's exit reason, and whether a peer should be woken once the lease is
// released (a graceful stop with work left). A lost lease writes nothing.
func (c *Cell) leave(ctx context.Context, reason string) (exit string, handOver bool) {
	d := c.deps
	c.parts.Close() // before the sandbox: a part's local servers run in it
	if c.hands != nil {
		save, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		cause := context.Cause(ctx)
		c.hands.Close(save, cause != errLeaseLost && cause != errClaimLost && reason != "lease_lost")
		stop()
	}
	if cause := context.Cause(ctx); cause == errLeaseLost || cause == errClaimLost || reason == "lease_lost" {
		c.log.Warn().Err(cause).Msg("cell: exiting without writing")
		d.Metrics.evictions.Inc()
		if cause == errClaimLost {
			return "claim_lost", false
		}
		return "lease_lost", false
	}
	out, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	var evs []session.NewEvent
	if c.carried.woken == 0 {
		evs = append(evs, c.carried.wake)
	}
	evs = append(evs, session.NewEvent{Type: session.TypeCellEvicted, Actor: cellActor, Payload: session.CellEvicted{Reason: reason}})
	if _, err := c.flog.Append(out, evs...); err != nil {
		c.log.Warn().Err(err).Msg("cell: append cell_evicted")
	}
	d.Metrics.evictions.Inc()
	if reason == "drain" || reason == "shutdown" {
		handOver = c.flog.sync(out) != nil || hasWork(readTurnState(c.flog.snapshot()))
	}
	c.log.Debug().Str("reason", reason).Bool("hand_over", handOver).Msg("cell evicted")
	return reason, handOver
}

// settle gives back the cell's room under WakeLimit, once.
func (c *Cell) settle() {
	if f := c.settled; f != nil {
		c.settled = nil
		f()
	}
}

func hasWork(st turnState) bool { return st.open || st.lastUser > st.through }

// handOver wakes one live peer for session id, whose lease this replica has just released
// on a graceful stop: the peer that runs the fewest sessions (session.Store.NotifyPeer), not
// every replica to race for the lease. When no live peer is known (none runs a session) every
// replica is signalled.
func (d *cellDeps) handOver(ctx context.Context, id session.ID) error {
	peer, err := d.Store.NotifyPeer(ctx, id, d.cfg.Owner, true)
	if err == nil && peer.Owner != "" {
		return d.wakeDirect(ctx, id, peer)
	}
	if err != nil {
		d.Log.Debug().Err(err).Msg("hand over to one peer; signalling every replica")
	}
	return d.Store.Notify(ctx, id, d.cfg.Owner)
}

// wakeDirect delivers a signal for session id that the database routed to another replica
// without a NOTIFY: that replica takes wakes over HTTP (route.Addr), where it is posted. When
// the post fails (the replica cannot be reached, is stopping, or answers an error), the
// replica is NOTIFYed after all, under a deadline of its own (the post may have used up
// ctx's). A route with no address was NOTIFYed already. An error means neither went: the
// session waits for a poll.
func (d *cellDeps) wakeDirect(ctx context.Context, id session.ID, route session.Route) error {
	if route.Addr == "" {
		return nil
	}
	err := d.peers.Send(ctx, route.Addr, route.Token, id, d.cfg.Owner)
	if err == nil {
		d.Metrics.peerWakes.WithLabelValues("posted").Inc()
		return nil
	}
	d.Metrics.peerWakes.WithLabelValues("notified").Inc()
	if !errors.Is(err, peerwake.ErrPeerDown) { // said once per address while it rests
		d.Log.Warn().Err(err).Str("peer", route.Owner).Msg("could not post a wake to the replica that runs the session; NOTIFYing it instead (and while its address rests)")
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := d.Store.NotifyTo(nctx, id, d.cfg.Owner, route.Owner); err != nil {
		return fmt.Errorf("signal %s: %w", route.Owner, err)
	}
	return nil
}

// isDraining reports whether the runner is stopping gracefully.
func (d *cellDeps) isDraining() bool { return closed(d.draining) }

// closed reports whether ch is closed (or holds a value).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

var cellActor = session.Actor{Kind: session.ActorSystem, ID: "cell"}

func (c *Cell) wokenEvent(epoch int64) session.NewEvent {
	return session.NewEvent{Type: session.TypeCellWoken, Actor: cellActor,
		Payload: session.CellWoken{Host: c.deps.cfg.Host, PID: os.Getpid(), Reason: c.reason, Epoch: epoch}}
}

// newTurn builds the turn st from the parts it uses: the cell's session, log, sandbox and
// signals, what the cell carries across its turns, and the runner's parts. This is the one
// place a turn's parts are picked: the runner's, handed on here whole (a capability is one of
// Deps.Parts).
func (c *Cell) newTurn(st turnState) *turn {
	d := c.deps
	return &turn{sess: c.sess, flog: c.flog, hands: c.hands, cell: c.parts, poke: c.poke, wake: c.wake, later: c.titleLater, carried: c.carried,
		agent: d.Agent, deliverer: d.Deliver, clock: d.Clock, features: d.Features, parts: d.Parts, cfg: &d.cfg,
		metrics: d.Metrics, meters: d.meters, probe: d.Probe, draining: d.draining,
		state: st, log: c.log, changed: make(chan struct{}, 1)}
}

// titleLater runs f, a turn's title, beside the cell's next turns, unless a title runs
// already (that one names the session; the next turn's reply tries again if it did not).
func (c *Cell) titleLater(f func()) {
	if !c.titleBusy.CompareAndSwap(false, true) {
		return
	}
	c.titling.Go(func() {
		defer c.titleBusy.Store(false)
		f()
	})
}

// watchClaim cancels the cell (errClaimLost) the moment claimLost is closed: the runner's
// liveness claim, which the lease was taken with, ended, so a peer may take the session now
// (nil: no claim). The renewer cancels it (errLeaseLost) once the lease is lost.
func (c *Cell) watchClaim(ctx context.Context, cancel context.CancelCauseFunc, claimLost <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-claimLost:
		cancel(errClaimLost)
	}
}

// loop runs turns while there is work, and waits for signals otherwise. It returns the
// eviction reason.
func (c *Cell) loop(ctx context.Context) string {
	d := c.deps
	idleAt := d.Clock.Now().Add(d.cfg.IdleTimeout)
	failures := 0
	for primed := true; ; primed = false {
		// Waiting from before the log is read: work stored after the read is one a poll may
		// poke the cell for (Runner.pokePending).
		c.waiting.Store(true)
		// The first pass reads nothing: the log was read with the lease (Cell.run).
		if err := c.flog.syncUnless(ctx, primed); err != nil {
			if ctx.Err() != nil {
				return "shutdown"
			}
			c.log.Warn().Err(err).Msg("cell: read the log")
			return "error"
		}
		if d.isDraining() {
			// A graceful stop: no new turn here; the session is handed over.
			return "drain"
		}
		st := readTurnState(c.flog.snapshot())
		if hasWork(st) {
			c.waiting.Store(false)
			t := c.newTurn(st)
			err := c.runTurn(ctx, t)
			c.carried = t.carried
			if c.fence.closed() {
				return "lease_lost" // an append was fenced: another cell owns the session
			}
			if err != nil {
				if ctx.Err() != nil {
					return "shutdown"
				}
				if errors.Is(err, errSuspended) {
					// The turn waits for a person; the log wakes the session when they decide.
					return "suspended"
				}
				failures++
				if failures >= maxTurnFailures {
					c.log.Warn().Err(err).Msg("cell: turn failed again; leaving it to the next poll")
					return "error"
				}
				wait := min(time.Second<<failures, time.Minute)
				c.log.Warn().Err(err).Dur("retry_in", wait).Msg("cell: turn failed; it stays open and is resumed")
				select {
				case <-ctx.Done():
					return "shutdown"
				case <-d.draining:
					return "drain"
				case <-d.Clock.After(wait):
				}
				continue
			}
			failures = 0
			idleAt = d.Clock.Now().Add(d.cfg.IdleTimeout)
			continue
		}
		c.settle() // no work left: the room it took goes to the next session
		if c.backlog != nil && c.backlog() {
			return "backlog" // more sessions wait: this one's cell and lease go now
		}
		select {
		case <-ctx.Done():
			return "shutdown"
		case <-c.poke:
		case <-c.evict:
			return "idle"
		case <-d.draining:
			return "drain"
		case <-d.Clock.After(idleAt.Sub(d.Clock.Now())):
			return "idle"
		}
	}
}

// turnState is what the log says about the session's turns, as the cell runs them.
type turnState struct {
	open        bool                // the newest turn has no turn_completed
	turnSeq     int64               // that turn's seq
	through     int64               // the last input seq the open (or last completed) turn answers
	lastUser    int64               // the newest input's seq: a user_message or a followup_signal
	lastUserMsg session.UserMessage // the newest user_message
}

// readTurnState reads the turn state off the turns fold: the newest turn and user message.
func readTurnState(evs []session.Event) turnState {
	ts := thread.FoldTurns(evs)
	st := turnState{lastUser: ts.LastInput()}
	if ts.LastUser.Seq > 0 {
		_ = ts.LastUser.Decode(&st.lastUserMsg) // only its ts, user and team, for the working reaction
	}
	if t := ts.Last(); t != nil {
		st.open, st.turnSeq, st.through = t.Open, t.Seq, t.Covered()
	}
	return st
}
