package thread_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// session_work (migrations/00004_pending.sql, 00008_awaiting.sql, kept by logbook_append since
// 00060_append_keeps_work.sql) keeps its own SQL reading of the turn markers, so that the
// poll stays flat in the log's size. It must agree with the fold: after every append of many
// walks through the markers that move it, the store's Pending lists a session exactly when
// the fold of its log says it is pending.
func TestPendingMatchesTheFold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := session.NewStore(pool, session.Options{})
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)

	// A step appends one event given the walk so far.
	sys := session.Actor{Kind: session.ActorSystem, ID: "cell"}
	steps := map[string]func(w *walk) session.NewEvent{
		"user": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"},
				Payload: session.UserMessage{TS: fmt.Sprintf("1.%d", w.n), Text: "hi"}}
		},
		"signal": func(w *walk) session.NewEvent { // a followup_signal is work as a user message is (00090)
			return session.NewEvent{Type: session.TypeFollowupSignal, Actor: session.Actor{Kind: session.ActorGitHub, ID: "octocat"},
				Payload: session.FollowupSignal{Repo: "acme/api", Number: 1, Kind: session.SignalCheckFailed, HeadSHA: fmt.Sprint(w.n)}}
		},
		"turn_started": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeTurnStarted, Actor: sys, Payload: session.TurnStarted{Through: w.lastUser}}
		},
		"turn_completed": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeTurnCompleted, Actor: sys,
				Payload: session.TurnCompleted{Turn: w.turn, Status: session.StatusOK, Through: w.lastUser}}
		},
		"turn_completed_short": func(w *walk) session.NewEvent { // answers less than the newest message
			return session.NewEvent{Type: session.TypeTurnCompleted, Actor: sys,
				Payload: session.TurnCompleted{Turn: w.turn, Status: session.StatusError, Through: max(w.lastUser-1, 0)}}
		},
		"approval_requested": func(w *walk) session.NewEvent {
			call := fmt.Sprintf("c%d", w.n)
			w.calls = append(w.calls, call)
			return session.NewEvent{Type: session.TypeApprovalRequested, Actor: sys,
				Payload: session.ApprovalRequested{Turn: w.turn, CallID: call, ExpiresAt: future}}
		},
		"suspended_future": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeTurnSuspended, Actor: sys,
				Payload: session.TurnSuspended{Turn: w.turn, CallID: w.call(), Until: future, Seen: w.lastUser}}
		},
		"suspended_past": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeTurnSuspended, Actor: sys,
				Payload: session.TurnSuspended{Turn: w.turn, CallID: w.call(), Until: past, Seen: w.lastUser}}
		},
		"suspended_unseen": func(w *walk) session.NewEvent { // the cell had not read the newest message
			return session.NewEvent{Type: session.TypeTurnSuspended, Actor: sys,
				Payload: session.TurnSuspended{Turn: w.turn, CallID: w.call(), Until: future, Seen: max(w.lastUser-1, 0)}}
		},
		"decided": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeApprovalDecided, Actor: sys,
				Payload: session.ApprovalDecided{CallID: w.call(), Decision: session.DecisionDenied}}
		},
		"decided_other": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeApprovalDecided, Actor: sys,
				Payload: session.ApprovalDecided{CallID: "other", Decision: session.DecisionDenied}}
		},
		"stop_requested": func(w *walk) session.NewEvent {
			return session.NewEvent{Type: session.TypeStopRequested, Actor: sys, Payload: session.StopRequested{Source: "button"}}
		},
	}
	names := make([]string, 0, len(steps))
	for n := range steps {
		names = append(names, n)
	}
	slices.Sort(names)

	scripted := [][]string{
		{"user", "turn_started", "turn_completed", "user", "turn_started", "turn_completed_short"},
		{"user", "turn_started", "approval_requested", "suspended_future", "decided"},
		{"user", "turn_started", "approval_requested", "suspended_future", "user"},
		{"user", "turn_started", "approval_requested", "suspended_past"},
		{"user", "turn_started", "approval_requested", "suspended_unseen"},
		{"user", "turn_started", "approval_requested", "stop_requested", "suspended_future"},
		{"user", "turn_started", "approval_requested", "decided", "suspended_future"},
		{"user", "turn_started", "approval_requested", "decided_other", "suspended_future", "decided_other"},
		{"user", "turn_started", "approval_requested", "suspended_future", "turn_completed", "user"},
		{"turn_started", "approval_requested", "suspended_future", "user"},
		{"signal", "turn_started", "turn_completed", "signal"},
		{"user", "turn_started", "signal", "turn_completed_short", "turn_started", "turn_completed"},
		{"user", "turn_started", "approval_requested", "suspended_future", "signal"},
	}
	rng := rand.New(rand.NewPCG(26, 2026))
	for range 12 {
		walk := []string{"user"}
		for range 14 {
			walk = append(walk, names[rng.IntN(len(names))])
		}
		scripted = append(scripted, walk)
	}

	checked := 0
	for i, script := range scripted {
		sess, err := store.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: fmt.Sprintf("%d.0", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		w := &walk{}
		for j, step := range script {
			w.n++
			stored, err := store.Append(ctx, sess.ID, steps[step](w))
			if err != nil {
				t.Fatal(err)
			}
			switch step {
			case "user", "signal":
				w.lastUser = stored[0].Seq
			case "turn_started":
				w.turn = stored[0].Seq
			}
			evs, err := store.Events(ctx, sess.ID, session.Range{})
			if err != nil {
				t.Fatal(err)
			}
			pending, err := store.Pending(ctx, "test", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			inSQL, inFold := slices.Contains(pending, sess.ID), thread.FoldTurns(evs).Pending(time.Now())
			if inSQL != inFold {
				t.Errorf("walk %d %v, after step %d (%s): session_work says pending %v, the fold %v", i, script, j, step, inSQL, inFold)
			}
			checked++
		}
	}
	t.Logf("%d appends checked", checked)
}

// walk is a session's turn, newest user message, steps and approval requests so far.
type walk struct {
	turn, lastUser, n int64
	calls             []string
}

func (w *walk) call() string {
	if len(w.calls) == 0 {
		return "none"
	}
	return w.calls[len(w.calls)-1]
}
