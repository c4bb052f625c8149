package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/fork"
	"github.com/logbook/logbook/session"
)

// forkActor is who a fork started from the command line is by: the operator's tool.
var forkActor = session.Actor{Kind: session.ActorSystem, ID: "cli/fork"}

func newForkCmd(e env) *cobra.Command {
	var (
		at     int64
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "fork <session id | Slack permalink | channel ts> [--at SEQ]",
		Short: "Branch a thread at one of its events into a new thread (DATABASE_URL, SLACK_BOT_TOKEN)",
		Long: `Start a new thread in the same channel that goes on from a session's conversation
through one of its events: a top-level post links the parent at that point, and the new
thread's session begins with a session_forked event naming the parent, the seq and the hash
of the parent's event there (audit verify checks it). The fork's model history is the
parent's conversation through that seq, then its own; its sandbox starts from the newest work
the parent saved at or before it. The parent is untouched and gets no message.

The session is named by its id, by a Slack permalink of a message in it, or by a channel id
and a ts as two arguments. --at is the parent's seq; without it, a permalink or ts of a
message of the thread names the event that recorded that message (as the "Branch from here"
shortcut does). --dry-run prints what would be posted and recorded, and asks Slack nothing.

  logbook fork 01a226cc-2ba6-7d4b-9f06-a738362db19d --at 12
  logbook fork https://acme.slack.com/archives/C0000001/p1700000000001200
  logbook fork C0000001 1700000000.000100 --at 1 --dry-run

The post needs SLACK_BOT_TOKEN (and SLACK_API_URL for another Slack API, such as logbook
dev's emulator); the channel must still be public.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			ref, err := parseSessionRef(args)
			if err != nil {
				return usage(e, c, err)
			}
			if at < 0 || (at == 0 && ref.id != (session.ID{})) {
				return usage(e, c, errors.New("--at must name the parent's seq (1 or more) when the session is named by its id"))
			}
			var api *slack.Client
			if !dryRun {
				if api, err = forkSlack(e); err != nil {
					return usage(e, c, err)
				}
			}
			ctx := c.Context()
			return withRead(ctx, e, primaryReads, func(d *readDeps) error {
				return runFork(ctx, e, d, api, ref, at, dryRun)
			})
		},
	}
	cmd.Flags().Int64Var(&at, "at", 0, "the parent's seq to branch at (default: the event of the message the permalink or ts names)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be posted and recorded; ask Slack nothing, write nothing")
	return cmd
}

// forkSlack is the bot's Slack client from SLACK_BOT_TOKEN and SLACK_API_URL.
func forkSlack(e env) (*slack.Client, error) {
	token := strings.TrimSpace(e.getenv("SLACK_BOT_TOKEN"))
	if !strings.HasPrefix(token, "xoxb-") {
		return nil, errors.New("SLACK_BOT_TOKEN must be set to the bot token (xoxb-...) to post the fork's thread; --dry-run needs none")
	}
	var opts []slack.Option
	if u := strings.TrimSpace(e.getenv("SLACK_API_URL")); u != "" {
		if !strings.HasSuffix(u, "/") {
			u += "/"
		}
		opts = append(opts, slack.OptionAPIURL(u))
	}
	return slack.New(token, opts...), nil
}

func runFork(ctx context.Context, e env, d *readDeps, api *slack.Client, ref sessionRef, at int64, dryRun bool) error {
	id, err := d.sessionID(ctx, e, ref)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	parent, err := d.store.Session(ctx, id)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	msg := ""
	if ref.id == (session.ID{}) {
		msg = ref.ts
	}
	if at == 0 {
		if at, err = fork.SeqAt(ctx, d.store, id, msg); err != nil {
			return fmt.Errorf("fork: %w", err)
		}
		if at == 0 {
			return fmt.Errorf("fork: session %s has no event at or before message %s: name one with --at", id, msg)
		}
	}
	f := &fork.Forker{Store: d.store}
	if api != nil {
		me, err := bot.WhoAmI(ctx, api)
		if err != nil {
			return fmt.Errorf("fork: %w", err)
		}
		f.Starter = bot.NewStarter(api, d.store, func(session.ID) {}, me.TeamID)
		f.Link = fork.SlackLink(api)
	}
	req := fork.Request{Parent: parent, Seq: at, By: forkActor, At: msg}
	if dryRun {
		p, err := f.Plan(ctx, req)
		if err != nil {
			return fmt.Errorf("fork: %w", err)
		}
		fmt.Fprintf(e.stdout, "would fork session %s (%s %s) at seq %d, hash %s\n", id, parent.Key.Channel, parent.Key.ThreadTS, at, p.Ref.Hash)
		fmt.Fprintf(e.stdout, "would post in %s: %s\n", parent.Key.Channel, p.Text)
		fmt.Fprintln(e.stdout, "dry run: nothing was posted or recorded")
		return nil
	}
	out, err := f.Fork(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "forked session %s at seq %d (hash %s) into session %s, thread %s %s\n",
		id, at, out.Ref.Hash, out.Started.Session.ID, parent.Key.Channel, out.Started.TS)
	return nil
}
