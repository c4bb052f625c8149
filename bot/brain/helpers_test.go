package brain_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

const (
	anthropicKey = "sk-ant-test-0123456789"
	openAIKey    = "sk-test-abcdef"
)

// storeLog binds a session.Store to one session: the brain's Log.
type storeLog struct {
	st *session.Store
	id session.ID
}

func (l storeLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	return l.st.Events(ctx, l.id, r)
}

func (l storeLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return l.st.Append(ctx, l.id, evs...)
}

// env is one test's session on a fresh database.
type env struct {
	t    *testing.T
	st   *session.Store
	sess session.Session
	log  storeLog
	ts   int // next Slack ts suffix
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := session.NewStore(pool, session.Options{})
	sess, err := st.Open(context.Background(), session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, sess: sess, log: storeLog{st: st, id: sess.ID}, ts: 100}
}

func (e *env) append(evs ...session.NewEvent) []session.Event {
	e.t.Helper()
	out, err := e.log.Append(context.Background(), evs...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

var alice = session.Actor{Kind: session.ActorUser, ID: "U0000001"}

// user appends a user message from Alice and returns its seq and ts.
func (e *env) user(text string) (int64, string) {
	e.t.Helper()
	e.ts++
	ts := fmt.Sprintf("1700000000.%06d", e.ts)
	ev := e.append(session.NewEvent{Type: session.TypeUserMessage, Actor: alice, Payload: session.UserMessage{
		Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100", TS: ts,
		User: "U0000001", UserName: "Alice", Text: text,
	}, IdempotencyKey: "msg:" + ts})
	return ev[0].Seq, ts
}

// startTurn appends turn_started answering messages through seq, and returns its seq.
func (e *env) startTurn(through int64) int64 {
	e.t.Helper()
	ev := e.append(session.NewEvent{Type: session.TypeTurnStarted, Actor: session.Actor{Kind: session.ActorSystem, ID: "cell"},
		Payload: session.TurnStarted{Through: through, Reason: "message"}})
	return ev[0].Seq
}

// titled appends a title, so a test's script need not answer the title call.
func (e *env) titled() {
	e.t.Helper()
	e.append(session.NewEvent{Type: session.TypeTitle, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
		Payload: session.Title{Text: "given"}, IdempotencyKey: "title"})
}

// after returns the events after seq, in order.
func (e *env) after(seq int64) []session.Event {
	e.t.Helper()
	evs, err := e.st.Events(context.Background(), e.sess.ID, session.Range{From: seq + 1})
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

// turn is the brain.Turn of the turn_started at turnSeq (0: a turn without one), bounded by
// that marker's Through as the cell bounds it.
func (e *env) turn(hands brain.Hands, turnSeq int64) brain.Turn {
	e.t.Helper()
	var through int64
	if turnSeq > 0 {
		evs, err := e.st.Events(context.Background(), e.sess.ID, session.Range{From: turnSeq, To: turnSeq})
		if err != nil {
			e.t.Fatal(err)
		}
		var ts session.TurnStarted
		if len(evs) == 1 && evs[0].Type == session.TypeTurnStarted && evs[0].Decode(&ts) == nil {
			through = ts.Through
		}
	}
	return brain.Turn{
		Session: e.sess, Log: e.log, Hands: hands, TurnSeq: turnSeq, Through: through,
		Where: brain.Where{Workspace: "Acme", Channel: "general", ThreadTS: "1700000000.000100", BotName: "logbook", BotUserID: "UB000001"},
	}
}

func types(evs []session.Event) []session.Type {
	out := make([]session.Type, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func wantTypes(t *testing.T, evs []session.Event, want ...session.Type) {
	t.Helper()
	got := types(evs)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("appended events %v, want %v", got, want)
	}
}

func decode[T any](t *testing.T, e session.Event) T {
	t.Helper()
	var v T
	if err := e.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// newBrain returns a brain over p whose retries do not sleep: they record the waits.
func newBrain(t *testing.T, p brain.Provider, mod func(*brain.Config)) (*brain.Brain, *sleeps) {
	t.Helper()
	sl := &sleeps{}
	cfg := brain.Config{
		Provider: p,
		Logger:   zerolog.New(zerolog.NewTestWriter(t)),
		Sleep:    sl.sleep,
		Jitter:   func() float64 { return 0.5 },
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := brain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, sl
}

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// turnClock is a Brain's clock that moves only when a test moves it: Config.Now and
// Config.AfterFunc.
type turnClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*turnTimer
}

type turnTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func newTurnClock() *turnClock { return &turnClock{now: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)} }

func (c *turnClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *turnClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &turnTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := tm.stopped
		tm.stopped = true
		return !was
	}
}

// Advance moves the clock on by d and calls the functions that came due; it returns how many.
func (c *turnClock) Advance(d time.Duration) int {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, tm := range c.timers {
		if !tm.stopped && !tm.at.After(c.now) {
			tm.stopped = true
			due = append(due, tm.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
	return len(due)
}

func anthropicProvider(t testing.TB, fake *fakeprovider.Server, key string) brain.Provider {
	t.Helper()
	p, err := brain.NewProvider("anthropic:claude-test", brain.ProviderConfig{AnthropicAPIKey: key, AnthropicBaseURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openAIProvider(t testing.TB, fake *fakeprovider.Server, key string) brain.Provider {
	t.Helper()
	// The fake stands in for a vision model (a local server gets no images by default).
	p, err := brain.NewProvider("openai:gpt-test", brain.ProviderConfig{OpenAIAPIKey: key, OpenAIBaseURL: fake.URL, Vision: brain.VisionOn})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mustAllValid fails the test if the fake rejected any request.
func mustAllValid(t *testing.T, fake *fakeprovider.Server, wantCalls int) []fakeprovider.Call {
	t.Helper()
	calls := fake.Calls()
	for i, c := range calls {
		if c.Invalid != "" {
			t.Errorf("call %d rejected by the fake provider: %s", i, c.Invalid)
		}
	}
	if len(calls) != wantCalls {
		t.Fatalf("%d model calls, want %d", len(calls), wantCalls)
	}
	if fake.Pending() != 0 {
		t.Fatalf("%d scripted replies unused", fake.Pending())
	}
	return calls
}

// fakeHands is a sandbox in memory: files in a map, commands answered by a function.
type fakeHands struct {
	mu       sync.Mutex
	files    map[string]string
	commands []string
	exec     func(ctx context.Context, shell string) (sandbox.ExecResult, error)
}

func (h *fakeHands) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	h.mu.Lock()
	h.commands = append(h.commands, req.Shell)
	run := h.exec
	h.mu.Unlock()
	if run == nil {
		return sandbox.ExecResult{Stdout: "ran " + req.Shell + "\n"}, nil
	}
	return run(ctx, req.Shell)
}

func (h *fakeHands) ReadFile(ctx context.Context, path string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.files[path]
	if !ok {
		return nil, fmt.Errorf("open %s: no such file", path)
	}
	return []byte(s), nil
}

func (h *fakeHands) WriteFile(ctx context.Context, path string, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.files == nil {
		h.files = map[string]string{}
	}
	h.files[path] = string(data)
	return nil
}

func (h *fakeHands) ran() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.commands...)
}

// fakeSearcher answers every search with a fixed text and records queries.
type fakeSearcher struct {
	mu      sync.Mutex
	queries []string
}

func (s *fakeSearcher) Search(ctx context.Context, query string, limit int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries = append(s.queries, fmt.Sprintf("%s/%d", query, limit))
	return "thread 1700000000.000001 in #ops: the deploy key rotated on Monday", nil
}

// blockTexts renders a received message's blocks compactly: "text:...", "tool_use:id",
// "tool_result:id", "image:image/png:<bytes>", "document:application/pdf:<name>:<bytes>".
func blockTexts(m fakeprovider.Message) []string {
	var out []string
	for _, b := range m.Blocks {
		switch b.Type {
		case "tool_use":
			out = append(out, "tool_use:"+b.ID)
		case "tool_result":
			out = append(out, "tool_result:"+b.ToolUseID)
		case "image":
			out = append(out, fmt.Sprintf("image:%s:%d", b.MediaType, len(b.Data)))
		case "document":
			out = append(out, fmt.Sprintf("document:%s:%s:%d", b.MediaType, b.Name, len(b.Data)))
		default:
			out = append(out, "text:"+b.Text)
		}
	}
	return out
}

func roles(msgs []fakeprovider.Message) string {
	var r []string
	for _, m := range msgs {
		r = append(r, m.Role)
	}
	return strings.Join(r, ",")
}

// attachTool is an attach_file tool (bot/files) whose calls run attach.
func attachTool(attach func(callID, path, title string) (string, error)) brain.Tool {
	spec := brain.ToolSpec{Name: "attach_file", Description: "Attach a file of the workspace to the reply.",
		Schema: brain.ObjectSchema(map[string]any{"path": brain.Prop("string", "path"), "title": brain.Prop("string", "title")}, "path")}
	return brain.NewTool(spec, func(_ context.Context, use brain.ToolUse) brain.Outcome {
		var in struct{ Path, Title string }
		if err := use.Decode(&in); err != nil {
			return brain.Failure("%v", err)
		}
		res, err := attach(use.ID, in.Path, in.Title)
		if err != nil {
			return brain.Failure("%s", clip.Text(err.Error(), 200))
		}
		return brain.Outcome{Content: res}
	})
}

// rememberTool is a remember tool (bot/memory) whose calls run remember.
func rememberTool(remember func(callID, text string) (string, error)) brain.Tool {
	spec := brain.ToolSpec{Name: "remember", Description: "Add a note to the channel's memory.",
		Schema: brain.ObjectSchema(map[string]any{"text": brain.Prop("string", "the note")}, "text")}
	return brain.NewTool(spec, func(_ context.Context, use brain.ToolUse) brain.Outcome {
		var in struct{ Text string }
		if err := use.Decode(&in); err != nil || strings.TrimSpace(in.Text) == "" {
			return brain.Failure("text is required")
		}
		res, err := remember(use.ID, strings.TrimSpace(in.Text))
		if err != nil {
			return brain.Failure("not remembered: %s", err.Error())
		}
		return brain.Outcome{Content: res}
	})
}
