package brain_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

var errGone = errors.New("the cell went away")

// A person's approval that comes after the turn's wall time would have run out still runs the
// call: the wait is given back to the turn. The approved call is marked tool_started before it
// runs.
func TestApprovalWaitDoesNotCountAgainstTheWallTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "run_command", Input: `{"command":"make test"}`}}},
		fakeprovider.Reply{Text: "The tests pass."})
	// The turn's clock moves only while the person decides: the model calls and the appends
	// around the wait take no time on it, however loaded the machine.
	clock := newTurnClock()
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), func(c *brain.Config) {
		c.MaxTurnTime, c.DeferTitle, c.Now, c.AfterFunc = 200*time.Millisecond, true, clock.Now, clock.AfterFunc
	})
	seq, _ := e.user("run the tests")
	hands := &fakeHands{}
	turn := e.turn(hands, e.startTurn(seq))
	ranOut := 0
	turn.Approve = func(ctx context.Context, use brain.ToolUse) (brain.Decision, error) {
		ranOut = clock.Advance(400 * time.Millisecond) // a person takes longer than the turn's wall time
		return brain.Decision{Allow: true, Asked: true}, nil
	}
	r, err := b.Run(context.Background(), turn)
	if err != nil || r.Status != session.StatusOK || !strings.Contains(r.Message.Text, "pass") {
		t.Fatalf("reply %+v, %v", r, err)
	}
	if ranOut != 1 {
		t.Fatalf("%d wall times ran out while the person decided, want 1 (the turn's)", ranOut)
	}
	if got := hands.ran(); len(got) != 1 || got[0] != "make test" {
		t.Fatalf("ran %v", got)
	}
	wantTypes(t, e.after(turn.TurnSeq), session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolStarted,
		session.TypeToolResult, session.TypeAssistantMessage)
}

// A Run that ends while a call waits for a decision leaves the call without a result; the next
// Run of the same turn asks again and runs it once approved — and the calls after it in the
// round, which never started. A call that was approved and started when its Run ended is not
// run again: its outcome is unknown.
func TestApprovalResumesTheRoundThatWaited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{
			{ID: "toolu_1", Name: "run_command", Input: `{"command":"one"}`},
			{ID: "toolu_2", Name: "run_command", Input: `{"command":"two"}`}}},
		fakeprovider.Reply{Text: "Both ran."})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), func(c *brain.Config) { c.DeferTitle = true })
	seq, _ := e.user("run one and two")
	turnSeq := e.startTurn(seq)
	hands := &fakeHands{}
	turn := e.turn(hands, turnSeq)
	turn.Approve = func(ctx context.Context, use brain.ToolUse) (brain.Decision, error) {
		// The first Run: the request is in the log when the cell goes away.
		e.append(session.NewEvent{Type: session.TypeApprovalRequested, Actor: session.Actor{Kind: session.ActorSystem, ID: "approval"},
			Payload: session.ApprovalRequested{Turn: turnSeq, CallID: use.ID, Tool: use.Name}})
		return brain.Decision{}, errGone
	}
	if _, err := b.Run(context.Background(), turn); !errors.Is(err, errGone) {
		t.Fatalf("Run: %v; want the approval's error", err)
	}
	var asked []string
	turn.Approve = func(ctx context.Context, use brain.ToolUse) (brain.Decision, error) {
		asked = append(asked, use.ID)
		return brain.Decision{Allow: true, Asked: use.ID == "toolu_1"}, nil
	}
	r, err := b.Run(context.Background(), turn)
	if err != nil || !strings.Contains(r.Message.Text, "Both ran") {
		t.Fatalf("reply %+v, %v", r, err)
	}
	if got := strings.Join(hands.ran(), ","); got != "one,two" || strings.Join(asked, ",") != "toolu_1,toolu_2" {
		t.Fatalf("ran %q, asked %v", got, asked)
	}
	if n := len(fake.Calls()); n != 2 {
		t.Fatalf("%d model calls; the resumed round needs no new one", n)
	}

	// Started, then the cell went away: repaired as interrupted, never run again.
	e2 := newEnv(t)
	fake2 := fakeprovider.NewAnthropic(t, anthropicKey)
	fake2.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_9", Name: "run_command", Input: `{"command":"deploy"}`}}},
		fakeprovider.Reply{Text: "I do not know whether it deployed."})
	b2, _ := newBrain(t, anthropicProvider(t, fake2, anthropicKey), func(c *brain.Config) { c.DeferTitle = true })
	seq2, _ := e2.user("deploy")
	turnSeq2 := e2.startTurn(seq2)
	ctx, cancel := context.WithCancel(context.Background())
	hands2 := &fakeHands{exec: func(ctx context.Context, shell string) (sandbox.ExecResult, error) {
		cancel() // the cell goes away while the approved command runs
		<-ctx.Done()
		return sandbox.ExecResult{}, ctx.Err()
	}}
	turn2 := e2.turn(hands2, turnSeq2)
	turn2.Approve = func(ctx context.Context, use brain.ToolUse) (brain.Decision, error) {
		e2.append(session.NewEvent{Type: session.TypeApprovalRequested, Actor: session.Actor{Kind: session.ActorSystem, ID: "approval"},
			Payload: session.ApprovalRequested{Turn: turnSeq2, CallID: use.ID, Tool: use.Name}})
		return brain.Decision{Allow: true, Asked: true}, nil
	}
	if _, err := b2.Run(ctx, turn2); err == nil {
		t.Fatal("the cancelled Run succeeded")
	}
	hands2.exec = nil
	if _, err := b2.Run(context.Background(), turn2); err != nil {
		t.Fatal(err)
	}
	if got := hands2.ran(); len(got) != 1 {
		t.Fatalf("the started call ran %d times: %v", len(got), got)
	}
	var res session.ToolResult
	for _, ev := range e2.after(turnSeq2) {
		if ev.Type == session.TypeToolResult {
			res = decode[session.ToolResult](t, ev)
		}
	}
	if !res.Synthetic || !res.IsError {
		t.Fatalf("result %+v; want the interrupted result", res)
	}
}
