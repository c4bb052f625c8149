package brain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// recLive records a turn's Live calls as lines; consecutive Text pieces are joined into one
// "text:" line, so the order of calls shows without depending on how the text was cut.
type recLive struct {
	mu     sync.Mutex
	calls  []string
	pieces int
	closed bool // Run returned: any call now is a bug
	late   []string
}

func (l *recLive) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.late = append(l.late, s)
	}
	l.calls = append(l.calls, s)
}

func (l *recLive) Status(text string) { l.add("status:" + text) }
func (l *recLive) Restart()           { l.add("restart") }
func (l *recLive) EndRound(reply bool) {
	l.add(fmt.Sprintf("end:%v", reply))
}
func (l *recLive) Tool(p brain.ToolProgress) {
	l.add(fmt.Sprintf("tool:%s:%s:%s:%s:%q", p.CallID, p.Name, p.Title, p.Status, p.Output))
}

func (l *recLive) Text(delta string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.late = append(l.late, "text:"+delta)
	}
	l.pieces++
	if n := len(l.calls); n > 0 && strings.HasPrefix(l.calls[n-1], "text:") {
		l.calls[n-1] += delta
		return
	}
	l.calls = append(l.calls, "text:"+delta)
}

// done marks the end of Run and returns the calls.
func (l *recLive) done(t *testing.T) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return slices.Clone(l.calls)
}

func wantCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("Live calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestLiveSeesATurnWithAToolRoundAndAReply(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{Text: "Let me look.", ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "run_command", Input: `{"command":"ls -l"}`}},
					InputTokens: 50, OutputTokens: 9, Stream: fakeprovider.Stream{Chunk: 3}},
				fakeprovider.Reply{Text: "There is one file, notes.txt.", InputTokens: 80, OutputTokens: 7, Stream: fakeprovider.Stream{Chunk: 3}},
				fakeprovider.Reply{Text: "Listing the workspace"}, // title
			)
			hands := &fakeHands{}
			b, _ := newBrain(t, p, nil)
			rec := &recLive{}
			msgSeq, _ := e.user("@logbook what's here?")
			tn := e.turn(hands, e.startTurn(msgSeq))
			tn.Live = rec
			r, err := b.Run(context.Background(), tn)
			if err != nil {
				t.Fatal(err)
			}
			wantCalls(t, rec.done(t),
				"status:thinking",
				"text:Let me look.",
				"end:false",
				`tool:call_1:run_command:run_command: ls -l:pending:""`,
				"status:running `ls -l`",
				`tool:call_1:run_command:run_command: ls -l:in_progress:""`,
				`tool:call_1:run_command:run_command: ls -l:complete:"exit code: 0\n--- stdout ---\nran ls -l"`,
				"status:thinking",
				"text:There is one file, notes.txt.",
				"end:true",
			)
			if r.Message.Text != "There is one file, notes.txt." || rec.pieces < 6 {
				t.Errorf("reply %q in %d pieces", r.Message.Text, rec.pieces)
			}
			calls := mustAllValid(t, fake, 3)
			if !calls[0].Stream || !calls[1].Stream || calls[2].Stream {
				t.Errorf("streamed: %v %v %v; want the reply rounds streamed, not the title", calls[0].Stream, calls[1].Stream, calls[2].Stream)
			}
		})
	}
}

// TestLiveRestartsARetriedStream: a stream dropped part way is retried, and Live hears that
// the text so far is void before the retry's text.
func TestLiveRestartsARetriedStream(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{Text: "Hello there, Alice.", Stream: fakeprovider.Stream{Chunk: 4, DropAfter: 2}},
				fakeprovider.Reply{Text: "Hello there, Alice.", Stream: fakeprovider.Stream{Chunk: 4, ErrorType: errorEvent(kind), ErrorAfter: 1}},
				fakeprovider.Reply{Text: "Hello there, Alice.", OutputTokens: 5, Stream: fakeprovider.Stream{Chunk: 4}},
			)
			b, sl := newBrain(t, p, nil)
			rec := &recLive{}
			msgSeq, _ := e.user("@logbook hi")
			tn := e.turn(nil, e.startTurn(msgSeq))
			tn.Live = rec
			r, err := b.Run(context.Background(), tn)
			if err != nil {
				t.Fatal(err)
			}
			wantCalls(t, rec.done(t),
				"status:thinking", "text:Hello th", "restart", "status:retrying",
				"status:thinking", "text:Hell", "restart", "status:retrying",
				"status:thinking", "text:Hello there, Alice.", "end:true")
			if r.Message.Text != "Hello there, Alice." || len(sl.all()) != 2 {
				t.Errorf("reply %q after %d waits", r.Message.Text, len(sl.all()))
			}
			mustAllValid(t, fake, 3)
		})
	}
}

func errorEvent(kind string) string {
	if kind == "openai" {
		return "server_error"
	}
	return "overloaded_error"
}

// TestLiveKeepsAContinuedReplyInOneRound: a reply the output limit cut streams on through its
// continuation with no EndRound between; a continuation that fails part way and is retried
// voids only its own text (the first part is sent again after Restart).
func TestLiveKeepsAContinuedReplyInOneRound(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{Text: "The first half", StopReason: cutReason(kind), Stream: fakeprovider.Stream{Chunk: 5}},
				fakeprovider.Reply{Text: " and the second.", Stream: fakeprovider.Stream{Chunk: 5, DropAfter: 1}},
				fakeprovider.Reply{Text: " and the second.", Stream: fakeprovider.Stream{Chunk: 5}},
			)
			b, _ := newBrain(t, p, nil)
			rec := &recLive{}
			msgSeq, _ := e.user("@logbook tell me")
			tn := e.turn(nil, e.startTurn(msgSeq))
			tn.Live = rec
			r, err := b.Run(context.Background(), tn)
			if err != nil {
				t.Fatal(err)
			}
			wantCalls(t, rec.done(t),
				"status:thinking", "text:The first half",
				"status:thinking", "text: and ", "restart", "text:The first half", "status:retrying",
				"status:thinking", "text: and the second.", "end:true")
			if r.Message.Text != "The first half and the second." {
				t.Errorf("reply %q", r.Message.Text)
			}
			mustAllValid(t, fake, 3)
		})
	}
}

// TestLiveRefusalAndFailure: a refused answer's streamed text is void; a model that stays
// unavailable ends the round too, so the live view never waits on an open round.
func TestLiveRefusalAndFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	fake, p := fakeFor(t, "anthropic")
	fake.Push(fakeprovider.Reply{Text: "I won't", StopReason: "refusal"})
	b, _ := newBrain(t, p, func(c *brain.Config) { c.Retry.Attempts = 2 })
	rec := &recLive{}
	msgSeq, _ := e.user("@logbook do something bad")
	tn := e.turn(nil, e.startTurn(msgSeq))
	tn.Live = rec
	if _, err := b.Run(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec.done(t), "status:thinking", "text:I won't", "restart", "end:true")

	fake.Push(fakeprovider.Reply{Status: 529, ErrorType: "overloaded_error"}, fakeprovider.Reply{Status: 529, ErrorType: "overloaded_error"})
	rec = &recLive{}
	msgSeq, _ = e.user("@logbook again")
	tn = e.turn(nil, e.startTurn(msgSeq))
	tn.Live = rec
	r, err := b.Run(context.Background(), tn)
	if err != nil || r.Status != session.StatusError {
		t.Fatalf("run: %+v, %v", r, err)
	}
	wantCalls(t, rec.done(t), "status:thinking", "status:retrying", "status:thinking", "end:true")
}

func TestLiveOfflineStreamsAReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	b, _ := newBrain(t, brain.Offline{}, nil)
	rec := &recLive{}
	msgSeq, _ := e.user("@logbook hello")
	tn := e.turn(nil, e.startTurn(msgSeq))
	tn.Live = rec
	r, err := b.Run(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.done(t)
	wantCalls(t, got, "status:thinking", "text:"+r.Message.Text, "end:true")
	if rec.pieces < 5 {
		t.Errorf("the offline reply came in %d pieces, want several", rec.pieces)
	}
}

// Turn.Steer is asked before each model call after the first: a message written while the
// tool ran reaches the model's next call in the same turn, and the reply answers through it.
func TestSteerReachesTheNextModelCall(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			fake, p := fakeFor(t, kind)
			fake.Push(
				fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "run_command", Input: `{"command":"ls"}`}}},
				fakeprovider.Reply{Text: "Only the linux job failed."},
				fakeprovider.Reply{Text: "The linux job"}, // title
			)
			b, _ := newBrain(t, p, nil)
			msgSeq, _ := e.user("@logbook check the build")
			tn := e.turn(&fakeHands{}, e.startTurn(msgSeq))
			var later int64
			var asked []int64
			tn.Steer = func(ctx context.Context, through int64) (int64, error) {
				asked = append(asked, through)
				if later == 0 {
					later, _ = e.user("only the linux job, please")
				}
				return later, nil
			}
			r, err := b.Run(context.Background(), tn)
			if err != nil {
				t.Fatal(err)
			}
			if len(asked) != 1 || asked[0] != msgSeq {
				t.Fatalf("Steer asked %v; want once, before the second call, with through %d", asked, msgSeq)
			}
			calls := mustAllValid(t, fake, 3)
			var last strings.Builder
			for _, m := range calls[1].Messages {
				for _, bl := range m.Blocks {
					last.WriteString(bl.Text)
				}
			}
			if !strings.Contains(last.String(), "only the linux job") {
				t.Fatalf("the second call does not carry the steering message:\n%s", last.String())
			}
			if r.Through != later {
				t.Fatalf("reply through %d, want %d", r.Through, later)
			}
		})
	}
}
