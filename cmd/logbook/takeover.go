package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
	"github.com/logbook/logbook/session/transcript"
)

func newTakeoverCmd(e env) *cobra.Command {
	var as, dir string
	cmd := &cobra.Command{
		Use:   "takeover <session id | Slack permalink | channel thread-ts>",
		Short: "Take a session over from the bot: its transcript and workspace, and the bot silent (DATABASE_URL)",
		Long: `Take a session over: the log records who took it (taken_over, the person as actor: --as,
else LOGBOOK_AUDIT_OPERATOR or USER), the bot stays silent in the thread until the session is
handed back, and, with SLACK_BOT_TOKEN, the thread gets a note saying who took it over.
A session taken over already is refused, naming who holds it and since when.

Who may hand it back: anyone who can run 'logbook handback' against the database; in the
thread, only the holder, by a message that is exactly "handback" — and only when --as named
their Slack user id (e.g. --as U0123ABCD), since the thread knows people by that id. Anyone
else who writes "handback" there is told who holds the thread.

--dir (default ./takeover-<session>) receives the transcript (TRANSCRIPT.md) and, when the
session's sandbox had the channel's repository, a clone at the recorded commit with the saved
uncommitted work applied (repo/). The clone uses your own git and credentials.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			return takeover(c.Context(), e, args, as, dir)
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "who takes it over (default LOGBOOK_AUDIT_OPERATOR, then USER); a Slack user id lets them hand it back in the thread")
	cmd.Flags().StringVar(&dir, "dir", "", "where the transcript and the workspace go (default ./takeover-<session>)")
	return cmd
}

// newHandbackCmd is `logbook handback` (cobra's shape, as every subcommand; what it runs is its own).
func newHandbackCmd(e env) *cobra.Command {
	var as string
	cmd := &cobra.Command{
		Use:   "handback <session id | Slack permalink | channel thread-ts>",
		Short: "Hand a session taken over back to the bot (DATABASE_URL)",
		Long: `Hand a session taken over back to the bot: the log records who (handed_back, --as, else
LOGBOOK_AUDIT_OPERATOR or USER) and, with SLACK_BOT_TOKEN, the thread gets a note. Anyone who
can run it against the database may hand back any session, whoever holds it; the output says
who held it since when. A session that is not taken over is refused.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			t, err := openTakeover(ctx, e, args, as)
			if err != nil {
				return err
			}
			defer t.d.pool.Close()
			var was session.Holder
			err = t.appendChecked(ctx, func(evs []session.Event) error {
				h, held := session.HolderOf(evs)
				if !held {
					return fmt.Errorf("session %s is not taken over: the bot has it, there is nothing to hand back", t.sess.ID)
				}
				was = h
				return nil
			}, session.NewEvent{Type: session.TypeHandedBack, Actor: session.Actor{Kind: session.ActorUser, ID: t.who.Name},
				Payload: session.HandedBack{By: t.who.Name, Source: "cli"}})
			if err != nil {
				return err
			}
			note(ctx, e, t.sess, "handback", t.who.Name+" handed this thread back to logbook; it answers again.")
			fmt.Fprintf(e.stdout, "session %s handed back by %s (taken over by %s since %s)\n", t.sess.ID, t.who.Name, was.By, was.Since.UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "who hands it back (default LOGBOOK_AUDIT_OPERATOR, then USER)")
	return cmd
}

// takeoverTarget is the session a takeover or handback names, its log as read, and who acts.
type takeoverTarget struct {
	d    *readDeps
	sess session.Session
	evs  []session.Event
	who  audit.Who
}

// openTakeover resolves who acts and the session args name, and reads its log. The caller
// closes t.d.pool.
func openTakeover(ctx context.Context, e env, args []string, as string) (*takeoverTarget, error) {
	who, err := operator(e, as)
	if err != nil {
		return nil, err
	}
	d, sess, err := openSession(ctx, e, args)
	if err != nil {
		return nil, err
	}
	evs, err := d.store.Events(ctx, sess.ID, session.Range{})
	if err != nil {
		d.pool.Close()
		return nil, err
	}
	return &takeoverTarget{d: d, sess: sess, evs: evs, who: who}, nil
}

// appendChecked appends ev if check passes on the session's log, expecting the head it
// checked: when something was appended meanwhile (a message, another takeover or handback),
// it reads what came and checks again, so two operators never both take a session over.
func (t *takeoverTarget) appendChecked(ctx context.Context, check func([]session.Event) error, ev session.NewEvent) error {
	for {
		if err := check(t.evs); err != nil {
			return err
		}
		var head int64
		if len(t.evs) > 0 {
			head = t.evs[len(t.evs)-1].Seq
		}
		_, err := t.d.store.AppendWith(ctx, t.sess.ID, session.AppendOptions{CheckSeq: true, ExpectedSeq: head}, ev)
		if !errors.Is(err, session.ErrConflict) {
			return err
		}
		newer, err := t.d.store.Events(ctx, t.sess.ID, session.Range{From: head + 1})
		if err != nil {
			return err
		}
		t.evs = append(t.evs, newer...)
	}
}

// openSession resolves a session reference against the log.
func openSession(ctx context.Context, e env, args []string) (*readDeps, session.Session, error) {
	ref, err := parseSessionRef(args)
	if err != nil {
		return nil, session.Session{}, usageError{err}
	}
	d, err := openRead(ctx, e)
	if err != nil {
		return nil, session.Session{}, err
	}
	id, err := d.sessionID(ctx, e, ref)
	if err != nil {
		d.pool.Close()
		return nil, session.Session{}, err
	}
	sess, err := d.store.Session(ctx, id)
	if err != nil {
		d.pool.Close()
		return nil, session.Session{}, err
	}
	return d, sess, nil
}

// notHeld is takeover's check: the session must not be taken over already.
func notHeld(id session.ID) func([]session.Event) error {
	return func(evs []session.Event) error {
		if h, held := session.HolderOf(evs); held {
			return fmt.Errorf("session %s is taken over already, by %s since %s: hand it back first (logbook handback %s)",
				id, h.By, h.Since.UTC().Format(time.RFC3339), id)
		}
		return nil
	}
}

func takeover(ctx context.Context, e env, args []string, as, dir string) error {
	t, err := openTakeover(ctx, e, args, as)
	if err != nil {
		return err
	}
	defer t.d.pool.Close()
	sess := t.sess
	if err := notHeld(sess.ID)(t.evs); err != nil {
		return err // before any work: nothing to clone for a session someone holds
	}
	if dir == "" {
		dir = "takeover-" + sess.ID.String()
	}
	// The workspace first: the session is recorded as taken over only once it is ready.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	notes, err := t.d.store.NotesByID(ctx, sess.Key.Team, sess.Key.Channel, transcript.NoteIDs(t.evs))
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := transcript.Render(&md, sess, t.evs, transcript.Options{Format: transcript.FormatMarkdown, Notes: notes}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "TRANSCRIPT.md"), md.Bytes(), 0o600); err != nil {
		return err
	}
	if err := checkoutWorkspace(ctx, e, t.d, sess, t.evs, filepath.Join(dir, "repo")); err != nil {
		return err
	}
	if err := t.appendChecked(ctx, notHeld(sess.ID), session.NewEvent{Type: session.TypeTakenOver,
		Actor: session.Actor{Kind: session.ActorUser, ID: t.who.Name}, Payload: session.TakenOver{By: t.who.Name}}); err != nil {
		return err
	}
	note(ctx, e, sess, "takeover", t.who.Name+" has taken this thread over; logbook records it but stays silent until it is handed back.")
	fmt.Fprintf(e.stdout, "session %s taken over by %s\ntranscript: %s\n", sess.ID, t.who.Name, filepath.Join(dir, "TRANSCRIPT.md"))
	return nil
}

// checkoutWorkspace clones the session's repository into work at the recorded commit and puts
// its saved work back: the commits made in the sandbox (fetched from their bundle), HEAD where
// it was, and the uncommitted changes — a patch the sandbox made, so it is checked first: no
// symbolic links, nothing under .git. Nothing to do without a repository.
func checkoutWorkspace(ctx context.Context, e env, d *readDeps, sess session.Session, evs []session.Event, work string) error {
	repo, commit, w := workspaceOf(evs)
	if repo == "" {
		return nil
	}
	if strings.HasPrefix(repo, "-") || !sandbox.ValidCommitID(commit) || (w.Head != "" && !sandbox.ValidCommitID(w.Head)) {
		return fmt.Errorf("the log's workspace is not usable: repository %q at commit %q, head %q", repo, commit, w.Head)
	}
	git := func(stdin []byte, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", work}, args...)...)
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		return cmd.CombinedOutput()
	}
	if out, err := exec.CommandContext(ctx, "git", "clone", "-q", "--", repo, work).CombinedOutput(); err != nil {
		return fmt.Errorf("clone %s: %v: %s", repo, err, out)
	}
	var store *filestore.Store
	content := func(sha string) ([]byte, error) {
		if store == nil {
			var err error
			if store, err = filestore.Open(ctx, d.store, strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL"))); err != nil {
				return nil, err
			}
		}
		data, err := store.FileContent(ctx, sha)
		if err != nil {
			return nil, fmt.Errorf("the saved work %s: %w", sha, err)
		}
		return data, nil
	}
	defer func() {
		if store != nil {
			store.Close()
		}
	}()
	head := commit
	if w.BundleSHA256 != "" {
		data, err := content(w.BundleSHA256)
		if err != nil {
			return err
		}
		bundle := filepath.Join(work, ".git", "logbook-takeover.bundle")
		if err := os.WriteFile(bundle, data, 0o600); err != nil {
			return err
		}
		out, err := git(nil, "fetch", "-q", "--no-write-fetch-head", bundle, "+HEAD:refs/logbook/takeover")
		os.Remove(bundle)
		if err != nil {
			return fmt.Errorf("fetch the sandbox's commits: %v: %s", err, out)
		}
		git(nil, "update-ref", "-d", "refs/logbook/takeover")
	}
	if w.Head != "" {
		head = w.Head
	}
	// The sandbox's commits are checked like its patch before they reach this machine's
	// work tree: no symbolic links, no submodules.
	if head != commit {
		out, err := git(nil, "diff-tree", "-r", "--no-renames", commit, head)
		if err != nil {
			return fmt.Errorf("compare the sandbox's commits with %s: %v: %s", commit, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && (f[1] == "120000" || f[1] == "160000") {
				return fmt.Errorf("the sandbox's commits create symbolic links or submodules; not checked out (head %s):\n%s", head, out)
			}
		}
	}
	if out, err := git(nil, "checkout", "-q", "-B", "takeover-"+sess.ID.String()[:8], head); err != nil {
		return fmt.Errorf("check out %s: %v: %s", head, err, out)
	}
	fmt.Fprintf(e.stdout, "workspace: %s at %s", work, head)
	if w.Branch != "" {
		fmt.Fprintf(e.stdout, " (the sandbox's branch %q)", w.Branch)
	}
	fmt.Fprintln(e.stdout)
	if w.SHA256 == "" {
		return nil
	}
	data, err := content(w.SHA256)
	if err != nil {
		return err
	}
	out, err := git(data, "apply", "--summary", "--numstat", "-")
	if err != nil {
		return fmt.Errorf("read the saved work: %v: %s", err, out)
	}
	if strings.Contains(string(out), " mode 120000 ") {
		return fmt.Errorf("the saved work creates symbolic links; not applied (it is %s in the file store):\n%s", w.SHA256, out)
	}
	if out, err := git(data, "apply", "-"); err != nil {
		return fmt.Errorf("apply the saved work: %v: %s", err, out)
	}
	fmt.Fprintf(e.stdout, "saved work applied (%d bytes of patch); it changes:\n%s", len(data), out)
	return nil
}

// workspaceOf is the session's workspace as the log records it: the repository and commit of
// its newest sandbox, and the newest saved work.
func workspaceOf(evs []session.Event) (repo, commit string, work session.WorkSaved) {
	for _, e := range evs {
		switch e.Type {
		case session.TypeSandboxProvisioned:
			var p session.SandboxProvisioned
			if e.Decode(&p) == nil && p.Repo != "" {
				if p.Repo != repo {
					work = session.WorkSaved{} // another repository: its work is not this one's
				}
				repo, commit = p.Repo, p.Commit
			}
		case session.TypeWorkSaved:
			var w session.WorkSaved
			if e.Decode(&w) == nil && (w.Repo == "" || w.Repo == repo) {
				work = w
				if w.Head == "" {
					work.Head = w.Commit // saved before HEAD was recorded
				}
			}
		}
	}
	return repo, commit, work
}

// note posts text in the session's thread with SLACK_BOT_TOKEN (SLACK_API_URL), when it is
// set; otherwise it says it could not. Its metadata says it is an operator's note of kind
// (bot.NoteMetadata): the bot posted it, but it is no turn's message, and a cell removing a
// dead cell's unrecorded messages of an open turn leaves it be.
func note(ctx context.Context, e env, sess session.Session, kind, text string) {
	token := strings.TrimSpace(e.getenv("SLACK_BOT_TOKEN"))
	if token == "" {
		fmt.Fprintln(e.stderr, "logbook: SLACK_BOT_TOKEN is not set: the thread gets no note")
		return
	}
	opts := []slack.Option{}
	if u := strings.TrimSpace(e.getenv("SLACK_API_URL")); u != "" {
		opts = append(opts, slack.OptionAPIURL(u))
	}
	api := slack.New(token, opts...)
	if _, _, err := api.PostMessageContext(ctx, sess.Key.Channel, slack.MsgOptionTS(sess.Key.ThreadTS),
		slack.MsgOptionText(mrkdwn.EscapeText(text), false), slack.MsgOptionMetadata(bot.NoteMetadata(sess, kind))); err != nil {
		fmt.Fprintf(e.stderr, "logbook: could not post the note in the thread: %v\n", err)
	}
}
