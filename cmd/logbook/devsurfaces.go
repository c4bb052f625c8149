package main

import (
	"cmp"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/logbook/logbook/bot/feedback"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/slacktext"
)

// Slack's own surfaces in dev's chat (docs/surfaces.md): 👍/👎 on the current thread's last
// reply, and your App Home printed as text.

// rate clicks the feedback button of value on the current thread's last reply that has one,
// and says what became of the click: recorded (a feedback event in the log), or the bot's note.
func (c *chat) rate(ctx context.Context, value string) {
	if c.thread == "" {
		c.printf("(no thread yet: say something first)\n")
		return
	}
	var reply string
	for _, m := range c.emu.BotReplies(devChannel, c.thread) {
		if strings.Contains(string(m.Blocks), feedback.ActionID) {
			reply = m.TS
		}
	}
	if reply == "" {
		c.printf("(no reply with 👍/👎 in this thread yet)\n")
		return
	}
	sess, err := c.rt.store.SessionByThread(ctx, session.ThreadKey{Team: c.emu.TeamID(), Channel: devChannel, ThreadTS: c.thread})
	if err != nil {
		c.printf("error: %v\n", err)
		return
	}
	count := func() int {
		evs, err := c.rt.store.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeFeedback}})
		if err != nil {
			return -1
		}
		return len(evs)
	}
	before, notes := count(), len(c.ephemerals())
	if _, err := c.emu.ClickButton(slackemu.Click{Channel: devChannel, TS: reply, ActionID: feedback.ActionID, User: devUser, Value: value}); err != nil {
		c.printf("error: %v\n", err)
		return
	}
	waitUntil(ctx, 10*time.Second, func() bool { return count() > before || len(c.ephemerals()) > notes })
	switch {
	case count() > before:
		mark := "👍"
		if value == session.FeedbackNegative {
			mark = "👎"
		}
		c.printf("(%s recorded on logbook's last reply: a feedback event; `logbook usage` counts it)\n", mark)
	case len(c.ephemerals()) > notes:
		for _, m := range c.ephemerals()[notes:] {
			c.printf("logbook (only you can see this)> %s\n", slacktext.ToPlain(m.Text, nil))
		}
	default:
		c.printf("(the bot did not record the click)\n")
	}
}

// home opens your App Home (app_home_opened) and prints the view logbook publishes for you.
func (c *chat) home(ctx context.Context) {
	_, before, _ := c.emu.HomeView(devUser)
	if _, err := c.emu.OpenAppHome(devUser); err != nil {
		c.printf("error: %v\n", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var blocks json.RawMessage
	if err := c.emu.Wait(wctx, func() bool {
		b, n, _ := c.emu.HomeView(devUser)
		blocks = b
		return n > before
	}); err != nil {
		c.printf("(the bot did not publish your App Home: %v)\n", err)
		return
	}
	c.printf("%s\n", homeText(blocks))
}

// homeText is a Home tab view as terminal text: headers, sections' text as plain text, rules.
func homeText(blocks json.RawMessage) string {
	var bs []struct {
		Type string `json:"type"`
		Text struct {
			Text string `json:"text"`
		} `json:"text"`
	}
	_ = json.Unmarshal(blocks, &bs)
	var b strings.Builder
	b.WriteString("App Home (only you see it)>")
	for _, x := range bs {
		switch x.Type {
		case "header":
			b.WriteString("\n== " + x.Text.Text + " ==")
		case "divider":
			b.WriteString("\n----")
		default:
			if x.Text.Text != "" {
				b.WriteString("\n" + slacktext.ToPlain(x.Text.Text, nil))
			}
		}
	}
	return b.String()
}

// canvasLink finds the canvases a message links (their permalinks, /docs/<team>/<id>).
var canvasLink = regexp.MustCompile(`/docs/[A-Z0-9]+/(F[A-Z0-9]+)`)

// printCanvases prints a line for each canvas a bot message links: a long reply written as a
// canvas (bot/canvas), its title and length, and how to print it; each canvas once. It
// reports whether it printed one.
func (c *chat) printCanvases(m slackemu.Message) bool {
	printed := false
	for _, sub := range canvasLink.FindAllStringSubmatch(m.Text, -1) {
		id := sub[1]
		cv, ok := c.emu.CanvasByID(id)
		if !ok || c.canvasShown[id] {
			continue
		}
		if c.canvasShown == nil {
			c.canvasShown = map[string]bool{}
		}
		c.canvasShown[id] = true
		c.printf("  📄 canvas %s %q (%d characters): /canvas %s prints it\n", id, cv.Title, cv.CanvasChars(), id)
		printed = true
	}
	return printed
}

// canvas prints a canvas's content: id's, else the newest the bot wrote.
func (c *chat) canvas(id string) {
	id = strings.TrimSpace(id)
	var cv slackemu.Canvas
	found := false
	if id != "" {
		cv, found = c.emu.CanvasByID(id)
	} else {
		for _, x := range c.emu.Canvases() {
			if x.Creator == c.emu.BotUserID() {
				cv, found = x, true
			}
		}
	}
	if !found {
		c.printf("(no such canvas: a reply longer than the channel's canvas_over is written as one)\n")
		return
	}
	c.printf("== %s (%s, %d characters) ==\n%s\n== end of canvas ==\n", cv.Title, cv.ID, cv.CanvasChars(), strings.TrimRight(cv.Markdown, "\n"))
}

// codeChannels prints each code channel whose name, status or context bar changed since it
// was last printed, on one line: "code channel #name (id) — status — item · item". It reports
// whether it printed.
func (c *chat) codeChannels() bool {
	printed := false
	for _, cc := range c.emu.CodeChannels() {
		line := codeChannelLine(cc)
		if c.codeShown[cc.ID] == line {
			continue
		}
		if c.codeShown == nil {
			c.codeShown = map[string]string{}
		}
		c.codeShown[cc.ID] = line
		c.status("%s\n", line)
		printed = true
	}
	return printed
}

// codeChannelLine is a code channel as dev shows it.
func codeChannelLine(cc slackemu.CodeChannel) string {
	items := make([]string, 0, len(cc.ContextBar))
	for _, it := range cc.ContextBar {
		items = append(items, it.Label)
	}
	line := "(code channel #" + cc.Name + " (" + cc.ID + ") — " + cmp.Or(cc.Status, "no status")
	if len(items) > 0 {
		line += " — " + strings.Join(items, " · ")
	}
	return line + ")"
}
