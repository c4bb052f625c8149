package bot

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/session"
)

// Cell runs one session: a single-owner actor. Its state lives in one goroutine; signals
// arrive on poke; an idle timer ends it. See the package documentation for its lifecycle.
type Cell struct {
	r      *Runner
	id     session.ID
	reason string
	poke   chan struct{}
	evict  chan struct{}

	log   zerolog.Logger
	sess  session.Session
	flog  fencedLog
	hands *Hands
	// queued is the highest user_message seq already given a queued marker.
	queued int64
}

// turnState is what the log says about the session's turns.
type turnState struct {
	open        bool  // a turn_started without turn_completed
	turnSeq     int64 // that turn's seq
	through     int64 // the last user_message seq the open (or last completed) turn answers
	lastUser    int64
	lastUserMsg session.UserMessage
}

func (c *Cell) run(ctx context.Context) {
	r := c.r
	c.log = r.log.With().Str("session_id", c.id.String()).Logger()
	sess, err := r.store.Session(ctx, c.id)
	if err != nil {
		c.log.Warn().Err(err).Msg("cell: read session")
		return
	}
	c.sess = sess
	acquiredAt := time.Now()
	lease, err := r.store.AcquireLease(ctx, c.id, r.cfg.Owner, r.cfg.LeaseTTL)
	if errors.Is(err, session.ErrLeaseHeld) {
		c.log.Debug().Msg("cell: another replica holds the session")
		return
	}
	if err != nil {
		c.log.Warn().Err(err).Msg("cell: take lease")
		return
	}
	if lease.Epoch > 1 && c.reason != "message" && c.reason != "notify" {
		r.metrics.leaseSteals.Inc()
	}
	c.flog = fencedLog{store: r.store, id: c.id, epoch: lease.Epoch}
	c.log = c.log.With().Int64("epoch", lease.Epoch).Logger()

	// The lease is renewed in the background; losing it cancels everything the cell does.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewDone := make(chan struct{})
	// The lease is trusted until a local deadline measured from before the call that took it,
	// so a skewed database clock cannot stretch it.
	validUntil := acquiredAt.Add(r.cfg.LeaseTTL)
	go func() {
		defer close(renewDone)
		c.renew(ctx, cancel, lease, validUntil)
	}()
	defer func() {
		cancel(nil)
		<-renewDone
		rel, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		if err := r.store.ReleaseLease(rel, lease); err != nil {
			c.log.Warn().Err(err).Msg("cell: release lease")
		}
	}()

	host := r.cfg.Host
	if _, err := c.flog.Append(ctx, session.NewEvent{Type: session.TypeCellWoken, Actor: c.actor(),
		Payload: session.CellWoken{Host: host, PID: os.Getpid(), Reason: c.reason, Epoch: lease.Epoch}}); err != nil {
		c.log.Warn().Err(err).Msg("cell: append cell_woken")
		return
	}
	r.metrics.rehydrations.Inc()
	if r.hands != nil {
		c.hands = r.hands(c.flog, sess)
	}
	reason := c.loop(ctx)

	if c.hands != nil {
		c.hands.Close()
	}
	if context.Cause(ctx) == errLeaseLost {
		c.log.Warn().Msg("cell: lease lost; exiting without writing")
		r.metrics.evictions.Inc()
		return
	}
	out, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	if _, err := c.flog.Append(out, session.NewEvent{Type: session.TypeCellEvicted, Actor: c.actor(),
		Payload: session.CellEvicted{Reason: reason}}); err != nil {
		c.log.Warn().Err(err).Msg("cell: append cell_evicted")
	}
	r.metrics.evictions.Inc()
	c.log.Debug().Str("reason", reason).Msg("cell evicted")
}

var errLeaseLost = errors.New("lease lost")

// maxTurnFailures is how many times in a row a cell retries a failing turn before it exits
// and leaves the session to the poll.
const maxTurnFailures = 6

// maxResumes is how many cells may take up one unfinished turn before it is abandoned.
const maxResumes = 3

func (c *Cell) renew(ctx context.Context, cancel context.CancelCauseFunc, lease session.Lease, validUntil time.Time) {
	t := time.NewTicker(c.r.cfg.LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sent := time.Now()
			rctx, stop := context.WithTimeout(ctx, c.r.cfg.LeaseTTL/8)
			l, err := c.r.store.RenewLease(rctx, lease, c.r.cfg.LeaseTTL)
			stop()
			if errors.Is(err, session.ErrFenced) {
				cancel(errLeaseLost)
				return
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// Not renewed: once the lease may have expired (measured on our own clock
				// from before the last successful call, with a margin), another replica may
				// run the session: stop now.
				if time.Now().After(validUntil.Add(-c.r.cfg.LeaseTTL / 4)) {
					c.log.Warn().Err(err).Msg("cell: lease could not be renewed before it expired")
					cancel(errLeaseLost)
					return
				}
				c.log.Warn().Err(err).Msg("cell: renew lease; retrying")
				continue
			}
			lease, validUntil = l, sent.Add(c.r.cfg.LeaseTTL)
		}
	}
}

func (c *Cell) actor() session.Actor {
	return session.Actor{Kind: session.ActorSystem, ID: "cell"}
}

// loop runs turns while there is work, and waits for signals otherwise. It returns the
// eviction reason.
func (c *Cell) loop(ctx context.Context) string {
	idle := time.NewTimer(c.r.cfg.IdleTimeout)
	defer idle.Stop()
	failures := 0
	for {
		st, err := c.state(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return "shutdown"
			}
			c.log.Warn().Err(err).Msg("cell: read turn state")
			return "error"
		}
		if st.open || st.lastUser > st.through {
			if err := c.turn(ctx, st); err != nil {
				if ctx.Err() != nil {
					return "shutdown"
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
				case <-time.After(wait):
				}
				continue
			}
			failures = 0
			idle.Reset(c.r.cfg.IdleTimeout)
			continue
		}
		select {
		case <-ctx.Done():
			return "shutdown"
		case <-c.poke:
		case <-c.evict:
			return "idle"
		case <-idle.C:
			return "idle"
		}
	}
}

// state reads the session's turn state from the log: the last turn_started,
// turn_completed and user_message.
func (c *Cell) state(ctx context.Context) (turnState, error) {
	var st turnState
	latest, err := c.r.store.Latest(ctx, c.id, session.TypeTurnStarted, session.TypeTurnCompleted, session.TypeUserMessage)
	if err != nil {
		return st, err
	}
	if user, ok := latest[session.TypeUserMessage]; ok {
		st.lastUser = user.Seq
		_ = user.Decode(&st.lastUserMsg) // only its ts, for the working reaction
	}
	if started, ok := latest[session.TypeTurnStarted]; ok {
		var ts session.TurnStarted
		if err := started.Decode(&ts); err != nil {
			return st, err
		}
		completed, done := latest[session.TypeTurnCompleted]
		st.through = ts.Through
		st.turnSeq = started.Seq
		st.open = !done || completed.Seq < started.Seq
	}
	return st, nil
}

// turn runs (or resumes) one turn: turn_started, the agent, delivery, turn_completed.
func (c *Cell) turn(ctx context.Context, st turnState) error {
	r := c.r
	resumed := st.open
	if !st.open {
		if err := c.replyBudget(ctx); err != nil {
			return err
		}
		evs, err := c.flog.Append(ctx, session.NewEvent{Type: session.TypeTurnStarted, Actor: c.actor(),
			Payload: session.TurnStarted{Through: st.lastUser, Reason: "message"}})
		if err != nil {
			return err
		}
		st.turnSeq, st.through = evs[0].Seq, st.lastUser
		c.queued = max(c.queued, st.lastUser)
	}
	log := c.log.With().Int64("turn", st.turnSeq).Bool("resumed", resumed).Logger()
	if resumed {
		// A turn that keeps failing across cells (an unsearchable thread, Slack refusing the
		// post) is closed with an error instead of being woken forever.
		woken, err := c.flog.Events(ctx, session.Range{From: st.turnSeq + 1, Types: []session.Type{session.TypeCellWoken}})
		if err != nil {
			return err
		}
		if len(woken) > maxResumes {
			log.Warn().Int("cells", len(woken)).Msg("turn abandoned after repeated failures")
			_, err := c.flog.Append(ctx,
				session.NewEvent{Type: session.TypeError, Actor: c.actor(), Payload: session.ErrorEvent{Stage: "turn", Code: "abandoned",
					Message: "the turn failed in every attempt; its reply may not have reached Slack"}},
				session.NewEvent{Type: session.TypeTurnCompleted, Actor: c.actor(),
					Payload: session.TurnCompleted{Turn: st.turnSeq, Status: brain.StatusError, Reason: "abandoned", Through: st.through}})
			return err
		}
	}
	working := r.deliver.Working(ctx, c.sess.Key.Channel, st.lastUserMsg.TS)
	defer working()

	// A resumed turn may have its reply already (a crash after the reply, before delivery):
	// it is delivered, not produced again.
	var reply session.Event
	found := false
	if resumed {
		var err error
		if reply, found, err = c.existingReply(ctx, st.turnSeq); err != nil {
			return err
		}
	}
	status, reason := brain.StatusOK, ""
	where := r.cfg.Where
	where.ThreadTS = c.sess.Key.ThreadTS
	where.Channel = c.sess.Key.Channel
	t := brain.Turn{Session: c.sess, Log: c.flog, Searcher: r.searcher, Where: where, TurnSeq: st.turnSeq}
	if c.hands != nil {
		t.Hands = c.hands
	}
	if !found {
		if r.cfg.Channel != nil {
			if name := r.cfg.Channel(ctx, c.sess.Key.Channel); name != "" {
				t.Where.Channel = name
			}
		}
		done := make(chan struct{})
		var res brain.Reply
		var runErr error
		go func() {
			defer close(done)
			res, runErr = r.agent.Run(ctx, t)
		}()
		c.whileRunning(ctx, done, st.through)
		if runErr != nil {
			return runErr
		}
		reply, status, reason = res.Event, res.Status, res.Reason
	}
	completed := func(status, reason string) session.NewEvent {
		return session.NewEvent{Type: session.TypeTurnCompleted, Actor: c.actor(),
			Payload: session.TurnCompleted{Turn: st.turnSeq, Status: status, Reason: reason, Through: st.through}}
	}
	// delivered and turn_completed go in one append.
	// Fresh: produced by this turn in this process, so never delivered before.
	fresh := !resumed && reply.Seq > st.turnSeq
	if err := r.deliver.Deliver(ctx, c.flog, c.sess, reply, fresh, completed(status, reason)); err != nil {
		if ctx.Err() != nil || !errors.Is(err, ErrDeliveryFailed) {
			// The turn stays open: it is resumed (the thread searched first) after a backoff.
			return err
		}
		log.Warn().Err(err).Msg("delivery failed for good")
		status, reason = brain.StatusError, "delivery"
		if _, err := c.flog.Append(ctx, session.NewEvent{Type: session.TypeError, Actor: c.actor(),
			Payload: session.ErrorEvent{Stage: "delivery", Message: shortError(err)}}, completed(status, reason)); err != nil {
			return err
		}
	}
	r.metrics.turns.WithLabelValues(status).Inc()
	// A title comes after the reply reached the thread, not before.
	if titler, ok := r.agent.(interface {
		Title(ctx context.Context, t brain.Turn, reply session.Event)
	}); ok && status == brain.StatusOK {
		titler.Title(ctx, t, reply)
	}
	return nil
}

// whileRunning waits for the agent to finish, appending a queued marker for every user
// message that arrives meanwhile (they are answered by the next turn).
func (c *Cell) whileRunning(ctx context.Context, done <-chan struct{}, through int64) {
	for {
		select {
		case <-done:
			return
		case <-c.poke:
			evs, err := c.flog.Events(ctx, session.Range{From: max(through, c.queued) + 1, Types: []session.Type{session.TypeUserMessage}})
			if err != nil {
				continue
			}
			var marks []session.NewEvent
			for _, e := range evs {
				marks = append(marks, session.NewEvent{Type: session.TypeQueued, Actor: c.actor(),
					IdempotencyKey: "queued/" + e.ID.String(), Payload: session.Queued{MessageSeq: e.Seq}})
				c.queued = max(c.queued, e.Seq)
			}
			if len(marks) > 0 {
				if _, err := c.flog.Append(ctx, marks...); err != nil && ctx.Err() == nil {
					c.log.Warn().Err(err).Msg("append queued markers")
				}
			}
			// The poke is consumed; the loop re-reads the state after the turn anyway.
		}
	}
}

// replyBudget waits until the thread may get another reply: replies per thread are capped
// (C05, RunnerConfig.MaxReplies per minute), a safety net against bot-to-bot ping-pong that
// slips past the filters.
func (c *Cell) replyBudget(ctx context.Context) error {
	limit := c.r.cfg.MaxReplies
	if limit < 0 {
		return nil
	}
	evs, err := c.flog.Events(ctx, session.Range{Types: []session.Type{session.TypeDelivered}, Desc: true, Limit: limit})
	if err != nil || len(evs) < limit {
		return err
	}
	wait := time.Until(evs[limit-1].CreatedAt.Add(c.r.cfg.ReplyWindow))
	if wait <= 0 {
		return nil
	}
	c.log.Warn().Dur("wait", wait).Msg("cell: reply cap reached for this thread; waiting")
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// existingReply returns the reply assistant_message of the turn, if the log has one.
func (c *Cell) existingReply(ctx context.Context, turnSeq int64) (session.Event, bool, error) {
	evs, err := c.flog.Events(ctx, session.Range{From: turnSeq + 1, Types: []session.Type{session.TypeAssistantMessage}})
	if err != nil {
		return session.Event{}, false, err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		var m session.AssistantMessage
		if err := evs[i].Decode(&m); err == nil && m.Reply() {
			return evs[i], true, nil
		}
	}
	return session.Event{}, false, nil
}

func shortError(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
