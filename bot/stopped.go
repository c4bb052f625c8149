package bot

import (
	"context"
	"errors"
	"sort"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// errHalted is the live view's finish refused because Slack halted the stream: a person
// stopped it in Slack, and the turn is to stop, not to post its reply.
var errHalted = errors.New("the stream was stopped in Slack")

// stoppedCalls are the results of the turn's tool calls that a stop left without one, written
// with the turn's turn_stopped so that no reader takes them for a crash's: the call that was
// running says who stopped it while it ran (its outcome is unknown); calls of its round that
// had not started say they were not run. A call still waiting for a person's decision is left
// to its canceled decision (the next turn's repair says it did not run). evs is the session's
// log, turnSeq the turn's turn_started, by the Slack user who stopped it.
func stoppedCalls(evs []session.Event, turnSeq int64, by string) []session.NewEvent {
	i := sort.Search(len(evs), func(i int) bool { return evs[i].Seq > turnSeq })
	th, folded := thread.Fold(evs[i:]), thread.FoldTurns(evs)
	who := nameOf(evs, by)
	var out []session.NewEvent
	running := true // calls run in order: the first without a result is the one that ran
	for _, it := range th.Items {
		if it.Kind != thread.KindTool || it.Tool.Call == nil || it.Tool.Result != nil {
			continue
		}
		id := it.Tool.Call.CallID
		if a, asked := folded.Approval(id); asked && !a.Started {
			continue
		}
		r := session.ToolResult{CallID: id, IsError: true, Synthetic: true, StoppedBy: by,
			Content: "stopped by " + who + " while it ran; its outcome is unknown (it may have done part of its work)"}
		if !running {
			// Not run: its outcome is known, so the result is not marked synthetic.
			r = session.ToolResult{CallID: id, IsError: true,
				Content: "not run: " + who + " stopped the turn before this call began"}
		}
		running = false
		out = append(out, session.NewEvent{Type: session.TypeToolResult, Actor: cellActor,
			IdempotencyKey: "tool_result:" + id, Payload: r})
	}
	return out
}

// stopperName is the display name of the person who asked for stop s: the one its
// stop_requested carries, else the one their messages were stored with; "" when unknown.
func stopperName(evs []session.Event, tn *thread.Turn, s *stopRequest) string {
	if r := tn.StopRequest; r != nil && r.Seq == s.seq && r.UserName != "" {
		return r.UserName
	}
	if name := nameOf(evs, s.by); name != s.by {
		return name
	}
	return ""
}

// stopperName is stopperName for the running turn.
func (t *turn) stopperName(s *stopRequest) string {
	_, tn := t.turns()
	return stopperName(t.flog.snapshot(), tn, s)
}

// nameOf is the display name a user's messages in evs were stored with, else the id.
func nameOf(evs []session.Event, user string) string {
	for j := len(evs) - 1; j >= 0; j-- {
		var m session.UserMessage
		if evs[j].Type == session.TypeUserMessage && evs[j].Decode(&m) == nil && m.User == user && m.UserName != "" {
			return m.UserName
		}
	}
	return user
}

// haltedInSlack is the stop request the live view recorded when Slack said a person stopped
// its stream (stopped_by_user), once the view is closed: the turn stops instead of posting
// its reply. false when Slack halted nothing.
func (t *turn) haltedInSlack(ctx context.Context, live *liveView) (*stopRequest, bool) {
	if live == nil || !live.halted() {
		return nil, false
	}
	if err := t.flog.sync(ctx); err != nil {
		t.log.Warn().Err(err).Msg("read the log for the stop Slack reported")
	}
	return t.stopAsked()
}

// wake pokes the cell without waiting: its running turn reads the log again.
func (c *Cell) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}
