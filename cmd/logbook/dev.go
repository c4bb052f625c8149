package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/cmd/logbook/localpg"
	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

const devHelp = `Run logbook locally: no Slack workspace and no model key needed.

It starts the Slack emulator, uses DATABASE_URL or else a local PostgreSQL of its own (data
kept in the user cache directory, so sessions survive restarts), applies migrations, runs
the same code as 'logbook serve' against the emulator, and opens a terminal chat where you
are a user (ada) in the public channel #general.

With ANTHROPIC_API_KEY, or OPENAI_API_KEY / OPENAI_BASE_URL (or LOGBOOK_MODEL), it uses that
model; otherwise the offline provider, which is not a language model (try "run: ls -la").

Chat commands:
  <text>          say something: a new thread mentioning the bot, or a reply in the current one
  /new            the next message starts a new thread
  /threads        list sessions;  /switch N  continue thread N of that list
  /transcript     print the current thread's transcript
  /evict          force idle eviction now (the next message rehydrates from the log)
  /status         cells running, model, current thread, metrics address
  /quit           stop (Ctrl-C or Ctrl-D too); everything dev started is stopped`

func newDevCmd(e env) *cobra.Command {
	var slackAddr string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run logbook locally against a Slack emulator, with a terminal chat",
		Long:  devHelp,
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runDev(c.Context(), e, slackAddr)
		},
	}
	cmd.Flags().StringVar(&slackAddr, "slack-addr", "127.0.0.1:0", "address of the Slack emulator")
	return cmd
}

func runDev(ctx context.Context, e env, slackAddr string) error {
	out := e.stdout
	say := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }

	// Logs go to a file: the terminal is the chat.
	logDir := filepath.Join(cacheDir(), "logbook")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(logDir, "dev.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := zerolog.New(logFile).With().Timestamp().Logger()

	emuLog := log.With().Str("part", "slackemu").Logger()
	emu, err := slackemu.Start(slackemu.Options{Addr: slackAddr, Logger: &emuLog})
	if err != nil {
		return fmt.Errorf("start the Slack emulator: %w", err)
	}
	defer emu.Close()
	say("slack emulator  %s (workspace %s, you are ada in #general)", emu.URL(), emu.TeamID())

	dsn := strings.TrimSpace(e.getenv("DATABASE_URL"))
	if dsn == "" {
		pg, err := localpg.Start(ctx, localpg.Options{Log: prefixWriter{out, "postgres        "}})
		if err != nil {
			return err
		}
		defer func() {
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := pg.Stop(stop); err != nil {
				say("stopping postgres: %v", err)
			}
		}()
		dsn = pg.URL()
		say("postgres        local server in %s", pg.Dir())
	} else {
		say("postgres        DATABASE_URL")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	err = migrations.Up(ctx, db, nil)
	db.Close()
	if err != nil {
		return err
	}

	cfg := serveConfig{
		DatabaseURL: Secret(dsn), AppToken: Secret(emu.AppToken()), BotToken: Secret(emu.BotToken()),
		APIURL: emu.APIURL(), DBRole: "logbook_app", PrivateNote: true,
	}
	if err := cfg.readSettings(e); err != nil {
		return usageError{err}
	}
	// dev's own: its database and Slack are the local ones, its web address loopback, and it
	// polls more often (a playground, one replica).
	cfg.DBRole = "logbook_app"
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, "127.0.0.1:0")
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 2*time.Second)
	if cfg.Model == "" {
		cfg.Model = "offline"
		say("model           offline — NOT a language model (set ANTHROPIC_API_KEY or OPENAI_API_KEY/OPENAI_BASE_URL for one); try \"run: uname -a\"")
	} else {
		say("model           %s", cfg.Model)
	}
	say("logs            %s", logPath)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	readyCh := make(chan running, 1)
	serveErr := make(chan error, 1)
	go func() { serveErr <- serve(ctx, cfg, log, func(r running) { readyCh <- r }) }()
	var rt running
	select {
	case rt = <-readyCh:
	case err := <-serveErr:
		return err
	}
	// Slack delivers what is posted while no socket is open only by its retries (a minute
	// later): let the bot's socket connect before the first message.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	err = emu.Wait(wctx, func() bool { return len(emu.Connections()) > 0 })
	wcancel()
	if err != nil {
		return fmt.Errorf("the bot did not connect to the Slack emulator: %w", err)
	}
	if rt.http != "" {
		say("http            http://%s/metrics (web pages need LOGBOOK_WEB_TOKENS)", rt.http)
	}
	say("ready. Type a message (/help for commands).")

	err = chat(ctx, e.stdin, out, emu, rt, cfg.Model)
	cancel()
	if serr := <-serveErr; serr != nil && !errors.Is(serr, context.Canceled) {
		return serr
	}
	say("stopped.")
	return err
}

func cacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return d
	}
	return os.TempDir()
}

// prefixWriter prefixes each write (one line from localpg) for the terminal.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "%s%s", p.prefix, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// chat is the terminal side of `logbook dev`.
func chat(ctx context.Context, in io.Reader, out io.Writer, emu *slackemu.Server, rt running, model string) error {
	const channel, user = "C0000001", "U0000001"
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	thread := ""
	var listed []string
	f, ok := in.(*os.File)
	echo := !ok || !isTerminal(f)
	prompt := func() { fmt.Fprint(out, "you> ") }
	prompt()
	for {
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case line, ok = <-lines:
			if !ok {
				fmt.Fprintln(out)
				return nil
			}
		}
		line = strings.TrimSpace(line)
		if echo {
			fmt.Fprintln(out, line) // piped input: show what "you" said
		}
		switch {
		case line == "":
		case line == "/quit" || line == "/exit":
			return nil
		case line == "/help":
			fmt.Fprintln(out, devHelp[strings.Index(devHelp, "Chat commands:"):])
		case line == "/new":
			thread = ""
			fmt.Fprintln(out, "(the next message starts a new thread)")
		case line == "/status":
			fmt.Fprintf(out, "cells running: %d · model: %s · thread: %s · metrics: http://%s/metrics\n", rt.runner.Active(), model, orNone(thread), rt.http)
		case line == "/evict":
			rt.runner.Evict()
			waitUntil(ctx, 5*time.Second, func() bool { return rt.runner.Active() == 0 })
			fmt.Fprintf(out, "(evicted: %d cells running; the next message rehydrates from the log)\n", rt.runner.Active())
		case line == "/threads":
			if _, err := rt.index.CatchUp(ctx); err != nil {
				fmt.Fprintln(out, "search index:", err)
			}
			sums, err := rt.search.Recent(ctx, time.Now().Add(time.Minute), 20)
			if err != nil {
				fmt.Fprintln(out, "list sessions:", err)
				break
			}
			listed = listed[:0]
			for i, s := range sums {
				listed = append(listed, s.ThreadTS)
				mark := " "
				if s.ThreadTS == thread {
					mark = "*"
				}
				fmt.Fprintf(out, "%s%2d. %s  (%d messages, %s)\n", mark, i+1, s.Heading(), s.Messages, s.LastEventAt.Local().Format(time.Kitchen))
			}
			if len(sums) == 0 {
				fmt.Fprintln(out, "(no sessions yet)")
			}
		case strings.HasPrefix(line, "/switch"):
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "/switch")))
			if err != nil || n < 1 || n > len(listed) {
				fmt.Fprintln(out, "usage: /switch N (a number from /threads)")
				break
			}
			thread = listed[n-1]
			fmt.Fprintf(out, "(continuing thread %s)\n", thread)
		case line == "/transcript":
			if thread == "" {
				fmt.Fprintln(out, "(no current thread)")
				break
			}
			sess, err := rt.store.SessionByThread(ctx, session.ThreadKey{Team: emu.TeamID(), Channel: channel, ThreadTS: thread})
			if err != nil {
				fmt.Fprintln(out, "transcript:", err)
				break
			}
			evs, err := rt.store.Events(ctx, sess.ID, session.Range{})
			if err != nil {
				fmt.Fprintln(out, "transcript:", err)
				break
			}
			if err := transcript.Render(out, sess, evs, transcript.Options{Location: time.Local}); err != nil {
				fmt.Fprintln(out, "transcript:", err)
			}
		case strings.HasPrefix(line, "/"):
			fmt.Fprintln(out, "unknown command; /help lists them")
		default:
			if err := say(ctx, out, emu, rt, channel, user, &thread, line); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintln(out, "error:", err)
			}
		}
		prompt()
	}
}

// say posts line as the user and waits for the bot's reply, showing that it works.
func say(ctx context.Context, out io.Writer, emu *slackemu.Server, rt running, channel, user string, thread *string, line string) error {
	p := slackemu.Post{Channel: channel, User: user, Text: line, ThreadTS: *thread}
	if *thread == "" {
		p.Text = "<@" + emu.BotUserID() + "> " + line
	}
	before := len(emu.BotReplies(channel, *thread))
	if *thread == "" {
		before = 0
	}
	posted, err := emu.Post(p)
	if err != nil {
		return err
	}
	if *thread == "" {
		*thread = posted.TS
		fmt.Fprintf(out, "(new thread %s)\n", posted.TS)
	}
	tty := isTerminal(out)
	if tty {
		fmt.Fprint(out, "logbook is working…")
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, err = emu.WaitForReplies(wctx, channel, *thread, before+1)
	if tty {
		fmt.Fprint(out, "\r                    \r")
	}
	if err != nil {
		return fmt.Errorf("no reply yet (it will appear in the thread): %w", err)
	}
	// A reply may come in parts; give the rest a moment to land.
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond):
	}
	replies := emu.BotReplies(channel, *thread)
	for _, r := range replies[before:] {
		fmt.Fprintf(out, "logbook> %s\n", mrkdwn.ToPlain(r.Text, nil))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// waitUntil polls cond every 20ms until it holds or d passes.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
