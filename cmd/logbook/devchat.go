package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/hooks"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/slacktext"
	"github.com/logbook/logbook/session/thread"
	"github.com/logbook/logbook/session/transcript"
)

// chat is the terminal side of `logbook dev`: what you type is posted to the emulator as
// ada in #general, and the bot's replies are printed as they arrive.
type chat struct {
	out    io.Writer
	emu    *slackemu.Server
	rt     running
	model  string
	signIn *web.SignIn
	echo   bool // piped input: print what "you" said, and read the next line only once answered
	tty    bool // out is a terminal: a line replaces the prompt with "\r" and a clear

	prompted bool // "you> " is the last thing printed

	thread  string             // the current thread's ts; "" before the first message
	listed  []string           // thread ts values of the last /threads
	waiting map[string]pending // thread → its newest message not answered yet
	shown   map[string]bool    // ts of the bot's messages printed (or there before we looked)
	// live holds what was printed of each message still streaming: its text, and its task
	// cards' lines.
	live map[string]*livePrinted
	// open is the live message whose text the current line ends with (nil: none); anything
	// else printed ends that line first.
	open *livePrinted
	// filesDir is where files the bot hands back (attach_file) are saved; "" keeps them in
	// the emulator only.
	filesDir string
	// cursor is where the emulator's changes were last read (ChangedSince): the bot's new
	// top-level posts are threads it started itself (a schedule's tick, a hook).
	cursor  int
	watched bool
	// origins names what started each thread the bot started itself ("a schedule").
	origins map[string]string
	// codeShown is each code channel's line as last printed (devsurfaces.go).
	codeShown map[string]string
	// canvasShown are the canvases whose line was printed (devsurfaces.go): once each, also
	// when the link reaches a reply after it was printed (a streamed reply's last update).
	canvasShown map[string]bool
}

type livePrinted struct {
	who   string // "logbook", or "logbook (thread …)"
	text  string
	tasks map[string]bool
	head  bool // its "logbook> " is printed
	cut   bool // something else was printed since its last text: the next text says "…"
}

// pending is a message whose turn has not completed, and what the chat said of it.
type pending struct {
	ts       string
	since    time.Time
	thinking bool // "… logbook is thinking" was printed (a turn took it up)
	noted    bool // that the bot does not answer it was printed
}

// replyPatience is how long piped input waits for a turn before going on.
const replyPatience = 10 * time.Minute

// printf prints a line of the chat's own, after ending the line a live reply is written on.
// What it prints is made inert: control characters (a command's colours, a cursor move) in
// what the bot or a tool wrote are shown, never obeyed by the terminal.
func (c *chat) printf(format string, a ...any) {
	c.endLive()
	c.prompted = false
	io.WriteString(c.out, inert(fmt.Sprintf(format, a...)))
}

// endLive ends the line a live reply is written on, if one is open.
func (c *chat) endLive() {
	if c.open != nil {
		io.WriteString(c.out, "\n")
		c.open.cut, c.open = true, nil
	}
}

// takePrompt makes the next line take the place of a "you> " printed last: on a terminal the
// prompt is cleared, elsewhere (dev | tee) its line is ended, with no "\r" in the log.
func (c *chat) takePrompt() {
	if !c.prompted {
		return
	}
	if c.tty {
		io.WriteString(c.out, "\r\x1b[K")
	} else {
		io.WriteString(c.out, "\n")
	}
	c.prompted = false
}

// inert shows the control characters of s (but newlines and tabs) as symbols, and drops
// carriage returns, so text from the bot or a tool cannot move the cursor or colour the
// terminal.
func inert(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return -1
		case r < 0x20:
			return 0x2400 + r // ␛ for ESC
		case r == 0x7f:
			return 0x2421
		case r >= 0x80 && r < 0xa0:
			return '\ufffd'
		}
		return r
	}, s)
}

// liveText prints text of the live message lp, continuing its line (or starting one that says
// whose continuation it is).
func (c *chat) liveText(lp *livePrinted, text string) {
	if c.open != lp {
		c.endLive()
		c.takePrompt() // the reply takes the prompt's place
		switch {
		case !lp.head:
			fmt.Fprintf(c.out, "%s> ", lp.who)
		case lp.cut:
			fmt.Fprintf(c.out, "%s> …", lp.who)
		}
		lp.head, lp.cut = true, false
	}
	c.prompted = false
	io.WriteString(c.out, inert(text))
	c.open = lp
}

// prompt prints "you> ", unless a reply is being written on the current line: the prompt
// follows it once it ends (printing it now would split the reply's line).
func (c *chat) prompt() {
	if c.open != nil || c.prompted {
		return
	}
	c.printf("you> ")
	c.prompted = true
}

// stopPatience is how long the chat, ending, waits for the turns it stopped to end.
const stopPatience = 15 * time.Second

// run reads inputs until they end, /quit or ctx (Ctrl-C); then it stops the turns still
// running, prints how each ended, and returns nil.
func (c *chat) run(ctx context.Context, inputs <-chan input) error {
	why := c.converse(ctx, inputs)
	c.finish(why)
	return nil
}

// finish stops the turns still running (Slack's stop button, pressed for you), says so at
// once, and prints what they posted and how they ended, for at most stopPatience: serve
// would otherwise wait for them in silence and end them unseen.
func (c *chat) finish(why string) {
	for _, thread := range slices.Sorted(maps.Keys(c.waiting)) {
		// A turn waiting for a decision is no work to stop: its wait is in the log, and its
		// card can be decided after the next start.
		if c.openCard(thread) != "" {
			c.status("(thread %s waits for an approval: it keeps waiting, and /approve or /deny decides it after the next start)\n", thread)
			delete(c.waiting, thread)
		}
	}
	if len(c.waiting) == 0 {
		return
	}
	threads := slices.Sorted(maps.Keys(c.waiting))
	c.status("(%s: stopping the running turn in thread %s; what it says follows, then dev stops)\n", why, strings.Join(threads, ", "))
	for _, thread := range threads {
		if _, err := c.emu.StopAgentSession(devChannel, thread, devUser); err != nil {
			c.printf("(could not press stop in thread %s: %v)\n", thread, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopPatience)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(c.waiting) > 0 {
		select {
		case <-ctx.Done():
			c.printf("(thread %s did not stop within %v: dev cuts it short now; the next start resumes it from the log)\n",
				strings.Join(slices.Sorted(maps.Keys(c.waiting)), ", "), stopPatience)
			return
		case <-tick.C:
			c.refresh(ctx)
		}
	}
	c.endLive()
}

// converse reads inputs until they end, /quit or ctx, and says which.
func (c *chat) converse(ctx context.Context, inputs <-chan input) string {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	c.watchStarted() // from here on, a thread the bot starts is shown
	c.prompt()
	var held *input // piped input read while a turn runs: said once it is answered
	ended := false
	for {
		in := inputs
		if ended || held != nil {
			in = nil
		}
		if held != nil && (!c.echo || len(c.waiting) == 0) {
			msg := *held
			held = nil
			if quit := c.handle(ctx, msg); quit {
				return "/quit"
			}
			if len(c.waiting) == 0 || !c.echo {
				c.prompt()
			}
			continue
		}
		if ended && held == nil && (!c.echo || len(c.waiting) == 0) {
			c.printf("\n")
			return "end of input"
		}
		select {
		case <-ctx.Done():
			c.endLive()
			c.takePrompt()
			return "Ctrl-C"
		case msg, ok := <-in:
			if !ok {
				ended = true // piped input: its last message is still answered
				continue
			}
			if c.echo && len(c.waiting) > 0 && !controlsTurn(msg.text) {
				// Piped input: one message at a time, as someone waiting for the answer;
				// what controls the running turn (/stop, /approve, /deny) acts at once.
				held = &msg
				continue
			}
			if quit := c.handle(ctx, msg); quit {
				return "/quit"
			}
			if len(c.waiting) == 0 || !c.echo {
				c.prompt()
			}
		case <-tick.C:
			if c.refresh(ctx) && (len(c.waiting) == 0 || !c.echo) {
				c.prompt()
			}
		}
	}
}

// controlsTurn reports a chat command that acts on the running turn; "stop", the word that
// stops a thread's running turn in Slack, is one too.
func controlsTurn(line string) bool {
	return line == "/stop" || line == "/approve" || line == "/deny" || line == "/quit" || line == "/exit" ||
		strings.EqualFold(strings.TrimSpace(line), "stop")
}

// handle acts on one input; it returns true for /quit.
func (c *chat) handle(ctx context.Context, in input) bool {
	line := in.text
	if in.hint != "" {
		c.printf("%s\n", in.hint)
		return false
	}
	if in.note != "" {
		if c.echo {
			c.printf("%s\n", clip.Text(line, 60))
		}
		c.printf("%s\n", in.note)
		return false
	}
	if c.echo {
		c.printf("%s\n", line)
	}
	switch {
	case line == "":
	case line == "/quit" || line == "/exit":
		return true
	case strings.HasPrefix(line, "/"):
		name, arg, _ := strings.Cut(line, " ")
		run, ok := c.commands()[name]
		if !ok {
			c.printf("unknown command %s; /help lists them\n", clip.Text(name, 40))
			break
		}
		run(ctx, strings.TrimSpace(arg))
	default:
		if err := c.post(line); err != nil {
			c.printf("error: %v\n", err)
		}
	}
	return false
}

// commands are the chat's slash commands (devHelp lists them), each given the rest of its line.
func (c *chat) commands() map[string]func(ctx context.Context, arg string) {
	return map[string]func(context.Context, string){
		"/help": func(context.Context, string) { c.printf("%s\n", devHelp[strings.Index(devHelp, "Chat commands:"):]) },
		"/new": func(context.Context, string) {
			c.thread = ""
			c.printf("(the next message starts a new thread)\n")
		},
		"/ids": func(context.Context, string) { c.printf("you are %s\n", devIDs(c.emu)) },
		"/status": func(context.Context, string) {
			c.printf("cells running: %d · model: %s · thread: %s · metrics: http://%s/metrics\n", c.rt.runner.Active(), c.model, orNone(c.thread), c.rt.http)
		},
		"/evict": func(ctx context.Context, _ string) {
			c.rt.runner.Evict()
			waitUntil(ctx, 5*time.Second, func() bool { return c.rt.runner.Active() == 0 })
			c.printf("(evicted: %d cells running; the next message rehydrates from the log)\n", c.rt.runner.Active())
		},
		"/threads":    func(ctx context.Context, _ string) { c.threads(ctx) },
		"/switch":     func(_ context.Context, arg string) { c.switchTo(arg) },
		"/stop":       func(context.Context, string) { c.stop() },
		"/approve":    func(ctx context.Context, _ string) { c.decide(ctx, bot.ActionApprove) },
		"/deny":       func(ctx context.Context, _ string) { c.decide(ctx, bot.ActionDeny) },
		"/transcript": func(ctx context.Context, _ string) { c.transcript(ctx) },
		"/web": func(context.Context, string) {
			if link := c.signInLink(); link != "" {
				c.printf("%s\n(a one-time sign-in link)\n", link)
			} else {
				c.printf("(no sign-in links: the web pages are off or not on loopback)\n")
			}
		},
		"/logbook": c.slash,
		"/share":   func(_ context.Context, arg string) { c.share(arg) },
		"/send":    func(_ context.Context, arg string) { c.send(arg) },
		"/good":    func(ctx context.Context, _ string) { c.rate(ctx, session.FeedbackPositive) }, // devsurfaces.go
		"/bad":     func(ctx context.Context, _ string) { c.rate(ctx, session.FeedbackNegative) },
		"/home":    func(ctx context.Context, _ string) { c.home(ctx) },
		"/canvas":  func(_ context.Context, arg string) { c.canvas(arg) },
	}
}

// switchTo makes thread n of the last /threads the current one.
func (c *chat) switchTo(arg string) {
	n, err := strconv.Atoi(arg)
	switch {
	case err != nil:
		c.printf("usage: /switch N (a number from /threads)\n")
	case len(c.listed) == 0:
		c.printf("(there is no thread %s: /threads lists the threads and numbers them)\n", clip.Text(arg, 20))
	case n < 1 || n > len(c.listed):
		c.printf("(there is no thread %d: /threads listed %d, numbered 1 to %d)\n", n, len(c.listed), len(c.listed))
	default:
		c.thread = c.listed[n-1]
		c.markShown(c.thread)
		c.printf("(continuing thread %s)\n", c.thread)
	}
}

// stop presses the stop button of the current thread's running turn.
func (c *chat) stop() {
	if c.thread == "" {
		c.printf("(no current thread)\n")
		return
	}
	if _, busy := c.waiting[c.thread]; !busy {
		c.printf("(nothing is running in this thread)\n")
		return
	}
	// Slack's stop button: the agent session's agent_session_stopped.
	if _, err := c.emu.StopAgentSession(devChannel, c.thread, devUser); err != nil {
		c.printf("error: %v\n", err)
		return
	}
	c.printf("(stop requested)\n")
}

// share shares "FILE [message]" as ada: the file's bytes as a Slack file, with the message.
func (c *chat) share(arg string) {
	file, text, _ := strings.Cut(arg, " ")
	b, err := os.ReadFile(file)
	if err != nil {
		c.printf("usage: /share FILE [message] (%v)\n", err)
		return
	}
	f := slackemu.File{Name: filepath.Base(file), Mimetype: mime.TypeByExtension(filepath.Ext(file)), Content: b}
	if err := c.post(cmp.Or(strings.TrimSpace(text), "(shared "+f.Name+")"), f); err != nil {
		c.printf("error: %v\n", err)
	}
}

// send says the contents of a file as one message.
func (c *chat) send(file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		c.printf("usage: /send FILE (%v)\n", err)
		return
	}
	if in := checkInput([]string{string(b)}, false); in.note != "" {
		c.printf("%s\n", in.note)
	} else if err := c.post(in.text); err != nil {
		c.printf("error: %v\n", err)
	}
}

// decide clicks Approve or Deny on the current thread's open approval card as ada, and prints
// what the bot did with the click: the card as it updated it, or the note it sent ada (someone
// not permitted to decide, a request no longer waiting). A decided card's thread is followed
// until its turn completes, a card from before a restart included.
func (c *chat) decide(ctx context.Context, action string) {
	card := c.awaitCard(ctx)
	if card == "" {
		c.printf("(no approval card waits in this thread)\n")
		return
	}
	c.refresh(ctx) // the card is printed before what is decided on it
	before := len(c.ephemerals())
	if _, err := c.emu.ClickButton(slackemu.Click{Channel: devChannel, TS: card, ActionID: action, User: devUser}); err != nil {
		c.printf("error: %v\n", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var notes []slackemu.Ephemeral
	var decided *slackemu.Message
	err := c.emu.Wait(wctx, func() bool {
		notes = c.ephemerals()[before:]
		if m, ok := c.emu.Message(devChannel, card); ok && !strings.Contains(string(m.Blocks), bot.ActionApprove) {
			decided = &m
		}
		return len(notes) > 0 || decided != nil
	})
	if err != nil {
		c.printf("(the bot did not answer the click: %v)\n", err)
		return
	}
	for _, m := range notes {
		c.printf("logbook (only you can see this)> %s\n", slacktext.ToPlain(m.Text, nil))
	}
	if decided != nil {
		lines := cardLines(*decided)
		c.printf("logbook updated the card> %s\n", strings.TrimSpace(lines[len(lines)-1]))
		c.follow(c.thread)
	}
}

// follow prints what the bot posts in thread until its turn completes: a thread the chat was
// not waiting for (a card decided after a restart) waits for ada's newest message there.
func (c *chat) follow(thread string) {
	if _, busy := c.waiting[thread]; busy {
		return
	}
	msgs, err := c.emu.Thread(devChannel, thread)
	if err != nil {
		return
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].User == devUser {
			c.waiting[thread] = pending{ts: msgs[i].TS, since: time.Now(), thinking: true}
			return
		}
	}
}

// post says text as ada: a new thread mentioning the bot, or a reply in the current one.
func (c *chat) post(text string, files ...slackemu.File) error {
	p := slackemu.Post{Channel: devChannel, User: devUser, Text: text, ThreadTS: c.thread, Files: files}
	if c.thread == "" {
		p.Text = "<@" + c.emu.BotUserID() + "> " + text
	}
	posted, err := c.emu.Post(p)
	if err != nil {
		return err
	}
	if c.thread == "" {
		c.thread = posted.TS
		c.printf("(new thread %s)\n", posted.TS)
	}
	c.markShown(c.thread)
	if _, busy := c.waiting[c.thread]; busy && strings.EqualFold(strings.TrimSpace(text), "stop") {
		c.printf("(stopping the running turn)\n")
	} else if busy {
		c.printf("(logbook is still working: it takes this message up at its next step, or answers it next)\n")
	}
	// "… logbook is thinking", or why it will not answer, is printed from the log (refresh).
	c.waiting[c.thread] = pending{ts: posted.TS, since: time.Now()}
	return nil
}

// markShown counts the bot's finished messages already in thread as printed, the first time
// the chat looks at it (a thread from /switch or before a restart shows only what comes next,
// and what a turn running there writes).
func (c *chat) markShown(thread string) {
	if _, busy := c.waiting[thread]; busy {
		return
	}
	for _, m := range c.emu.BotReplies(devChannel, thread) {
		if st, ok := c.emu.StreamState(devChannel, m.TS); !ok || !st.Streaming() {
			c.shown[m.TS] = true // a message still streaming is a turn running now: shown as it goes
		}
	}
}

// refresh prints, for each thread waiting for an answer, what the log says the bot does with
// the message (takes it up, or will not answer it and why) and the bot's new messages, and
// forgets the threads whose turn completed. It reports whether it printed a reply or a thread
// stopped waiting.
func (c *chat) refresh(ctx context.Context) bool {
	done := c.watchStarted()
	done = c.codeChannels() || done
	for thread, p := range c.waiting {
		// Ask the log first: a turn completes after its replies were delivered, so once it
		// has, every reply is in the emulator.
		st, err := c.messageState(ctx, thread, p.ts)
		if err != nil && ctx.Err() == nil {
			c.printf("error: %v\n", err)
		}
		switch {
		case st.unanswered != "" && !p.noted:
			c.status("(logbook does not answer this message%s: %s)\n", c.where(thread), st.unanswered)
			p.noted, done = true, true
		case st.started && st.unanswered == "" && !p.thinking:
			c.status("… logbook is thinking%s\n", c.where(thread))
			p.thinking, done = true, true
		}
		c.waiting[thread] = p
		for _, m := range c.emu.BotReplies(devChannel, thread) {
			if !c.shown[m.TS] && c.printReply(thread, m) {
				c.shown[m.TS] = true
				done = true
			} else if c.shown[m.TS] && c.printCanvases(m) {
				done = true
			}
		}
		answered := st.answered
		if !answered && c.echo && time.Since(p.since) > replyPatience {
			c.printf("(no answer after %v; it will appear in thread %s)\n", replyPatience, thread)
			answered = true
		}
		if answered {
			if c.stopped(ctx, thread) {
				c.printf("(the turn was stopped; nothing more is posted for it)\n")
			}
			delete(c.waiting, thread)
			done = true
		}
	}
	return done
}

// status prints a line on what the bot does, in the prompt's place as a reply does.
func (c *chat) status(format string, a ...any) {
	c.endLive()
	c.takePrompt()
	c.printf(format, a...)
}

// printReply prints a bot message of thread that the chat has not shown; it reports false
// for one still streaming (printed as it grows, and again when it ends).
func (c *chat) printReply(thread string, m slackemu.Message) bool {
	if c.printLive(thread, m) {
		return false
	}
	if isCard(m) {
		lines := cardLines(m)
		c.printf("logbook asks for approval> %s\n", lines[0])
		for _, l := range lines[1:] {
			c.printf("  %s\n", l)
		}
		c.printf("  (/approve or /deny)\n")
		return true
	}
	if lp := c.live[m.TS]; lp != nil {
		// The end of a reply that was printed as it grew.
		final := strings.TrimSpace(m.Text)
		rest, ok := strings.CutPrefix(final, lp.text)
		if !ok {
			rest, ok = strings.CutPrefix(final, strings.TrimSpace(lp.text))
		}
		switch {
		case ok && lp.head:
			if rest != "" || c.open == lp {
				c.liveText(lp, rest+"\n")
			}
			c.open = nil
		case lp.head: // the message was made to show the reply alone
			c.printf("%s (the reply)> %s\n", lp.who, slacktext.ToPlain(final, nil))
		default:
			c.printf("%s> %s\n", lp.who, slacktext.ToPlain(final, nil))
		}
		c.printFiles(m)
		c.printCanvases(m)
		c.printFooter(m)
		delete(c.live, m.TS)
		return true
	}
	c.endLive()
	c.takePrompt() // the reply takes the prompt's place; the prompt follows it
	who := c.who(thread)
	if text := strings.TrimSpace(slacktext.ToPlain(m.Text, nil)); text != "" || len(m.Files) == 0 {
		c.printf("%s> %s\n", who, text)
	} else {
		c.printf("%s> (a file)\n", who)
	}
	c.printFiles(m)
	c.printCanvases(m)
	c.printFooter(m)
	return true
}

// printFiles prints the files a bot message carries (what attach_file handed back), saved
// where you can open them.
func (c *chat) printFiles(m slackemu.Message) {
	for _, f := range m.Files {
		where := "in the emulator only"
		if full, ok := c.emu.UploadedFile(f.ID); ok && c.filesDir != "" {
			path := filepath.Join(c.filesDir, f.ID+"-"+filepath.Base(cmp.Or(f.Name, "file")))
			err := os.MkdirAll(c.filesDir, 0o700)
			if err == nil {
				err = os.WriteFile(path, full.Content, 0o600)
			}
			where = "saved to " + path
			if err != nil {
				where = fmt.Sprintf("not saved: %v", err)
			}
		}
		c.printf("  📎 %s (%d bytes, %s) %s\n", cmp.Or(f.Title, f.Name), max(f.Size, 0), cmp.Or(f.Mimetype, "unknown type"), where)
	}
}

// cardLines is an approval card as terminal lines: its sections and context, the code of what
// will run indented under them, Slack's markup decoded.
func cardLines(m slackemu.Message) []string {
	text, _ := mrkdwn.BlocksText(m.Blocks, nil)
	text = strings.ReplaceAll(slacktext.ToPlain(text, nil), "\u200b", "")
	var out []string
	for i, part := range strings.Split(text, "```") {
		for _, l := range strings.Split(strings.Trim(part, "\n"), "\n") {
			switch {
			case i%2 == 1: // inside a code block
				out = append(out, "  "+l)
			case strings.TrimSpace(l) != "":
				out = append(out, strings.ReplaceAll(strings.TrimSpace(l), "*", ""))
			}
		}
	}
	if len(out) == 0 {
		out = append(out, "(an approval card without text)")
	}
	return out
}

// messageState is what the log says of the message ts of thread.
type messageState struct {
	started    bool   // a turn took it up (or the running one was steered by it)
	answered   bool   // a completed turn covers it
	unanswered string // why the bot does not answer it (its not_addressed reason), "" if it does
}

// notAnswered says each not_addressed reason (bot/manners.go) as the chat prints it.
var notAnswered = map[string]string{
	"aside":         "it is an aside",
	"other_person":  "it mentions someone else and not the bot",
	"not_mentioned": "it does not mention the bot (LOGBOOK_THREAD_REPLIES=mentions)",
	"muted":         "the thread is muted (unmute resumes)",
	"taken_over":    "a person has taken the session over (handback gives it back)",
}

// messageState reads the log for the message ts of thread: whether a turn took it up,
// answered it, or recorded that it is not answered.
func (c *chat) messageState(ctx context.Context, threadTS, ts string) (messageState, error) {
	var st messageState
	sess, err := c.rt.store.SessionByThread(ctx, session.ThreadKey{Team: c.emu.TeamID(), Channel: devChannel, ThreadTS: threadTS})
	if errors.Is(err, session.ErrNotFound) {
		return st, nil // not stored yet
	}
	if err != nil {
		return st, err
	}
	evs, err := c.rt.store.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeUserMessage,
		session.TypeTurnStarted, session.TypeSteered, session.TypeNotAddressed, session.TypeTurnCompleted}})
	if err != nil {
		return st, err
	}
	var seq int64
	for _, ev := range evs {
		var um session.UserMessage
		if ev.Type == session.TypeUserMessage && ev.Decode(&um) == nil && um.TS == ts {
			seq = ev.Seq
		}
	}
	if seq == 0 {
		return st, nil
	}
	turns := thread.FoldTurns(evs)
	st.answered = turns.Answered >= seq
	for _, t := range turns.List {
		// A turn took it up: a new one, or the running one (steered).
		st.started = st.started || t.Through >= seq || slices.Contains(t.Steered, seq)
	}
	for _, ev := range evs {
		var na session.NotAddressed
		if ev.Type == session.TypeNotAddressed && ev.Decode(&na) == nil && na.MessageSeq == seq {
			st.unanswered = cmp.Or(notAnswered[na.Reason], na.Reason)
		}
	}
	return st, nil
}

// answered reports whether the log holds a completed turn that answered the message ts of
// thread.
func (c *chat) answered(ctx context.Context, thread, ts string) (bool, error) {
	st, err := c.messageState(ctx, thread, ts)
	return st.answered, err
}

func (c *chat) threads(ctx context.Context) {
	if _, err := c.rt.index.CatchUp(ctx); err != nil {
		c.printf("search index: %v\n", err)
	}
	sums, err := c.rt.search.Recent(ctx, time.Now().Add(time.Minute), 20)
	if err != nil {
		c.printf("list sessions: %v\n", err)
		return
	}
	c.listed = c.listed[:0]
	for i, s := range sums {
		c.listed = append(c.listed, s.ThreadTS)
		mark := " "
		if s.ThreadTS == c.thread {
			mark = "*"
		}
		c.printf("%s%2d. %s  (%d messages, %s)\n", mark, i+1, s.Heading(), s.Messages, s.LastEventAt.Local().Format(time.Kitchen))
	}
	if len(sums) == 0 {
		c.printf("(no sessions yet)\n")
	}
}

func (c *chat) transcript(ctx context.Context) {
	if c.thread == "" {
		c.printf("(no current thread)\n")
		return
	}
	sess, err := c.rt.store.SessionByThread(ctx, session.ThreadKey{Team: c.emu.TeamID(), Channel: devChannel, ThreadTS: c.thread})
	if err != nil {
		c.printf("transcript: %v\n", err)
		return
	}
	evs, err := c.rt.store.Events(ctx, sess.ID, session.Range{})
	if err != nil {
		c.printf("transcript: %v\n", err)
		return
	}
	notes, err := c.rt.store.NotesByID(ctx, sess.Key.Team, sess.Key.Channel, transcript.NoteIDs(evs))
	if err != nil {
		c.printf("transcript: %v\n", err)
		return
	}
	var b strings.Builder
	if err := transcript.Render(&b, sess, evs, transcript.Options{Location: time.Local, Notes: notes}); err != nil {
		c.printf("transcript: %v\n", err)
		return
	}
	c.printf("%s", b.String())
}

// slash runs `/logbook text` in #general and prints its answer, an ephemeral that arrives
// through the command's response_url (or the ack).
func (c *chat) slash(ctx context.Context, text string) {
	before := len(c.ephemerals())
	if _, err := c.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: text, User: devUser, Channel: devChannel}); err != nil {
		c.printf("error: %v\n", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []slackemu.Ephemeral
	err := c.emu.Wait(wctx, func() bool {
		got = c.ephemerals()
		return len(got) > before
	})
	if err != nil {
		c.printf("(no answer to /logbook %s: %v)\n", text, err)
		return
	}
	for _, m := range got[before:] {
		c.printf("logbook (only you can see this)> %s\n", slacktext.ToPlain(m.Text, nil))
	}
}

// ephemerals are the ephemeral messages to ada in #general.
func (c *chat) ephemerals() []slackemu.Ephemeral {
	var out []slackemu.Ephemeral
	for _, m := range c.emu.Ephemerals() {
		if m.User == devUser && m.Channel == devChannel {
			out = append(out, m)
		}
	}
	return out
}

// signInLink is a new one-time link to the web pages, or "" without them.
func (c *chat) signInLink() string {
	if c.signIn == nil || c.rt.http == "" {
		return ""
	}
	link, err := c.signIn.Link("http://" + c.rt.http + "/")
	if err != nil {
		return ""
	}
	return link
}

// printLive prints what is new in a bot message that is still streaming: its text as it grows
// and each task card's line when it changes. It reports whether the message is streaming.
func (c *chat) printLive(thread string, m slackemu.Message) bool {
	st, ok := c.emu.StreamState(devChannel, m.TS)
	if !ok || !st.Streaming() {
		return false
	}
	if c.live == nil {
		c.live = map[string]*livePrinted{}
	}
	lp := c.live[m.TS]
	if lp == nil {
		lp = &livePrinted{who: c.who(thread), tasks: map[string]bool{}}
		c.live[m.TS] = lp
	}
	for _, line := range st.TaskLines() {
		if line == st.PlanTitle {
			continue // the thread's title, not a task
		}
		if !lp.tasks[line] {
			lp.tasks[line] = true
			c.endLive()
			c.takePrompt()
			c.printf("%s\n", taskLines(line))
		}
	}
	if rest, ok := strings.CutPrefix(st.Text, lp.text); ok && rest != "" {
		c.liveText(lp, rest)
		lp.text = st.Text
	}
	return true
}

// taskLines is a task card's line as the chat prints it: its output's lines (a command's
// stdout) stay under it, indented, never at the start of a line of their own.
func taskLines(line string) string {
	return "  ⚙ " + strings.ReplaceAll(strings.TrimRight(line, "\n"), "\n", "\n    ")
}

// isCard reports whether m is an approval card.
func isCard(m slackemu.Message) bool {
	return strings.Contains(string(m.Metadata), bot.ApprovalMetadataType)
}

// openCard is the ts of the newest approval card in thread that still has its buttons, "" if
// none.
func (c *chat) openCard(thread string) string {
	if thread == "" {
		return ""
	}
	msgs := c.emu.BotReplies(devChannel, thread)
	for i := len(msgs) - 1; i >= 0; i-- {
		if isCard(msgs[i]) && strings.Contains(string(msgs[i].Blocks), bot.ActionApprove) {
			return msgs[i].TS
		}
	}
	return ""
}

// awaitCard is the current thread's open approval card; while its turn runs, it waits for one
// (a piped "/approve" may come before the card), or for the turn's end.
func (c *chat) awaitCard(ctx context.Context) string {
	p, busy := c.waiting[c.thread]
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(replyPatience); ; {
		if card := c.openCard(c.thread); card != "" || !busy {
			return card
		}
		if done, err := c.answered(ctx, c.thread, p.ts); done || err != nil || time.Now().After(deadline) {
			return ""
		}
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
	}
}

// stopped reports whether the thread's last turn was stopped by a person.
func (c *chat) stopped(ctx context.Context, threadTS string) bool {
	sess, err := c.rt.store.SessionByThread(ctx, session.ThreadKey{Team: c.emu.TeamID(), Channel: devChannel, ThreadTS: threadTS})
	if err != nil {
		return false
	}
	evs, err := c.rt.store.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeTurnStarted, session.TypeTurnCompleted}})
	if err != nil {
		return false
	}
	last := thread.FoldTurns(evs).Last()
	return last != nil && !last.Open && last.Status == session.StatusStopped
}

// printFooter prints the small print under a reply (its context blocks: notes on files it
// could not read, the transcript link), as Slack shows it under the message.
func (c *chat) printFooter(m slackemu.Message) {
	var blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			Text string `json:"text"`
		} `json:"elements"`
	}
	if json.Unmarshal(m.Blocks, &blocks) != nil {
		return
	}
	for _, b := range blocks {
		if b.Type != "context" {
			continue
		}
		for _, e := range b.Elements {
			for _, line := range strings.Split(slacktext.ToPlain(e.Text, nil), "\n") {
				if line = strings.TrimSpace(line); line != "" {
					c.printf("  · %s\n", line)
				}
			}
		}
	}
}

// who is the name a bot message of thread is printed under: "logbook" in the current thread,
// else with the thread's ts and, for a thread the bot started itself, what started it.
func (c *chat) who(thread string) string {
	if thread == c.thread {
		return "logbook"
	}
	if origin := c.origins[thread]; origin != "" {
		return "logbook (thread " + thread + ", started by " + origin + ")"
	}
	return "logbook (thread " + thread + ")"
}

// where names thread in a status line when it is not the current one.
func (c *chat) where(thread string) string {
	if thread == c.thread {
		return ""
	}
	return " (thread " + thread + ")"
}

// openingOrigins name what posted a top-level message by its metadata's event_type.
var openingOrigins = map[string]string{schedule.MetadataEventType: "a schedule", hooks.MetadataEventType: "a hook"}

// watchStarted prints the threads the bot started itself in #general since it last looked (a
// schedule's tick, a hook: their top-level post, labelled with what started it) and follows
// them as it follows yours: their turn's replies are printed as they come. The first call
// only takes note of where the workspace is. It reports whether it printed one.
func (c *chat) watchStarted() bool {
	changes, cursor := c.emu.ChangedSince(c.cursor)
	first := !c.watched
	c.cursor, c.watched = cursor, true
	if first {
		return false
	}
	printed := false
	for _, m := range changes {
		if m.Deleted || m.Channel != devChannel || (m.ThreadTS != "" && m.ThreadTS != m.TS) || m.BotID == "" || c.origins[m.TS] != "" {
			continue
		}
		var meta struct {
			EventType string `json:"event_type"`
		}
		if json.Unmarshal(m.Metadata, &meta) != nil || openingOrigins[meta.EventType] == "" {
			continue
		}
		if c.origins == nil {
			c.origins = map[string]string{}
		}
		c.origins[m.TS] = openingOrigins[meta.EventType]
		c.endLive()
		c.takePrompt()
		c.printf("logbook started thread %s (%s)> %s\n", m.TS, c.origins[m.TS], strings.TrimSpace(slacktext.ToPlain(m.Text, nil)))
		c.printf("  (its replies follow here; /threads and /switch N to answer in it)\n")
		c.shown[m.TS] = true
		if _, busy := c.waiting[m.TS]; !busy {
			c.waiting[m.TS] = pending{ts: m.TS, since: time.Now()}
		}
		printed = true
	}
	return printed
}
