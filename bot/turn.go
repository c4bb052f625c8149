package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
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

// turn is one turn of a session, run by its cell: the only code that appends a turn's markers
// (turn_started, queued, delivered, turn_completed, and the turn's own error events). In
// order:
//
//  1. turn_started{through: the last user message} — with the cell's cell_woken when it is
//     the cell's first write; a resumed turn (open in the log) appends nothing here.
//  2. the agent: it appends the conversation — assistant_message with its tool_call events,
//     tool_result, context_summary, the reply assistant_message — through the cell's log.
//     Meanwhile every user message that arrives gets a queued marker.
//  3. delivery: the reply is posted (a resumed turn searches the thread first), then
//     delivered and turn_completed are appended together; a delivery that can never succeed
//     appends error and turn_completed{status: error} instead.
//  4. the title, once, after the first reply reached the thread (the Titler appends it).
//
// A turn reads the log only from the cell's memory (see cellLog); it costs one append per
// step above.
type turn struct {
	cell  *Cell
	epoch int64
	state turnState
	log   zerolog.Logger
	// changed is signalled (never blocking) each time the running turn's cell read what others
	// appended: an approval's wait looks again.
	changed chan struct{}
	live    *liveView // nil: none (yet)
	// notes are lines this turn's reply carries: budget notices (budget.go), a failed
	// setup (setup.go).
	notes []string
}

// run runs the turn in the phases turn's doc lists: begin (or resume), abandon a turn
// no cell could finish, prepare the brain's turn, produce the reply (or find it), deliver it
// and complete the turn, then title the session.
func (t *turn) run(ctx context.Context) error {
	resumed := t.state.open
	if !resumed {
		if answer, err := t.begin(ctx); err != nil || !answer {
			return err // a turn that answers nothing is closed at once, silently
		}
	} else if _, err := t.cell.appendWoken(ctx, t.epoch); err != nil {
		return err
	}
	t.log = t.cell.log.With().Ctx(ctx).Int64("turn", t.state.turnSeq).Bool("resumed", resumed).Logger()
	if resumed {
		if cells, give := t.givingUp(); give {
			return t.giveUp(ctx, cells)
		}
	}
	// A status at once: the thread's agent session, else its assistant-thread status, else a
	// reaction; cleared on every way out of the turn.
	c := t.cell
	working := c.deps.Deliver.startStatus(ctx, c.sess.Key.Channel, c.sess.Key.ThreadTS, t.state.lastUserMsg.TS, threadTitle(c.flog.snapshot()))
	defer working.end()
	bt := t.prepare(ctx)
	p, err := t.produce(ctx, bt, working)
	if p.live != nil {
		defer p.live.close()
	}
	if err != nil || p.ended {
		return err
	}
	if !p.completed {
		if p.status, err = t.deliver(ctx, resumed, p); err != nil {
			return err
		}
	}
	return t.titleAfter(ctx, bt, p.reply, p.status)
}

// begin opens a fresh turn: which of the new messages are for the bot (thread manners) — the
// rest are recorded as not addressed —, the reply cap, then turn_started with its markers (and a
// canned reply, or the turn_completed of a turn that answers nothing) in one append. It
// reports whether the turn goes on to answer.
func (t *turn) begin(ctx context.Context) (answer bool, err error) {
	c, d, st := t.cell, t.cell.deps, &t.state
	h := hearAll(d.cfg.ThreadReplies, c.flog.snapshot(), st.through, st.lastUser)
	if h.answer && h.canned == "" {
		if err := t.replyBudget(ctx); err != nil {
			return false, err
		}
	}
	evs := append([]session.NewEvent{{Type: session.TypeTurnStarted, Actor: cellActor,
		Payload: session.TurnStarted{Through: st.lastUser, Reason: session.StartMessage, TraceID: telemetry.TraceID(ctx)}}}, h.marks...)
	if h.canned != "" {
		// A reply that needs no model (mute, unmute, a mention while muted) is stored
		// with the turn, so a resumed turn finds it and delivers it.
		evs = append(evs, session.NewEvent{Type: session.TypeAssistantMessage,
			Actor:   session.Actor{Kind: session.ActorBot, ID: cmp.Or(d.cfg.Where.BotUserID, "logbook")},
			Payload: session.AssistantMessage{Text: h.canned}})
	}
	if !h.answer {
		evs = append(evs, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cellActor,
			Payload: session.TurnCompleted{Status: session.StatusSilent, Reason: session.ReasonNotAddressed, Through: st.lastUser}})
	}
	stored, err := c.appendWoken(ctx, t.epoch, evs...)
	if err != nil {
		return false, err
	}
	st.turnSeq, st.through = stored[0].Seq, st.lastUser
	c.queued = max(c.queued, st.lastUser)
	if !h.answer {
		d.Metrics.turns.WithLabelValues(session.StatusSilent).Inc()
		d.Probe.turnDone(c.id, st.turnSeq, session.StatusSilent)
	}
	return h.answer, nil
}

// givingUp reports a resumed turn that keeps failing across cells (an unsearchable thread,
// Slack refusing the post), to close with an error instead of waking it forever: cells that
// took it up without moving it on, or too many cells at all (cells that each finish one call
// and die would otherwise go on for ever).
func (t *turn) givingUp() (cells int, give bool) {
	_, tn := t.turns()
	woken, all := tn.Resumes()
	return max(woken, all), woken > maxResumes || all > maxCells
}

// giveUp abandons the turn. The live messages the dead cells left are removed first: the
// thread gets the notice, not a half-written reply left streaming above it. Best-effort: the
// turn is abandoned whatever Slack says.
func (t *turn) giveUp(ctx context.Context, cells int) error {
	if _, err := t.recoverLive(ctx, session.Event{}, false); err != nil {
		t.log.Warn().Err(err).Msg("live view: could not remove the live messages of an abandoned turn")
	}
	return t.abandon(ctx, cells) // abandon.go: the thread is told, once
}

// prepare is the brain's turn: the session, its log, and the optional features this
// deployment and channel offer.
func (t *turn) prepare(ctx context.Context) brain.Turn {
	c, d, st := t.cell, t.cell.deps, t.state
	bt := brain.Turn{Session: c.sess, Log: c.flog, Where: d.cfg.Where, TurnSeq: st.turnSeq, Through: st.through}
	if d.Features.Search != nil { // scoped to this session's channel
		bt.Searcher = d.Features.Search.For(c.sess.Key.Channel)
	}
	bt.Where.ThreadTS = c.sess.Key.ThreadTS
	bt.Where.Channel = c.sess.Key.Channel
	if c.hands != nil {
		bt.Hands = c.hands
		if d.Features.Uploader != nil {
			bt.Attach = t.attach
		}
	}
	if d.Features.Files != nil {
		bt.Files = d.Features.Files
	}
	if d.Features.Forge != nil {
		if r, ok, err := d.cfg.Repos.For(ctx, c.sess.Key.Team, c.sess.Key.Channel); err != nil {
			t.log.Warn().Err(err).Msg("the channel's repository cannot be read: no create_pull_request this turn")
		} else if ok && r.OnForge {
			bt.PullRequest = t.pullRequest
		}
	}
	if d.cfg.MidTurn == MidTurnSteer {
		bt.Steer = t.steer
	}
	if c.mcp != nil {
		bt.Connectors = c.mcp
	}
	if d.cfg.Approval.Policy.Restricts() || c.mcp != nil {
		bt.Approve = t.approve
	}
	if d.Features.Budget != nil { // budget.go
		bt.Meter = d.Features.Budget.For(c.sess.Key.Channel, st.lastUserMsg.User, c.sess.ID, st.turnSeq)
	}
	return bt
}

// produced is what produce leaves for delivery: the reply and the turn_completed status it
// goes with, and the live view showing the turn (nil: none). ended says the turn ended there
// (stopped, suspended); completed that its reply was delivered and the turn completed (a dead
// cell's live messages finished from the log).
type produced struct {
	reply            session.Event
	status, reason   string
	live             *liveView
	ended, completed bool
}

// produce finds the turn's reply or has the agent write it. A resumed turn may have its reply
// already (a crash after the reply, before delivery), and a canned reply is stored with its
// turn_started: either is delivered, not produced again. What a dead cell left in the thread
// is settled first: files it uploaded but did not record as shared (Slack says whether they
// are in the thread, else they are shared now), and its live messages, finished from the log
// so the thread ends with the whole reply exactly once and nothing left streaming.
func (t *turn) produce(ctx context.Context, bt brain.Turn, working *threadStatus) (produced, error) {
	c, d, st := t.cell, t.cell.deps, &t.state
	_, tn := t.turns()
	p := produced{reply: tn.Reply, status: session.StatusOK}
	found := tn.Reply.Seq > 0
	if err := t.finishUploads(ctx); err != nil {
		return p, err
	}
	recovered, err := t.recoverLive(ctx, p.reply, found)
	if err != nil || recovered {
		p.completed = recovered
		return p, err
	}
	if found {
		return p, nil
	}
	if d.cfg.Live.Mode != StreamOff {
		p.live = newLiveView(d.Deliver, c.flog, t.log, d.Clock, d.cfg.Live, c.sess, st.turnSeq,
			st.lastUserMsg.User, cmp.Or(st.lastUserMsg.Team, c.sess.Key.Team), threadTitle(c.flog.snapshot()))
		p.live.status = working
		p.live.onHalt = c.wake // Slack halted the stream: runAgent reads the stop at once
		go p.live.run(ctx)
		bt.Live = p.live
		t.live = p.live
	}
	if d.Features.Channel != nil {
		if name := d.Features.Channel(ctx, c.sess.Key.Channel); name != "" {
			bt.Where.Channel = name
		}
	}
	// The model reads what was shared with the messages it answers; what it was told is in
	// the sandbox is put back there.
	if err := t.fetchFiles(ctx); err != nil {
		return p, err
	}
	t.restoreCopies(ctx)
	t.readyHands(ctx) // setup.go: the channel's setup runs before the first model call
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
	if err := t.budgetNotices(ctx); err != nil { // budget.go: shown under the reply
		return p, err
	}
	return p, nil
}

// deliver posts the reply (or finishes the live view that shows it) and completes the turn
// with it, in one append; it returns the status the turn completed with. A delivery that fails
// for a reason that may pass leaves the turn open (it is resumed, the thread searched first,
// after a backoff); one that can never succeed completes it with an error.
func (t *turn) deliver(ctx context.Context, resumed bool, p produced) (string, error) {
	c, d, live, reply := t.cell, t.cell.deps, p.live, p.reply
	if live != nil {
		live.close()
	}
	if s, ok := t.haltedInSlack(ctx, live); ok {
		return session.StatusStopped, t.stop(ctx, live, s) // stopped in Slack: the reply is not posted
	}
	if live != nil && live.shown() {
		// The live view shows the reply: its messages take the place of posting it.
		posted, stopped, err := live.finish(ctx, reply, t.footer(reply))
		if s, ok := t.haltedInSlack(ctx, live); ok && errors.Is(err, errHalted) {
			return session.StatusStopped, t.stop(ctx, live, s)
		}
		if err != nil {
			return p.status, err // the turn stays open; the next cell finishes the live messages
		}
		if err := t.complete(ctx, p.status, p.reason, append(stopped, deliveredEvent(reply, c.sess.Key.Channel, posted))...); err != nil {
			return p.status, err
		}
		d.Metrics.deliveries.Inc()
		return p.status, nil
	}
	if ts, _ := t.turns(); resumed && ts.Delivered(reply) {
		return p.status, t.complete(ctx, p.status, p.reason)
	}
	// Fresh: produced by this turn in this process, so never posted before.
	fresh := !resumed && reply.Seq > t.state.turnSeq
	posted, err := d.Deliver.Deliver(ctx, c.sess, reply, !fresh, t.footer(reply))
	switch {
	case err == nil:
		if err := t.complete(ctx, p.status, p.reason, deliveredEvent(reply, c.sess.Key.Channel, posted)); err != nil {
			return p.status, err
		}
		d.Metrics.deliveries.Inc()
		return p.status, nil
	case ctx.Err() != nil || !errors.Is(err, ErrDeliveryFailed):
		return p.status, err
	default:
		t.log.Warn().Err(err).Msg("delivery failed for good")
		return session.StatusError, t.complete(ctx, session.StatusError, session.ReasonDelivery, session.NewEvent{Type: session.TypeError, Actor: cellActor,
			Payload: session.ErrorEvent{Stage: "delivery", Message: shortError(err)}})
	}
}

// titleAfter names the session once its reply reached the thread.
func (t *turn) titleAfter(ctx context.Context, bt brain.Turn, reply session.Event, status string) error {
	c, d := t.cell, t.cell.deps
	// A title comes after the reply reached the thread, not before; Slack shows it where it
	// can (the thread's agent session, or its assistant-thread title).
	if d.Features.Titler != nil && status == session.StatusOK {
		before := len(session.Select(c.flog.snapshot(), session.Range{Types: []session.Type{session.TypeTitle}}))
		d.Features.Titler.Title(ctx, bt, reply)
		if titles := session.Select(c.flog.snapshot(), session.Range{Types: []session.Type{session.TypeTitle}}); len(titles) > before {
			var tt session.Title
			if titles[len(titles)-1].Decode(&tt) == nil && tt.Text != "" {
				d.Deliver.SetTitle(ctx, c.sess.Key.Channel, c.sess.Key.ThreadTS, tt.Text)
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
	lines := append(t.pullNotes(), t.fileNotes()...)
	lines = append(lines, t.notes...)
	if f := t.cell.deps.cfg.Footer.line(t.cell.id, turnUsage(t.cell.flog.snapshot(), t.state.turnSeq)); f != "" {
		lines = append(lines, f)
	}
	return strings.Join(lines, "\n")
}

var deliveryActor = session.Actor{Kind: session.ActorSystem, ID: "delivery"}

// complete appends first, then turn_completed, in one append, and tells the probe.
func (t *turn) complete(ctx context.Context, status, reason string, first ...session.NewEvent) error {
	st := t.state
	evs := append(first, session.NewEvent{Type: session.TypeTurnCompleted, Actor: cellActor,
		Payload: session.TurnCompleted{Turn: st.turnSeq, Status: status, Reason: reason, Through: st.through, TraceID: telemetry.TraceID(ctx)}})
	if _, err := t.cell.flog.Append(ctx, evs...); err != nil {
		return err
	}
	t.cell.deps.Metrics.turns.WithLabelValues(status).Inc()
	t.cell.deps.Probe.turnDone(t.cell.id, st.turnSeq, status)
	return nil
}

// runAgent runs the agent, appending a queued marker for every user message that arrives
// meanwhile (they are answered by the next turn).
func (t *turn) runAgent(ctx context.Context, bt brain.Turn) (brain.Reply, error) {
	c := t.cell
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
		res, err = c.deps.Agent.Run(actx, bt)
	}()
	for {
		select {
		case <-done:
			var s *stopRequest
			if errors.As(context.Cause(actx), &s) {
				return brain.Reply{}, s // stopped: whatever the agent returned is not posted
			}
			return res, err
		case <-c.poke:
			if err := c.flog.sync(ctx); err != nil {
				continue
			}
			if s, ok := t.stopAsked(); ok {
				// The model call and the sandbox's commands end with the agent's context.
				cancel(s)
				continue
			}
			if s, ok := takenOverDuring(c.flog.snapshot(), t.state.turnSeq); ok {
				cancel(s) // a person took the session over: the running turn gives way
				continue
			}
			select {
			case t.changed <- struct{}{}: // an approval's wait looks again
			default:
			}
			var marks []session.NewEvent
			for _, e := range session.Select(c.flog.snapshot(), session.Range{From: max(t.state.through, c.queued) + 1,
				Types: []session.Type{session.TypeUserMessage}}) {
				marks = append(marks, session.NewEvent{Type: session.TypeQueued, Actor: cellActor,
					IdempotencyKey: "queued/" + e.ID.String(), Payload: session.Queued{MessageSeq: e.Seq}})
				c.queued = max(c.queued, e.Seq)
			}
			if len(marks) > 0 {
				if _, err := c.flog.Append(ctx, marks...); err != nil && ctx.Err() == nil {
					c.log.Warn().Err(err).Msg("append queued markers")
				}
			}
			// The poke is consumed; the cell reads the log again after the turn anyway.
		}
	}
}

// replyBudget waits until the thread may get another reply: replies per thread are capped
// (RunnerConfig.MaxReplies per ReplyWindow), a safety net against bot-to-bot ping-pong that
// slips past the filters: a chain of two bots answering each other never exceeds the cap.
func (t *turn) replyBudget(ctx context.Context) error {
	d := t.cell.deps
	limit := d.cfg.MaxReplies
	if limit < 0 {
		return nil
	}
	evs := session.Select(t.cell.flog.snapshot(), session.Range{Types: []session.Type{session.TypeDelivered}, Desc: true, Limit: limit})
	if len(evs) < limit {
		return nil
	}
	wait := evs[limit-1].CreatedAt.Add(d.cfg.ReplyWindow).Sub(d.Clock.Now())
	if wait <= 0 {
		return nil
	}
	t.cell.log.Warn().Dur("wait", wait).Msg("cell: reply cap reached for this thread; waiting")
	d.Metrics.replyCapWaits.Inc()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.Clock.After(wait):
		return nil
	}
}

// turns folds the cell's log: all its turns, and this one (an empty one should the log not
// know it, which a turn that began in this cell's memory rules out).
func (t *turn) turns() (*thread.Turns, *thread.Turn) {
	ts := thread.FoldTurns(t.cell.flog.snapshot())
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
// the log, the turn's first live message is made to show it whole (the others are removed) and
// the turn is completed: it reports true. Without one, every live message of the turn is
// removed (the agent runs again and shows itself anew): it reports false.
func (t *turn) recoverLive(ctx context.Context, reply session.Event, found bool) (bool, error) {
	c, d := t.cell, t.cell.deps
	if !t.state.open {
		return false, nil // a fresh turn: nothing of it is in the thread yet
	}
	ts, tn := t.turns()
	var keep []thread.LiveMessage
	for _, m := range tn.Live {
		if !m.Deleted {
			keep = append(keep, m)
		}
	}
	channel := c.sess.Key.Channel
	// A cell killed between Slack's answer and its record leaves a message the log does not
	// know: the bot's messages in the thread after the message this turn answers, that no
	// delivered or stream_started names, are this turn's too.
	orphans, err := d.Deliver.unknownBotMessages(ctx, channel, c.sess.Key.ThreadTS, t.state.lastUserMsg.TS,
		d.cfg.Where.BotUserID, knownMessages(ts, c.flog.snapshot()))
	if err != nil {
		t.log.Warn().Err(err).Msg("live view: could not look for messages a dead cell left; going on")
	}
	var found0 []session.NewEvent // the orphans' records, written with what becomes of them
	for _, orphan := range orphans {
		keep = append(keep, thread.LiveMessage{TS: orphan, Mode: "stream", Open: true})
		found0 = append(found0, session.NewEvent{Type: session.TypeStreamStarted, Actor: deliveryActor, IdempotencyKey: "stream/" + orphan,
			Payload: session.StreamStarted{Turn: t.state.turnSeq, Channel: channel, TS: orphan, Mode: "found"}})
	}
	if len(keep) == 0 {
		return false, nil
	}
	evs := found0
	for _, m := range keep {
		if m.Open && m.Mode == "stream" {
			// Best-effort: a stream Slack already closed answers message_not_in_streaming_state.
			if err := d.Deliver.call(ctx, "chat.stopStream", func() error {
				_, _, err := d.Deliver.api.StopStreamContext(ctx, channel, m.TS)
				return err
			}); err != nil && !streamClosed(err) && !isSlackErr(err, "message_not_found") && !isSlackErr(err, "stopped_by_user") && !errors.Is(err, errUnavailable) {
				return false, fmt.Errorf("stop live message %s: %w", m.TS, err)
			}
		}
	}
	if found && !ts.Delivered(reply) {
		var drop []string
		for _, m := range keep[1:] {
			drop = append(drop, m.TS)
		}
		t.log.Info().Str("ts", keep[0].TS).Int("removed", len(drop)).Msg("live view: finishing the reply a dead cell streamed")
		posted, err := d.Deliver.replace(ctx, c.sess, reply, keep[0].TS, drop, t.footer(reply))
		if err != nil {
			return false, err
		}
		if keep[0].Open {
			evs = append(evs, streamStopped(keep[0].TS, session.StreamRecovered, 0))
		}
		for _, m := range keep[1:] {
			evs = append(evs, streamStopped(m.TS, session.StreamDeleted, 0))
		}
		evs = append(evs, deliveredEvent(reply, channel, posted))
		if err := t.complete(ctx, session.StatusOK, "", evs...); err != nil {
			return false, err
		}
		d.Metrics.deliveries.Inc()
		return true, nil
	}
	if found {
		return false, nil // delivered already: the turn only needs closing
	}
	for _, m := range keep {
		if err := d.Deliver.call(ctx, "chat.delete", func() error {
			_, _, err := d.Deliver.api.DeleteMessageContext(ctx, channel, m.TS)
			return err
		}); err != nil && !isSlackErr(err, "message_not_found") {
			return false, fmt.Errorf("remove live message %s: %w", m.TS, err)
		}
		evs = append(evs, streamStopped(m.TS, session.StreamDeleted, 0))
	}
	t.log.Info().Int("removed", len(keep)).Msg("live view: removed the partial messages of a dead cell; running the turn again")
	_, err = c.flog.Append(ctx, evs...)
	return false, err
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
	for _, e := range session.Select(t.cell.flog.snapshot(), session.Range{From: max(tn.Seq, t.state.through) + 1, Types: []session.Type{session.TypeUserMessage}}) {
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
	d := t.cell.deps
	ctx = context.WithoutCancel(ctx) // the agent's context ended; the record must not
	var evs []session.NewEvent
	var shown string // what the thread showed of the stopped model call, for the next history
	if live != nil {
		evs = append(evs, live.stopWith(ctx, "_Stopped by <@"+s.by+">._")...)
		shown = clip.Text(live.stoppedText(), 32<<10)
	}
	canceled, show := t.cancelApprovals(ctx, s.by)
	evs = append(evs, canceled...)
	evs = append(evs, stoppedCalls(t.cell.flog.snapshot(), t.state.turnSeq, s.by)...)
	evs = append(evs, session.NewEvent{Type: session.TypeTurnStopped, Actor: cellActor,
		Payload: session.TurnStopped{Turn: t.state.turnSeq, By: s.by, Source: s.source, Request: s.seq, Shown: shown,
			ByName: t.stopperName(s)}})
	if s.source == "message" {
		t.state.through = max(t.state.through, s.seq)
	}
	t.log.Info().Str("by", s.by).Str("source", s.source).Msg("turn stopped")
	d.Metrics.stops.Inc()
	if err := t.complete(ctx, session.StatusStopped, s.source, evs...); err != nil {
		return err
	}
	show(t.cell.flog.snapshot())
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
	c, d := t.cell, t.cell.deps
	evs := c.flog.snapshot()
	muted := isMuted(evs)
	var marks []session.NewEvent
	next := through
	for _, e := range session.Select(evs, session.Range{From: through + 1, Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Decode(&m) != nil || isStop(m.Text) {
			break
		}
		h := hear(d.cfg.ThreadReplies, m, muted, false)
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
	if _, err := c.flog.Append(ctx, marks...); err != nil {
		return through, err
	}
	t.log.Info().Int64("through", next).Msg("messages written meanwhile steer the running turn")
	// Files shared with those messages reach the model's next call too.
	if err := t.fetchThrough(ctx, next); err != nil {
		return through, err
	}
	return next, nil
}
