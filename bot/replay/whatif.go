package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// The what-if (issue 50): one recorded turn run again from the user message it answered, the
// model called for real under other settings (a model, the channel's instructions, the
// repository's AGENTS.md). Up to that message the recording is the model's history, as it
// was; from there the turn is the new model's. A tool call identical (name and canonical
// input) to one the recorded turn made gets the recorded result without running; any other
// call of the sandbox's tools runs in a fresh sandbox restored to where the recorded turn
// began, with no network (ToolsSandbox), or is refused with a tool error the model sees
// (ToolsRecorded); a call of any other tool (a part's, a connector's) is refused in both.
// Nothing reaches Slack and the original session gets nothing: what the replayed turn
// appends, and what its sandbox records, goes to an eval record, a session of kind replay
// whose first event (replay_started) links the original at that message by its hash and whose
// last (replay_completed) sets the recorded turn and the replayed one side by side.

// The what-if's tool modes: ToolsSandbox (the default) runs the calls the recording cannot
// serve in a sandbox; ToolsRecorded serves only recorded results.
const (
	ToolsSandbox  = "sandbox"
	ToolsRecorded = "recorded"
)

// EvalStore is where a what-if records its eval record (session.Store).
type EvalStore interface {
	OpenReplay(ctx context.Context, original session.Session) (session.Session, error)
	ReplayReference(ctx context.Context, original session.Session, seq int64) (session.ReplayStarted, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
}

// WhatIfConfig is what a what-if runs under.
type WhatIfConfig struct {
	// Brain is the agent's configuration; its Provider is the model called for real
	// (required), DeferTitle is set.
	Brain brain.Config
	Where brain.Where
	// Model is the model's spec as given (LOGBOOK_MODEL's form), for the record.
	Model string
	// Instructions replaces the channel's instructions (nil: as the recorded turn's
	// turn_settings has them); AgentsMD is put in the system prompt as the repository's
	// AGENTS.md (nil: none: the recording keeps only its hash).
	Instructions, AgentsMD *string
	// Tools is the tool mode: ToolsSandbox ("" is taken as it) or ToolsRecorded.
	Tools string
	// Sandbox, in ToolsSandbox, makes the sandbox the other calls of the sandbox's tools run
	// in: hands.NewFactory over a bubblewrap provider with no network, its Config.Offline
	// set (the eval record's log is what it is given: it records there, and restores the
	// work the original saved through the log's Lineage). nil: there is none, NoSandbox says
	// why, and those calls are refused saying so. SandboxName is what it is, for the record.
	Sandbox                hands.Factory
	SandboxName, NoSandbox string
	// Prefix is, for a fork, the conversation it continues (session.Prefix), as for Session.
	Prefix [][]session.Event
	Files  brain.FileReader
	// Meter, when set, is the budget meter of the eval record's turn (bot/budget: the
	// original channel's budget). Each call is admitted under it with its purpose marked as an
	// eval (session.EvalPurpose).
	Meter func(eval session.ID, turn int64) brain.Meter
	// Price is what a model call cost, in micros (false: its model has no price), for both
	// sides of the record; Currency names the unit.
	Price    func(provider, model string, u session.Usage) (int64, bool)
	Currency string
	// By is the actor of the eval record's own events (replay_started, replay_completed).
	By session.Actor
}

// Eval is a what-if's outcome: the eval record and its summary.
type Eval struct {
	Record   session.Session // the eval record (kind replay)
	Original session.Session
	From     int64 // the user message it ran from
	Turn     int64 // the recorded turn's turn_started
	Summary  session.ReplayCompleted
}

// WhatIf runs the recorded turn of sess (whose events, all of them from seq 1, are evs) that
// answered the user message at seq from again under cfg, and records it in a new eval record.
func WhatIf(ctx context.Context, st EvalStore, sess session.Session, evs []session.Event, from int64, cfg WhatIfConfig) (Eval, error) {
	ev := Eval{Original: sess, From: from}
	switch cfg.Tools {
	case "":
		cfg.Tools = ToolsSandbox
	case ToolsSandbox, ToolsRecorded:
	default:
		return ev, fmt.Errorf("what-if: tools %q: want %s or %s", cfg.Tools, ToolsSandbox, ToolsRecorded)
	}
	if cfg.Brain.Provider == nil {
		return ev, errors.New("what-if: no model")
	}
	if sess.Key.Replay() {
		return ev, fmt.Errorf("what-if of session %s: it is an eval record; name the original", sess.ID)
	}
	for _, e := range evs {
		if e.Payload == nil {
			return ev, fmt.Errorf("what-if of session %s: event %d: %w", sess.ID, e.Seq, ErrPurged)
		}
	}
	r, err := whatIfRun(sess, evs, from, cfg)
	if err != nil {
		return ev, err
	}
	ev.Turn = r.all[r.at].Seq
	ref, err := st.ReplayReference(ctx, sess, from)
	if err != nil {
		return ev, err
	}
	ref.Turn, ref.Model, ref.Tools, ref.By = ev.Turn, cfg.Model, cfg.Tools, cfg.By.ID
	if cfg.Tools == ToolsSandbox {
		ref.Sandbox = cfg.SandboxName
		if cfg.Sandbox == nil {
			ref.Sandbox = "none: " + cmp.Or(cfg.NoSandbox, "no sandbox is configured") + " (other tool calls are refused)"
		}
	}
	if cfg.Instructions != nil {
		ref.Instructions = *cfg.Instructions
	}
	if cfg.AgentsMD != nil {
		ref.AgentsMD = *cfg.AgentsMD
	}
	rec, err := st.OpenReplay(ctx, sess)
	if err != nil {
		return ev, err
	}
	ev.Record = rec
	if _, err := st.Append(ctx, rec.ID, session.NewEvent{Type: session.TypeReplayStarted, Actor: cfg.By, Payload: ref, IdempotencyKey: ref.Key()}); err != nil {
		return ev, err
	}
	w := &whatIf{run: r, cfg: cfg, st: st, rec: rec.ID, view: slices.Clip(r.all[:r.mine[0]])}
	if cfg.Tools == ToolsSandbox && cfg.Sandbox != nil {
		w.hands = cfg.Sandbox((*sandboxLog)(w), rec)
	}
	status, runErr := w.turn(ctx)
	if w.hands != nil {
		// Its last work saved in the eval record before replay_completed closes it.
		w.hands.Close(context.WithoutCancel(ctx), true)
	}
	sum := w.summary(status, runErr)
	if _, err := st.Append(context.WithoutCancel(ctx), rec.ID, session.NewEvent{Type: session.TypeReplayCompleted, Actor: cfg.By, Payload: sum,
		IdempotencyKey: "replay_completed"}); err != nil {
		return ev, err
	}
	ev.Summary = sum
	return ev, nil
}

// FirstAsked is where `logbook eval` runs a thread's what-if from: its first user message that
// a turn of the agent answered (a thread opened by a message not addressed to the bot starts
// at the first one that was). false when the agent answered none.
func FirstAsked(sess session.Session, evs []session.Event) (int64, bool) {
	for _, e := range evs {
		if e.Type != session.TypeUserMessage {
			continue
		}
		if _, err := whatIfRun(sess, evs, e.Seq, WhatIfConfig{}); err == nil {
			return e.Seq, true
		}
	}
	return 0, false
}

// whatIfRun finds the recorded turn that answered the user message at from: the first turn
// started after it whose Through reaches it, and which the agent ran.
func whatIfRun(sess session.Session, evs []session.Event, from int64, cfg WhatIfConfig) (*run, error) {
	if from < 1 || from > int64(len(evs)) || evs[from-1].Seq != from {
		return nil, fmt.Errorf("what-if of session %s: --from %d: %w: the session has events 1 to %d", sess.ID, from, session.ErrNotFound, len(evs))
	}
	if t := evs[from-1].Type; t != session.TypeUserMessage {
		return nil, fmt.Errorf("what-if of session %s: --from %d is a %s: name a user_message (the what-if runs from a person's message)", sess.ID, from, t)
	}
	folded := thread.FoldTurns(evs)
	for i := int(from); i < len(evs); i++ {
		if evs[i].Type != session.TypeTurnStarted {
			continue
		}
		tn, ok := folded.Turn(evs[i].Seq)
		if !ok || tn.Unread || tn.Through < from {
			continue
		}
		end := len(evs)
		for j := i + 1; j < len(evs); j++ {
			if evs[j].Type == session.TypeTurnStarted {
				end = j
				break
			}
		}
		var res Result
		r, err := newRun(sess, evs, folded, i, end, Config{Brain: cfg.Brain, Where: cfg.Where, Files: cfg.Files, Prefix: cfg.Prefix}, &res)
		if err != nil {
			return nil, err
		}
		if len(r.mine) == 0 {
			return nil, fmt.Errorf("what-if of session %s: the turn that answered seq %d (turn %d) ran no agent (a canned reply, or not addressed to the bot): nothing to run again", sess.ID, from, evs[i].Seq)
		}
		return r, nil
	}
	return nil, fmt.Errorf("what-if of session %s: no turn answered the user message at seq %d", sess.ID, from)
}

// whatIf is one what-if's state: the view of the log the agent reads (the recording up to
// where the recorded agent started, then what the replayed one appended, numbered on), the
// recorded calls served, and the model calls made.
type whatIf struct {
	*run
	cfg WhatIfConfig
	st  EvalStore
	rec session.ID
	// hands is the what-if's sandbox (ToolsSandbox; nil: none), provisioned at its first call.
	hands *hands.Hands

	mu        sync.Mutex
	view      []session.Event
	appended  []session.Event // as stored in the eval record
	served    map[string]bool // recorded call ids whose result was served
	different int
	fresh     int
	same      int
	calls     []session.EvalCall
}

func (w *whatIf) turn(ctx context.Context) (string, error) {
	bcfg := w.cfg.Brain
	bcfg.DeferTitle = true
	b, err := brain.New(bcfg)
	if err != nil {
		return "", err
	}
	where := w.cfg.Where
	where.Channel, where.ThreadTS = w.sess.Key.Channel, w.sess.Key.ThreadTS
	if where.BotUserID == "" {
		where.BotUserID = botUser(w.all)
	}
	w.served = map[string]bool{}
	t := brain.Turn{
		Session:  w.sess,
		Log:      (*whatIfLog)(w),
		Where:    where,
		Tools:    w.tools(),
		TurnSeq:  w.all[w.at].Seq,
		Through:  w.through,
		Files:    w.cfg.Files,
		Prefix:   w.cfg.Prefix,
		Guidance: w.guidance(),
		Meter:    &evalMeter{w: w},
	}
	reply, err := b.Run(ctx, t)
	return reply.Status, err
}

// guidance is the system prompt's guidance: the instructions given, else the channel's as the
// recorded turn ran under them; the AGENTS.md given.
func (w *whatIf) guidance() brain.Guidance {
	var g brain.Guidance
	if w.cfg.Instructions != nil {
		g.Instructions = *w.cfg.Instructions
	} else {
		for _, e := range w.all[w.at:w.end] {
			var s session.TurnSettings
			if e.Type == session.TypeTurnSettings && e.Decode(&s) == nil && s.Turn == w.all[w.at].Seq {
				g.Instructions = s.Instructions
			}
		}
	}
	if w.cfg.AgentsMD != nil {
		g.Repo = brain.RepoInstructions{Path: "AGENTS.md", Text: *w.cfg.AgentsMD}
	}
	return g
}

// tools are the tools the session's recording called, under the brain's own specs where they
// are its own (the sandbox's), and in ToolsSandbox the sandbox's three whether called or not,
// each serving recorded results first. read_log is the brain's.
func (w *whatIf) tools() []brain.Tool {
	var out []brain.Tool
	seen := map[string]bool{brain.ToolReadLog: true}
	sandboxed := map[string]brain.Tool{}
	if w.cfg.Tools == ToolsSandbox {
		// Over the what-if's own sandbox; a nil one refuses (see serve).
		for _, t := range brain.HandsTools((*whatIfHands)(w), w.cfg.Brain.CommandTimeout) {
			sandboxed[t.Spec().Name] = t
			seen[t.Spec().Name] = true
			out = append(out, brain.NewTool(t.Spec(), w.serve(t)))
		}
	}
	for _, e := range w.all {
		var c session.ToolCall
		if e.Type != session.TypeToolCall || e.Decode(&c) != nil || seen[c.Name] {
			continue
		}
		seen[c.Name] = true
		spec, ok := brain.SpecOf(c.Name)
		if !ok {
			spec = brain.ToolSpec{Name: c.Name, Schema: map[string]any{"type": "object"},
				Description: "A tool of this thread (its description was not recorded).", Server: c.Server, Tool: c.Tool, ReadOnly: c.ReadOnly}
		}
		out = append(out, brain.NewTool(spec, w.serve(sandboxed[c.Name])))
	}
	return out
}

// serve answers a tool call: the recorded result of the recorded turn's call with the same
// name and the same canonical input; else, with run (a sandbox's tool in ToolsSandbox), the
// call run in the what-if's sandbox; else a refusal.
func (w *whatIf) serve(run brain.Tool) func(ctx context.Context, use brain.ToolUse) brain.Outcome {
	return func(ctx context.Context, use brain.ToolUse) brain.Outcome {
		out, ok := w.recorded(use)
		if ok {
			return out
		}
		if run == nil {
			return w.refuse()
		}
		if w.hands == nil {
			return brain.Failure("refused: this what-if replay has no sandbox to run the call in (%s); only a call identical to one "+
				"the recorded turn made gets a result, the recorded one. This call was not run. Answer with what you have.",
				cmp.Or(w.cfg.NoSandbox, "none is configured"))
		}
		return run.Run(ctx, use)
	}
}

// refuse is the answer to a call the what-if cannot run.
func (w *whatIf) refuse() brain.Outcome {
	if w.cfg.Tools == ToolsSandbox {
		return brain.Failure("refused: this is a what-if replay; it runs only the sandbox's tools (run_command, read_file, write_file) " +
			"for real, in a sandbox with no network, and serves other tools' results from the recording only for a call identical " +
			"to one the recorded turn made (the same tool, the same input). This call was not run. Answer with what you have.")
	}
	return brain.Failure("refused: this is a what-if replay that serves recorded tool results only (--tools recorded). " +
		"Only a call identical to one the recorded turn made (the same tool, the same input) gets a result, the recorded one; " +
		"this call was not run. Answer with what you have.")
}

// recorded is the recorded result of the recorded turn's call identical to use (false: none),
// counting the call the same, different or new.
func (w *whatIf) recorded(use brain.ToolUse) (brain.Outcome, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	input := canonical(use.Input)
	named := false
	for _, e := range w.all[w.at:w.end] {
		var c session.ToolCall
		if e.Type != session.TypeToolCall || e.Decode(&c) != nil || c.Name != use.Name {
			continue
		}
		named = true
		if !bytes.Equal(canonical(c.Input), input) {
			continue
		}
		for _, re := range w.all[w.at:w.end] {
			var res session.ToolResult
			if re.Type == session.TypeToolResult && re.Decode(&res) == nil && res.CallID == c.CallID {
				w.same++
				w.served[c.CallID] = true
				return brain.Outcome{Content: res.Content, IsError: res.IsError, Truncated: res.Truncated,
					ExitCode: res.ExitCode, Duration: msDuration(res.DurationMS), FromHands: re.Actor.Kind == session.ActorSandbox}, true
			}
		}
	}
	if named {
		w.different++
	} else {
		w.fresh++
	}
	return brain.Outcome{}, false
}

// whatIfHands is the what-if's sandbox as the sandbox's tools use it (brain.Hands).
type whatIfHands whatIf

func (h *whatIfHands) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return h.hands.Exec(ctx, req)
}

func (h *whatIfHands) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return h.hands.ReadFile(ctx, path)
}

func (h *whatIfHands) WriteFile(ctx context.Context, path string, data []byte) error {
	return h.hands.WriteFile(ctx, path, data)
}

// sandboxLog is the log the what-if's sandbox is given (hands.Log): the eval record, where it
// appends what it does (sandbox_provisioned, work_saved, sandbox_lost) and reads what it did;
// and, as its Lineage, the original's history through where the recorded turn's agent began,
// after the original's own ancestors' for a fork, so that a sandbox that saved nothing yet
// starts from the newest work the original (or its ancestors) saved by then, else the commit
// its sandbox was checked out at, as a fork's does.
type sandboxLog whatIf

func (l *sandboxLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	return l.st.Events(ctx, l.rec, r)
}

func (l *sandboxLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	return l.st.Append(ctx, l.rec, evs...)
}

// Prefix is the original's history through where the recorded turn's agent began. When
// neither it nor the ancestors' holds a sandbox_provisioned or work_saved (the recorded turn
// provisioned the first sandbox), the recorded turn's first sandbox_provisioned is added to
// it: the commit the original was checked out at for that turn.
func (l *sandboxLog) Prefix(context.Context) ([][]session.Event, error) {
	own := slices.Clip(l.all[:l.mine[0]])
	segs := append(slices.Clip(l.cfg.Prefix), own)
	for _, seg := range segs {
		for _, e := range seg {
			if e.Type == session.TypeSandboxProvisioned || e.Type == session.TypeWorkSaved {
				return segs, nil
			}
		}
	}
	for _, e := range l.all[l.mine[0]:l.end] {
		if e.Type == session.TypeSandboxProvisioned {
			segs[len(segs)-1] = append(own, e)
			break
		}
	}
	return segs, nil
}

// canonical is a JSON value with its keys sorted and no insignificant space (the input as
// written when it is no JSON).
func canonical(raw json.RawMessage) []byte {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return bytes.TrimSpace(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return bytes.TrimSpace(raw)
	}
	return out
}

// whatIfLog is the replayed turn's log: reads see the view, appends go to the eval record and
// onto the view, numbered on from it (the brain sees one session, as a cell's turn does).
type whatIfLog whatIf

func (l *whatIfLog) Events(_ context.Context, rg session.Range) ([]session.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return session.Select(l.view, rg), nil
}

func (l *whatIfLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	stored, err := l.st.Append(ctx, l.rec, evs...)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]session.Event, len(stored))
	for i, e := range stored {
		l.appended = append(l.appended, e)
		v := e
		v.SessionID, v.Seq = l.sess.ID, int64(len(l.view))+1
		l.view = append(l.view, v)
		out[i] = v
	}
	return out, nil
}

// evalMeter admits the replayed turn's model calls under the channel's budget (when there is
// one), marked as an eval, and keeps what each cost for the record.
type evalMeter struct{ w *whatIf }

func (m *evalMeter) Admit(ctx context.Context, c brain.MeteredCall) (func(context.Context, *session.Usage), error) {
	purpose := string(c.Purpose)
	settle := func(context.Context, *session.Usage) {}
	if m.w.cfg.Meter != nil {
		c.Purpose = brain.Purpose(session.EvalPurpose + purpose)
		s, err := m.w.cfg.Meter(m.w.rec, m.w.all[m.w.at].Seq).Admit(ctx, c)
		if err != nil {
			return nil, err
		}
		settle = s
	}
	return func(ctx context.Context, u *session.Usage) {
		settle(ctx, u)
		call := session.EvalCall{Purpose: purpose, Provider: c.Provider, Model: c.Model}
		if u != nil {
			call.Provider, call.Model = cmp.Or(u.Provider, c.Provider), cmp.Or(u.Model, c.Model)
			call.InputTokens, call.OutputTokens = u.InputTokens, u.OutputTokens
			call.CacheReadTokens, call.CacheWriteTokens = u.CacheReadTokens, u.CacheWriteTokens
			// At the answer's model's price, else the one asked for's (as bot/budget charges).
			call.CostMicros, call.Priced = m.w.price(call.Provider, call.Model, *u)
			if !call.Priced {
				call.CostMicros, call.Priced = m.w.price(c.Provider, c.Model, *u)
			}
		}
		m.w.mu.Lock()
		m.w.calls = append(m.w.calls, call)
		m.w.mu.Unlock()
	}, nil
}

func (w *whatIf) price(provider, model string, u session.Usage) (int64, bool) {
	if w.cfg.Price == nil {
		return 0, false
	}
	return w.cfg.Price(provider, model, u)
}

// summary sets the recorded turn and the replayed one side by side.
func (w *whatIf) summary(status string, runErr error) session.ReplayCompleted {
	w.mu.Lock()
	defer w.mu.Unlock()
	turn := w.all[w.at].Seq
	s := session.ReplayCompleted{Status: cmp.Or(status, "ok"), RecordedThrough: w.all[w.end-1].Seq, Currency: w.cfg.Currency,
		Same: w.same, Different: w.different, New: w.fresh, Calls: w.calls}
	if runErr != nil {
		s.Status, s.Error = "failed", runErr.Error()
	}
	var recorded []session.Event
	for _, i := range w.mine {
		recorded = append(recorded, w.all[i])
	}
	s.Recorded = side(recorded, turn, func(u session.Usage) (int64, bool) { return w.price(u.Provider, u.Model, u) })
	s.Replayed = side(w.appended, turn, nil)
	s.Replayed.ModelCalls = len(w.calls)
	for _, c := range w.calls {
		s.Replayed.InputTokens += c.InputTokens
		s.Replayed.OutputTokens += c.OutputTokens
		s.Replayed.CacheReadTokens += c.CacheReadTokens
		s.Replayed.CacheWriteTokens += c.CacheWriteTokens
		s.Replayed.CostMicros += c.CostMicros
		if !c.Priced {
			s.Replayed.Unpriced++
		}
	}
	for _, e := range recorded {
		var c session.ToolCall
		if e.Type == session.TypeToolCall && e.Decode(&c) == nil && !w.served[c.CallID] {
			s.Missing++
		}
	}
	s.ReplyChanged = strings.TrimSpace(s.Recorded.Reply) != strings.TrimSpace(s.Replayed.Reply)
	return s
}

// side sums up one side's agent events of turn: replies, tool calls, and with price the model
// calls' tokens and cost from the usage the assistant messages recorded.
func side(evs []session.Event, turn int64, price func(session.Usage) (int64, bool)) session.EvalSide {
	var s session.EvalSide
	for _, e := range evs {
		switch e.Type {
		case session.TypeToolCall:
			s.ToolCalls++
		case session.TypeAssistantMessage:
			var m session.AssistantMessage
			if e.Decode(&m) != nil || m.Turn != turn {
				continue
			}
			if m.Text != "" {
				s.Replies++
				s.Reply = m.Text
			}
			if m.Usage == nil || price == nil {
				continue
			}
			s.ModelCalls++
			s.InputTokens += m.Usage.InputTokens
			s.OutputTokens += m.Usage.OutputTokens
			s.CacheReadTokens += m.Usage.CacheReadTokens
			s.CacheWriteTokens += m.Usage.CacheWriteTokens
			if c, ok := price(*m.Usage); ok {
				s.CostMicros += c
			} else {
				s.Unpriced++
			}
		}
	}
	return s
}
