package brain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// Log is one session's event log as the brain needs it. The caller binds it to the session and
// to its lease epoch, so an append after the lease was lost fails (session.ErrFenced) and the
// brain stops.
type Log interface {
	// Events returns the session's events selected by r, oldest first.
	Events(ctx context.Context, r session.Range) ([]session.Event, error)
	// Append appends evs in order, all or nothing, and returns them as stored.
	Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error)
}

// Hands is the session's sandbox. The caller provisions it lazily (on the first call) and may
// replace a lost one; errors follow the sandbox package (sandbox.ErrLost, ErrDisabled,
// ErrOutsideWorkspace, ErrTooLarge).
type Hands interface {
	Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error)
	ReadFile(ctx context.Context, path string) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte) error
}

// Where says where the bot is talking, for the system prompt and for recognising mentions.
type Where struct {
	Workspace string // Slack workspace (team) name or id
	Channel   string // channel name without '#', or id
	ThreadTS  string // the thread's parent ts
	BotName   string // the bot's display name, e.g. "logbook"
	BotUserID string // the bot's Slack user id, e.g. "UB000001"; the actor id of what the model writes
}

// Turn is one turn of one session.
type Turn struct {
	Session session.Session
	Log     Log
	Hands   Hands // nil: no sandbox tools are offered
	Where   Where
	// Tools are the tools the turn's parts offer (bot/part), beside the brain's own (the
	// sandbox's with Hands, read_log); Toolsets those whose list may change while the turn
	// runs, asked again before each model call. Names are unique in a turn.
	Tools    []Tool
	Toolsets []Toolset
	// TurnSeq is the seq of the turn_started marker the caller appended for this turn.
	TurnSeq int64
	// Through is the seq of the last user message the turn answers (its turn_started's
	// Through): messages that arrive while the turn runs are kept for the next turn. 0: no
	// bound, every message is answered.
	Through int64
	// Prefix is, for a fork (issue 50), the conversation it continues: each ancestor's events
	// through the seq it was branched at, oldest ancestor first (session.Store.Lineage). The
	// fork's log holds none of them; its history is theirs, then its own. nil: no fork.
	Prefix [][]session.Event
	// Live is told of the turn's progress as it happens (nil: no live view). See Live.
	Live Live
	// Steer, when set, is asked before each model call after the first for messages that
	// arrived while the turn ran and are for the model now: it returns the new Through (the
	// last such message), having recorded them as steering the turn, or the Through it was
	// given. nil: such messages wait for the next turn.
	Steer func(ctx context.Context, through int64) (int64, error)
	// Files reads the content of the files shared in the thread (file_fetched events with
	// status stored), by hash. Run reads each file once and shows it to the model: an image or
	// a PDF as such, text in the request's text, anything else as a note naming it. nil: files
	// are only named. A failed read is a note, never a failed turn.
	Files FileReader
	// Approve, when set, is asked before each tool call runs whether it may (a person may
	// have to decide: it may block for long, and the wait does not count against the turn's
	// wall time). A call not allowed is not run: Decision.Result is its tool_result, an error
	// the model sees. An error ends the turn (Run returns it; the call keeps no result, and
	// a later Run of the same turn asks again before running it). nil: every call runs.
	Approve func(ctx context.Context, use ToolUse) (Decision, error)
	// Guidance is put in the system prompt after logbook's own rules: the channel's
	// instructions, the repository's instruction file, the channel's memory.
	Guidance Guidance
	// Meter, when set, admits each model call of the turn against a budget and is told what
	// it cost (see Meter). nil: calls are not metered.
	Meter Meter
	// Keep, when set with Files, keeps the images a tool returns (once, by hash) so the
	// model sees them as images in this and later turns; nil: they are named with type and
	// size.
	Keep FileKeeper
}

// Decision is Turn.Approve's answer on one tool call.
type Decision struct {
	Allow  bool
	Result string // when not allowed: why, for the model (who denied it, or that nobody decided)
	// Asked says a person decided (not a policy): the call is then marked tool_started before
	// it runs, so that a later Run of the turn never runs it again.
	Asked bool
}

// Live is told of a turn's progress while it runs, for the live view in Slack: a status, the
// model's text as it is written, a card per tool call. The log stays the record; Live is
// best-effort, must return quickly, and never fails the turn. Calls come from the turn's
// goroutine, in order, and never after Run returns. A nil Live costs nothing: the model is
// then called without streaming.
//
// A turn is a sequence of rounds, one per model call that answered (a reply cut by the output
// limit and continued stays one round: the continuation's text follows in the same round):
//
//	Status("thinking")
//	Text(delta)…            the model's text as it streams (reply rounds only, never titles or summaries)
//	EndRound(false)         the text came with tool calls; then per call:
//	Tool(pending)…          every call of the round, in call order, once they are in the log
//	Status("running `ls`")  then Tool(in_progress), then Tool(complete|error) with an excerpt
//	Status("thinking")      the next round…
//	Text(delta)…
//	EndRound(true)          its text is the turn's reply
//
// Retries: when a model call fails part way and is retried (a dropped stream, an overloaded
// error event), Restart says the round's text so far is void; the text still valid (that of
// an earlier, continued part of the round) is then sent again with Text, and the retried
// call's text follows. Restart also voids the text of a response the model refused, before
// its EndRound(true). Status("retrying") precedes the wait before a retry.
//
// The reply Run returns is what the thread gets: its text may differ from the streamed text
// (spaces trimmed, a note that it was cut, or a fixed sentence when the turn failed; a failed
// model call's round ends with EndRound(true) too, its text void).
type Live interface {
	// Status says in a few words what the turn does now ("thinking", "running `make test`").
	Status(text string)
	// Text is the next piece of the text of the model call in progress, as it streams.
	Text(delta string)
	// Restart: the text sent with Text since the round began is void (the call is retried,
	// or its answer was refused); Text calls that follow start the round's text afresh.
	Restart()
	// EndRound: the model call in progress ended. reply says its text is the turn's reply
	// (stored as an assistant_message without tool calls); otherwise the text, if any,
	// came with tool calls, whose Tool progress follows.
	EndRound(reply bool)
	// Tool: a tool call changed state.
	Tool(p ToolProgress)
}

// Tool call states of ToolProgress.Status, as Slack's task cards name them.
const (
	ToolPending    = "pending"     // the model asked for it
	ToolInProgress = "in_progress" // it runs
	ToolComplete   = "complete"    // its result is stored
	ToolError      = "error"       // its result is an error
)

// ToolProgress is the state of one tool call, for a task card.
type ToolProgress struct {
	CallID string
	Name   string
	Title  string // what runs, one line: "run_command: make test"
	Status string // ToolPending, ToolInProgress, ToolComplete, ToolError
	Output string // with ToolComplete and ToolError: at most 200 characters of the result, its first and last lines when longer
}

// Reply is the outcome of a turn.
type Reply struct {
	// Event is the stored assistant_message to deliver to the thread; Message is its payload.
	Event   session.Event
	Message session.AssistantMessage
	// Status is "ok", or "error" when the turn ended early (the model refused the request or
	// stayed unavailable, the turn ran out of time, the history could not be made valid); the
	// reply then says so in a sentence and an error event is in the log. Reason is the error
	// event's code. Both are meant for turn_completed.
	Status string
	Reason string
	// Through is the last user message the reply answers: the Turn's Through, or later when
	// messages steered the turn.
	Through int64
}

// RetryPolicy bounds retries of transient model errors within a turn.
type RetryPolicy struct {
	Attempts int           // calls in all, first included; default 5
	Base     time.Duration // first backoff; default 1s
	Max      time.Duration // longest backoff; default 30s
}

// The defaults of Config.MaxTokens and Config.ContextBudget, in tokens: the budget's worst
// case of one call is read from them too.
const (
	DefaultMaxTokens     = 4096
	DefaultContextBudget = 100_000
)

// Config configures a Brain. Zero values take the defaults noted.
type Config struct {
	Provider Provider // required
	Logger   zerolog.Logger

	MaxRounds      int           // tool rounds per turn; then the model must answer without tools; default 10
	MaxTurnTime    time.Duration // wall time of a turn, model calls and tools; default 5m
	CommandTimeout time.Duration // per run_command; default 2m
	MaxToolOutput  int           // bytes of one tool result; default 16 KiB
	MaxTurnOutput  int           // bytes of all tool results of a turn; default 128 KiB
	// MaxTokens is the output limit of one model call, in tokens (LOGBOOK_MAX_OUTPUT_TOKENS);
	// default DefaultMaxTokens. A reply the limit cuts is continued (MaxContinuations); a tool call it
	// cuts is not run.
	MaxTokens int64
	// MaxContinuations is how many further calls may continue a reply the output limit cut
	// (LOGBOOK_MAX_CONTINUATIONS); default 2. A reply still cut after them says so.
	MaxContinuations int
	// RepeatLimit ends the turn when one tool call (same tool, same input) has failed the
	// same way this many times in it (LOGBOOK_REPEAT_LIMIT); default 3.
	RepeatLimit int
	// ContextBudget is the history size, in input tokens (counted by the provider where it
	// can, else estimated), over which older turns are summarised into a context_summary
	// (LOGBOOK_CONTEXT_BUDGET); default DefaultContextBudget.
	ContextBudget int
	Retry         RetryPolicy
	// DeferTitle leaves the session's title to a later call of Title, so the first reply is
	// not held back by the title's model call.
	DeferTitle bool
	// Tracer traces each model call and tool call (nil: no spans). TraceContent puts the
	// prompt, the completion and tools' input and output in those spans
	// (LOGBOOK_TRACE_CONTENT=on); off, spans carry no text of the conversation.
	Tracer       trace.TracerProvider
	TraceContent bool
	// Meter records each model call's tokens and duration (gen_ai.client.token.usage,
	// gen_ai.client.operation.duration; nil: none).
	Meter metric.MeterProvider
	// EditHistory, when set, changes the messages of each reply request after the history is
	// built from the log: a test's deliberate change to how history is built (the replay's
	// divergence test). nil in production.
	EditHistory func([]Message) []Message

	// Now, Sleep, AfterFunc and Jitter make time testable: defaults time.Now, a ctx-aware
	// timer, time.AfterFunc and math/rand/v2's Float64. Sleep returns ctx's error when ctx
	// ends first; AfterFunc calls f once d has passed unless stop is called first (stop
	// reports whether it prevented the call); Jitter returns a number in [0, 1). The turn's
	// wall time (MaxTurnTime) is measured with Now and ended by AfterFunc.
	Now       func() time.Time
	Sleep     func(ctx context.Context, d time.Duration) error
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	Jitter    func() float64
}

// Brain runs turns. It holds no history of its own and is safe for concurrent use by many
// sessions' cells.
type Brain struct {
	cfg     Config
	log     zerolog.Logger
	tracer  trace.Tracer
	metrics *telemetry.Metrics
}

// New returns a Brain. It fails only when cfg.Provider is nil.
func New(cfg Config) (*Brain, error) {
	if cfg.Provider == nil {
		return nil, errors.New("new brain: no model provider")
	}
	cfg.MaxRounds = cmp.Or(cfg.MaxRounds, 10)
	cfg.MaxTurnTime = cmp.Or(cfg.MaxTurnTime, 5*time.Minute)
	cfg.CommandTimeout = cmp.Or(cfg.CommandTimeout, defaultCommandTimeout)
	cfg.MaxToolOutput = cmp.Or(cfg.MaxToolOutput, 16<<10)
	cfg.MaxTurnOutput = cmp.Or(cfg.MaxTurnOutput, 128<<10)
	cfg.MaxTokens = cmp.Or(cfg.MaxTokens, DefaultMaxTokens)
	cfg.MaxContinuations = cmp.Or(cfg.MaxContinuations, 2)
	cfg.RepeatLimit = cmp.Or(cfg.RepeatLimit, 3)
	cfg.ContextBudget = cmp.Or(cfg.ContextBudget, DefaultContextBudget)
	cfg.Retry.Attempts = cmp.Or(cfg.Retry.Attempts, 5)
	cfg.Retry.Base = cmp.Or(cfg.Retry.Base, time.Second)
	cfg.Retry.Max = cmp.Or(cfg.Retry.Max, 30*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = wait.Sleep
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	return &Brain{cfg: cfg, log: cfg.Logger, tracer: telemetry.Tracer(cfg.Tracer), metrics: telemetry.NewMetrics(cfg.Meter)}, nil
}

func (b *Brain) now() time.Time { return b.cfg.Now() }

// wallTime returns a context of ctx that ends at deadline on the Brain's clock (Config.Now,
// Config.AfterFunc), and its cancel. Its Err is then context.DeadlineExceeded, as a
// context.WithDeadline's would be; contexts made from it see context.Canceled.
func (b *Brain) wallTime(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancelCause(ctx)
	stop := b.cfg.AfterFunc(deadline.Sub(b.now()), func() { cancel(context.DeadlineExceeded) })
	return wallTimeCtx{inner}, func() { stop(); cancel(context.Canceled) }
}

// wallTimeCtx is a context that wallTime ended with context.DeadlineExceeded as its cause.
// It has no Deadline of its own: the Brain's clock need not be the wall clock that sockets'
// deadlines are set on.
type wallTimeCtx struct{ context.Context }

func (c wallTimeCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// Provider returns the brain's model provider.
func (b *Brain) Provider() Provider { return b.cfg.Provider }

// WithProvider returns a Brain like b that calls p: a channel's own model (bot/settings).
// p nil returns b.
func (b *Brain) WithProvider(p Provider) *Brain {
	if p == nil {
		return b
	}
	c := *b
	c.cfg.Provider = p
	return &c
}

// Reply texts that do not come from the model.
const (
	// EmptyMentionReply answers a thread whose messages hold nothing but mentions of the bot:
	// there is nothing to send the model, and an empty user message is invalid for its API.
	EmptyMentionReply = "What can I help with?"
)

// turn is the state of one Run.
type turn struct {
	Turn
	log     zerolog.Logger
	through int64
	tools   []ToolSpec      // the specs of offered, in order
	offered []Tool          // the tools offered, as last asked
	byName  map[string]Tool // offered, by name
	system  string
	budget  outputBudget
	repeats repeats
	bot     session.Actor
	live    live // drives Turn.Live
	// turnCtx ends at deadline, the turn's wall time, which waits for approval push back;
	// cancel releases it.
	turnCtx  context.Context
	cancel   context.CancelFunc
	deadline time.Time
	asked    []string   // calls a person approved in this Run
	files    *fileCache // the shared files' content, read once a Run; nil without Turn.Files
}

// Run runs one turn: it repairs the history (a synthetic tool_result for every tool_call the
// log has no result for), then calls the model until it answers without tool calls, appending
// as it goes: assistant_message (with its tool_call events, in one append), each tool_result,
// context_summary when the history is over budget, and finally the reply assistant_message
// (no ToolCallIDs). After the first reply of the session it appends a title.
//
// Model failures do not make Run fail: a permanent error (400, 401, ...) or a transient one
// that outlasts the retries ends the turn with an error event and a short, honest reply, as
// does the turn's wall-time limit; Reply.Status is then "error". Run returns an error, and no
// reply, only when the log fails (session.ErrFenced after a lost lease, for one) or ctx ends;
// what it appended before stays, and the next turn repairs it.
func (b *Brain) Run(ctx context.Context, t Turn) (Reply, error) {
	if t.Log == nil {
		return Reply{}, errors.New("run turn: no log")
	}
	ctx = conversation(ctx, t.Session.ID)
	st := b.begin(ctx, t)
	defer func() { st.cancel() }()
	first, r, done, err := b.resume(ctx, st)
	if done || err != nil {
		return r, err
	}
	for round := first; ; round++ {
		if r, done, err := b.round(ctx, st, round); done || err != nil {
			return r, err
		}
	}
}

// begin is the state of one Run of t: its tools, budgets, system prompt and wall time.
func (b *Brain) begin(ctx context.Context, t Turn) *turn {
	st := &turn{
		Turn:    t,
		through: t.Through,
		log:     b.log.With().Ctx(ctx).Str("session_id", t.Session.ID.String()).Int64("turn", t.TurnSeq).Logger(),
		budget:  outputBudget{perResult: b.cfg.MaxToolOutput, left: b.cfg.MaxTurnOutput},
		repeats: repeats{limit: b.cfg.RepeatLimit},
		bot:     session.Actor{Kind: session.ActorBot, ID: cmp.Or(t.Where.BotUserID, "logbook")},
		live:    live{l: t.Live},
		files:   newFileCache(t.Files),
	}
	st.deadline = b.now().Add(b.cfg.MaxTurnTime)
	st.turnCtx, st.cancel = b.wallTime(ctx, st.deadline)
	b.refreshTools(st.turnCtx, st)
	st.system = systemPrompt(t.Where, st.tools, b.now(), t.Guidance)
	return st
}

// resume repairs the history and goes on with a round whose calls were waiting for a decision
// when the turn's cell went away, where it stopped; the calls of other rounds left without a
// result are repaired. first is the round the turn goes on with; done says the turn ended (r
// is its reply).
func (b *Brain) resume(ctx context.Context, st *turn) (first int, r Reply, done bool, err error) {
	evs, err := b.load(ctx, st.Log)
	if err != nil {
		return 0, Reply{}, true, fmt.Errorf("run turn %d: %w", st.TurnSeq, err)
	}
	resume, cutLast := waitingRound(evs, st.TurnSeq)
	if err := b.repair(ctx, st, evs, resume); err != nil {
		return 0, Reply{}, true, err
	}
	if len(resume) == 0 {
		return 0, Reply{}, false, nil
	}
	st.log.Info().Int("calls", len(resume)).Msg("resuming a round that waited for approval")
	r, done, err = b.runRound(ctx, st, resume, cutLast)
	return 1, r, done, err
}

// round is one model call and, when it asks for tools, their round: steered messages taken
// up, the history rebuilt from the log (summarised when over budget), the call, then the
// reply or the tool calls run. done says the turn ended (r is its reply).
func (b *Brain) round(ctx context.Context, st *turn, round int) (r Reply, done bool, err error) {
	t := st.Turn
	turnCtx := st.turnCtx
	if err := steer(ctx, st, round); err != nil {
		return Reply{}, true, err
	}
	evs, err := b.load(ctx, t.Log)
	if err != nil {
		return Reply{}, true, fmt.Errorf("run turn %d: %w", t.TurnSeq, err)
	}
	st.files.load(turnCtx, evs, st.log) // only files not read yet in this Run
	h, err := st.history(evs)
	if err != nil {
		return ended(b.fail(ctx, st, "context", "bad_event",
			"I could not read this thread's history, so I stopped. An operator can find the details in the log.", err))
	}
	if !h.Content {
		return ended(b.reply(ctx, st, EmptyMentionReply, nil, session.StatusOK, "", true))
	}
	if r, ok := answered(evs, h, st.through, t.TurnSeq); ok {
		// The process died after appending this turn's reply: deliver that one.
		st.log.Info().Int64("reply_seq", r.Event.Seq).Msg("turn already answered")
		return r, true, nil
	}
	b.refreshTools(turnCtx, st) // a server's list may have changed
	tools, noTools := st.toolsFor(h), round >= b.cfg.MaxRounds
	st.system = systemPrompt(t.Where, tools, b.now(), t.Guidance)
	tokens, method := b.measure(turnCtx, st, Request{System: st.system, Messages: h.Messages, Tools: tools})
	if tokens > int64(b.cfg.ContextBudget) {
		st.log.Info().Int64("tokens", tokens).Int("budget", b.cfg.ContextBudget).Str("method", method).
			Msg("history over the context budget; summarising older turns")
		if h, err = b.compact(turnCtx, st, evs, h, tokens, method); err != nil {
			return Reply{}, true, err
		}
		tools = st.toolsFor(h) // a new summary offers read_log
		st.system = systemPrompt(t.Where, tools, b.now(), t.Guidance)
	}
	tools, noTools = declared(h, tools, noTools)
	if b.cfg.EditHistory != nil {
		h.Messages = b.cfg.EditHistory(h.Messages)
	}
	if err := validate(h.Messages, true); err != nil {
		return ended(b.fail(ctx, st, "context", "invalid_history",
			"I could not put this thread's history into a form the model accepts, so I stopped. The problem is recorded in the log.", err))
	}
	req := Request{
		Purpose:   PurposeReply,
		System:    st.system,
		Messages:  h.Messages,
		Tools:     tools,
		NoTools:   noTools,
		MaxTokens: b.cfg.MaxTokens,
		OnText:    st.live.onText(), // nil without a live view: no streaming
	}
	resp, usage, err := b.call(turnCtx, st.Meter, req, &st.live)
	if ob := (*OverBudgetError)(nil); errors.As(err, &ob) {
		return ended(b.fail(ctx, st, "budget", ob.Code, ob.Reply, err)) // budget.go
	}
	if err != nil {
		r, err := b.modelFailure(ctx, turnCtx, st, err, usage)
		if err == nil {
			st.live.endRound(true)
		}
		return r, true, err
	}
	stop := classifyStop(resp.StopReason)
	switch stop {
	case stopRefused:
		// Whatever came with a refusal is not an answer, and its tool calls are not run.
		st.live.discard()
		r, err := b.failUsage(ctx, st, "model", resp.StopReason, refusalText(resp),
			fmt.Errorf("the model stopped with %q", resp.StopReason), usage)
		if err == nil {
			st.live.endRound(true)
		}
		return r, true, err
	case stopUnknown:
		st.log.Warn().Str("stop_reason", resp.StopReason).Msg("unknown stop reason; taking the response as complete")
	}
	if len(resp.ToolUses) == 0 || req.NoTools {
		return ended(b.answer(ctx, turnCtx, st, req, resp, usage, stop, round, evs))
	}
	// Ids are checked against every tool_call of the session, not only the events after
	// the summary: a repeated id would make the append idempotent and lose the call.
	prior, err := t.Log.Events(ctx, session.Range{Types: []session.Type{session.TypeToolCall}})
	if err != nil {
		return Reply{}, true, fmt.Errorf("run turn %d: %w", t.TurnSeq, err)
	}
	uses := uniqueIDs(resp.ToolUses, prior, t.TurnSeq, round)
	if err := b.appendCalls(ctx, st, resp.Text, uses, usage); err != nil {
		return Reply{}, true, err
	}
	st.live.endRound(false)
	if r, done, err := b.runRound(ctx, st, uses, stop == stopCut); done || err != nil {
		return r, true, err
	}

	return Reply{}, false, nil
}

// steer hands the model, from the round's second call on, the messages written while the
// turn ran (Turn.Steer): they reach it at its next call.
func steer(ctx context.Context, st *turn, round int) error {
	t := st.Turn
	if round == 0 || t.Steer == nil {
		return nil
	}
	through, err := t.Steer(ctx, st.through)
	if err != nil {
		return fmt.Errorf("run turn %d: steer: %w", t.TurnSeq, err)
	}
	st.through = max(st.through, through)
	return nil
}

// answer appends the round's text as the turn's reply: a reply the output limit cut is
// continued (and marked when still cut), an empty one says why. The title follows unless it
// is deferred.
func (b *Brain) answer(ctx, turnCtx context.Context, st *turn, req Request, resp Response, usage *session.Usage, stop stopKind, round int, evs []session.Event) (Reply, error) {
	text, cutOff := resp.Text, false
	if stop == stopCut || stop == stopPaused {
		text, usage, cutOff = b.continueReply(turnCtx, st, req, resp, usage)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		text = "(The model returned an empty reply.)"
		if cutOff {
			text = fmt.Sprintf("I have no answer: the model spent its output limit (%d tokens) before writing any reply. Ask me again, perhaps for something shorter.", b.cfg.MaxTokens)
		} else if round >= b.cfg.MaxRounds {
			text = fmt.Sprintf("I stopped after %d rounds of tool calls, the limit for one turn, without a final answer. Ask me to continue.", b.cfg.MaxRounds)
		}
	} else if cutOff {
		text += b.cutNote()
	}
	r, err := b.reply(ctx, st, text, usage, session.StatusOK, "", false)
	if err != nil {
		return r, err
	}
	st.live.endRound(true)
	if !b.cfg.DeferTitle {
		b.maybeTitle(turnCtx, st, evs, r)
	}
	return r, nil
}

// ended is a reply that ends the turn, for round.
func ended(r Reply, err error) (Reply, bool, error) { return r, true, err }

// runRound runs a round's tool calls in order and appends each result; cutLast says the output
// limit struck while the model wrote the last call, which is then not run. done reports that
// the turn ended (r is its reply): a tool failed the same way too often, or the wall time ran
// out.
func (b *Brain) runRound(ctx context.Context, st *turn, uses []ToolUse, cutLast bool) (r Reply, done bool, err error) {
	t := st.Turn
	for _, use := range uses {
		st.live.tool(use, ToolPending, "")
	}
	var repeated *ToolUse
	for i, use := range uses {
		var out Outcome
		if cutLast && i == len(uses)-1 {
			// The output limit struck while the model wrote this call (the last one): its
			// input may be incomplete, so it is not run. The calls before it are whole.
			out = b.cutToolResult(use.Name)
			st.log.Warn().Str("tool", use.Name).Str("call_id", use.ID).Msg("tool call cut by the output limit; not run")
		} else {
			allowed, result, err := b.approve(ctx, st, use)
			if err != nil {
				return Reply{}, false, err
			}
			if allowed {
				if err := b.markStarted(ctx, st, use); err != nil {
					return Reply{}, false, err
				}
				st.live.status(st.doing(use))
				st.live.tool(use, ToolInProgress, "")
				out = b.traceTool(st.turnCtx, st, use, &st.budget)
			} else {
				content, _ := st.budget.fit(result)
				out = Outcome{Content: content, IsError: true}
			}
		}
		if ctx.Err() != nil {
			return Reply{}, false, fmt.Errorf("run turn %d: %w", t.TurnSeq, ctx.Err())
		}
		if err := b.appendResult(ctx, st, use, out); err != nil {
			return Reply{}, false, err
		}
		if out.IsError {
			st.live.tool(use, ToolError, out.Content)
		} else {
			st.live.tool(use, ToolComplete, out.Content)
		}
		if st.repeats.record(use, out) && repeated == nil {
			repeated = &uses[i]
		}
	}
	if repeated != nil {
		r, err := b.fail(ctx, st, "tool", "repeated_tool_failure", fmt.Sprintf(
			"I stopped: I called %s %d times with the same input and it failed the same way each time, so trying again would not help. "+
				"The calls and their results are in this thread's log.", repeated.Name, b.cfg.RepeatLimit),
			fmt.Errorf("%s call %s failed identically %d times in turn %d", repeated.Name, repeated.ID, b.cfg.RepeatLimit, t.TurnSeq))
		return r, true, err
	}
	if st.turnCtx.Err() != nil {
		r, err := b.fail(ctx, st, "turn", "wall_time",
			fmt.Sprintf("I stopped: this turn reached its time limit (%s) before I finished. Ask me to continue.", b.cfg.MaxTurnTime),
			st.turnCtx.Err())
		return r, true, err
	}
	return Reply{}, false, nil
}

// approve asks the turn's Approve whether use may run. The time spent waiting for a person is
// given back to the turn's wall time. st.asked records the calls a person approved.
func (b *Brain) approve(ctx context.Context, st *turn, use ToolUse) (bool, string, error) {
	if st.Approve == nil {
		return true, "", nil
	}
	start := b.now() // the turn's deadline is on the Brain's clock
	d, err := st.Approve(ctx, use)
	if err != nil {
		return false, "", fmt.Errorf("run turn %d: approval of %s: %w", st.TurnSeq, use.ID, err)
	}
	if waited := b.now().Sub(start); waited > time.Millisecond {
		// Even when the wall time ran out while a person decided: the decision is honoured.
		st.cancel()
		st.deadline = st.deadline.Add(waited)
		st.turnCtx, st.cancel = b.wallTime(ctx, st.deadline)
	}
	if d.Allow {
		if d.Asked {
			st.asked = append(st.asked, use.ID)
		}
		return true, "", nil
	}
	return false, nonEmpty(d.Result, "this call was not approved; it did not run"), nil
}

// markStarted appends tool_started for a call a person approved, just before it runs: should
// the turn's cell go away while it runs, the next one repairs it instead of running it again.
func (b *Brain) markStarted(ctx context.Context, st *turn, use ToolUse) error {
	if !slices.Contains(st.asked, use.ID) {
		return nil
	}
	if _, err := st.Log.Append(ctx, session.NewEvent{Type: session.TypeToolStarted, Actor: session.Actor{Kind: session.ActorSystem, ID: "brain"},
		IdempotencyKey: "tool_started:" + use.ID, Payload: session.ToolStarted{CallID: use.ID}}); err != nil {
		return fmt.Errorf("run turn %d: mark %s started: %w", st.TurnSeq, use.ID, err)
	}
	return nil
}

// waitingRound returns the calls of this turn's last round that are still to run because
// the first of them was waiting for approval (an approval_requested, no tool_started, no
// result) when the turn's cell went away: that call and the ones after it, which never
// started. cutLast says the round's model answer was cut by the output limit, and its last
// call is among them (it is not run). nil when there is no such round.
func waitingRound(evs []session.Event, turnSeq int64) (uses []ToolUse, cutLast bool) {
	i := sort.Search(len(evs), func(i int) bool { return evs[i].Seq > turnSeq })
	th, folded := thread.Fold(evs[i:]), thread.FoldTurns(evs)
	done := map[string]bool{}
	var last *session.AssistantMessage
	for _, it := range th.Items {
		switch {
		case it.Kind == thread.KindTool && it.Tool.Result != nil:
			done[it.Tool.Result.CallID] = true
		case it.Kind == thread.KindAssistant && len(it.Assistant.ToolCallIDs) > 0:
			last = it.Assistant
		}
	}
	if last == nil {
		return nil, false
	}
	ids := last.ToolCallIDs
	for i, id := range ids {
		if done[id] {
			continue
		}
		if a, asked := folded.Approval(id); !asked || a.Event.Seq <= turnSeq || a.Started {
			return nil, false // it was running: its outcome is unknown (repair)
		}
		for _, id := range ids[i:] {
			if tool, ok := th.Call(id); ok && tool.Call != nil && !done[id] {
				c := tool.Call
				uses = append(uses, ToolUse{ID: c.CallID, Name: c.Name, Input: c.Input})
			}
		}
		cut := last.Usage != nil && classifyStop(last.Usage.StopReason) == stopCut
		return uses, cut && len(uses) > 0 && uses[len(uses)-1].ID == ids[len(ids)-1]
	}
	return nil, false
}

// Title appends the session's title, once, after reply (the turn's stored reply) has been
// delivered: for callers that set Config.DeferTitle. Failures are logged, never returned.
func (b *Brain) Title(ctx context.Context, t Turn, reply session.Event) {
	var msg session.AssistantMessage
	if t.Log == nil || reply.Decode(&msg) != nil {
		return
	}
	ctx = conversation(ctx, t.Session.ID)
	st := &turn{
		Turn:    t,
		through: t.Through,
		log:     b.log.With().Ctx(ctx).Str("session_id", t.Session.ID.String()).Int64("turn", t.TurnSeq).Logger(),
		bot:     session.Actor{Kind: session.ActorBot, ID: cmp.Or(t.Where.BotUserID, "logbook")},
	}
	evs, err := b.load(ctx, t.Log)
	if err != nil {
		return
	}
	before := evs[:0:0]
	for _, e := range evs {
		if e.Seq < reply.Seq {
			before = append(before, e)
		}
	}
	b.maybeTitle(ctx, st, before, Reply{Event: reply, Message: msg})
}

// declared is the tools a request declares for h: the APIs want every tool the history calls
// declared. When the turn offers none and the history shows tool calls (made when a sandbox
// was there), those are declared and none may be called (noTools); otherwise the tools the
// history used that this turn does not offer (a sandbox gone, a part or server no longer
// offered) are added, and calling one answers with an error result.
func declared(h history, tools []ToolSpec, noTools bool) ([]ToolSpec, bool) {
	missing := undeclaredTools(h, tools)
	if len(tools) == 0 && historyUsesTools(h) {
		return missing, true
	}
	if len(missing) > 0 {
		return append(slices.Clip(tools), missing...), noTools
	}
	return tools, noTools
}

// undeclaredTools is the specs of tools the history calls that tools lacks: the brain's own
// as they are, any other as a tool no longer offered.
func undeclaredTools(h history, tools []ToolSpec) []ToolSpec {
	var missing []ToolSpec
	for _, m := range h.Messages {
		for _, b := range m.Blocks {
			if b.ToolUse == nil || hasTool(tools, b.ToolUse.Name) || hasTool(missing, b.ToolUse.Name) {
				continue
			}
			missing = append(missing, ownSpec(b.ToolUse.Name))
		}
	}
	return missing
}

// ownSpec is the spec of the brain's own tool name, or of a tool no longer offered.
func ownSpec(name string) ToolSpec {
	own := append(handsTools(nil, 0), readLogTool(nil, nil))
	if i := slices.IndexFunc(own, func(t Tool) bool { return t.Spec().Name == name }); i >= 0 {
		return own[i].Spec()
	}
	return goneSpec(name)
}

// history is the turn's conversation from evs (the session's events, from load): buildHistory,
// and for a fork the conversation it continues (Turn.Prefix) before it — unless a
// context_summary of the fork's own is in force, which took the prefix in when it was written.
func (st *turn) history(evs []session.Event) (history, error) {
	h, err := buildHistory(evs, st.historyOptions())
	if err != nil || len(st.Prefix) == 0 || h.Summary.ToSeq > 0 {
		return h, err
	}
	return withPrefix(st.Prefix, h, historyOptions{BotName: st.Where.BotName, BotUserID: st.Where.BotUserID, Sandbox: st.Hands != nil})
}

func (st *turn) historyOptions() historyOptions {
	return historyOptions{Through: st.through, BotName: st.Where.BotName, BotUserID: st.Where.BotUserID,
		Files: st.files, Sandbox: st.Hands != nil}
}

// load reads the events the history needs: those after the newest context_summary's range (the
// summary included), or all of them.
func (b *Brain) load(ctx context.Context, log Log) ([]session.Event, error) {
	sums, err := log.Events(ctx, session.Range{Types: []session.Type{session.TypeContextSummary}, Desc: true, Limit: 1})
	if err != nil {
		return nil, err
	}
	var from int64
	if len(sums) == 1 {
		var s session.ContextSummary
		if sums[0].Decode(&s) == nil && s.ToSeq < sums[0].Seq {
			from = s.ToSeq + 1
		}
	}
	return log.Events(ctx, session.Range{From: from})
}

// answered returns the turn's reply when the log already holds it: the history ends with the
// assistant, and the last assistant_message is a reply written after the turn's last user
// message by this turn (its Turn is turnSeq; a reply without Turn counts when its seq is above
// turnSeq). A reply of an earlier turn is never this turn's answer, even when its seq is above
// a message this turn answers (that message arrived while the earlier turn ran). turnSeq 0
// (no turn_started) accepts any reply.
func answered(evs []session.Event, h history, through, turnSeq int64) (Reply, bool) {
	if n := len(h.Messages); n == 0 || h.Messages[n-1].Role != RoleAssistant {
		return Reply{}, false
	}
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		if (e.Type == session.TypeUserMessage || e.Type == session.TypeFollowupSignal) && (through == 0 || e.Seq <= through) {
			return Reply{}, false
		}
		if e.Type != session.TypeAssistantMessage {
			continue
		}
		var m session.AssistantMessage
		if e.Decode(&m) != nil || !m.Reply() {
			return Reply{}, false
		}
		if turnSeq > 0 && m.Turn != turnSeq && (m.Turn != 0 || e.Seq < turnSeq) {
			return Reply{}, false
		}
		return Reply{Event: e, Message: m, Status: session.StatusOK}, true
	}
	return Reply{}, false
}

func historyUsesTools(h history) bool {
	for _, m := range h.Messages {
		if hasToolUse(m) {
			return true
		}
	}
	return false
}

// repair appends a synthetic error tool_result, in call order, for every tool_call the log has
// no result for: the process died between the call and its result, and a provider rejects every
// later request whose tool_use has no tool_result after it. The calls are not run
// again: their outcome is unknown and they may not be idempotent.
func (b *Brain) repair(ctx context.Context, st *turn, evs []session.Event, resume []ToolUse) error {
	th, folded := thread.Fold(evs), thread.FoldTurns(evs) // the calls and their results; the decisions that kept calls from running
	calls := map[string]*thread.Tool{}
	for _, it := range th.Items {
		if it.Kind == thread.KindTool && it.Tool.Call != nil {
			calls[it.Tool.Call.CallID] = it.Tool
		}
	}
	done := map[string]bool{}
	for _, u := range resume {
		done[u.ID] = true // they go on where they stopped
	}
	var fix []session.NewEvent
	var rerun []ToolUse
	for _, it := range th.Items {
		if it.Kind != thread.KindAssistant {
			continue
		}
		for _, id := range it.Assistant.ToolCallIDs {
			call, ok := calls[id]
			if !ok || call.Result != nil || done[id] {
				continue
			}
			done[id] = true
			if use, ok := st.rerunnable(*call.Call); ok && !keptFromRunning(folded, id) {
				rerun = append(rerun, use) // read-only by the server's word: safe to repeat
				continue
			}
			r := session.ToolResult{CallID: id, Content: interruptedResult, IsError: true, Synthetic: true}
			if dec, p, ok := folded.Decision(id); ok && p.Decision != session.DecisionApproved {
				// Not run, and the log says why: no outcome is unknown.
				r = session.ToolResult{CallID: id, Content: notRun(p.Decision, dec.Actor.ID), IsError: true, Synthetic: true}
			} else if out, ok := st.recovered(evs, *call.Call); ok {
				// The tool's own record says what the call did before the process died (a file
				// attach_file shared): the model must not do it again.
				r = session.ToolResult{CallID: id, Content: out.Content, IsError: out.IsError, Synthetic: true}
			}
			fix = append(fix, session.NewEvent{
				Type:           session.TypeToolResult,
				Actor:          session.Actor{Kind: session.ActorSystem, ID: "brain"},
				Payload:        r,
				IdempotencyKey: "tool_result:" + id,
			})
		}
	}
	if len(fix) > 0 {
		st.log.Warn().Int("calls", len(fix)).Msg("tool calls without results: appending interrupted results")
		if _, err := st.Log.Append(ctx, fix...); err != nil {
			return fmt.Errorf("run turn %d: append interrupted tool results: %w", st.TurnSeq, err)
		}
	}
	for _, use := range rerun {
		st.log.Info().Str("tool", use.Name).Str("call_id", use.ID).Msg("read-only MCP call without a result: calling it again")
		if err := b.appendResult(ctx, st, use, b.traceTool(st.turnCtx, st, use, &st.budget)); err != nil {
			return err
		}
	}
	return nil
}

// notRun is the result of a call a decision kept from running.
func notRun(decision, by string) string {
	switch decision {
	case session.DecisionCanceled:
		return "not run: the turn was stopped by <@" + by + "> while the call waited for approval"
	case session.DecisionTimeout:
		return "not run: nobody approved it within the approval timeout (a timeout counts as a denial)"
	}
	return "not run: <@" + by + "> denied it"
}

// uniqueIDs gives every tool use an id that is non-empty and new to the session (some local
// models repeat or omit ids); the ids of well-behaved providers are kept.
func uniqueIDs(uses []ToolUse, evs []session.Event, turnSeq int64, round int) []ToolUse {
	taken := map[string]bool{}
	for _, e := range evs {
		if e.Type == session.TypeToolCall {
			var c session.ToolCall
			if e.Decode(&c) == nil {
				taken[c.CallID] = true
			}
		}
	}
	out := make([]ToolUse, len(uses))
	for i, u := range uses {
		if u.ID == "" || taken[u.ID] {
			u.ID = fmt.Sprintf("call_t%d_r%d_%d", turnSeq, round, i)
		}
		taken[u.ID] = true
		out[i] = u
	}
	return out
}

func (b *Brain) appendCalls(ctx context.Context, st *turn, text string, uses []ToolUse, usage *session.Usage) error {
	ids := make([]string, len(uses))
	evs := make([]session.NewEvent, 0, len(uses)+1)
	evs = append(evs, session.NewEvent{}) // the assistant message, below
	for i, u := range uses {
		ids[i] = u.ID
		evs = append(evs, session.NewEvent{
			Type:           session.TypeToolCall,
			Actor:          st.bot,
			Payload:        st.toolCall(u),
			IdempotencyKey: "tool_call:" + u.ID,
		})
	}
	evs[0] = session.NewEvent{
		Type:    session.TypeAssistantMessage,
		Actor:   st.bot,
		Payload: session.AssistantMessage{Text: text, ToolCallIDs: ids, Usage: usage, Turn: st.TurnSeq},
	}
	if _, err := st.Log.Append(ctx, evs...); err != nil {
		return fmt.Errorf("run turn %d: append tool calls: %w", st.TurnSeq, err)
	}
	return nil
}

func (b *Brain) appendResult(ctx context.Context, st *turn, use ToolUse, out Outcome) error {
	actor := session.Actor{Kind: session.ActorSystem, ID: "brain"}
	if out.FromHands {
		actor = session.Actor{Kind: session.ActorSandbox, ID: "sandbox"}
	}
	p := session.ToolResult{
		CallID: use.ID, Content: out.Content, IsError: out.IsError, Truncated: out.Truncated,
		ExitCode: out.ExitCode, DurationMS: out.Duration.Milliseconds(),
	}
	if c := st.toolCall(use); c.Server != "" {
		p.Server, p.Tool = c.Server, c.Tool
	}
	if len(out.Images) > 0 {
		p.Images = b.keepImages(ctx, st, &out)
		p.Content = out.Content
	}
	ev := session.NewEvent{
		Type:           session.TypeToolResult,
		Actor:          actor,
		Payload:        p,
		IdempotencyKey: "tool_result:" + use.ID,
	}
	if _, err := st.Log.Append(ctx, ev); err != nil {
		return fmt.Errorf("run turn %d: append result of %s: %w", st.TurnSeq, use.ID, err)
	}
	return nil
}

// reply appends the turn's reply.
// own says logbook wrote text, not the model (session.AssistantMessage.Own).
func (b *Brain) reply(ctx context.Context, st *turn, text string, usage *session.Usage, status, reason string, own bool) (Reply, error) {
	m := session.AssistantMessage{Text: text, Usage: usage, Turn: st.TurnSeq, Own: own}
	evs, err := st.Log.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage, Actor: st.bot, Payload: m})
	if err != nil {
		return Reply{}, fmt.Errorf("run turn %d: append reply: %w", st.TurnSeq, err)
	}
	return Reply{Event: evs[0], Message: m, Status: status, Reason: reason, Through: st.through}, nil
}

// fail ends the turn early: a log line and an error event with the detail for operators, then
// a reply that says what happened in a plain sentence. replyText is fixed text chosen by the
// caller and never carries the cause's text (ids, SQL, Go error chains): that stays in the log
// line and the error event.
func (b *Brain) fail(ctx context.Context, st *turn, stage, code, replyText string, cause error) (Reply, error) {
	return b.failUsage(ctx, st, stage, code, replyText, cause, nil)
}

// failUsage is fail for a turn that ends on a model call's answer, whose usage the reply keeps.
func (b *Brain) failUsage(ctx context.Context, st *turn, stage, code, replyText string, cause error, usage *session.Usage) (Reply, error) {
	if ctx.Err() != nil {
		return Reply{}, fmt.Errorf("run turn %d: %w", st.TurnSeq, ctx.Err())
	}
	st.log.Error().Err(cause).Str("stage", stage).Str("code", code).Msg("turn ended early")
	msg := clip.Text(cause.Error(), 300)
	var pe *ProviderError
	if errors.As(cause, &pe) {
		msg = clip.Text(pe.Error(), 300)
	}
	ev := session.NewEvent{
		Type:    session.TypeError,
		Actor:   session.Actor{Kind: session.ActorSystem, ID: "brain"},
		Payload: session.ErrorEvent{Stage: stage, Code: code, Message: msg},
	}
	if _, err := st.Log.Append(ctx, ev); err != nil {
		return Reply{}, fmt.Errorf("run turn %d: append error: %w", st.TurnSeq, err)
	}
	return b.reply(ctx, st, replyText, usage, session.StatusError, code, true)
}

// modelFailure ends the turn after a model call failed for good; spent is what its failed
// attempts used (nil: none reached the model), which the error reply keeps as its usage.
func (b *Brain) modelFailure(ctx, turnCtx context.Context, st *turn, err error, spent *session.Usage) (Reply, error) {
	if ctx.Err() != nil {
		return Reply{}, fmt.Errorf("run turn %d: %w", st.TurnSeq, ctx.Err())
	}
	var pe *ProviderError
	if !errors.As(err, &pe) {
		if turnCtx.Err() != nil {
			return b.failUsage(ctx, st, "turn", "wall_time",
				fmt.Sprintf("I stopped: this turn reached its time limit (%s) while waiting for the model. Ask me to continue.", b.cfg.MaxTurnTime), err, spent)
		}
		return b.failUsage(ctx, st, "model", "error", "I could not get an answer from the model; the error is recorded in the log.", err, spent)
	}
	code, text := failureText(pe, b.cfg.MaxTokens)
	return b.failUsage(ctx, st, "model", code, text, err, spent)
}

// failureText is the error code and the user-facing sentence for a failed model call: what
// happened, and what a person can do about it (which setting, which limit). A request the
// provider refused is never called unreachable; the provider's own message stays in the log
// (the error event), never in the thread.
func failureText(pe *ProviderError, maxTokens int64) (code, text string) {
	code = fmt.Sprintf("http_%d", pe.Status)
	refused := fmt.Sprintf("I can't answer: the model provider (%s) rejected the request (HTTP %d%s)", pe.Provider, pe.Status, codeSuffix(pe.Code))
	switch {
	case pe.Code == CodeNotSent:
		return CodeNotSent, fmt.Sprintf("I can't answer: logbook could not send the request to the model provider (%s); it was refused before it left. "+
			"An operator can find why in the log; check LOGBOOK_MODEL, LOGBOOK_MAX_OUTPUT_TOKENS (now %d) and LOGBOOK_STREAM.", pe.Provider, maxTokens)
	case pe.Status == 401 || pe.Status == 403:
		return code, fmt.Sprintf(
			"I can't answer: the model provider (%s) refused logbook's credentials (HTTP %d). An operator needs to check the API key (%s).",
			pe.Provider, pe.Status, providerSetting(pe.Provider, "API_KEY"))
	case pe.Transient && pe.Status == 0:
		return "unreachable", fmt.Sprintf("I can't answer right now: the model provider (%s) did not respond (%s). Please try again in a few minutes; "+
			"if it keeps happening, an operator should check %s and the network.", pe.Provider, pe.Message, providerSetting(pe.Provider, "BASE_URL"))
	case pe.Status == 429 && pe.Code == "insufficient_quota":
		return code, fmt.Sprintf("I can't answer: the model provider (%s) says the account's quota is used up (HTTP 429, insufficient_quota). "+
			"An operator needs to add credit or raise the plan's limit.", pe.Provider)
	case pe.Status == 429:
		return code, fmt.Sprintf("I can't answer right now: the model provider (%s) is rate-limiting logbook (HTTP 429%s) and retrying did not help. "+
			"Please try again in a few minutes; an operator can raise the account's rate limit.", pe.Provider, codeSuffix(pe.Code))
	case pe.Transient:
		return code, fmt.Sprintf(
			"I can't answer right now: the model provider (%s) is unavailable (HTTP %d%s) and retrying did not help. Please try again in a few minutes.",
			pe.Provider, pe.Status, codeSuffix(pe.Code))
	}
	return code, refused + ": " + refusalHint(pe, maxTokens)
}

// refusalHint says, for a request the provider refused, what a person can do.
func refusalHint(pe *ProviderError, maxTokens int64) string {
	msg := strings.ToLower(pe.Message)
	switch {
	case pe.Code == "context_length_exceeded" || strings.Contains(msg, "prompt is too long") ||
		strings.Contains(msg, "context length") || strings.Contains(msg, "context window"):
		return "this thread is longer than the model's context window. Start a new thread, or an operator can set " +
			"LOGBOOK_CONTEXT_BUDGET below the model's window so that older turns are summarised first."
	case pe.Status == 413 || pe.Code == "request_too_large":
		return "the request is larger than the provider takes; files shared in the thread count. An operator can lower " +
			"LOGBOOK_FILE_MAX, or share smaller files (or fewer) in a new thread."
	case strings.Contains(msg, "max_tokens") || strings.Contains(msg, "max_completion_tokens") || strings.Contains(msg, "output tokens"):
		return fmt.Sprintf("the output limit is more than this model allows. An operator needs to lower LOGBOOK_MAX_OUTPUT_TOKENS (now %d) "+
			"to the model's maximum.", maxTokens)
	case pe.Code == "unsupported_parameter" || pe.Code == "unsupported_value":
		return "the model server does not take a parameter logbook sends. An operator needs to check LOGBOOK_MODEL against what the server at " +
			providerSetting(pe.Provider, "BASE_URL") + " serves."
	case pe.Status == 404 || pe.Code == "not_found_error" || pe.Code == "model_not_found":
		return "it does not know the model. An operator needs to fix LOGBOOK_MODEL (or " + providerSetting(pe.Provider, "BASE_URL") + ")."
	}
	return "an operator can find the provider's message in the log (the error event) and check LOGBOOK_MODEL and " +
		providerSetting(pe.Provider, "BASE_URL") + "."
}

// providerSetting is the provider's setting with the suffix: ANTHROPIC_API_KEY,
// OPENAI_BASE_URL, ...
func providerSetting(provider, suffix string) string {
	if provider == "anthropic" {
		return "ANTHROPIC_" + suffix
	}
	return "OPENAI_" + suffix
}

func codeSuffix(code string) string {
	if code == "" {
		return ""
	}
	return ", " + code
}

// call makes one model call, retrying transient errors with exponential backoff and full
// jitter (at least the server's Retry-After), within the attempts of the retry policy and the
// time left in ctx. lv, when not nil, is told of each attempt ("thinking"), of a failed
// attempt's text being void (Restart) and of a retry's wait ("retrying"); req.OnText is then
// its onText.
//
// Every attempt is charged (Meter): one that failed after the provider accepted it with what
// was sent and what streamed (partialUsage). With an error, the usage returned is the sum of
// the failed attempts' (nil when none reached the model), for the turn's error reply to keep.
func (b *Brain) call(ctx context.Context, m Meter, req Request, lv *live) (Response, *session.Usage, error) {
	p := b.cfg.Provider
	var spent *session.Usage // the failed attempts'
	for attempt := 1; ; attempt++ {
		settle, err := b.admit(ctx, m, req) // budget.go: before every call, retries included
		if err != nil {
			return Response{}, spent, err
		}
		start := b.now()
		lv.status("thinking")
		resp, err := b.complete(ctx, p, req)
		if err != nil {
			part := resp.Partial
			if part == nil && waitCut(ctx, err) {
				part = &Partial{} // the provider had the request: its input is charged
			}
			u := b.partialUsage(ctx, req, part, err, b.now().Sub(start))
			settle(ctx, u) // nil: it never reached the model, nothing to charge
			spent = addUsage(spent, u)
			lv.callFailed()
		} else {
			lv.callDone()
		}
		if err == nil {
			u := &session.Usage{
				Provider: p.Name(), Model: cmp.Or(resp.Model, p.Model()),
				InputTokens: resp.InputTokens, OutputTokens: resp.OutputTokens,
				CacheReadTokens: resp.CacheReadTokens, CacheWriteTokens: resp.CacheWriteTokens,
				StopReason: resp.StopReason, LatencyMS: b.now().Sub(start).Milliseconds(),
				RequestHash: RequestHash(req),
			}
			settle(ctx, u)
			return resp, u, nil
		}
		var pe *ProviderError
		if !errors.As(err, &pe) || !pe.Transient || attempt >= b.cfg.Retry.Attempts {
			return Response{}, spent, err
		}
		d := b.backoff(attempt)
		if pe.RetryAfter > d {
			d = pe.RetryAfter
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
			return Response{}, spent, err
		}
		b.log.Warn().Str("provider", pe.Provider).Int("status", pe.Status).Str("code", pe.Code).
			Int("attempt", attempt).Dur("backoff", d).Msg("transient model error, retrying")
		lv.status("retrying")
		if err := b.cfg.Sleep(ctx, d); err != nil {
			return Response{}, spent, err
		}
	}
}

// backoff is the wait after the given failed attempt (1-based): half of min(Max, Base·2^(n-1))
// plus a random part up to the other half.
func (b *Brain) backoff(attempt int) time.Duration {
	d := b.cfg.Retry.Base << min(attempt-1, 20)
	if d > b.cfg.Retry.Max || d <= 0 {
		d = b.cfg.Retry.Max
	}
	return d/2 + time.Duration(b.cfg.Jitter()*float64(d/2))
}
