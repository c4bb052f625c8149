package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// maxResumes is how many cells in a row may take up one unfinished turn without moving it on
// (no tool call finished) before it is abandoned; maxCells how many may take it up at all.
const (
	maxResumes = 3
	maxCells   = 4 * maxResumes
)

// turn is one turn of a session: a value its cell builds (Cell.newTurn) from the parts the
// turn uses, and the only code that appends a turn's markers (turn_started, queued,
// delivered, turn_completed, and the turn's own error events). run goes through its phases,
// in order:
//
//  1. begin: a fresh turn appends turn_started{through: the last user message}, with the
//     cell's cell_woken when it is the cell's first write; a resumed turn (open in the log)
//     appends only that cell_woken.
//  2. give up on, instead of going on, a resumed turn no cell could finish (abandon.go).
//  3. prepare: the brain's turn with the engine's own parts, and the scope the turn's parts
//     see; the parts that settle what a dead cell left of theirs do so (part.Settler).
//  4. produce: each part is offered the turn (offer.go: tools, guidance, turn_settings), then
//     the agent appends the conversation — assistant_message with its tool_call events,
//     tool_result, context_summary, the reply assistant_message — through the session's log.
//     Meanwhile every user message that arrives gets a queued marker. A resumed turn may find
//     its reply in the log instead, and a canned reply is stored with its turn_started: no
//     part is offered for those.
//  5. deliver: the reply is posted (a resumed turn searches the thread first), as the parts
//     that are part.Presenters show it (a long one as a canvas's link), recorded by them first.
//  6. complete: delivered and turn_completed are appended together; a delivery that can never
//     succeed appends error and turn_completed{status: error} instead.
//  7. title, once, after the first reply reached the thread (the Titler appends it), beside
//     the cell's next turns: no reply waits for it.
//
// A turn reads the log only from the cell's memory (see cellLog); it costs one append per
// step above. A new optional part is a part.Part (Deps.Parts), offered in prepare.
type turn struct {
	// What the turn works on: the session, its log as the cell read it, its sandbox (nil:
	// none) and connectors, the cell's signals (the log may have grown), and what the cell carries from one
	// turn to the next (read back once the turn ends).
	sess  session.Session
	flog  *cellLog
	hands *hands.Hands
	cell  *part.Cell // what the parts keep for the length of the cell
	poke  <-chan struct{}
	wake  func() // pokes the cell, never waiting: the running turn reads the log again
	// later runs a step that no reply waits for (the title) beside the cell's next turns; the
	// cell waits for it before it lets go of the lease. nil: at once, in the turn.
	later   func(func())
	carried carried
	// What it works with: the runner's parts, the same for every turn.
	agent     Agent
	deliverer *Deliverer
	clock     Clock
	features  Features    // each part left nil is a feature turned off
	parts     []part.Part // the turn's optional parts, offered in prepare
	cfg       *RunnerConfig
	metrics   *Metrics
	meters    *telemetry.Metrics
	probe     *Probe          // nil: none
	draining  <-chan struct{} // closed when the runner stops gracefully
	// Its own: the turn state it began with (moved on as it runs), its logger, and the live
	// view showing it (nil: none, yet).
	state   turnState
	started time.Time // when the cell began running it (runTurn), for the turn's latency
	log     zerolog.Logger
	// changed is signalled (never blocking) each time the running turn's cell read what others
	// appended: an approval's wait looks again.
	changed chan struct{}
	live    *liveView // nil: none (yet)
	// channel is what the turn runs under from its channel's settings (loadChannel).
	channel channelTurn
	// scope is what the turn's parts see (prepare); offered what they offered the agent
	// (produce) that the turn uses after: the tools a person must approve, and what goes
	// under the reply.
	scope   part.Scope
	offered offered
	// swept says the thread was searched for the turn's messages the log does not name, and
	// they were removed (removeOrphans): the reply is not looked for by metadata after that.
	swept bool
}

// carried is what a cell keeps from one of its turns to the next.
type carried struct {
	wake   session.NewEvent // the cell's cell_woken, appended with its first write
	woken  int64            // the seq of that cell_woken: 0 until it is appended
	queued int64            // the highest user_message seq already given a queued marker
}

// appendWoken appends cell_woken, and evs after it in the same append when this is the
// cell's first write; otherwise just evs.
func (t *turn) appendWoken(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	if t.carried.woken > 0 {
		return t.flog.Append(ctx, evs...)
	}
	stored, err := t.flog.Append(ctx, append([]session.NewEvent{t.carried.wake}, evs...)...)
	// cell_woken and evs are stored together, or neither is.
	if err != nil {
		return nil, err
	}
	t.carried.woken = stored[0].Seq
	return stored[1:], nil
}

// out is where the turn's reply goes: the session's thread, or — when the message it answers
// was written elsewhere in the session (a thread of the session's code channel,
// bot/codechannel) — that message's thread. Settings, budgets and approvals stay the
// session's thread's.
func (t *turn) out() session.Session {
	m := t.state.lastUserMsg
	if m.Channel == "" || m.Channel == t.sess.Key.Channel || m.ThreadTS == "" {
		return t.sess
	}
	out := t.sess
	out.Key.Channel, out.Key.ThreadTS = m.Channel, m.ThreadTS
	return out
}

// run runs the turn through the phases turn's doc lists: begin (or resume), abandon a turn
// no cell could finish, prepare the brain's turn, produce the reply (or find it), deliver it,
// complete the turn, then title the session.
func (t *turn) run(ctx context.Context) error {
	ch, err := loadChannel(ctx, t.features, t.cfg, t.agent, t.sess.Key, t.log)
	if err != nil {
		return err
	}
	t.channel = ch
	if t.channel.on { // what runs under the turn reads the settings the turn read (loadChannel)
		ctx = t.features.Settings.Within(ctx, t.channel.ch)
	}
	resumed := t.state.open
	if answer, err := t.begin(ctx); err != nil || !answer {
		return err // a turn that answers nothing is closed at once, silently
	}
	if _, tn := t.turns(); t.state.open {
		if cells, give := givingUp(tn); give {
			return t.giveUp(ctx, cells)
		}
	}
	// A status at once: the thread's agent session, else its assistant-thread status, else a
	// reaction; cleared on every way out of the turn.
	out := t.out()
	working := t.deliverer.startStatus(ctx, out.Key.Channel, out.Key.ThreadTS, t.state.lastUserMsg.TS, threadTitle(t.flog.snapshot()))
	defer working.end()
	bt, err := t.prepare(ctx)
	if err != nil {
		return err
	}
	p, err := t.produce(ctx, bt, working)
	if p.live != nil {
		defer p.live.close()
	}
	if err != nil || p.ended {
		return err
	}
	done, err := t.deliver(ctx, resumed, p)
	if err != nil {
		return err
	}
	if err := t.complete(ctx, done); err != nil {
		return err
	}
	// The title's model call must not hold up the next message's turn either (issue 33: the
	// second message of a thread waited for it).
	title := func() { _ = t.title(ctx, bt, p.reply, done.status) }
	if t.later == nil || t.features.Titler == nil || done.status != session.StatusOK {
		title()
	} else {
		t.later(title)
	}
	return nil
}

// begin begins the turn: a fresh one is started (start); a resumed one, open in the log,
// appends only the cell's cell_woken, when it is the cell's first write. It reports whether
// the turn goes on to answer.
func (t *turn) begin(ctx context.Context) (answer bool, err error) {
	resumed := t.state.open
	if !resumed {
		if answer, err := t.start(ctx); err != nil || !answer {
			return false, err
		}
	} else if _, err := t.appendWoken(ctx); err != nil {
		return false, err
	}
	t.log = t.log.With().Ctx(ctx).Int64("turn", t.state.turnSeq).Bool("resumed", resumed).Logger()
	return true, nil
}

// start opens a fresh turn: which of the new messages are for the bot (thread manners) — the
// rest are recorded as not addressed —, the reply cap, then turn_started with its markers (and a
// canned reply, or the turn_completed of a turn that answers nothing) in one append. It
// reports whether the turn goes on to answer.
func (t *turn) start(ctx context.Context) (answer bool, err error) {
	st := &t.state
	h := hearAll(t.channel.replies, t.flog.snapshot(), st.through, st.lastUser)
	if h.answer && h.canned == "" {
		waited, err := t.replyBudget(ctx)
		if err != nil {
			return false, err
		}
		if waited {
			// What the thread said while it was capped is answered by this turn, all of it:
			// a burst costs one reply, not one wait and one reply per message.
			if err := t.flog.sync(ctx); err != nil {
				return false, err
			}
			if now := readTurnState(t.flog.snapshot()); now.lastUser > st.lastUser {
				st.lastUser, st.lastUserMsg = now.lastUser, now.lastUserMsg
				h = hearAll(t.channel.replies, t.flog.snapshot(), st.through, st.lastUser)
			}
		}
	}
	evs := append([]session.NewEvent{{Type: session.TypeTurnStarted, Actor: cellActor,
		Payload: session.TurnStarted{Through: st.lastUser, Reason: session.StartMessage, TraceID: telemetry.TraceID(ctx)}}}, h.marks...)
	if h.canned != "" {
		// A reply that needs no model (mute, unmute, a mention while muted) is stored
		// with the turn, so a resumed turn finds it and delivers it.
		evs = append(evs, session.NewEvent{Type: session.TypeAssistantMessage,
			Actor:   session.Actor{Kind: session.ActorBot, ID: cmp.Or(t.cfg.Where.BotUserID, "logbook")},
			Payload: session.AssistantMessage{Text: h.canned, Own: true}})
	}
	if !h.answer {
		evs = append(evs, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cellActor,
			Payload: session.TurnCompleted{Status: session.StatusSilent, Reason: session.ReasonNotAddressed, Through: st.lastUser}})
	}
	stored, err := t.appendWoken(ctx, evs...)
	if err != nil {
		return false, err
	}
	st.turnSeq, st.through = stored[0].Seq, st.lastUser
	t.carried.queued = max(t.carried.queued, st.lastUser)
	if !h.answer {
		t.metrics.turns.WithLabelValues(session.StatusSilent).Inc()
		if !t.started.IsZero() {
			t.meters.RecordTurn(ctx, session.StatusSilent, t.clock.Now().Sub(t.started))
		}
		t.probe.turnDone(t.sess.ID, st.turnSeq, session.StatusSilent)
	}
	return h.answer, nil
}

// givingUp reports a resumed turn that keeps failing across cells (an unsearchable thread,
// Slack refusing the post), to close with an error instead of waking it forever: cells that
// took it up without moving it on, or too many cells at all (cells that each finish one call
// and die would otherwise go on for ever). Only a resumed turn is asked: one this cell started
// gives up never.
func givingUp(tn *thread.Turn) (cells int, give bool) {
	woken, all := tn.Resumes()
	return max(woken, all), woken > maxResumes || all > maxCells
}

// prepare is the brain's turn — the session, its log, the engine's own parts (the sandbox,
// steering, the budget's admission of each call) — and the scope the turn's parts see. The
// parts that settle what a dead cell left of theirs do so now (settle); the others are
// offered only when the agent runs (produce).
func (t *turn) prepare(ctx context.Context) (brain.Turn, error) {
	st := t.state
	bt := brain.Turn{Session: t.sess, Log: t.flog, Where: t.cfg.Where, TurnSeq: st.turnSeq, Through: st.through}
	prefix, err := t.flog.prefix(ctx)
	if err != nil {
		return bt, err
	}
	bt.Prefix = prefix
	bt.Where.ThreadTS = t.sess.Key.ThreadTS
	bt.Where.Channel = t.sess.Key.Channel
	if t.hands != nil {
		bt.Hands = t.hands
	}
	if t.features.Files != nil {
		bt.Files = t.features.Files
		bt.Keep = t.features.Files // images a tool returns
	}
	if t.cfg.MidTurn == MidTurnSteer {
		bt.Steer = t.steer
	}
	if t.features.Budget != nil {
		bt.Meter = t.features.Budget.For(t.sess.Key.Channel, st.lastUserMsg.User, t.sess.ID, st.turnSeq)
	}
	t.scope = part.Scope{Session: t.sess, Turn: st.turnSeq, Through: st.through, Requester: st.lastUserMsg.User,
		BotUser: t.cfg.Where.BotUserID, Log: t.flog, Cell: t.cell, Logger: t.log}
	if t.channel.on {
		t.scope.Channel = t.channel.ch
	}
	if t.hands != nil {
		t.scope.Hands = t.hands
	}
	return bt, settle(ctx, t.parts, t.scope)
}

// produced is what produce leaves for delivery: the reply and the turn_completed status it
// goes with, and the live view showing the turn (nil: none). ended says the turn ended there
// (stopped, suspended); done, when set, is the outcome of a reply delivered already (a dead
// cell's live messages finished from the log).
type produced struct {
	reply          session.Event
	status, reason string
	live           *liveView
	ended          bool
	done           *outcome
}

// outcome is how a turn completes: turn_completed's status and reason, the events appended
// before it in the same append, and whether those hold the reply's delivered. completed says
// the turn was completed already (a stop completes its turn itself): nothing is appended.
type outcome struct {
	status, reason string
	evs            []session.NewEvent
	delivered      bool
	completed      bool
	// created is the messages the delivery made in Slack that only evs name: should the
	// append be refused as fenced (the lease moved), they are removed again.
	created []string
}

// produce finds the turn's reply or has the agent write it. A resumed turn may have its reply
// already (a crash after the reply, before delivery), and a canned reply is stored with its
// turn_started: either is delivered, not produced again, and no part is offered for it. What
// a dead cell left in the thread is settled first: its parts' own (prepare: the files it
// uploaded but did not record as shared), then its live messages, finished from the log so
// the thread ends with the whole reply exactly once and nothing left streaming. The agent's
// turn gets what each part offers just before it runs.
func (t *turn) produce(ctx context.Context, bt brain.Turn, working *threadStatus) (produced, error) {
	st := &t.state
	_, tn := t.turns()
	p := produced{reply: tn.Reply, status: session.StatusOK}
	found := tn.Reply.Seq > 0
	recovered, err := t.recoverLive(ctx, p.reply, found)
	if err != nil || recovered != nil {
		p.done = recovered
		return p, err
	}
	if found {
		return p, nil
	}
	if t.cfg.Live.Mode != StreamOff {
		p.live = newLiveView(t.deliverer, t.flog, t.log, t.clock, t.cfg.Live, t.out(), st.turnSeq,
			st.lastUserMsg.User, cmp.Or(st.lastUserMsg.Team, t.sess.Key.Team), threadTitle(t.flog.snapshot()))
		p.live.status = working
		p.live.orphans.botUser = t.cfg.Where.BotUserID // a lost answer is looked for among the bot's messages
		p.live.onHalt = t.wake                         // Slack halted the stream: runAgent reads the stop at once
		go p.live.run(ctx)
		bt.Live = p.live
		t.live = p.live
	}
	if t.features.Channel != nil {
		if name := t.features.Channel(ctx, t.sess.Key.Channel); name != "" {
			bt.Where.Channel = name
		}
	}
	// What each part offers the agent (tools, guidance, turn_settings), just before its first
	// model call: shared files fetched, the setup run, the instruction files read.
	rec := session.TurnSettings{Turn: st.turnSeq}
	if t.channel.on { // what the turn applies itself, as it applies it
		rec.Model, rec.ThreadReplies = t.channel.model, string(t.channel.replies)
	}
	if t.offered, err = offer(ctx, t.parts, t.scope, &bt, rec); err != nil {
		return p, err
	}
	if t.channel.approval.Restricts() || len(t.offered.asks) > 0 {
		bt.Approve = t.approve
	}
	res, err := t.runAgent(ctx, bt)
	if res.Through > st.through {
		st.through = res.Through // messages steered the turn: it answered them too
	}
	var s *stopRequest
	switch {
	case errors.As(err, &s):
		p.ended = true
		return p, t.stop(ctx, p.live, s) // stopWith closes the live view first
	case err != nil:
		return p, err // errSuspended: turn_suspended is in the log; the cell goes away
	}
	p.reply, p.status, p.reason = res.Event, res.Status, res.Reason
	return p, t.offered.answer(ctx) // the parts' lines under the reply (budget notices)
}

// deliver posts the reply (or finishes the live view that shows it) and returns the outcome
// the turn completes with. A delivery that fails for a reason that may pass is an error: the
// turn stays open (it is resumed, the thread searched first, after a backoff); one that can
// never succeed is an outcome with an error.
func (t *turn) deliver(ctx context.Context, resumed bool, p produced) (outcome, error) {
	if p.done != nil {
		return *p.done, nil
	}
	live, reply := p.live, p.reply
	done := outcome{status: p.status, reason: p.reason}
	if live != nil {
		live.close()
		if live.fenced {
			return done, errViewFenced // another cell owns the session: it shows the reply
		}
		if live.doubt {
			// A new message's answer was lost and the thread could not be searched then:
			// whatever it made is removed before the reply is shown.
			searched, err := leftoversOf(t).removeOrphans(ctx, live.tsList(0)...)
			t.swept = searched
			if err != nil {
				return done, err
			}
		}
	}
	if s, ok := t.haltedInSlack(ctx, live); ok {
		return outcome{status: session.StatusStopped, completed: true}, t.stop(ctx, live, s) // stopped in Slack: the reply is not posted
	}
	if !resumed || !t.delivered(reply) {
		// A part may show the reply otherwise (a long one as a canvas, linked): what it does
		// is recorded before the reply is posted.
		shown, err := present(ctx, t.parts, t.scope, reply)
		if err != nil {
			return done, err
		}
		reply = shown
	}
	if live != nil && live.shown() {
		// The live view shows the reply: its messages take the place of posting it.
		posted, stopped, err := live.finish(ctx, reply, t.footer(reply))
		if s, ok := t.haltedInSlack(ctx, live); ok && errors.Is(err, errHalted) {
			return outcome{status: session.StatusStopped, completed: true}, t.stop(ctx, live, s)
		}
		if err != nil {
			return done, err // the turn stays open; the next cell finishes the live messages
		}
		done.evs, done.delivered = append(stopped, deliveredEvent(reply, t.out().Key.Channel, posted)), true
		done.created = slices.DeleteFunc(slices.Clone(posted), func(ts string) bool { return slices.Contains(live.tsList(0), ts) })
		return done, nil
	}
	if ts, _ := t.turns(); resumed && ts.Delivered(reply) {
		return done, nil
	}
	// Fresh: produced by this turn in this process, so never posted before.
	fresh := !resumed && reply.Seq > t.state.turnSeq
	// A swept thread is not searched by metadata: what the search finds after the sweep is a
	// fenced cell's post, which that cell removes.
	posted, err := t.deliverer.Deliver(ctx, t.out(), reply, !fresh && !t.swept, t.footer(reply))
	switch {
	case err == nil:
		done.evs, done.delivered = []session.NewEvent{deliveredEvent(reply, t.out().Key.Channel, posted)}, true
		done.created = posted
		return done, nil
	case ctx.Err() != nil || !errors.Is(err, ErrDeliveryFailed):
		return done, err
	default:
		t.log.Warn().Err(err).Msg("delivery failed for good")
		return outcome{status: session.StatusError, reason: session.ReasonDelivery, evs: []session.NewEvent{{Type: session.TypeError,
			Actor: cellActor, Payload: session.ErrorEvent{Stage: "delivery", Message: shortError(err)}}}}, nil
	}
}

// delivered reports whether the log names reply delivered.
func (t *turn) delivered(reply session.Event) bool {
	ts, _ := t.turns()
	return ts.Delivered(reply)
}

// title names the session once its reply reached the thread.
func (t *turn) title(ctx context.Context, bt brain.Turn, reply session.Event, status string) error {
	// A title comes after the reply reached the thread, not before; Slack shows it where it
	// can (the thread's agent session, or its assistant-thread title).
	if t.features.Titler != nil && status == session.StatusOK {
		before := len(session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeTitle}}))
		t.features.Titler.Title(ctx, bt, reply)
		if titles := session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeTitle}}); len(titles) > before {
			var tt session.Title
			if titles[len(titles)-1].Decode(&tt) == nil && tt.Text != "" {
				t.deliverer.SetTitle(ctx, t.out().Key.Channel, t.out().Key.ThreadTS, tt.Text)
			}
		}
	}
	return nil
}

// footer is the line under reply — notes on the files the turn could not read, then the
// transcript link and usage: none for a canned reply (stored with the turn, Turn 0).
func (t *turn) footer(reply session.Event) string {
	var m session.AssistantMessage
	if reply.Decode(&m) != nil || m.Turn == 0 {
		return ""
	}
	lines := append(footers(t.parts, t.scope), t.offered.notes...)
	if f := t.cfg.Footer.line(t.sess.ID, turnUsage(t.flog.snapshot(), t.state.turnSeq)); f != "" {
		lines = append(lines, f)
	}
	return strings.Join(lines, "\n")
}

var deliveryActor = session.Actor{Kind: session.ActorSystem, ID: "delivery"}

// complete completes the turn with done: its events, then turn_completed, in one append; and
// tells the metrics and the probe.
func (t *turn) complete(ctx context.Context, done outcome) error {
	if done.completed {
		return nil
	}
	st := t.state
	evs := append(done.evs, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cellActor,
		Payload: session.TurnCompleted{Turn: st.turnSeq, Status: done.status, Reason: done.reason, Through: st.through, TraceID: telemetry.TraceID(ctx)}})
	actx := ctx
	if done.delivered {
		// The reply is in Slack: its record must not be lost to the cell's cancellation (a
		// renewal that failed under load), or the next cell would post it again.
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	if _, err := t.flog.Append(actx, evs...); err != nil {
		if errors.Is(err, session.ErrFenced) {
			t.unpost(ctx, done.created)
		}
		return err
	}
	if done.delivered {
		t.metrics.deliveries.Inc()
	}
	t.metrics.turns.WithLabelValues(done.status).Inc()
	if !t.started.IsZero() {
		t.meters.RecordTurn(ctx, done.status, t.clock.Now().Sub(t.started))
	}
	t.probe.turnDone(t.sess.ID, st.turnSeq, done.status)
	return nil
}

// unpost removes the messages a delivery made whose record was refused as fenced: another
// cell owns the session and shows the reply (it never takes over a message the log does not
// name), unless the log, read again, names them delivered after all.
func (t *turn) unpost(ctx context.Context, created []string) {
	ctx, cancel := unfenced(ctx)
	defer cancel()
	for _, m := range created {
		if ok, err := named(ctx, t.flog, t.clock, m); ok {
			if err != nil {
				t.log.Warn().Err(err).Str("ts", m).Msg("the lease moved; kept a reply it could not record")
			}
			continue
		}
		if err := leftoversOf(t).deleteLive(ctx, m); err != nil {
			t.log.Warn().Err(err).Msg("the lease moved; could not remove a reply it could not record")
			continue
		}
		t.log.Info().Str("ts", m).Msg("the lease moved to another cell; removed a reply it could not record")
	}
}

// runAgent runs the agent, appending a queued marker for every user message that arrives
// meanwhile (they are answered by the next turn).
func (t *turn) runAgent(ctx context.Context, bt brain.Turn) (brain.Reply, error) {
	if s, ok := t.stopAsked(); ok {
		return brain.Reply{}, s // asked before the agent started
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	var res brain.Reply
	var err error
	go func() {
		defer close(done)
		res, err = t.channel.agent.Run(actx, bt) // the channel's model
	}()
	for {
		select {
		case <-done:
			var s *stopRequest
			if errors.As(context.Cause(actx), &s) {
				return brain.Reply{}, s // stopped: whatever the agent returned is not posted
			}
			return res, err
		case <-t.poke:
			if err := t.flog.sync(ctx); err != nil {
				continue
			}
			if s, ok := t.stopAsked(); ok {
				// The model call and the sandbox's commands end with the agent's context.
				cancel(s)
				continue
			}
			if s, ok := takenOverDuring(t.flog.snapshot(), t.state.turnSeq); ok {
				cancel(s) // a person took the session over: the running turn gives way
				continue
			}
			select {
			case t.changed <- struct{}{}: // an approval's wait looks again
			default:
			}
			var marks []session.NewEvent
			for _, e := range session.Select(t.flog.snapshot(), session.Range{From: max(t.state.through, t.carried.queued) + 1,
				Types: []session.Type{session.TypeUserMessage}}) {
				marks = append(marks, session.NewEvent{Type: session.TypeQueued, Actor: cellActor,
					IdempotencyKey: "queued/" + e.ID.String(), Payload: session.Queued{MessageSeq: e.Seq}})
				t.carried.queued = max(t.carried.queued, e.Seq)
			}
			if len(marks) > 0 {
				if _, err := t.flog.Append(ctx, marks...); err != nil && ctx.Err() == nil {
					t.log.Warn().Err(err).Msg("append queued markers")
				}
			}
			// The poke is consumed; the cell reads the log again after the turn anyway.
		}
	}
}

// replyBudget waits until the thread may get another reply: replies per thread are capped
// (RunnerConfig.MaxReplies per ReplyWindow, LOGBOOK_THREAD_REPLIES_PER_MINUTE), a safety net
// against bot-to-bot ping-pong that slips past the filters: a chain of two bots answering
// each other never exceeds the cap. It reports whether it waited (the thread may have said
// more meanwhile).
func (t *turn) replyBudget(ctx context.Context) (waited bool, err error) {
	limit := t.cfg.MaxReplies
	if limit < 0 {
		return false, nil
	}
	evs := session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeDelivered}, Desc: true, Limit: limit})
	if len(evs) < limit {
		return false, nil
	}
	wait := evs[limit-1].CreatedAt.Add(t.cfg.ReplyWindow).Sub(t.clock.Now())
	if wait <= 0 {
		return false, nil
	}
	t.log.Warn().Dur("wait", wait).Msg("cell: reply cap reached for this thread; waiting")
	t.metrics.replyCapWaits.Inc()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.clock.After(wait):
		return true, nil
	}
}

// turns folds the cell's log: all its turns, and this one (an empty one should the log not
// know it, which a turn that began in this cell's memory rules out).
func (t *turn) turns() (*thread.Turns, *thread.Turn) {
	ts := thread.FoldTurns(t.flog.snapshot())
	if tn, ok := ts.Turn(t.state.turnSeq); ok {
		return ts, tn
	}
	return ts, &thread.Turn{Seq: t.state.turnSeq}
}

func shortError(err error) string { return clip.Text(err.Error(), 200) }

// threadTitle is the session's newest title, "" when it has none.
func threadTitle(evs []session.Event) string {
	titles := session.Select(evs, session.Range{Types: []session.Type{session.TypeTitle}, Desc: true, Limit: 1})
	var t session.Title
	if len(titles) == 1 && titles[0].Decode(&t) == nil {
		return t.Text
	}
	return ""
}

// recoverLive finishes the live messages a dead cell left for this turn. With the reply in
// the log, the turn's first live message is made to show it whole (the others are removed):
// it returns the outcome the turn completes with. Without one, every live message of the turn
// is removed (the agent runs again and shows itself anew): it returns nil. The turn's messages
// the log does not name are removed first, whatever becomes of the others (removeOrphans); a
// search for them that fails leaves the turn for a later attempt rather than risk a double.
func (t *turn) recoverLive(ctx context.Context, reply session.Event, found bool) (*outcome, error) {
	if !t.state.open {
		return nil, nil // a fresh turn: nothing of it is in the thread yet
	}
	left := leftoversOf(t)
	searched, err := left.removeOrphans(ctx)
	t.swept = searched
	if err != nil {
		return nil, err
	}
	var evs []session.NewEvent
	ts, tn := t.turns()
	var keep []thread.LiveMessage
	for _, m := range tn.Live {
		if !m.Deleted {
			keep = append(keep, m)
		}
	}
	if len(keep) == 0 || found && ts.Delivered(reply) {
		// Nothing the log names is left to finish (delivered already: the turn only needs
		// closing), but what the orphans became is recorded.
		return nil, left.appendRecords(ctx, keep, evs)
	}
	channel := t.out().Key.Channel
	for _, m := range keep {
		if err := left.stopLive(ctx, m.TS, m.Open && m.Mode == "stream"); err != nil {
			return nil, err
		}
	}
	if found {
		var drop []string
		for _, m := range keep[1:] {
			drop = append(drop, m.TS)
		}
		t.log.Info().Str("ts", keep[0].TS).Int("removed", len(drop)).Msg("live view: finishing the reply a dead cell streamed")
		reply, err := present(ctx, t.parts, t.scope, reply)
		if err != nil {
			return nil, err
		}
		posted, removed, err := t.deliverer.replace(ctx, t.out(), reply, keep[0].TS, drop, t.footer(reply))
		if err != nil {
			// What it removed before it failed is recorded; the rest is named still, for a
			// later attempt.
			return nil, errors.Join(err, left.recordRemoved(ctx, removedRecords(removed)))
		}
		if keep[0].Open {
			evs = append(evs, streamStopped(keep[0].TS, session.StreamRecovered, 0))
		}
		evs = append(evs, removedRecords(removed)...)
		evs = append(evs, deliveredEvent(reply, channel, posted))
		return &outcome{status: session.StatusOK, evs: evs, delivered: true, created: posted[1:]}, nil
	}
	// Every live message is tried, whatever became of the others; each delete that happened
	// is recorded, also when another failed.
	var errs []error
	for _, m := range keep {
		if err := left.deleteLive(ctx, m.TS); err != nil {
			errs = append(errs, err)
			continue
		}
		evs = append(evs, streamStopped(m.TS, session.StreamDeleted, 0))
	}
	if err := left.recordRemoved(ctx, evs); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	t.log.Info().Int("removed", len(keep)).Msg("live view: removed the partial messages of a dead cell; running the turn again")
	return nil, nil
}

// removedRecords are the records of the live messages ts, deleted.
func removedRecords(ts []string) []session.NewEvent {
	var evs []session.NewEvent
	for _, m := range ts {
		evs = append(evs, streamStopped(m, session.StreamDeleted, 0))
	}
	return evs
}

// startedAfter is the ts of the newest user message stored before the turn began (its
// turn_started, at turnSeq), else the thread's: every Slack message of the turn came after
// it, even one shown before a message the turn took up later (steered) or left for the next.
func startedAfter(evs []session.Event, turnSeq int64, thread string) string {
	var m session.UserMessage
	last := session.Select(evs, session.Range{To: turnSeq, Types: []session.Type{session.TypeUserMessage}, Desc: true, Limit: 1})
	if len(last) == 1 && last[0].Decode(&m) == nil && m.TS != "" {
		return m.TS
	}
	return thread
}

// knownMessages is every Slack message of the bot that the log names: deliveries, live
// messages (ts, the fold of evs) and shared files. (Approval cards are known by their
// metadata: see unknownBotMessages.)
func knownMessages(ts *thread.Turns, evs []session.Event) map[string]bool {
	known := map[string]bool{}
	for _, m := range ts.Posted {
		known[m] = true
	}
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeFileUpload}}) {
		var u session.FileUpload
		if e.Decode(&u) == nil && u.TS != "" {
			known[u.TS] = true
		}
	}
	return known
}

// stopRequest is a person's request to stop the running turn: a press of Slack's stop button
// (stop_requested) or a thread message that is exactly "stop".
type stopRequest struct {
	by, source string
	seq        int64 // the request's event
}

func (s *stopRequest) Error() string { return "stopped by " + s.by + " (" + s.source + ")" }

// stopAsked finds the first stop request after the turn began: a stop_requested event, or a
// user message "stop" that arrived while the turn ran (after through).
func (t *turn) stopAsked() (*stopRequest, bool) {
	_, tn := t.turns()
	var asked *stopRequest
	if r := tn.StopRequest; r != nil {
		asked = &stopRequest{by: r.By, source: r.Source, seq: r.Seq}
	}
	for _, e := range session.Select(t.flog.snapshot(), session.Range{From: max(tn.Seq, t.state.through) + 1, Types: []session.Type{session.TypeUserMessage}}) {
		if asked != nil && asked.seq < e.Seq {
			break
		}
		var m session.UserMessage
		if e.Decode(&m) == nil && isStop(m.Text) {
			return &stopRequest{by: m.User, source: "message", seq: e.Seq}, true
		}
	}
	return asked, asked != nil
}

// takenOverDuring finds a takeover appended after the turn began: the turn stops as if the
// person had asked.
func takenOverDuring(evs []session.Event, turnSeq int64) (*stopRequest, bool) {
	for _, e := range session.Select(evs, session.Range{From: turnSeq + 1, Types: []session.Type{session.TypeTakenOver}}) {
		return &stopRequest{by: e.Actor.ID, source: "takeover", seq: e.Seq}, true
	}
	return nil, false
}

// stop ends a turn a person stopped: the live view's message is finished with a short note,
// and the log records who stopped it. Nothing else is posted for the turn. The next turn
// starts after the "stop" message, which it does not answer.
func (t *turn) stop(ctx context.Context, live *liveView, s *stopRequest) error {
	ctx = context.WithoutCancel(ctx) // the agent's context ended; the record must not
	var evs []session.NewEvent
	var shown string // what the thread showed of the stopped model call, for the next history
	if live != nil {
		evs = append(evs, live.stopWith(ctx, "_Stopped by <@"+s.by+">._")...)
		shown = clip.Text(live.stoppedText(), 32<<10)
	}
	canceled, show := t.cancelApprovals(ctx, s.by)
	evs = append(evs, canceled...)
	evs = append(evs, stoppedCalls(t.flog.snapshot(), t.state.turnSeq, s.by)...)
	evs = append(evs, session.NewEvent{Type: session.TypeTurnStopped, Actor: cellActor,
		Payload: session.TurnStopped{Turn: t.state.turnSeq, By: s.by, Source: s.source, Request: s.seq, Shown: shown,
			ByName: t.stopperName(s)}})
	if s.source == "message" {
		t.state.through = max(t.state.through, s.seq)
	}
	t.log.Info().Str("by", s.by).Str("source", s.source).Msg("turn stopped")
	t.metrics.stops.Inc()
	if err := t.complete(ctx, outcome{status: session.StatusStopped, reason: s.source, evs: evs}); err != nil {
		return err
	}
	show(t.flog.snapshot())
	return nil
}

// isStop reports a message that is exactly "stop", with or without the mention (which the
// gateway strips) and trailing punctuation.
func isStop(text string) bool {
	return strings.EqualFold(strings.TrimRight(strings.TrimSpace(text), ".! "), "stop")
}

// What becomes of a message written while a turn runs (RunnerConfig.MidTurn).
const (
	MidTurnSteer = "steer"
	MidTurnQueue = "queue"
)

// steer is the brain's Turn.Steer: the user messages after through that arrived while the turn
// ran and are for the model (thread manners) are handed to it now, each recorded as steered;
// those not for it get their not_addressed marker. It stops at a "stop" (the cell stops the
// turn) and at mute or unmute (the next turn takes those up). It returns the new through.
func (t *turn) steer(ctx context.Context, through int64) (int64, error) {
	evs := t.flog.snapshot()
	muted := isMuted(evs)
	var marks []session.NewEvent
	next := through
	for _, e := range session.Select(evs, session.Range{From: through + 1, Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Decode(&m) != nil || isStop(m.Text) {
			break
		}
		h := hear(t.channel.replies, m, muted, false)
		if h.mute != 0 || h.canned != "" {
			break
		}
		if h.answer {
			marks = append(marks, session.NewEvent{Type: session.TypeSteered, Actor: cellActor,
				IdempotencyKey: "steered/" + e.ID.String(), Payload: session.Steered{Turn: t.state.turnSeq, MessageSeq: e.Seq}})
		} else {
			marks = append(marks, session.NewEvent{Type: session.TypeNotAddressed, Actor: cellActor,
				IdempotencyKey: "not_addressed/" + e.ID.String(), Payload: session.NotAddressed{MessageSeq: e.Seq, Reason: h.reason}})
		}
		next = e.Seq
	}
	if len(marks) == 0 {
		return through, nil
	}
	if _, err := t.flog.Append(ctx, marks...); err != nil {
		return through, err
	}
	t.log.Info().Int64("through", next).Msg("messages written meanwhile steer the running turn")
	// Files shared with those messages reach the model's next call too.
	if err := t.offered.steer(ctx, next); err != nil {
		return through, err
	}
	return next, nil
}

// Each channel its own agent (issue 31): the turn's side of a channel's settings
// (Features.Settings) and its own model (Features.Models). A turn reads them once, at its
// start (channelTurn), and uses them in its phases (thread manners, approvals, the agent);
// the parts (settings.Part, memory, checkout) give the system prompt the rest, and the turn
// records what it ran under in a turn_settings event before its first model call.

// channelTurn is what a turn runs under from its channel's settings, else the deployment's
// configuration (no Features.Settings, or a setting the channel left at its default).
type channelTurn struct {
	on       bool // the deployment keeps channel settings: ch is the channel's
	ch       settings.Channel
	agent    Agent         // the channel's model's, else Deps.Agent
	approval ToolApproval  // the channel's approvals policy, else RunnerConfig.Approval.Policy
	own      bool          // approval is the channel's own (/logbook config approvals)
	replies  ThreadReplies // the channel's thread-replies mode, else RunnerConfig.ThreadReplies
	model    string        // the model spec the agent runs
}

// loadChannel reads what the turn of session key runs under. A setting that no longer parses
// (a provider's key removed since an admin set it) is logged and falls back: a model to the
// default, an approvals policy to asking before every tool. Errors are the store's: a turn
// never runs under settings it could not read.
func loadChannel(ctx context.Context, f Features, cfg *RunnerConfig, agent Agent, key session.ThreadKey, log zerolog.Logger) (channelTurn, error) {
	ct := channelTurn{agent: agent, approval: cfg.Approval.Policy, replies: cfg.ThreadReplies}
	if f.Settings == nil {
		return ct, nil
	}
	ch, err := f.Settings.For(ctx, key.Team, key.Channel)
	if err != nil {
		return ct, fmt.Errorf("the settings of %s: %w", key.Channel, err)
	}
	ct.on, ct.ch, ct.model = true, ch, ch.Value(settings.Model)
	if _, ok := ch.Record(settings.Model); ok && f.Models != nil {
		if a, err := f.Models.Agent(ct.model); err != nil {
			log.Warn().Err(err).Msg("the channel's model cannot be used: the turn runs the default one")
			ct.model = f.Settings.Default(settings.Model)
		} else {
			ct.agent = a
		}
	}
	if v, ok := ch.Record(settings.Approvals); ok {
		p, err := ParseToolApproval(v.New, cfg.Approval.tools())
		if err != nil {
			log.Warn().Err(err).Msg("the channel's approvals policy does not parse: every tool asks")
			p, _ = ParseToolApproval("*=ask", nil)
		}
		ct.approval, ct.own = p, true
	}
	if v, ok := ch.Record(settings.ThreadReplies); ok {
		if m, err := ParseThreadReplies(v.New); err == nil {
			ct.replies = m
		}
	}
	return ct, nil
}
