package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/web"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
	"github.com/logbook/logbook/session/slacktext"
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

	prompted bool // "you> " is the last thing printed

	thread  string             // the current thread's ts; "" before the first message
	listed  []string           // thread ts values of the last /threads
	waiting map[string]pending // thread → its newest message not answered yet
	shown   map[string]bool    // ts of the bot's messages printed (or there before we looked)
	// live holds what was printed of each message still streaming: its text, and its task
	// cards' lines.
	live map[string]*livePrinted
}

type livePrinted struct {
	text  string
	tasks map[string]bool
}

// pending is a message whose turn has not completed.
type pending struct {
	ts    string
	since time.Time
}

// replyPatience is how long piped input waits for a turn before going on.
const replyPatience = 10 * time.Minute

func (c *chat) printf(format string, a ...any) {
	c.prompted = false
	fmt.Fprintf(c.out, format, a...)
}

func (c *chat) prompt() {
	c.printf("you> ")
	c.prompted = true
}

// run reads inputs until they end, /quit or ctx; it returns nil then.
func (c *chat) run(ctx context.Context, inputs <-chan input) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
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
				return nil
			}
			c.prompt()
			continue
		}
		if ended && held == nil && (!c.echo || len(c.waiting) == 0) {
			c.printf("\n")
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
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
				return nil
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

// controlsTurn reports a chat command that acts on the running turn.
func controlsTurn(line string) bool {
	return line == "/stop" || line == "/approve" || line == "/deny" || line == "/quit" || line == "/exit"
}

// handle acts on one input; it returns true for /quit.
func (c *chat) handle(ctx context.Context, in input) bool {
	line := in.text
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
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch {
	case line == "":
	case line == "/quit" || line == "/exit":
		return true
	case line == "/help":
		c.printf("%s\n", devHelp[strings.Index(devHelp, "Chat commands:"):])
	case line == "/new":
		c.thread = ""
		c.printf("(the next message starts a new thread)\n")
	case line == "/status":
		c.printf("cells running: %d · model: %s · thread: %s · metrics: http://%s/metrics\n", c.rt.runner.Active(), c.model, orNone(c.thread), c.rt.http)
	case line == "/evict":
		c.rt.runner.Evict()
		waitUntil(ctx, 5*time.Second, func() bool { return c.rt.runner.Active() == 0 })
		c.printf("(evicted: %d cells running; the next message rehydrates from the log)\n", c.rt.runner.Active())
	case line == "/threads":
		c.threads(ctx)
	case cmd == "/switch":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 || n > len(c.listed) {
			c.printf("usage: /switch N (a number from /threads)\n")
			break
		}
		c.thread = c.listed[n-1]
		c.markShown(c.thread)
		c.printf("(continuing thread %s)\n", c.thread)
	case line == "/stop":
		if c.thread == "" {
			c.printf("(no current thread)\n")
			break
		}
		if _, busy := c.waiting[c.thread]; !busy {
			c.printf("(nothing is running in this thread)\n")
			break
		}
		// Slack's stop button: the agent session's agent_session_stopped.
		if _, err := c.emu.StopAgentSession(devChannel, c.thread, devUser); err != nil {
			c.printf("error: %v\n", err)
			break
		}
		c.printf("(stop requested)\n")
	case line == "/approve" || line == "/deny":
		card := c.awaitCard(ctx)
		if card == "" {
			c.printf("(no approval card waits in this thread)\n")
			break
		}
		c.refresh(ctx) // the card is printed before what is decided on it
		action := bot.ActionApprove
		if line == "/deny" {
			action = bot.ActionDeny
		}
		if _, err := c.emu.ClickButton(slackemu.Click{Channel: devChannel, TS: card, ActionID: action, User: devUser}); err != nil {
			c.printf("error: %v\n", err)
			break
		}
		c.printf("(%s)\n", map[string]string{"/approve": "approved", "/deny": "denied"}[line])
	case line == "/transcript":
		c.transcript(ctx)
	case line == "/web":
		if link := c.signInLink(); link != "" {
			c.printf("%s\n(a one-time sign-in link)\n", link)
		} else {
			c.printf("(no sign-in links: the web pages are off or not on loopback)\n")
		}
	case cmd == "/logbook":
		c.slash(ctx, arg)
	case cmd == "/share":
		file, text, _ := strings.Cut(arg, " ")
		b, err := os.ReadFile(file)
		if err != nil {
			c.printf("usage: /share FILE [message] (%v)\n", err)
			break
		}
		f := slackemu.File{Name: filepath.Base(file), Mimetype: mime.TypeByExtension(filepath.Ext(file)), Content: b}
		if err := c.post(cmp.Or(strings.TrimSpace(text), "(shared "+f.Name+")"), f); err != nil {
			c.printf("error: %v\n", err)
		}
	case cmd == "/send":
		b, err := os.ReadFile(arg)
		if err != nil {
			c.printf("usage: /send FILE (%v)\n", err)
			break
		}
		if in := checkInput([]string{string(b)}, false); in.note != "" {
			c.printf("%s\n", in.note)
		} else if err := c.post(in.text); err != nil {
			c.printf("error: %v\n", err)
		}
	case strings.HasPrefix(line, "/"):
		c.printf("unknown command; /help lists them\n")
	default:
		if err := c.post(line); err != nil {
			c.printf("error: %v\n", err)
		}
	}
	return false
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
	} else {
		c.printf("… logbook is thinking\n")
	}
	c.waiting[c.thread] = pending{ts: posted.TS, since: time.Now()}
	return nil
}

// markShown counts the bot's messages already in thread as printed, the first time the chat
// looks at it (a thread from /switch or before a restart shows only what comes next).
func (c *chat) markShown(thread string) {
	if _, busy := c.waiting[thread]; busy {
		return
	}
	for _, m := range c.emu.BotReplies(devChannel, thread) {
		c.shown[m.TS] = true
	}
}

// refresh prints the bot's new messages in the threads waiting for an answer and forgets
// those whose turn completed. It reports whether it printed a reply or a thread stopped
// waiting.
func (c *chat) refresh(ctx context.Context) bool {
	done := false
	for thread, p := range c.waiting {
		// Ask the log first: a turn completes after its replies were delivered, so once it
		// has, every reply is in the emulator.
		answered, err := c.answered(ctx, thread, p.ts)
		if err != nil && ctx.Err() == nil {
			c.printf("error: %v\n", err)
		}
		for _, m := range c.emu.BotReplies(devChannel, thread) {
			if c.shown[m.TS] {
				continue
			}
			if c.printLive(thread, m) {
				continue // still being written: printed as it grows
			}
			c.shown[m.TS] = true
			done = true
			if isCard(m) {
				if c.prompted {
					c.printf("\r")
				}
				if len(c.live) > 0 {
					c.printf("\n") // a live reply was being printed on this line
				}
				summary, _ := mrkdwn.BlocksText(m.Blocks, nil)
				c.printf("logbook asks for approval> %s\n  (/approve or /deny)\n", strings.TrimSpace(slacktext.ToPlain(summary, nil)))
				continue
			}
			if lp := c.live[m.TS]; lp != nil {
				// The end of a reply that was printed as it grew.
				final := strings.TrimSpace(m.Text)
				switch rest, ok := strings.CutPrefix(final, lp.text); {
				case final == strings.TrimSpace(lp.text):
					c.printf("\n")
				case ok && lp.text != "":
					c.printf("%s\n", rest)
				default: // the message was made to show the reply alone
					c.printf("\nlogbook (the reply)> %s\n", slacktext.ToPlain(final, nil))
				}
				c.printFooter(m)
				delete(c.live, m.TS)
				continue
			}
			if c.prompted {
				c.printf("\r") // the reply takes the prompt's place; the prompt follows it
			}
			who := "logbook"
			if thread != c.thread {
				who = "logbook (thread " + thread + ")"
			}
			c.printf("%s> %s\n", who, slacktext.ToPlain(m.Text, nil))
			c.printFooter(m)
		}
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

// answered reports whether the log holds a completed turn that answered the message ts of
// thread.
func (c *chat) answered(ctx context.Context, thread, ts string) (bool, error) {
	sess, err := c.rt.store.SessionByThread(ctx, session.ThreadKey{Team: c.emu.TeamID(), Channel: devChannel, ThreadTS: thread})
	if errors.Is(err, session.ErrNotFound) {
		return false, nil // not stored yet
	}
	if err != nil {
		return false, err
	}
	evs, err := c.rt.store.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeUserMessage, session.TypeTurnCompleted}})
	if err != nil {
		return false, err
	}
	var seq int64
	for _, ev := range evs {
		switch ev.Type {
		case session.TypeUserMessage:
			var um session.UserMessage
			if ev.Decode(&um) == nil && um.TS == ts {
				seq = ev.Seq
			}
		case session.TypeTurnCompleted:
			var tc session.TurnCompleted
			if seq > 0 && ev.Decode(&tc) == nil && tc.Through >= seq {
				return true, nil
			}
		}
	}
	return false, nil
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
	if err := transcript.Render(c.out, sess, evs, transcript.Options{Location: time.Local}); err != nil {
		c.printf("transcript: %v\n", err)
	}
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
		lp = &livePrinted{tasks: map[string]bool{}}
		c.live[m.TS] = lp
		if c.prompted {
			c.printf("\r")
		}
		who := "logbook"
		if thread != c.thread {
			who = "logbook (thread " + thread + ")"
		}
		c.printf("%s> ", who)
	}
	for _, line := range st.TaskLines() {
		if line == st.PlanTitle {
			continue // the thread's title, not a task
		}
		if !lp.tasks[line] {
			lp.tasks[line] = true
			c.printf("\n  ⚙ %s\n", line)
		}
	}
	if rest, ok := strings.CutPrefix(st.Text, lp.text); ok && rest != "" {
		c.printf("%s", rest)
		lp.text = st.Text
	}
	return true
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
func (c *chat) stopped(ctx context.Context, thread string) bool {
	sess, err := c.rt.store.SessionByThread(ctx, session.ThreadKey{Team: c.emu.TeamID(), Channel: devChannel, ThreadTS: thread})
	if err != nil {
		return false
	}
	evs, err := c.rt.store.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeTurnCompleted}, Desc: true, Limit: 1})
	var tc session.TurnCompleted
	return err == nil && len(evs) == 1 && evs[0].Decode(&tc) == nil && tc.Status == bot.StatusStopped
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
