package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/replay"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// evalActor records the eval records' own events (replay_started, replay_completed).
var evalActor = session.Actor{Kind: session.ActorSystem, ID: "cli/replay"}

// evalConcurrency is how many what-ifs `logbook eval` runs at once by default; --concurrency
// takes up to maxEvalConcurrency.
const (
	evalConcurrency    = 4
	maxEvalConcurrency = 16
)

// whatIfFlags are the what-if's flags, shared by `replay --from` and `eval`.
type whatIfFlags struct {
	model, instructions, agentsMD, tools string
}

func (f *whatIfFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "the what-if's model, as LOGBOOK_MODEL is given (anthropic:<model>, openai:<model>); default LOGBOOK_MODEL")
	fl.StringVar(&f.instructions, "instructions", "", "a file whose text replaces the channel's instructions in the what-if")
	fl.StringVar(&f.agentsMD, "agents-md", "", "a file the what-if's system prompt holds as the repository's AGENTS.md")
	fl.StringVar(&f.tools, "tools", replay.ToolsSandbox, `how the what-if serves the tool calls it cannot serve from the recording: "sandbox" runs the sandbox's in a fresh sandbox restored to that point, with no network; "recorded" refuses them`)
}

// whatIfSetup is what every what-if of one command runs under, read from the flags and the
// environment once.
type whatIfSetup struct {
	cfg      serveConfig
	spec     string
	provider brain.Provider
	base     replay.Config
	instr    *string
	agents   *string
	public   string
	tools    string
	// sandbox is what the other tool calls run in (tools "sandbox"); nil: none, noSandbox says why.
	sandbox   sandbox.Provider
	noSandbox string
}

func readWhatIf(e env, f whatIfFlags) (whatIfSetup, error) {
	var w whatIfSetup
	switch w.tools = cmp.Or(f.tools, replay.ToolsSandbox); w.tools {
	case replay.ToolsSandbox, replay.ToolsRecorded:
	default:
		return w, fmt.Errorf("--tools %q: want sandbox or recorded", f.tools)
	}
	var err error
	if w.cfg, err = cliSettingsConfig(e); err != nil {
		return w, err
	}
	if w.tools == replay.ToolsSandbox {
		// The sandbox and the channels' repositories as serve reads them.
		if err := w.cfg.readSandbox(e); err != nil {
			return w, err
		}
		if err := w.cfg.readRepos(e); err != nil {
			return w, err
		}
		w.sandbox, w.noSandbox = whatIfSandbox(w.cfg)
	}
	w.spec = cmp.Or(strings.TrimSpace(f.model), w.cfg.Model)
	if w.spec == "" {
		return w, errors.New("no model: give --model (anthropic:<model>, openai:<model>) or set LOGBOOK_MODEL")
	}
	if w.provider, err = brain.NewProvider(w.spec, w.cfg.providers()); err != nil {
		return w, fmt.Errorf("--model %q: %w", w.spec, err)
	}
	for _, r := range []struct {
		name string
		path string
		into **string
	}{{"--instructions", f.instructions, &w.instr}, {"--agents-md", f.agentsMD, &w.agents}} {
		if r.path == "" {
			continue
		}
		b, err := os.ReadFile(r.path)
		if err != nil {
			return w, fmt.Errorf("%s: %w", r.name, err)
		}
		text := string(b)
		*r.into = &text
	}
	if w.base, err = replayConfig(e); err != nil {
		return w, err
	}
	w.public = strings.TrimRight(w.cfg.Footer.PublicURL, "/")
	return w, nil
}

// whatIfSandbox is the sandbox a what-if runs tool calls in: bubblewrap as LOGBOOK_SANDBOX
// picks it (serve's sandboxProvider), with no network whatever LOGBOOK_SANDBOX_NETWORK and
// LOGBOOK_SANDBOX_EGRESS say. nil, and why, when there is none: LOGBOOK_SANDBOX=none,
// bubblewrap not installed, or LOGBOOK_SANDBOX=process, whose commands share the host's
// network.
func whatIfSandbox(cfg serveConfig) (sandbox.Provider, string) {
	switch cfg.Sandbox {
	case sandbox.KindNone:
		return nil, "LOGBOOK_SANDBOX=none"
	case sandbox.KindProcess:
		return nil, "LOGBOOK_SANDBOX=process cannot turn the network off; a what-if runs commands under bubblewrap only"
	}
	cfg.SandboxNet = false
	p, _, err := sandboxProvider(cfg, zerolog.Nop())
	switch {
	case err != nil:
		return nil, err.Error()
	case p == nil:
		return nil, "bubblewrap is not installed"
	}
	return p, ""
}

// whatIf runs the what-if of sess from seq from, its spend metered by the channel's budget.
func (w whatIfSetup) run(ctx context.Context, e env, d *readDeps, sess session.Session, evs []session.Event, from int64) (replay.Eval, error) {
	s := settings.New(settingsConfig(w.cfg, d.store, cliModels(w.cfg)))
	b, err := newBudget(w.cfg, d.store, zerolog.Nop(), s, sess.Key.Team, nil)
	if err != nil {
		return replay.Eval{}, err
	}
	prices := b.Prices()
	cfg := replay.WhatIfConfig{
		Brain: w.base.Brain, Where: w.base.Where, Model: w.spec, Instructions: w.instr, AgentsMD: w.agents,
		Tools: w.tools, By: evalActor, Currency: prices.Currency, NoSandbox: w.noSandbox,
		Meter: func(eval session.ID, turn int64) brain.Meter { return b.For(sess.Key.Channel, "", eval, turn) },
		Price: func(provider, model string, u session.Usage) (int64, bool) {
			p, ok := prices.For(provider, model)
			return int64(p.Cost(budget.Usage{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens})), ok
		},
	}
	cfg.Brain.Provider = w.provider
	sandboxed := w.tools == replay.ToolsSandbox && w.sandbox != nil
	if hasFiles(evs) || sandboxed {
		files, err := filestore.Open(ctx, d.store, strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL")))
		if err != nil {
			return replay.Eval{}, err
		}
		defer files.Close()
		cfg.Files = files
		if sandboxed {
			// The eval record's log is what the hands get (bot/replay): they record there,
			// and restore the original's saved work from it (the work store holds it).
			cfg.Sandbox = hands.NewFactory(w.sandbox, hands.Config{Repo: repoCheckout(w.cfg, channelRepos(w.cfg, d.store)), Work: files, Offline: true},
				zerolog.Nop())
			cfg.SandboxName = w.sandbox.Name() + ", no network"
		}
	}
	if cfg.Prefix, err = session.Prefix(ctx, d.store, evs); err != nil {
		return replay.Eval{}, err
	}
	return replay.WhatIf(ctx, d.store, sess, evs, from, cfg)
}

// page is the eval record's web page (bot/web: recorded and replayed side by side).
func (w whatIfSetup) page(id session.ID) string { return w.public + "/evals/" + id.String() }

// whatIfStored is `logbook replay <session> --from SEQ`: it prints the eval record and its
// comparison, and the page that shows it.
func whatIfStored(ctx context.Context, e env, d *readDeps, ref sessionRef, from int64, w whatIfSetup) error {
	sess, evs, err := d.storedSession(ctx, e, ref)
	if err != nil {
		return err
	}
	ev, err := w.run(ctx, e, d, sess, evs, from)
	if err != nil {
		return err
	}
	s := ev.Summary
	fmt.Fprintf(e.stdout, "eval record %s: session %s (%s %s) from seq %d (turn %d) under %s: %s\n",
		ev.Record.ID, sess.ID, sess.Key.Channel, sess.Key.ThreadTS, from, ev.Turn, w.spec, s.Status)
	if s.Error != "" {
		fmt.Fprintf(e.stdout, "  error: %s\n", s.Error)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  \trecorded\treplayed\n")
	fmt.Fprintf(tw, "  replies\t%d\t%d\n", s.Recorded.Replies, s.Replayed.Replies)
	fmt.Fprintf(tw, "  tool calls\t%d\t%d (same %d, different %d, new %d; %d recorded not made)\n",
		s.Recorded.ToolCalls, s.Replayed.ToolCalls, s.Same, s.Different, s.New, s.Missing)
	fmt.Fprintf(tw, "  model calls\t%d\t%d\n", s.Recorded.ModelCalls, s.Replayed.ModelCalls)
	fmt.Fprintf(tw, "  tokens in/out\t%d/%d\t%d/%d\n", s.Recorded.InputTokens, s.Recorded.OutputTokens, s.Replayed.InputTokens, s.Replayed.OutputTokens)
	fmt.Fprintf(tw, "  cost\t%s\t%s\n", costText(s.Recorded, s.Currency), costText(s.Replayed, s.Currency))
	if err := tw.Flush(); err != nil {
		return err
	}
	changed := "the same"
	if s.ReplyChanged {
		changed = "changed"
	}
	fmt.Fprintf(e.stdout, "  reply: %s\n  page: %s\n", changed, w.page(ev.Record.ID))
	return nil
}

func costText(s session.EvalSide, currency string) string {
	t := budget.Money(s.CostMicros).String() + " " + currency
	if s.Unpriced > 0 {
		t += fmt.Sprintf(" (+%d calls without a price)", s.Unpriced)
	}
	return t
}

// evalRow is one thread of `logbook eval`.
type evalRow struct {
	Session      session.ID `json:"session"`
	ThreadTS     string     `json:"thread_ts"`
	From         int64      `json:"from,omitempty"`
	Record       *string    `json:"eval_record,omitempty"`
	Status       string     `json:"status"`
	Skipped      string     `json:"skipped,omitempty"`
	Same         int        `json:"tool_calls_same"`
	Different    int        `json:"tool_calls_different"`
	New          int        `json:"tool_calls_new"`
	Missing      int        `json:"tool_calls_missing"`
	ReplyChanged bool       `json:"reply_changed"`
	CostBefore   int64      `json:"cost_before_micros"`
	CostAfter    int64      `json:"cost_after_micros"`
	Page         string     `json:"page,omitempty"`
}

// evalReport is `logbook eval`'s outcome, its --json.
type evalReport struct {
	Channel        string    `json:"channel"`
	DryRun         bool      `json:"dry_run,omitempty"`
	Model          string    `json:"model"`
	Currency       string    `json:"currency"`
	Threads        int       `json:"threads"` // threads replayed
	Skipped        int       `json:"skipped"`
	Same           int       `json:"tool_calls_same"`
	Different      int       `json:"tool_calls_different"`
	New            int       `json:"tool_calls_new"`
	Missing        int       `json:"tool_calls_missing"`
	RepliesChanged int       `json:"replies_changed"`
	CostBefore     int64     `json:"cost_before_micros"`
	CostAfter      int64     `json:"cost_after_micros"`
	Rows           []evalRow `json:"rows"`
}

func newEvalCmd(e env) *cobra.Command {
	var (
		f              whatIfFlags
		channel, since string
		limit, conc    int
		asJSON, dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "eval --channel C --model SPEC [--tools sandbox|recorded] [--since 30d] [--limit N]",
		Short: "Run the what-if over a channel's recent threads and compare (DATABASE_URL, the model's keys)",
		Long: `Run the what-if of logbook replay --from over the threads of a channel with activity since
--since (default 30d), newest first, at most --limit (default 20): each thread from its first
user message the agent answered, the model called for real under --model (and
--instructions, --agents-md), a tool call identical to a recorded one served from the
recording, any other of the sandbox's run in a fresh sandbox restored to that point with no
network (--tools sandbox, the default, as logbook replay --from) or refused (--tools
recorded). Each what-if is an eval record
of its own (a session of kind replay), charged to the channel's budget as an eval; nothing
reaches Slack and the threads get nothing. --concurrency what-ifs run at once (default 4, at
most 16). --dry-run lists the threads and the seq each would run from, and calls no model and
records nothing.

It prints a table — per thread and in all: tool calls the same, different (a recorded tool,
another input), new (a tool the recorded turn did not call), recorded calls not made, whether
the reply changed, and the cost before (the recorded turn's, at today's prices) and after —
or, with --json, the same as JSON for CI.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if !settings.ValidChannelID(channel) {
				return usage(e, c, fmt.Errorf("--channel %q: name a channel id (e.g. C0123ABCD)", channel))
			}
			if limit < 1 {
				return usage(e, c, errors.New("--limit must be 1 or more"))
			}
			if conc < 1 || conc > maxEvalConcurrency {
				return usage(e, c, fmt.Errorf("--concurrency must be 1 to %d", maxEvalConcurrency))
			}
			from, err := parseWhen(since, time.Now())
			if err != nil {
				return usage(e, c, fmt.Errorf("--since: %w", err))
			}
			w, err := readWhatIf(e, f)
			if err != nil {
				return usage(e, c, err)
			}
			ctx := c.Context()
			return withRead(ctx, e, primaryReads, func(d *readDeps) error {
				rep, err := runEval(ctx, e, d, w, channel, from, limit, conc, dryRun)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(rep)
				}
				return rep.writeText(e.stdout)
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&channel, "channel", "", "the channel whose threads to run (a Slack channel id)")
	fl.StringVar(&since, "since", "30d", "threads with activity since (a date, a time or an age: 30d, 2w)")
	fl.IntVar(&limit, "limit", 20, "at most this many threads, newest first")
	fl.IntVar(&conc, "concurrency", evalConcurrency, "what-ifs run at once")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.BoolVar(&dryRun, "dry-run", false, "list the threads and where each would run from; call no model, record nothing")
	return cmd
}

// runEval runs the what-if over the channel's threads, conc at once.
func runEval(ctx context.Context, e env, d *readDeps, w whatIfSetup, channel string, since time.Time, limit, conc int, dryRun bool) (evalReport, error) {
	rep := evalReport{Channel: channel, Model: w.spec, Currency: w.cfg.Budget.Prices.Currency, DryRun: dryRun}
	threads, err := d.store.ChannelThreads(ctx, channel, since, limit)
	if err != nil {
		return rep, err
	}
	rows := make([]evalRow, len(threads))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for i, sess := range threads {
		g.Go(func() error {
			row := evalRow{Session: sess.ID, ThreadTS: sess.Key.ThreadTS}
			defer func() {
				mu.Lock()
				rows[i] = row
				mu.Unlock()
			}()
			evs, err := d.store.Events(gctx, sess.ID, session.Range{})
			if err != nil {
				return err
			}
			at, ok := replay.FirstAsked(sess, evs)
			if !ok {
				row.Status, row.Skipped = "skipped", "no message of the thread was answered by the agent"
				return nil
			}
			row.From = at
			if dryRun {
				row.Status = "dry run"
				return nil
			}
			ev, err := w.run(gctx, e, d, sess, evs, at)
			if errors.Is(err, replay.ErrPurged) {
				row.Status, row.Skipped = "skipped", err.Error()
				return nil
			}
			if err != nil {
				return fmt.Errorf("eval of session %s: %w", sess.ID, err)
			}
			s := ev.Summary
			id := ev.Record.ID.String()
			row.Record, row.Status, row.Page = &id, s.Status, w.page(ev.Record.ID)
			row.Same, row.Different, row.New, row.Missing, row.ReplyChanged = s.Same, s.Different, s.New, s.Missing, s.ReplyChanged
			row.CostBefore, row.CostAfter = s.Recorded.CostMicros, s.Replayed.CostMicros
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return rep, err
	}
	rep.Rows = rows
	for _, r := range rows {
		if r.Skipped != "" {
			rep.Skipped++
			continue
		}
		rep.Threads++
		rep.Same += r.Same
		rep.Different += r.Different
		rep.New += r.New
		rep.Missing += r.Missing
		if r.ReplyChanged {
			rep.RepliesChanged++
		}
		rep.CostBefore += r.CostBefore
		rep.CostAfter += r.CostAfter
	}
	return rep, nil
}

func (r evalReport) writeText(out io.Writer) error {
	fmt.Fprintf(out, "eval of %s under %s: %d threads replayed, %d skipped (costs in %s)\n", r.Channel, r.Model, r.Threads, r.Skipped, r.Currency)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "thread\tfrom\tsame\tdifferent\tnew\tnot made\treply\tcost before\tcost after\tstatus\n")
	for _, row := range r.Rows {
		if row.Skipped != "" {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\tskipped: %s\n", row.ThreadTS, row.Skipped)
			continue
		}
		reply := "same"
		if row.ReplyChanged {
			reply = "changed"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", row.ThreadTS, row.From, row.Same, row.Different, row.New, row.Missing,
			reply, budget.Money(row.CostBefore), budget.Money(row.CostAfter), row.Status)
	}
	fmt.Fprintf(tw, "all %d\t\t%d\t%d\t%d\t%d\t%d changed\t%s\t%s\t\n", r.Threads, r.Same, r.Different, r.New, r.Missing, r.RepliesChanged,
		budget.Money(r.CostBefore), budget.Money(r.CostAfter))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if row.Page != "" {
			fmt.Fprintf(out, "%s: %s\n", row.ThreadTS, row.Page)
		}
	}
	if r.DryRun {
		fmt.Fprintln(out, "dry run: no model was called and nothing was recorded")
	}
	return nil
}
