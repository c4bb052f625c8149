package thread

import (
	"cmp"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/logbook/logbook/session"
)

// Turns is the fold of a session's turn markers: the one reading of what the log says of each
// turn, for every reader (the cell that runs turns, the gateway deciding an approval, the
// brain, the transcript). Like Thread it reads only the events it is given, in seq order.
//
// The rules:
//   - turn_started opens a turn. Its payload, when retention purged it or it cannot be
//     decoded, leaves the turn's Through 0 and Unread set (a decoding error is also Err); any
//     other marker that cannot be read is left out.
//   - turn_completed closes the turn it names (Turn), or, naming none (a silent turn, whose
//     turn_started is just before it, or a log older than the field), the newest open turn;
//     an unreadable one closes the newest open turn.
//   - steered, turn_stopped, turn_suspended, approval_requested and stream_started belong to
//     the turn they name, or to the newest turn when it is not known; queued belongs to the
//     newest turn, stop_requested to the newest turn while it is open (a stop asked between
//     turns stops nothing), and cell_woken, turn_suspended and tool_result count the newest
//     turn's resumes.
//   - A reply (an assistant_message without tool calls) belongs to the turn it names, else
//     to the newest turn (a canned reply, stored with its turn_started; an abandoned turn's
//     notice); a turn's Reply is its newest. delivered names a message by id and seq.
//   - Of several decisions on one call (there is one: its idempotency key), the first counts.
//
// It also keeps what session_work (migrations 00004, 00008) derives from the same events, for
// Pending; a test holds the two to each other.
type Turns struct {
	// List holds the turns in turn_started order.
	List []*Turn
	// LastUser is the newest user_message (Seq 0: none).
	LastUser session.Event
	// LastSignal is the newest followup_signal (Seq 0: none): work for the session as a user
	// message is (migration 00090).
	LastSignal session.Event
	// Answered is the Through of the newest turn_completed: the last user message the
	// session's turns answered.
	Answered int64
	// Posted is the Slack ts of every message the log says the bot posted or streamed for a
	// turn (delivered parts, live messages), in log order.
	Posted []string
	// PostedBy is, for each ts of Posted, the seq of the newest event that recorded it (a
	// delivered record after the stream_started of the same message): where the message is in
	// the log, for a fork taken at it (bot/fork).
	PostedBy map[string]int64
	// Err is the first turn_started or turn_completed whose payload could not be decoded (a
	// purge is no error). Other markers that cannot be decoded are left out.
	Err error

	bySeq        map[int64]int // turn_started seq -> index in List
	byCompletion map[int64]int // turn_completed seq -> index in List of the turn it closed
	approvals    map[string]*Approval
	decisions    map[string]session.Event // call id -> the first decision
	delivered    map[string]bool          // assistant_message ids and seqs ("#n") whose delivery is recorded
	live         map[string][2]int        // live message ts -> turn index, index in its Live

	// session_work's awaiting_until (zero: NULL) and awaiting_through, and what logbook_append
	// looks up when a turn is suspended: the newest stop request and decision per call.
	awaitingUntil   time.Time
	awaitingThrough int64
	lastStop        int64
	lastDecision    map[string]int64
}

// Turn is one turn as the log records it.
type Turn struct {
	Seq    int64  // its turn_started
	Reason string // turn_started's reason (session.StartMessage)
	// Through is the last user message the turn set out to answer (turn_started's).
	Through int64
	// Unread: the turn_started's payload was purged by retention or cannot be decoded.
	Unread bool

	Open bool
	// Completed is the seq of the turn_completed that closed it (0 while Open); Status,
	// StatusReason and Answered (its Through) are that event's.
	Completed    int64
	Status       string
	StatusReason string
	Answered     int64
	// CompletionUnread: the turn_completed's payload was purged or cannot be decoded.
	CompletionUnread bool

	// Reply is the turn's newest reply assistant_message (Seq 0: none yet); Delivered says
	// the log records its delivery.
	Reply     session.Event
	Delivered bool
	// Live is the turn's live messages (stream_started), in order.
	Live []LiveMessage
	// Steered is the user messages handed to the turn while it ran (steered), Queued those
	// left for the next turn (queued).
	Steered []int64
	Queued  []int64
	// StopRequest is the first stop_requested while the turn was open (nil: none); Stopped
	// its turn_stopped (nil: not stopped).
	StopRequest *StopRequest
	Stopped     *session.TurnStopped
	// StoppedSeq is the seq of that turn_stopped (0: not stopped).
	StoppedSeq int64
	// Suspended is the turn's newest turn_suspended (nil: never suspended).
	Suspended *session.TurnSuspended
	// Approvals is the turn's approval requests, in order.
	Approvals []*Approval

	progress []session.Event // cell_woken, turn_suspended and tool_result since it began, for Resumes
}

// Resumes counts the cells that took the turn up since its last finished tool call (a
// synthetic result is no progress), leaving out each that woke after the turn was suspended
// for an approval (that is the wait going on, not a failure): the cells that failed in a row
// without moving the turn on. cells counts every such cell, progress or not. It reads the
// turn's tool results, which the fold itself leaves unread.
func (t *Turn) Resumes() (n, cells int) {
	suspended := false
	for _, e := range t.progress {
		switch e.Type {
		case session.TypeToolResult:
			var r struct {
				Synthetic bool `json:"synthetic"`
			}
			if e.Payload != nil && json.Unmarshal(e.Payload, &r) == nil && !r.Synthetic {
				n = 0
			}
		case session.TypeTurnSuspended:
			suspended = true
		case session.TypeCellWoken:
			if suspended {
				suspended = false
				continue
			}
			n++
			cells++
		}
	}
	return n, cells
}

// Covered is the last user message the turn took up: its Through while open, and once closed
// the turn_completed's Through when that is later (a stopped turn takes up its "stop" message).
func (t *Turn) Covered() int64 {
	if t.Open {
		return t.Through
	}
	return max(t.Through, t.Answered)
}

// LiveMessage is a Slack message a turn showed live.
type LiveMessage struct {
	TS, Mode string
	Open     bool // no stream_stopped yet
	Deleted  bool // a stream_stopped says it was removed
}

// StopRequest is a stop_requested: who asked (its actor) and how.
type StopRequest struct {
	Seq    int64
	By     string
	Source string // "button" when the payload does not say
	// UserName is the asker's display name, when Slack told it ("" otherwise).
	UserName string
}

// Approval is an approval request and what became of it.
type Approval struct {
	Request session.ApprovalRequested
	Event   session.Event // the approval_requested
	// Started: a tool_started says the approved call began to run.
	Started bool
}

// FoldTurns folds evs (one session's events in seq order) into a new Turns.
func FoldTurns(evs []session.Event) *Turns {
	ts := &Turns{}
	ts.Add(evs...)
	return ts
}

// Add folds more events of the same session, in seq order, after those folded before.
func (ts *Turns) Add(evs ...session.Event) {
	if ts.bySeq == nil {
		ts.bySeq, ts.byCompletion = map[int64]int{}, map[int64]int{}
		ts.approvals, ts.decisions = map[string]*Approval{}, map[string]session.Event{}
		ts.delivered, ts.live, ts.lastDecision = map[string]bool{}, map[string][2]int{}, map[string]int64{}
		ts.PostedBy = map[string]int64{}
	}
	for _, e := range evs {
		ts.add(e)
	}
}

// Last is the newest turn; nil when there is none.
func (ts *Turns) Last() *Turn {
	if len(ts.List) == 0 {
		return nil
	}
	return ts.List[len(ts.List)-1]
}

// Turn returns the turn whose turn_started has seq.
func (ts *Turns) Turn(seq int64) (*Turn, bool) {
	i, ok := ts.bySeq[seq]
	if !ok {
		return nil, false
	}
	return ts.List[i], true
}

// Completed returns the turn that the turn_completed at seq closed.
func (ts *Turns) Completed(seq int64) (*Turn, bool) {
	i, ok := ts.byCompletion[seq]
	if !ok {
		return nil, false
	}
	return ts.List[i], true
}

// Delivered reports whether the log records the delivery of the assistant_message e.
func (ts *Turns) Delivered(e session.Event) bool {
	return ts.delivered[e.ID.String()] || ts.delivered[seqKey(e.Seq)]
}

// Approval returns the request for call (the first one).
func (ts *Turns) Approval(call string) (*Approval, bool) {
	a, ok := ts.approvals[call]
	return a, ok
}

// Decision returns the decision on call (an approval_decided event, the first) and its
// payload.
func (ts *Turns) Decision(call string) (session.Event, session.ApprovalDecided, bool) {
	e, ok := ts.decisions[call]
	if !ok {
		return session.Event{}, session.ApprovalDecided{}, false
	}
	return e, Decided(e), true
}

// Decided reads the decision of an approval_decided event (the zero value when it cannot be
// read), for a reader that holds the event itself (an append's answer, say).
func Decided(e session.Event) session.ApprovalDecided {
	var p session.ApprovalDecided
	_ = e.Decode(&p)
	return p
}

// CompletedAs reads the record of a turn_completed event (the zero value when it cannot be
// read), for a reader that follows events one by one (the record streamed out).
func CompletedAs(e session.Event) session.TurnCompleted {
	var p session.TurnCompleted
	_ = e.Decode(&p)
	return p
}

// Pending reports what session_work says of the session at now, as session.Store.Pending
// reads it (without its window and leases): a user message after the newest turn_completed's
// Through, and no turn suspended waiting for a person — or its deadline passed, or a message
// arrived that the suspending cell had not read.
func (ts *Turns) Pending(now time.Time) bool {
	last := ts.LastInput()
	if last <= ts.Answered {
		return false
	}
	return ts.awaitingUntil.IsZero() || !ts.awaitingUntil.After(now) || last > ts.awaitingThrough
}

// LastInput is the seq of the newest event that is work for the session: a user_message or a
// followup_signal (0: none), as session_work.last_message_seq counts them.
func (ts *Turns) LastInput() int64 { return max(ts.LastUser.Seq, ts.LastSignal.Seq) }

func seqKey(seq int64) string { return "#" + strconv.FormatInt(seq, 10) }

// decode reads e's payload into v. An unreadable turn_started or turn_completed (other than a
// purge) is recorded in Err; any other unreadable marker is left out.
func (ts *Turns) decode(e session.Event, v any) bool {
	err := e.Decode(v)
	if err != nil && !errors.Is(err, session.ErrPurged) && ts.Err == nil &&
		(e.Type == session.TypeTurnStarted || e.Type == session.TypeTurnCompleted) {
		ts.Err = err
	}
	return err == nil
}

// current is the turn named by seq, else the newest; nil when there is none.
func (ts *Turns) current(seq int64) *Turn {
	if t, ok := ts.Turn(seq); ok {
		return t
	}
	return ts.Last()
}

func (ts *Turns) add(e session.Event) {
	switch e.Type {
	case session.TypeUserMessage, session.TypeTurnStarted, session.TypeTurnCompleted, session.TypeAssistantMessage, session.TypeDelivered:
		ts.addLifecycle(e)
	case session.TypeFollowupSignal:
		ts.LastSignal = e
	case session.TypeApprovalRequested, session.TypeApprovalDecided, session.TypeToolStarted, session.TypeTurnSuspended:
		ts.addApproval(e)
	default:
		ts.addDuring(e)
	}
}

// addLifecycle folds what opens, answers and closes a turn.
func (ts *Turns) addLifecycle(e session.Event) {
	switch e.Type {
	case session.TypeUserMessage:
		ts.LastUser = e
	case session.TypeTurnStarted:
		var p session.TurnStarted
		ok := ts.decode(e, &p)
		ts.bySeq[e.Seq] = len(ts.List)
		ts.List = append(ts.List, &Turn{Seq: e.Seq, Reason: p.Reason, Through: p.Through, Unread: !ok, Open: true})
	case session.TypeTurnCompleted:
		ts.complete(e)
	case session.TypeAssistantMessage:
		var m struct {
			ToolCallIDs []string `json:"tool_call_ids"`
			Turn        int64    `json:"turn"`
		}
		if e.Payload == nil || json.Unmarshal(e.Payload, &m) != nil || len(m.ToolCallIDs) > 0 {
			return // the messages fold reports what it cannot read
		}
		if t := ts.current(m.Turn); t != nil {
			t.Reply, t.Delivered = e, ts.Delivered(e)
		}
	case session.TypeDelivered:
		var p session.Delivered
		if !ts.decode(e, &p) {
			return
		}
		ts.delivered[p.EventID], ts.delivered[seqKey(p.Seq)] = true, true
		ts.Posted = append(ts.Posted, p.TS...)
		for _, posted := range p.TS {
			ts.PostedBy[posted] = e.Seq
		}
		for i := len(ts.List) - 1; i >= 0; i-- {
			if t := ts.List[i]; t.Reply.Seq > 0 && (t.Reply.ID.String() == p.EventID || t.Reply.Seq == p.Seq) {
				t.Delivered = true
				break
			}
		}
	}
}

// addDuring folds what happens to the newest turn while it runs: messages steered into it or
// queued for the next, stops, resumes and live messages.
func (ts *Turns) addDuring(e session.Event) {
	switch e.Type {
	case session.TypeQueued:
		var p session.Queued
		if t := ts.Last(); t != nil && ts.decode(e, &p) {
			t.Queued = append(t.Queued, p.MessageSeq)
		}
	case session.TypeSteered:
		var p session.Steered
		if ts.decode(e, &p) {
			if t := ts.current(p.Turn); t != nil {
				t.Steered = append(t.Steered, p.MessageSeq)
			}
		}
	case session.TypeStopRequested:
		ts.lastStop = e.Seq
		ts.awaitingUntil = time.Time{}
		var p session.StopRequested
		_ = ts.decode(e, &p) // a stop without a readable source came from the button
		if t := ts.Last(); t != nil && t.Open && t.StopRequest == nil {
			t.StopRequest = &StopRequest{Seq: e.Seq, By: e.Actor.ID, Source: cmp.Or(p.Source, "button"), UserName: p.UserName}
		}
	case session.TypeTurnStopped:
		var p session.TurnStopped
		if ts.decode(e, &p) {
			if t := ts.current(p.Turn); t != nil {
				t.Stopped, t.StoppedSeq = &p, e.Seq
			}
		}
	case session.TypeCellWoken, session.TypeToolResult:
		if t := ts.Last(); t != nil {
			t.progress = append(t.progress, e)
		}
	case session.TypeStreamStarted:
		var p session.StreamStarted
		if !ts.decode(e, &p) {
			return
		}
		ts.Posted = append(ts.Posted, p.TS)
		ts.PostedBy[p.TS] = e.Seq
		if i, ok := ts.bySeq[p.Turn]; ok {
			t := ts.List[i]
			ts.live[p.TS] = [2]int{i, len(t.Live)}
			t.Live = append(t.Live, LiveMessage{TS: p.TS, Mode: p.Mode, Open: true})
		}
	case session.TypeStreamStopped:
		var p session.StreamStopped
		if !ts.decode(e, &p) {
			return
		}
		if at, ok := ts.live[p.TS]; ok {
			m := &ts.List[at[0]].Live[at[1]]
			m.Open, m.Deleted = false, m.Deleted || p.Reason == session.StreamDeleted
		}
	}
}

// addApproval folds a tool call's wait for a person: the request, the decision, the call
// starting, and the turn suspended meanwhile.
func (ts *Turns) addApproval(e session.Event) {
	switch e.Type {
	case session.TypeApprovalRequested:
		ts.request(e)
	case session.TypeApprovalDecided:
		ts.awaitingUntil = time.Time{}
		var p session.ApprovalDecided
		if !ts.decode(e, &p) {
			return
		}
		ts.lastDecision[p.CallID] = e.Seq
		if _, dup := ts.decisions[p.CallID]; !dup {
			ts.decisions[p.CallID] = e
		}
	case session.TypeToolStarted:
		var p session.ToolStarted
		if ts.decode(e, &p) {
			if a, ok := ts.approvals[p.CallID]; ok {
				a.Started = true
			}
		}
	case session.TypeTurnSuspended:
		ts.suspend(e)
	}
}

// request folds an approval request (the first for its call): its turn, or else the newest,
// lists it.
func (ts *Turns) request(e session.Event) {
	var p session.ApprovalRequested
	if !ts.decode(e, &p) {
		return
	}
	if _, dup := ts.approvals[p.CallID]; dup {
		return
	}
	a := &Approval{Request: p, Event: e}
	ts.approvals[p.CallID] = a
	if t := ts.current(p.Turn); t != nil {
		t.Approvals = append(t.Approvals, a)
	}
}

func (ts *Turns) complete(e session.Event) {
	var p session.TurnCompleted
	ok := ts.decode(e, &p)
	ts.Answered, ts.awaitingUntil = p.Through, time.Time{}
	i, named := ts.bySeq[p.Turn]
	if !ok || !named || p.Turn == 0 {
		i = len(ts.List) - 1
		for i >= 0 && !ts.List[i].Open {
			i--
		}
	}
	if i < 0 || !ts.List[i].Open {
		return
	}
	ts.byCompletion[e.Seq] = i
	t := ts.List[i]
	t.Open, t.Completed, t.Status, t.StatusReason, t.Answered, t.CompletionUnread = false, e.Seq, p.Status, p.Reason, p.Through, !ok
}

// suspend folds a turn_suspended: the turn's record, and session_work's awaiting columns as
// 00008_awaiting.sql sets them (a decision on the call or a stop request after the turn
// already in the log keeps the session pending).
func (ts *Turns) suspend(e session.Event) {
	var p session.TurnSuspended
	ok := ts.decode(e, &p)
	if t := ts.Last(); t != nil {
		t.progress = append(t.progress, e)
	}
	if !ok {
		ts.awaitingUntil = time.Time{}
		return
	}
	if t := ts.current(p.Turn); t != nil {
		t.Suspended = &p
	}
	ts.awaitingUntil = p.Until
	if ts.lastStop > p.Turn || ts.lastDecision[p.CallID] > p.Turn {
		ts.awaitingUntil = time.Time{}
	}
	ts.awaitingThrough = min(ts.LastInput(), p.Seen)
}
