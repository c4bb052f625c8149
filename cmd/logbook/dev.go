package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/cmd/logbook/localpg"
	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/sandbox"
)

const devHelp = `Run logbook locally: no Slack workspace and no model key needed.

It starts the Slack emulator, uses DATABASE_URL or else a local PostgreSQL of its own (data
kept in the user cache directory, or /var/lib/logbook/pg as root, or --data-dir), applies
migrations, runs the same code as 'logbook serve' against the emulator, and opens a terminal
chat where you are a user (ada) in the public channel #general. The emulator's workspace is
kept next to the database, so threads survive a restart of dev: /threads, /switch N and a
reply continue one, rehydrated from the log. It reads the same settings as 'logbook serve'
(LOGBOOK_*; see 'logbook serve --help'), prints the DATABASE_URL of its database (logbook
search, transcript and audit find it by themselves while dev runs and say which data dir's;
with several dev runs live they list them and ask for DATABASE_URL), and serves the web
pages on loopback behind a one-time sign-in link.

With ANTHROPIC_API_KEY, or OPENAI_API_KEY / OPENAI_BASE_URL (or LOGBOOK_MODEL), it uses that
model; otherwise the offline provider, which is not a language model but calls the tools:
  run: ls -la            runs a command in the thread's sandbox
  write: notes.txt       writes the lines typed after it, up to a line of """, to a file
  attach: notes.txt      hands that file of the sandbox back in the thread (saved next to dev.log)
Commands need a sandbox: bubblewrap when installed (apt-get install -y bubblewrap), or
LOGBOOK_SANDBOX=process (no isolation); without either dev says at start that they are off.

Chat commands:
  <text>          say something: a new thread mentioning the bot, or a reply in the current
                  one. A multi-line paste is one message; so are the lines between two lines
                  of """ (type or pipe them). At most 40,000 characters, as in Slack.
                  Once a turn takes it up, "… logbook is thinking" shows (or why the bot
                  does not answer it: an aside, a muted thread); what you type meanwhile is
                  handed to the running turn at its next model call
                  (LOGBOOK_MIDTURN=queue: answered after it); "stop" stops it.
  /send FILE      say the contents of FILE as one message
  /share FILE [text]  share FILE (its bytes, as a Slack file) with a message; the model reads
                  images, PDFs and text files, the rest lands in its sandbox
  /logbook TEXT   the /logbook slash command (help, search <words>, repo [<url> [branch] |
                  off]); its answer is ephemeral
  /new            the next message starts a new thread
  /threads        list sessions;  /switch N  continue thread N of that list
  /stop           stop the current thread's running turn (Slack's stop button)
  /approve /deny  decide the approval card waiting in the current thread, and print what the
                  bot did: the card's decision, or its note to you (LOGBOOK_TOOL_APPROVERS);
                  LOGBOOK_TOOL_APPROVAL=run_command=ask,write_file=ask asks before each call
  /transcript     print the current thread's transcript
  /good /bad      👍 or 👎 on the current thread's last reply (a feedback event)
  /home           open your App Home: your sessions, what waits for you, schedules, spend
  /canvas [ID]    print the canvas a long reply was written as (the last one, or ID)
  /evict          force idle eviction now (the next message rehydrates from the log)
  /web            print a new one-time sign-in link for the web pages
  /status         cells running, model, current thread, metrics address
  /ids            your user id and #general's channel id (for LOGBOOK_ADMINS, hooks)
  /quit           stop (Ctrl-C or Ctrl-D too); everything dev started is stopped`

func newDevCmd(e env) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run logbook locally against a Slack emulator, with a terminal chat",
		Long:  devHelp,
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runDev(c.Context(), e, o)
		},
	}
	cmd.Flags().StringVar(&o.slackAddr, "slack-addr", "127.0.0.1:0", "address of the Slack emulator")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "directory of dev's PostgreSQL and emulator workspace "+
		"(default: the user cache dir's logbook/pg, or /var/lib/logbook/pg as root)")
	return cmd
}

// devOptions are dev's flags.
type devOptions struct {
	slackAddr string
	dataDir   string
}

// devUser is "you" in the chat: ada, in #general.
const devChannel, devUser = "C0000001", "U0000001"

// runDev runs dev's phases: its log, its database, the emulator, the settings, serve, and the
// chat until it ends; each phase's cleanup runs when runDev returns.
func runDev(ctx context.Context, e env, o devOptions) error {
	out := e.stdout
	say := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }

	// Under a pipe (logbook dev | tee dev.log) Ctrl-C interrupts tee too, and the next write
	// to the pipe would kill dev by SIGPIPE before it stops its PostgreSQL. Caught, SIGPIPE
	// makes that write fail with EPIPE instead, and shutdown goes on. (Caught, not ignored:
	// children get the default disposition back.)
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)

	// Logs go to a file: the terminal is the chat.
	logDir := filepath.Join(cacheDir(), "logbook")
	logFile, logPath, err := openDevLog(logDir)
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := zerolog.New(logFile).With().Timestamp().Logger()

	// The database first: the emulator's workspace is kept next to it.
	db, err := startDevDatabase(ctx, e, o, logDir, say)
	if err != nil {
		return err
	}
	defer db.stop()

	emuLog := log.With().Str("part", "slackemu").Logger()
	emu, err := slackemu.Start(slackemu.Options{Addr: o.slackAddr, Logger: &emuLog, StateFile: db.stateFile})
	if err != nil {
		return fmt.Errorf("start the Slack emulator: %w", err)
	}
	defer emu.Close()
	say("slack emulator  %s (workspace %s, kept in %s)", emu.URL(), emu.TeamID(), db.stateFile)
	say("you             %s", devIDs(emu))

	if err := migrateDev(ctx, db.dsn); err != nil {
		return err
	}
	cfg, err := devConfig(e, db.dsn, emu, exec.LookPath, say)
	if err != nil {
		return err
	}
	say("logs            %s", logPath)

	// serve outlives Ctrl-C (ctx) until the chat has stopped the running turns and shown how
	// they ended; during its start, Ctrl-C ends it at once.
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	starting := context.AfterFunc(ctx, cancel)
	rt, serveErr, err := startDevServe(serveCtx, cfg, log, emu)
	starting()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		if serveErr != nil {
			<-serveErr // serve runs yet: it ends before dev stops what it uses
		}
		return err
	}
	c := &chat{out: out, emu: emu, rt: rt, model: cfg.Model, signIn: cfg.SignIn, tty: isTerminal(out),
		waiting: map[string]pending{}, shown: map[string]bool{}, filesDir: filepath.Join(logDir, "dev-files")}
	if rt.http != "" {
		if link := c.signInLink(); link != "" {
			say("web pages       %s", link)
			say("                (a one-time sign-in link; /web prints another)")
		}
		say("metrics         http://%s/metrics", rt.http)
	}
	say("ready. Type a message (/help for commands).")

	window := time.Duration(0)
	if f, ok := e.stdin.(*os.File); ok && isTerminal(f) {
		window = pasteWindow
	} else {
		c.echo = true // piped input: show what "you" said
	}
	err = c.run(ctx, readInputs(ctx, e.stdin, window, cfg.Model == "offline"))
	cancel()
	if serr := <-serveErr; serr != nil && !errors.Is(serr, context.Canceled) {
		return serr
	}
	say("stopped.")
	return err
}

// devIDs says who you are in dev's workspace, with the ids that settings (LOGBOOK_ADMINS,
// LOGBOOK_TOOL_APPROVERS), hooks (LOGBOOK_HOOKS' channel) and /logbook budget raise take.
func devIDs(emu *slackemu.Server) string {
	return fmt.Sprintf("ada, user id %s, in #general, channel id %s (the bot is %s); e.g. LOGBOOK_ADMINS=%s, "+
		`LOGBOOK_HOOKS='{"alerts":{"channel":"%s",...}}'`, devUser, devChannel, emu.BotUserID(), devUser, devChannel)
}

// openDevLog opens dev's log file in dir (appending).
func openDevLog(dir string) (*os.File, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "dev.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	return f, path, err
}

// devDB is dev's database: DATABASE_URL's, or a local PostgreSQL dev started (stop stops it
// and removes the URL left for the CLIs).
type devDB struct {
	dsn       string
	stateFile string // the emulator's workspace, kept next to the database
	stop      func()
}

// startDevDatabase uses DATABASE_URL, or starts dev's own PostgreSQL in o.dataDir and leaves
// its URL for the CLIs (keyed by the data dir).
func startDevDatabase(ctx context.Context, e env, o devOptions, logDir string, say func(string, ...any)) (devDB, error) {
	if dsn := strings.TrimSpace(e.getenv("DATABASE_URL")); dsn != "" {
		// One workspace file per database, so the emulator's threads match the sessions.
		sum := sha256.Sum256([]byte(dsn))
		say("postgres        DATABASE_URL")
		return devDB{dsn: dsn, stateFile: filepath.Join(logDir, "slackemu-"+hex.EncodeToString(sum[:6])+".json"), stop: func() {}}, nil
	}
	pg, err := localpg.Start(ctx, localpg.Options{Dir: o.dataDir, Log: prefixWriter{e.stdout, "postgres        "}})
	if err != nil {
		return devDB{}, err
	}
	stopPG := func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := pg.Stop(stop); err != nil {
			say("stopping postgres: %v", err)
		}
	}
	say("postgres        local server in %s", pg.Dir())
	unpublish, err := publishDevDatabase(devDatabaseFile(devDatabaseDir(), pg.Dir()), pg.URL(), pg.Dir())
	if err != nil {
		stopPG()
		return devDB{}, err
	}
	say("database        DATABASE_URL='%s'", pg.URL())
	say("                (psql takes it; logbook search, transcript and audit find it by themselves while dev runs)")
	return devDB{dsn: pg.URL(), stateFile: filepath.Join(pg.Dir(), "slackemu.json"), stop: func() { unpublish(); stopPG() }}, nil
}

// migrateDev applies the migrations to dev's database.
func migrateDev(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return migrations.Up(ctx, db, nil)
}

// devConfig is serve's configuration for dev: its database and the emulator, the settings
// serve reads, and dev's own defaults. It says what dev chose: the web pages, the sandbox
// (lookPath finds bubblewrap) and the model.
func devConfig(e env, dsn string, emu *slackemu.Server, lookPath func(string) (string, error), say func(string, ...any)) (serveConfig, error) {
	cfg := serveConfig{
		DatabaseURL: Secret(dsn), AppToken: Secret(emu.AppToken()), BotToken: Secret(emu.BotToken()),
		APIURL: emu.APIURL(), DBRole: "logbook_app", PrivateNote: true,
	}
	if err := cfg.readSettings(e); err != nil {
		return cfg, usageError{err}
	}
	// dev's own: its database and Slack are the local ones, its web address loopback, and it
	// polls more often (a playground, one replica).
	cfg.DBRole = "logbook_app"
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, "127.0.0.1:0")
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 2*time.Second)
	if cfg.HTTPAddr != "off" {
		if isLoopback(cfg.HTTPAddr) {
			var err error
			if cfg.SignIn, err = web.NewSignIn("ada", false); err != nil {
				return cfg, err
			}
		} else {
			say("web pages       no sign-in link: LOGBOOK_HTTP_ADDR=%s is not a loopback address (LOGBOOK_WEB_TOKENS still work)", cfg.HTTPAddr)
		}
	}
	var commands bool
	cfg.Sandbox, commands = devSandbox(cfg.Sandbox, lookPath, say)
	if cfg.Model == "" {
		cfg.Model = "offline"
		try := `try "run: uname -a", "write: notes.txt" with lines after it, "attach: notes.txt"`
		if !commands {
			try = `its run:, write: and attach: need the sandbox (above)`
		}
		say("model           offline — NOT a language model (set ANTHROPIC_API_KEY or OPENAI_API_KEY/OPENAI_BASE_URL for one); %s", try)
	} else {
		say("model           %s", cfg.Model)
	}
	return cfg, nil
}

// devSandbox decides the sandbox as serve would (LOGBOOK_SANDBOX, else bubblewrap when
// installed, else none), says it, and reports whether command tools are on.
func devSandbox(kind string, lookPath func(string) (string, error), say func(string, ...any)) (string, bool) {
	if kind == "" {
		kind = sandbox.KindNone
		if _, err := lookPath("bwrap"); err == nil {
			kind = sandbox.KindBwrap
		}
		if kind == sandbox.KindNone {
			say("sandbox         commands are OFF: bubblewrap is not installed. Turn them on with " +
				"apt-get install -y bubblewrap, or LOGBOOK_SANDBOX=process (no isolation: commands run as your own user)")
			return kind, false
		}
	}
	switch kind {
	case sandbox.KindNone:
		say("sandbox         commands are OFF (LOGBOOK_SANDBOX=none); LOGBOOK_SANDBOX=bwrap or process turns them on")
		return kind, false
	case sandbox.KindProcess:
		say("sandbox         process: commands run WITHOUT isolation, as your own user (LOGBOOK_SANDBOX=process)")
	default:
		say("sandbox         bubblewrap: each thread's commands run in a sandbox of their own")
	}
	return kind, true
}

// startDevServe runs serve against the emulator until ctx ends, and returns once it is up and
// its socket is connected; serveErr says how serve ended (nil when it already has, with err).
func startDevServe(ctx context.Context, cfg serveConfig, log zerolog.Logger, emu *slackemu.Server) (running, <-chan error, error) {
	readyCh := make(chan running, 1)
	serveErr := make(chan error, 1)
	go func() { serveErr <- serve(ctx, cfg, log, func(r running) { readyCh <- r }) }()
	var rt running
	select {
	case rt = <-readyCh:
	case err := <-serveErr:
		return rt, nil, err
	}
	// Slack delivers what is posted while no socket is open only by its retries (a minute
	// later): let the bot's socket connect before the first message.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := emu.Wait(wctx, func() bool { return len(emu.Connections()) > 0 }); err != nil {
		return rt, serveErr, fmt.Errorf("the bot did not connect to the Slack emulator: %w", err)
	}
	return rt, serveErr, nil
}

// isLoopback reports whether a host:port address listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
