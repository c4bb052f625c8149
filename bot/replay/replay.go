// Package replay re-runs a recorded session with today's code: each turn's agent (bot/brain)
// runs again with the model's answers, the tools' results and the people's approval decisions
// served from the log, and every event it would append is compared with the one recorded in
// its place. It touches no Slack, no sandbox and no model, and appends nothing: the log it
// runs against is the recording, read from the database or from an export.
//
// What it checks, turn by turn:
//
//   - the model requests: each reply request's canonical hash (brain.RequestHash) against the
//     one recorded with the call's usage (sessions recorded before the hash was kept are
//     compared by what the model was asked to do — the calls and replies — and say so);
//   - the tool calls: name, input and id, in order, and each result the turn records;
//   - the approvals asked: today's approvals policy (the deployment's, or the channel's own as
//     the turn's turn_settings recorded it) must ask a person exactly where the recording did;
//   - the replies: the text of every assistant_message, the error events of the turn.
//
// What it does not: the system prompt (the clock and the parts' guidance: turn_settings
// records what a turn ran under), the parts' own records (a pull request opened, a file
// uploaded: their tools' results are served), delivery to Slack, and titles.
//
// The what-if (whatif.go: `logbook replay --from`, `logbook eval`) is the other use of the
// recording: one turn run again from a user message with the model called for real under
// other settings, recorded as an eval record (a session of kind replay) beside the original.
package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/thread"
)

// Config is what a replay runs under.
type Config struct {
	// Brain is the agent's configuration as the deployment runs it (MaxTokens, ContextBudget,
	// MaxRounds, RepeatLimit, MaxToolOutput, …): a change there is a change of decisions.
	// Its Provider is replaced by the recording's answers; DeferTitle is set.
	Brain brain.Config
	// Where is who the bot is (BotUserID, BotName, Workspace); the channel and thread are the
	// session's.
	Where brain.Where
	// Policy is the deployment's approvals policy (LOGBOOK_TOOL_APPROVAL); a channel's own,
	// recorded in the turn's turn_settings, takes precedence. PolicyTools are the tool names a
	// channel's policy may name (nil: brain.ToolNames and the session's tools).
	Policy      bot.ToolApproval
	PolicyTools []string
	// Files reads the shared files' content by hash (the file store), so that a request
	// holding an image or a PDF hashes as it was sent; nil: files are only named, and a
	// session with shared files may differ.
	Files brain.FileReader
	// Logger gets the agent's log lines (zerolog.Nop by default).
	Logger zerolog.Logger
	// Prefix is, for a fork, the conversation it continues (session.Prefix: each ancestor's
	// events through its fork's seq), as the cell gives it to the agent; nil for a session that
	// is no fork. A fork replayed without it diverges at its first model request.
	Prefix [][]session.Event
}

// Result is a replay's outcome.
type Result struct {
	Session session.ID
	Events  int   // recorded events
	Through int64 // the last seq through which the replay is identical
	Turns   int   // turns replayed
	// Skipped are turns that ran no agent: canned replies, messages not addressed to the bot,
	// turns stopped before the model answered.
	Skipped int
	// Cut are turns the recording ends part way (stopped, or still open): compared as far as
	// they went.
	Cut int
	// Requests are the model requests compared by hash; Unhashed those recorded without one
	// (before logbook kept it), compared by their answers only.
	Requests, Unhashed int
	// ToolCalls and Approvals are the tool calls and the approvals asked that matched.
	ToolCalls, Approvals int
	Divergence           *Divergence // nil: identical
}

// Divergence is the first place where today's code decided otherwise than the recording.
type Divergence struct {
	Seq  int64 // the recorded event where the replay parted (0: after the end of its turn)
	Turn int64 // the seq of the turn's turn_started
	// What is what differs: "model request", "tool call", "approval", "reply" or "event".
	What     string
	Recorded string
	Replayed string
}

// Identical reports whether the replay made the recorded decisions throughout.
func (r Result) Identical() bool { return r.Divergence == nil }

// String is the replay's verdict, its first line "identical through seq N" or "diverged at
// seq N (turn T): what", then both sides.
func (r Result) String() string {
	var b strings.Builder
	if d := r.Divergence; d != nil {
		if d.Seq > 0 {
			fmt.Fprintf(&b, "diverged at seq %d (turn %d): %s differs\n", d.Seq, d.Turn, d.What)
		} else {
			fmt.Fprintf(&b, "diverged after the end of turn %d: %s differs\n", d.Turn, d.What)
		}
		fmt.Fprintf(&b, "  recorded: %s\n", d.Recorded)
		fmt.Fprintf(&b, "  replayed: %s\n", d.Replayed)
		fmt.Fprintf(&b, "  identical through seq %d\n", r.Through)
		return b.String()
	}
	fmt.Fprintf(&b, "identical through seq %d\n", r.Through)
	fmt.Fprintf(&b, "  %d turns replayed, %d without the agent; %d model requests compared by hash, %d tool calls, %d approvals asked\n",
		r.Turns, r.Skipped, r.Requests, r.ToolCalls, r.Approvals)
	if r.Unhashed > 0 {
		fmt.Fprintf(&b, "  %d model requests were recorded before logbook kept their hash: compared by their answers only\n", r.Unhashed)
	}
	if r.Cut > 0 {
		fmt.Fprintf(&b, "  %d turns end part way in the recording (stopped, or still open): compared as far as they went\n", r.Cut)
	}
	return b.String()
}

// ErrPurged is returned for a session whose events retention purged: there is nothing to
// re-run.
var ErrPurged = errors.New("the session's payloads were purged by retention")

// Session replays sess, whose events (all of them, oldest first) are evs.
func Session(ctx context.Context, sess session.Session, evs []session.Event, cfg Config) (Result, error) {
	res := Result{Session: sess.ID, Events: len(evs)}
	for _, e := range evs {
		if e.Payload == nil {
			return res, fmt.Errorf("replay session %s: event %d: %w", sess.ID, e.Seq, ErrPurged)
		}
	}
	if len(evs) > 0 {
		res.Through = evs[len(evs)-1].Seq
	}
	folded := thread.FoldTurns(evs)
	var starts []int
	for i, e := range evs {
		if e.Type == session.TypeTurnStarted {
			starts = append(starts, i)
		}
	}
	for n, at := range starts {
		end := len(evs)
		if n+1 < len(starts) {
			end = starts[n+1]
		}
		r, err := newRun(sess, evs, folded, at, end, cfg, &res)
		if err != nil {
			return res, err
		}
		if len(r.mine) == 0 {
			res.Skipped++
			continue
		}
		if err := r.replay(ctx); err != nil {
			return res, fmt.Errorf("replay session %s, turn %d: %w", sess.ID, evs[at].Seq, err)
		}
		if r.div != nil {
			res.Divergence = r.div
			res.Through = r.lastSame()
			return res, nil
		}
		res.Turns++
		if r.cut {
			res.Cut++
		}
	}
	return res, nil
}

// errDiverged stops the agent at the first divergence (run.div says what); errCut at the end of
// a turn the recording holds only part of.
var (
	errDiverged = errors.New("replay diverged")
	errCut      = errors.New("the recording ends here")
)

// run is the replay of one turn: the recording, the turn's bounds in it, and the agent's
// events of the turn (mine) matched so far (next).
type run struct {
	sess    session.Session
	all     []session.Event
	at, end int   // the turn's turn_started, and the next turn's (or len(all))
	through int64 // the last user message the turn set out to answer
	steered []int64
	mine    []int // indices in all of the events the agent appended in this turn
	next    int   // the first of mine not matched yet
	partial bool  // the turn was stopped, or never completed: it may end part way
	failed  bool  // a model call failed as recorded: the turn ends with the provider's words
	cut     bool  // it did
	div     *Divergence
	cfg     Config
	res     *Result
	folded  *thread.Turns
	policy  bot.ToolApproval
	own     bool
}

func newRun(sess session.Session, all []session.Event, folded *thread.Turns, at, end int, cfg Config, res *Result) (*run, error) {
	r := &run{sess: sess, all: all, folded: folded, at: at, end: end, cfg: cfg, res: res, policy: cfg.Policy}
	turn := all[at].Seq
	tn, ok := folded.Turn(turn)
	if !ok || tn.Unread {
		return nil, fmt.Errorf("turn %d cannot be read", turn)
	}
	r.through = tn.Through
	r.steered = tn.Steered
	// A turn stopped, or never completed, may end part way in the recording.
	r.partial = tn.Open || tn.Stopped != nil || tn.Status == session.StatusStopped
	for i := at + 1; i < end; i++ {
		e := all[i]
		if e.Type == session.TypeTurnSettings {
			var s session.TurnSettings
			if e.Decode(&s) == nil && s.Turn == turn && slices.Contains(s.Set, settings.Approvals) {
				p, err := bot.ParseToolApproval(s.Approvals, r.policyTools())
				if err != nil {
					p, _ = bot.ParseToolApproval("*=ask", nil) // as the turn did (bot.loadChannel)
				}
				r.policy, r.own = p, true
			}
		}
		if agents(e, turn) {
			r.mine = append(r.mine, i)
		}
	}
	return r, nil
}

// agents reports whether e, an event of turn's span, is one the agent appends: its assistant
// messages, tool calls and their results, tool_started, context summaries, its error events.
func agents(e session.Event, turn int64) bool {
	switch e.Type {
	case session.TypeAssistantMessage:
		var m session.AssistantMessage
		return e.Decode(&m) == nil && m.Turn == turn
	case session.TypeToolCall, session.TypeContextSummary:
		return true
	case session.TypeToolResult, session.TypeToolStarted, session.TypeError:
		return e.Actor.ID == "brain" || e.Actor.Kind == session.ActorSandbox
	}
	return false
}

func (r *run) policyTools() []string {
	if r.cfg.PolicyTools != nil {
		return r.cfg.PolicyTools
	}
	names := brain.ToolNames()
	for _, e := range r.all {
		var c session.ToolCall
		if e.Type == session.TypeToolCall && e.Decode(&c) == nil && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	return names
}

// lastSame is the last seq before the divergence.
func (r *run) lastSame() int64 {
	if r.div.Seq > 0 {
		return r.div.Seq - 1
	}
	return r.all[r.end-1].Seq
}

// view is the log as the agent saw it at this point of the turn: the recording up to the next
// event the agent has yet to append.
func (r *run) view() []session.Event {
	if r.next < len(r.mine) {
		return r.all[:r.mine[r.next]]
	}
	return r.all[:r.end]
}

func (r *run) diverge(seq int64, what, recorded, replayed string) {
	if r.div == nil {
		r.div = &Divergence{Seq: seq, Turn: r.all[r.at].Seq, What: what, Recorded: recorded, Replayed: replayed}
	}
}

// more is the error for an agent that goes on where the turn's recording has nothing more:
// the end of a turn that was stopped or is still open, else a divergence.
func (r *run) more(what, replayed string) error {
	if r.partial {
		r.cut = true
		return errCut
	}
	r.diverge(0, what, "(the turn ended)", replayed)
	return errDiverged
}

func (r *run) replay(ctx context.Context) error {
	bcfg := r.cfg.Brain
	bcfg.Provider = &provider{r: r}
	bcfg.DeferTitle = true
	bcfg.Logger = r.cfg.Logger
	b, err := brain.New(bcfg)
	if err != nil {
		return err
	}
	where := r.cfg.Where
	where.Channel, where.ThreadTS = r.sess.Key.Channel, r.sess.Key.ThreadTS
	if where.BotUserID == "" {
		where.BotUserID = botUser(r.all) // the agent's events name the bot as it was
	}
	t := brain.Turn{
		Session: r.sess,
		Log:     (*replayLog)(r),
		Where:   where,
		Tools:   r.tools(),
		TurnSeq: r.all[r.at].Seq,
		Through: r.through,
		Steer:   r.steer,
		Approve: r.approve,
		Files:   r.cfg.Files,
		Prefix:  r.cfg.Prefix,
	}
	_, err = b.Run(ctx, t)
	switch {
	case r.div != nil:
		return nil
	case errors.Is(err, errCut):
		return nil
	case err != nil:
		return err
	case r.next < len(r.mine):
		e := r.all[r.mine[r.next]]
		r.diverge(e.Seq, whatOf(e), describe(e.Type, e.Payload), "(the turn ended)")
	}
	return nil
}

// replayLog is the turn's log: reads see the recording up to where the agent is, appends are
// compared with the recorded events in their place and return those.
type replayLog run

func (l *replayLog) Events(_ context.Context, rg session.Range) ([]session.Event, error) {
	return session.Select((*run)(l).view(), rg), nil
}

func (l *replayLog) Append(_ context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	r := (*run)(l)
	if r.div != nil {
		return nil, errDiverged
	}
	if r.cut {
		return nil, errCut
	}
	out := make([]session.Event, 0, len(evs))
	for _, ne := range evs {
		payload, err := json.Marshal(ne.Payload)
		if err != nil {
			return nil, err
		}
		if r.next >= len(r.mine) {
			return nil, r.more(whatOfType(ne.Type, payload), describe(ne.Type, payload))
		}
		rec := r.all[r.mine[r.next]]
		if !same(rec, ne.Type, ne.Actor, payload, r.failed) {
			recorded, replayed := describe(rec.Type, rec.Payload), describe(ne.Type, payload)
			if recorded == replayed {
				// The difference is beyond the one-line description: both sides whole.
				recorded, replayed = detail(rec.Actor, rec.Payload), detail(ne.Actor, payload)
			}
			r.diverge(rec.Seq, whatOf(rec), recorded, replayed)
			return nil, errDiverged
		}
		if ne.Type == session.TypeToolCall {
			r.res.ToolCalls++
		}
		out = append(out, rec)
		r.next++
	}
	return out, nil
}

// steer is the turn's steering as recorded: the messages the recording handed the turn while
// it ran (its steered markers), those of them before the point the agent has reached.
func (r *run) steer(_ context.Context, through int64) (int64, error) {
	view := r.view()
	bound := view[len(view)-1].Seq
	for _, seq := range r.steered {
		if seq <= bound {
			through = max(through, seq)
		}
	}
	return through, nil
}

// approve is today's approvals policy checked against the recording: where it asks a person,
// the recording must have asked, and the recorded decision is served; where it allows or
// denies, the recording must not have asked. A call the recording asked for whose tool the
// policy allows is taken as a part's own ask (an MCP server's approve patterns) when it is a
// connector's tool.
func (r *run) approve(_ context.Context, use brain.ToolUse) (brain.Decision, error) {
	mode := r.policy.For(r.sess.Key.Channel, use.Name)
	a, asked := r.folded.Approval(use.ID)
	if asked && a.Event.Seq < r.all[r.at].Seq {
		asked = false // another turn's
	}
	switch {
	case asked && mode != bot.ApprovalAsk && !strings.HasPrefix(use.Name, "mcp__"):
		r.diverge(a.Event.Seq, "approval", fmt.Sprintf("asked a person before %s ran", use.Name),
			fmt.Sprintf("today's approvals policy says %s for %s: nobody is asked", mode, use.Name))
		return brain.Decision{}, errDiverged
	case !asked && mode == bot.ApprovalAsk && r.grantApplied(use.ID):
		// A scoped grant of the thread allowed it without a card (bot/grant.go): the recorded
		// decision names the grant.
		r.res.Approvals++
		return brain.Decision{Allow: true, Asked: true}, nil
	case !asked && mode == bot.ApprovalAsk:
		r.diverge(r.nextSeq(), "approval", fmt.Sprintf("%s ran without asking anyone", use.Name),
			fmt.Sprintf("today's approvals policy asks a person before %s", use.Name))
		return brain.Decision{}, errDiverged
	case asked:
		dec, p, ok := r.folded.Decision(use.ID)
		if !ok {
			return brain.Decision{}, r.more("approval", "a decision on "+use.Name)
		}
		r.res.Approvals++
		return bot.DecisionFor(dec, p, a.Request), nil
	case mode == bot.ApprovalDeny:
		return brain.Decision{Result: bot.PolicyDenial(use.Name, r.own)}, nil
	}
	return brain.Decision{Allow: true}, nil
}

// grantApplied reports whether the recording allowed call id by a live grant of the thread.
func (r *run) grantApplied(id string) bool {
	_, p, ok := r.folded.Decision(id)
	return ok && p.Via == bot.ViaGrantApplied
}

// botUser is the bot's user id as the recording's agent events name it.
func botUser(evs []session.Event) string {
	for _, e := range evs {
		if e.Type == session.TypeAssistantMessage && e.Actor.Kind == session.ActorBot {
			return e.Actor.ID
		}
	}
	return ""
}

func (r *run) nextSeq() int64 {
	if r.next < len(r.mine) {
		return r.all[r.mine[r.next]].Seq
	}
	return 0
}

// tools are the session's tools, each serving its recorded results by call id: the names
// the recording called, with the server and tool a connector's calls name.
func (r *run) tools() []brain.Tool {
	var out []brain.Tool
	seen := map[string]bool{}
	for _, e := range r.all {
		var c session.ToolCall
		if e.Type != session.TypeToolCall || e.Decode(&c) != nil || seen[c.Name] {
			continue
		}
		seen[c.Name] = true
		spec := brain.ToolSpec{Name: c.Name, Description: "replayed", Schema: brain.ObjectSchema(nil),
			Server: c.Server, Tool: c.Tool, ReadOnly: c.ReadOnly}
		out = append(out, brain.NewTool(spec, r.result))
	}
	return out
}

// result serves the recorded result of use.
func (r *run) result(_ context.Context, use brain.ToolUse) brain.Outcome {
	for _, e := range r.all[r.at:r.end] {
		var res session.ToolResult
		if e.Type != session.TypeToolResult || e.Decode(&res) != nil || res.CallID != use.ID {
			continue
		}
		if !agents(e, 0) {
			r.partial, r.cut = true, true // a stop's result: the turn ended while the call ran
		}
		return brain.Outcome{Content: res.Content, IsError: res.IsError, Truncated: res.Truncated,
			ExitCode: res.ExitCode, Duration: msDuration(res.DurationMS), FromHands: e.Actor.Kind == session.ActorSandbox}
	}
	return brain.Failure("replay: the recording has no result of %s", use.ID)
}

// provider answers the agent's model calls with the recording's answers, checking each
// request's canonical hash against the one recorded.
type provider struct{ r *run }

func (p *provider) Name() string  { return "replay" }
func (p *provider) Model() string { return "replay" }

func (p *provider) Complete(_ context.Context, req brain.Request) (brain.Response, error) {
	r := p.r
	if r.div != nil {
		return brain.Response{}, errDiverged
	}
	if r.next >= len(r.mine) {
		return brain.Response{}, r.more("model request", "a further "+string(req.Purpose)+" request")
	}
	rec := r.all[r.mine[r.next]]
	switch {
	case req.Purpose == brain.PurposeSummary && rec.Type == session.TypeContextSummary:
		var s session.ContextSummary
		if err := rec.Decode(&s); err != nil {
			return brain.Response{}, err
		}
		return brain.Response{Text: s.Summary, StopReason: "end_turn"}, nil
	case req.Purpose == brain.PurposeReply && rec.Type == session.TypeAssistantMessage:
		var m session.AssistantMessage
		if err := rec.Decode(&m); err != nil {
			return brain.Response{}, err
		}
		u := cmp.Or(m.Usage, &session.Usage{})
		if u.RequestHash == "" {
			r.res.Unhashed++
		} else if got := brain.RequestHash(req); got != u.RequestHash {
			r.diverge(rec.Seq, "model request", "request "+short(u.RequestHash)+" answered by this message",
				"request "+short(got)+", "+lastWords(req))
			return brain.Response{}, errDiverged
		} else {
			r.res.Requests++
		}
		resp := brain.Response{Text: m.Text, StopReason: u.StopReason, Model: u.Model,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens}
		for _, id := range m.ToolCallIDs {
			for _, e := range r.all[r.mine[r.next]:r.end] {
				var c session.ToolCall
				if e.Type == session.TypeToolCall && e.Decode(&c) == nil && c.CallID == id {
					resp.ToolUses = append(resp.ToolUses, brain.ToolUse{ID: c.CallID, Name: c.Name, Input: c.Input})
					break
				}
			}
		}
		return resp, nil
	case rec.Type == session.TypeError:
		// The call failed as recorded (a provider's refusal, a budget, the wall time): the
		// turn ends with an error; its wording is the provider's, compared by kind only.
		r.failed = true
		return brain.Response{}, &brain.ProviderError{Provider: "replay", Message: "recorded failure"}
	}
	r.diverge(rec.Seq, "model request", describe(rec.Type, rec.Payload), "a "+string(req.Purpose)+" request to the model")
	return brain.Response{}, errDiverged
}

// same reports whether the agent's event (typ, actor, payload) is the recorded rec, leaving
// out what differs by nature from run to run: latencies and durations. loose compares only
// the type, the actor and whether logbook wrote the text: the error event and the reply of a
// turn that ended on a recorded model failure, whose wording is the provider's.
func same(rec session.Event, typ session.Type, actor session.Actor, payload []byte, loose bool) bool {
	if rec.Type != typ || rec.Actor != actor {
		return false
	}
	a, b := normal(rec.Payload), normal(payload)
	if rec.Type == session.TypeToolResult && a["synthetic"] == true {
		// A result the harness wrote for a call a crash cut short (its outcome unknown, or
		// recovered from the tool's own record): the replay serves that result as the call's,
		// and cannot tell it from a tool's. Whether the call was made is the tool_call's to say.
		delete(a, "synthetic")
	}
	if loose {
		return a["own"] == b["own"]
	}
	if u, ok := a["usage"].(map[string]any); ok {
		if _, hashed := u["request_hash"]; !hashed {
			if bu, ok := b["usage"].(map[string]any); ok {
				delete(bu, "request_hash") // recorded before the hash was kept
			}
		}
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// normal is a payload as a map without its volatile fields.
func normal(raw []byte) map[string]any {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return map[string]any{}
	}
	delete(m, "duration_ms")
	if u, ok := m["usage"].(map[string]any); ok {
		delete(u, "latency_ms")
		delete(u, "provider") // the replay's stand-in answers for the recorded provider
	}
	return m
}

// detail is an event's actor and payload (without its volatile fields), cut to 600
// characters: the two sides of a divergence their descriptions do not tell apart.
func detail(actor session.Actor, payload []byte) string {
	j, _ := json.Marshal(normal(payload))
	return clip.Text(fmt.Sprintf("by %s:%s %s", actor.Kind, actor.ID, j), 600)
}

func whatOf(e session.Event) string { return whatOfType(e.Type, e.Payload) }

func whatOfType(t session.Type, payload []byte) string {
	switch t {
	case session.TypeToolCall, session.TypeToolResult, session.TypeToolStarted:
		return "tool call"
	case session.TypeAssistantMessage:
		var m session.AssistantMessage
		if json.Unmarshal(payload, &m) == nil && len(m.ToolCallIDs) > 0 {
			return "tool call"
		}
		return "reply"
	}
	return "event"
}

// describe is one line for an event: its type and the part of its payload that says what it
// is, cut to 300 characters.
func describe(t session.Type, payload []byte) string {
	var s string
	switch t {
	case session.TypeAssistantMessage:
		var m session.AssistantMessage
		_ = json.Unmarshal(payload, &m)
		s = fmt.Sprintf("assistant_message %q", m.Text)
		if len(m.ToolCallIDs) > 0 {
			s += fmt.Sprintf(" calling %s", strings.Join(m.ToolCallIDs, ", "))
		}
	case session.TypeToolCall:
		var c session.ToolCall
		_ = json.Unmarshal(payload, &c)
		s = fmt.Sprintf("tool_call %s %s %s", c.CallID, c.Name, c.Input)
	case session.TypeToolResult:
		var res session.ToolResult
		_ = json.Unmarshal(payload, &res)
		s = fmt.Sprintf("tool_result %s %q", res.CallID, res.Content)
		if res.IsError {
			s += " (error)"
		}
	default:
		s = string(t) + " " + string(payload)
	}
	return clip.Text(s, 300)
}

// lastWords says what a request ended with: its last message's text, cut.
func lastWords(req brain.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		for j := len(m.Blocks) - 1; j >= 0; j-- {
			b := m.Blocks[j]
			switch {
			case b.Text != "":
				return fmt.Sprintf("%d messages, the last (%s) ending %q", len(req.Messages), m.Role, tail(b.Text, 120))
			case b.ToolResult != nil:
				return fmt.Sprintf("%d messages, the last (%s) ending with the result of %s", len(req.Messages), m.Role, b.ToolResult.CallID)
			}
		}
	}
	return fmt.Sprintf("%d messages", len(req.Messages))
}

func tail(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n:])
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
