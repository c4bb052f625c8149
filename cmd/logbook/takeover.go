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

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot/mrkdwn"
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
handed back (logbook handback, or a thread message that is exactly "handback"), and, with
SLACK_BOT_TOKEN, the thread gets a note saying who took it over.

--dir (default ./takeover-<session>) receives the transcript (TRANSCRIPT.md) and, when the
session's sandbox had the channel's repository, a clone at the recorded commit with the saved
uncommitted work applied (repo/). The clone uses your own git and credentials.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			return takeover(c.Context(), e, args, as, dir)
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "who takes it over (default LOGBOOK_AUDIT_OPERATOR, then USER)")
	cmd.Flags().StringVar(&dir, "dir", "", "where the transcript and the workspace go (default ./takeover-<session>)")
	return cmd
}

func newHandbackCmd(e env) *cobra.Command {
	var as string
	cmd := &cobra.Command{
		Use:   "handback <session id | Slack permalink | channel thread-ts>",
		Short: "Hand a session taken over back to the bot (DATABASE_URL)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			who, err := operator(e, as)
			if err != nil {
				return err
			}
			d, sess, err := openSession(ctx, e, args)
			if err != nil {
				return err
			}
			defer d.pool.Close()
			if _, err := d.store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeHandedBack,
				Actor: session.Actor{Kind: session.ActorUser, ID: who.Name}, Payload: session.HandedBack{By: who.Name, Source: "cli"}}); err != nil {
				return err
			}
			note(ctx, e, sess, who.Name+" handed this thread back to logbook; it answers again.")
			fmt.Fprintf(e.stdout, "session %s handed back by %s\n", sess.ID, who.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "who hands it back (default LOGBOOK_AUDIT_OPERATOR, then USER)")
	return cmd
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
	id := ref.id
	if id == (session.ID{}) {
		if id, err = d.searcher.SessionByThread(ctx, ref.channel, ref.ts); errors.Is(err, session.ErrNotFound) {
			d.sync(ctx, e)
			id, err = d.searcher.SessionByThread(ctx, ref.channel, ref.ts)
		}
		if err != nil {
			d.pool.Close()
			return nil, session.Session{}, err
		}
	}
	sess, err := d.store.Session(ctx, id)
	if err != nil {
		d.pool.Close()
		return nil, session.Session{}, err
	}
	return d, sess, nil
}

func takeover(ctx context.Context, e env, args []string, as, dir string) error {
	who, err := operator(e, as)
	if err != nil {
		return err
	}
	d, sess, err := openSession(ctx, e, args)
	if err != nil {
		return err
	}
	defer d.pool.Close()
	if dir == "" {
		dir = "takeover-" + sess.ID.String()
	}
	// The workspace first: the session is recorded as taken over only once it is ready.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	evs, err := d.store.Events(ctx, sess.ID, session.Range{})
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := transcript.Render(&md, sess, evs, transcript.Options{Format: transcript.FormatMarkdown}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "TRANSCRIPT.md"), md.Bytes(), 0o600); err != nil {
		return err
	}
	if err := checkoutWorkspace(ctx, e, d, sess, evs, filepath.Join(dir, "repo")); err != nil {
		return err
	}
	if _, err := d.store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeTakenOver,
		Actor: session.Actor{Kind: session.ActorUser, ID: who.Name}, Payload: session.TakenOver{By: who.Name}}); err != nil {
		return err
	}
	note(ctx, e, sess, who.Name+" has taken this thread over; logbook records it but stays silent until it is handed back.")
	fmt.Fprintf(e.stdout, "session %s taken over by %s\ntranscript: %s\n", sess.ID, who.Name, filepath.Join(dir, "TRANSCRIPT.md"))
	return nil
}

// checkoutWorkspace clones the session's repository into work at the recorded commit and
// applies its saved work — a patch the sandbox made, so it is checked first: no symbolic
// links, nothing under .git. Nothing to do without a repository.
func checkoutWorkspace(ctx context.Context, e env, d *readDeps, sess session.Session, evs []session.Event, work string) error {
	repo, commit, patch := workspaceOf(evs)
	if repo == "" {
		return nil
	}
	if strings.HasPrefix(repo, "-") || len(commit) != 40 || strings.Trim(commit, "0123456789abcdef") != "" {
		return fmt.Errorf("the log's workspace is not usable: repository %q at commit %q", repo, commit)
	}
	if out, err := exec.CommandContext(ctx, "git", "clone", "-q", "--", repo, work).CombinedOutput(); err != nil {
		return fmt.Errorf("clone %s: %v: %s", repo, err, out)
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", work, "checkout", "-q", "-B", "takeover-"+sess.ID.String()[:8], commit).CombinedOutput(); err != nil {
		return fmt.Errorf("check out %s: %v: %s", commit, err, out)
	}
	fmt.Fprintf(e.stdout, "workspace: %s at %s\n", work, commit)
	if patch == "" {
		return nil
	}
	store, err := filestore.Open(ctx, d.store, strings.TrimSpace(e.getenv("LOGBOOK_BLOB_URL")))
	if err != nil {
		return err
	}
	defer store.Close()
	data, err := store.FileContent(ctx, patch)
	if err != nil {
		return fmt.Errorf("the saved work %s: %w", patch, err)
	}
	summary := exec.CommandContext(ctx, "git", "-C", work, "apply", "--summary", "--numstat", "-")
	summary.Stdin = bytes.NewReader(data)
	out, err := summary.CombinedOutput()
	if err != nil {
		return fmt.Errorf("read the saved work: %v: %s", err, out)
	}
	if strings.Contains(string(out), " mode 120000 ") {
		return fmt.Errorf("the saved work creates symbolic links; not applied (it is %s in the file store):\n%s", patch, out)
	}
	apply := exec.CommandContext(ctx, "git", "-C", work, "apply", "-")
	apply.Stdin = bytes.NewReader(data)
	if out, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("apply the saved work: %v: %s", err, out)
	}
	fmt.Fprintf(e.stdout, "saved work applied (%d bytes of patch); it changes:\n%s", len(data), out)
	return nil
}

// workspaceOf is the session's workspace as the log records it: the repository and commit of
// its newest sandbox, and the newest saved work on that commit (its hash; "" when none).
func workspaceOf(evs []session.Event) (repo, commit, patch string) {
	for _, e := range evs {
		switch e.Type {
		case session.TypeSandboxProvisioned:
			var p session.SandboxProvisioned
			if e.Decode(&p) == nil && p.Repo != "" {
				repo, commit, patch = p.Repo, p.Commit, ""
			}
		case session.TypeWorkSaved:
			var w session.WorkSaved
			if e.Decode(&w) == nil && w.Commit == commit {
				patch = w.SHA256
			}
		}
	}
	return repo, commit, patch
}

// note posts text in the session's thread with SLACK_BOT_TOKEN (SLACK_API_URL), when it is
// set; otherwise it says it could not.
func note(ctx context.Context, e env, sess session.Session, text string) {
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
		slack.MsgOptionText(mrkdwn.EscapeText(text), false)); err != nil {
		fmt.Fprintf(e.stderr, "logbook: could not post the note in the thread: %v\n", err)
	}
}
