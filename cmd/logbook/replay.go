package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/replay"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

func newReplayCmd(e env) *cobra.Command {
	var (
		dir  string
		from int64
		wf   whatIfFlags
	)
	cmd := &cobra.Command{
		Use:   "replay <session id | Slack permalink | channel thread-ts> [--from SEQ [--model SPEC] [--tools sandbox|recorded]] | --dir DIR",
		Short: "Re-run a recorded session and check today's code makes the same decisions (DATABASE_URL)",
		Long: `Re-run a recorded session with the model's answers, the tools' results and the approval
decisions served from its log, and check that today's code makes the same decisions: the same
model requests (compared by their canonical hash), the same tool calls, the same approvals
asked, the same replies. It prints "identical through seq N", or the first divergence with
both sides, and exits 0 or 1. It touches no Slack, no sandbox and no model, and appends
nothing.

--dir DIR replays every whole session of an export (logbook audit export, JSONL; with
--with-files the shared files are read from it), so CI can hold an upgrade of logbook against
real threads.

The agent runs under the limits of the environment, as serve would: LOGBOOK_MAX_OUTPUT_TOKENS,
LOGBOOK_MAX_CONTINUATIONS, LOGBOOK_REPEAT_LIMIT, LOGBOOK_CONTEXT_BUDGET and the approvals
policy LOGBOOK_TOOL_APPROVAL (a channel's own policy, recorded with each turn, wins).

--from SEQ is the what-if: the recorded turn that answered the user message at SEQ runs again,
its history the recording's up to that message, the model called for real under --model
(default LOGBOOK_MODEL; its keys as serve reads them), --instructions FILE in place of the
channel's instructions and --agents-md FILE as the repository's AGENTS.md. A tool call
identical to a recorded one (the same tool, the same input) gets the recorded result. Any
other call of the sandbox's tools runs in a fresh bubblewrap sandbox restored to where the
session was when that turn began (its saved work, on its commit), with no network (--tools
sandbox, the default; it needs the sandbox and repository settings serve reads: LOGBOOK_SANDBOX,
LOGBOOK_REPOS, LOGBOOK_REPO_URL, GITHUB_TOKEN, LOGBOOK_BLOB_URL; without a sandbox such calls
are refused, saying why); with --tools recorded it is refused with an error the model sees.
A call of another tool (a pull request, a connector) is refused in both. What the sandbox
does is recorded in the eval record. Nothing reaches Slack and the session gets nothing: the result
is an eval record, a session of kind replay linked to the original (audit verify checks the
link), charged to the channel's budget as an eval. It prints the recorded and replayed turn
side by side and the web page that shows them (LOGBOOK_PUBLIC_URL/evals/<id>).`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := replayConfig(e)
			if err != nil {
				return usage(e, c, err)
			}
			ctx := c.Context()
			if from != 0 || c.Flags().Changed("model") || c.Flags().Changed("tools") || c.Flags().Changed("instructions") || c.Flags().Changed("agents-md") {
				if dir != "" || len(args) == 0 || from < 1 {
					return usage(e, c, errors.New("the what-if names one session and --from SEQ, the seq of a user message (1 or more)"))
				}
				ref, err := parseSessionRef(args)
				if err != nil {
					return usage(e, c, err)
				}
				w, err := readWhatIf(e, wf)
				if err != nil {
					return usage(e, c, err)
				}
				return withRead(ctx, e, primaryReads, func(d *readDeps) error {
					return whatIfStored(ctx, e, d, ref, from, w)
				})
			}
			if dir != "" {
				if len(args) > 0 {
					return usage(e, c, errors.New("--dir replays an export: name no session with it"))
				}
				return replayExport(ctx, e, dir, cfg)
			}
			if len(args) == 0 {
				return usage(e, c, errors.New("name a session (id, permalink, or channel and thread ts), or an export with --dir"))
			}
			ref, err := parseSessionRef(args)
			if err != nil {
				return usage(e, c, err)
			}
			return withRead(ctx, e, standbyReads, func(d *readDeps) error {
				return replayStored(ctx, e, d, ref, cfg)
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "replay the sessions of an export in this directory (JSONL)")
	cmd.Flags().Int64Var(&from, "from", 0, "the what-if: run the turn that answered the user message at this seq again, the model called for real")
	wf.add(cmd)
	return cmd
}

// replayConfig is the agent's limits and the approvals policy from the environment.
func replayConfig(e env) (replay.Config, error) {
	var ints [4]int
	for i, name := range []string{"LOGBOOK_MAX_OUTPUT_TOKENS", "LOGBOOK_MAX_CONTINUATIONS", "LOGBOOK_REPEAT_LIMIT", "LOGBOOK_CONTEXT_BUDGET"} {
		v, err := envInt(e, name)
		if err != nil {
			return replay.Config{}, err
		}
		ints[i] = v
	}
	policy, err := bot.ParseToolApproval(e.getenv("LOGBOOK_TOOL_APPROVAL"), toolNames())
	if err != nil {
		return replay.Config{}, fmt.Errorf("LOGBOOK_TOOL_APPROVAL: %w", err)
	}
	return replay.Config{
		Brain:  brain.Config{MaxTokens: int64(ints[0]), MaxContinuations: ints[1], RepeatLimit: ints[2], ContextBudget: ints[3]},
		Where:  brain.Where{BotName: "logbook"},
		Policy: policy,
	}, nil
}

// storedSession is the session ref names and its whole log, read from the database (the
// primary: replay and the what-if run what they read).
func (d *readDeps) storedSession(ctx context.Context, e env, ref sessionRef) (session.Session, []session.Event, error) {
	id, err := d.sessionID(ctx, e, ref)
	if err != nil {
		return session.Session{}, nil, err
	}
	sess, err := d.store.Session(ctx, id)
	if err != nil {
		return session.Session{}, nil, err
	}
	evs, err := d.store.Events(ctx, id, session.Range{})
	if err != nil {
		return session.Session{}, nil, err
	}
	return sess, evs, nil
}

// replayStored replays the session ref names from the database: exit 1 when it diverged.
func replayStored(ctx context.Context, e env, d *readDeps, ref sessionRef, cfg replay.Config) error {
	sess, evs, err := d.storedSession(ctx, e, ref)
	if err != nil {
		return err
	}
	if hasFiles(evs) {
		files, err := filestore.Open(ctx, d.store, strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL")))
		if err != nil {
			return err
		}
		defer files.Close()
		cfg.Files = files
	}
	if cfg.Prefix, err = session.Prefix(ctx, d.store, evs); err != nil {
		return err
	}
	res, err := replay.Session(ctx, sess, evs, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "session %s (%s %s): %s", sess.ID, sess.Key.Channel, sess.Key.ThreadTS, res)
	if !res.Identical() {
		return exitError{code: 1, err: fmt.Errorf("replay of session %s diverged at seq %d", sess.ID, res.Divergence.Seq)}
	}
	return nil
}

// replayExport replays every whole session of the export in dir; a session the export holds
// only part of is named and skipped. Exit 1 when one diverged.
func replayExport(ctx context.Context, e env, dir string, cfg replay.Config) error {
	sessions, err := audit.ReadExportedSessions(dir)
	if err != nil {
		return err
	}
	cfg.Files = audit.ExportedFiles(dir)
	exported := exportedEvents{}
	for _, s := range sessions {
		exported[s.Session.ID] = s.Events
	}
	diverged, replayed := 0, 0
	for _, s := range sessions {
		head := fmt.Sprintf("session %s (%s %s): ", s.Session.ID, s.Session.Key.Channel, s.Session.Key.ThreadTS)
		if !s.Whole {
			fmt.Fprintf(e.stdout, "%sskipped: the export holds only part of it (%d events, not seqs 1..n)\n", head, len(s.Events))
			continue
		}
		prefix, err := session.Prefix(ctx, exported, s.Events)
		if err != nil {
			fmt.Fprintf(e.stdout, "%sskipped: a fork whose parent's events the export does not hold through the fork's seq (%v)\n", head, err)
			continue
		}
		cfg.Prefix = prefix
		res, err := replay.Session(ctx, s.Session, s.Events, cfg)
		if errors.Is(err, replay.ErrPurged) {
			fmt.Fprintf(e.stdout, "%sskipped: %v\n", head, err)
			continue
		}
		if err != nil {
			return err
		}
		replayed++
		fmt.Fprint(e.stdout, head+res.String())
		if !res.Identical() {
			diverged++
		}
	}
	fmt.Fprintf(e.stdout, "%d sessions replayed, %d diverged, %d skipped\n", replayed, diverged, len(sessions)-replayed)
	if diverged > 0 {
		return exitError{code: 1, err: fmt.Errorf("replay: %d of %d sessions diverged", diverged, replayed)}
	}
	return nil
}

// hasFiles reports whether a session holds files the model was shown (stored shared files).
func hasFiles(evs []session.Event) bool {
	for _, e := range evs {
		if e.Type == session.TypeFileFetched {
			return true
		}
	}
	return false
}

// exportedEvents are an export's events by session, read as a log (session.EventReader), so
// that a fork in an export is replayed with its parent's conversation.
type exportedEvents map[session.ID][]session.Event

func (x exportedEvents) Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error) {
	evs, ok := x[id]
	if !ok {
		return nil, fmt.Errorf("session %s: %w: not in the export", id, session.ErrNotFound)
	}
	var out []session.Event
	for _, e := range evs {
		if e.Seq >= max(r.From, 1) && (r.To == 0 || e.Seq <= r.To) {
			out = append(out, e)
		}
	}
	if r.To > 0 && int64(len(out)) != r.To-max(r.From, 1)+1 {
		return nil, fmt.Errorf("session %s: the export holds %d of its events %d..%d", id, len(out), max(r.From, 1), r.To)
	}
	return out, nil
}
