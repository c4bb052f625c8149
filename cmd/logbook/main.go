// Command logbook is the one binary of logbook: the Slack bot (serve), its local playground
// (dev), the Slack emulator, migrations, transcripts and search, and audit.
//
// Only this package reads flags and the environment; everything else gets its
// dependencies passed in.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/sandbox"
)

func main() {
	// In a sandbox, this binary is also the forwarder to logbook's egress proxy.
	sandbox.MaybeForward(os.Args)
	// Log lines carry milliseconds: a failover or a start is read off them, and whole
	// seconds hide its steps. (zerolog's one setting for it is package-wide; only main sets it.)
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	if err := harden(); err != nil {
		fmt.Fprintln(os.Stderr, "logbook: could not make the process undumpable:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		report(os.Stderr, err)
		os.Exit(exitCode(err))
	}
}

// report prints err once: an error whose message was printed already (flag errors and bad
// arguments, with the usage) is not printed again.
func report(stderr io.Writer, err error) {
	var fe flagError
	if !errors.As(err, &fe) {
		fmt.Fprintln(stderr, "logbook:", err)
	}
}

// env is what every subcommand gets: the environment and the standard streams.
type env struct {
	getenv func(string) string
	// account names the operating system account running logbook (nil: os/user.Current);
	// audit commands fall back to it for the operator's name.
	account func() (string, error)
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// exitError carries a specific exit code (e.g. 1 for "verification failed").
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// usageError is a mistake in how logbook was called: exit code 2.
type usageError struct{ error }

// flagError is a usageError whose message (and, for flags and arguments, the usage) was
// printed already.
type flagError struct{ error }

func exitCode(err error) int {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue usageError
	var fe flagError
	if errors.As(err, &ue) || errors.As(err, &fe) {
		return 2
	}
	return 1
}

// run is main without the process: arguments, environment and streams passed in, so a test
// can call it (the end-to-end tests exec the built binary instead, to test the process too).
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "logbook",
		Short:         "A Slack agent whose every session lives in an append-only Postgres log",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// "logbook audit verfy --session x": the group cannot parse verify's flags, but the
		// mistake is the subcommand.
		if args := c.Flags().Args(); c.HasSubCommands() && len(args) > 0 {
			return usageError{unknownCommand(c, args[0])}
		}
		fmt.Fprintf(stderr, "logbook %s: %v\n%s", c.Name(), err, c.UsageString())
		return flagError{err}
	})
	root.AddCommand(
		newMigrateCmd(e),
		newTranscriptCmd(e), newSearchCmd(e), newTakeoverCmd(e), newHandbackCmd(e), newConfigCmd(e), newUsageCmd(e), newForkCmd(e),
		newAuditCmd(e), newWebhooksCmd(e),
		newReplayCmd(e), newEvalCmd(e),
		newServeCmd(e),
		newDevCmd(e),
		newSlackEmulatorCmd(e),
	)
	strictArgs(root)
	return root.ExecuteContext(ctx)
}

// strictArgs makes every command refuse what it does not take, with exit status 2 and one
// line naming the word: a command group (logbook, audit, migrate, audit hold, …) an unknown
// subcommand, with the nearest ones cobra suggests (SuggestionsMinimumDistance); a command
// its arguments' validator rejects. Without it cobra prints a group's help and exits 0 for
// a mistyped subcommand, so a cron job with a typo would never run anything.
func strictArgs(c *cobra.Command) {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if c.HasSubCommands() {
		c.Args = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return usageError{unknownCommand(c, args[0])}
		}
		if c.RunE == nil && c.Run == nil {
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
	} else if valid := c.Args; valid != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			err := valid(c, args)
			switch {
			case err == nil:
				return nil
			case len(args) > 0 && valid(c, nil) == nil:
				// cobra.NoArgs calls an argument an unknown command.
				err = fmt.Errorf("takes no arguments (got %q)", args[0])
			}
			return usageError{fmt.Errorf("%s: %w; usage: %s", strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "), err, c.UseLine())}
		}
	}
	for _, sub := range c.Commands() {
		strictArgs(sub)
	}
}

// unknownCommand says that word is not a subcommand of group, and which it may have meant:
// the nearest by cobra's suggestions, else every subcommand there is.
func unknownCommand(group *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, group.CommandPath())
	if near := group.SuggestionsFor(word); len(near) > 0 {
		quoted := make([]string, len(near))
		for i, n := range near {
			quoted[i] = strconv.Quote(n)
		}
		return fmt.Errorf("%s; did you mean %s?", msg, strings.Join(quoted, " or "))
	}
	var names []string
	for _, sub := range group.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return fmt.Errorf("%s; its commands: %s", msg, strings.Join(names, ", "))
}
