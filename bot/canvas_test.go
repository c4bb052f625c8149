package bot_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/canvas"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// canvasHarness writes replies over canvas_over (400 characters by default here; ada is an
// admin of the channels' settings) as canvases, as serve wires it.
func canvasHarness(t *testing.T, reply func(texts []string) string, o harnessOptions) *harness {
	return canvasHarnessWith(t, &echoAgent{reply: reply}, o)
}

func canvasHarnessWith(t *testing.T, agent bot.Agent, o harnessOptions) *harness {
	o.partsWith = func(api *slack.Client) []part.Part { return []part.Part{&canvas.Part{Slack: api}} }
	o.channelAdmins = []string{ada}
	o.defaults = map[string]string{settings.CanvasOver: "400"}
	return newHarness(t, agent, o)
}

// longAnswer is a Markdown answer of about n characters, with a heading.
func longAnswer(n int) string {
	var b strings.Builder
	b.WriteString("# Rollout plan for the payments service\n\n")
	for i := 1; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%d. Step %d: drain the node, deploy the build, watch the error rate for ten minutes.\n", i, i)
	}
	return b.String()
}

// canvasRecords is the session's canvas_written records, oldest first.
func (h *harness) canvasRecords(id session.ID) []session.CanvasWritten {
	h.t.Helper()
	var out []session.CanvasWritten
	for _, e := range h.events(id, session.TypeCanvasWritten) {
		var w session.CanvasWritten
		if err := e.Decode(&w); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// A reply over the channel's canvas_over becomes one canvas, through the unmodified slack-go
// client: created standalone with the whole answer, readable by the thread's channel,
// recorded (canvas_written: id, channel, title, sha256 of its content, characters) before the
// reply that links it is delivered; the thread's message carries the canvas's permalink and
// the answer's beginning, not the whole answer.
func TestLongReplyBecomesOneRecordedCanvas(t *testing.T) {
	t.Parallel()
	answer := longAnswer(5000)
	h := canvasHarness(t, func([]string) string { return answer }, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> plan the rollout"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	cs := h.emu.Canvases()
	if len(cs) != 1 {
		t.Fatalf("%d canvases, want 1: %+v", len(cs), cs)
	}
	c := cs[0]
	if c.Markdown != answer || c.Creator != botUser || c.Access[general] != "read" || c.Channel != "" {
		t.Fatalf("the canvas: creator %s, access %v, tab %q, holds the answer %v", c.Creator, c.Access, c.Channel, c.Markdown == answer)
	}
	if !strings.HasPrefix(c.Title, "Rollout plan for the payments service · lb-") {
		t.Fatalf("the canvas's title %q", c.Title)
	}
	recs := h.canvasRecords(s.ID)
	if len(recs) != 1 {
		t.Fatalf("%d canvas_written records, want 1", len(recs))
	}
	w := recs[0]
	if w.CanvasID != c.ID || w.Channel != general || w.Title != c.Title || w.SHA256 != session.FileHash([]byte(c.Markdown)) ||
		w.Chars != utf8.RuneCountInString(answer) || w.Found || !strings.Contains(w.Permalink, "/docs/T0000001/"+c.ID) {
		t.Fatalf("canvas_written %+v, canvas %s %q", w, c.ID, c.Title)
	}
	if n := len(h.events(s.ID, session.TypeCanvasStarted)); n != 1 {
		t.Fatalf("%d canvas_started, want 1", n)
	}
	written, delivered := h.events(s.ID, session.TypeCanvasWritten)[0], h.events(s.ID, session.TypeDelivered)
	if len(delivered) != 1 || written.Seq > delivered[0].Seq {
		t.Fatalf("canvas_written at seq %d, delivered %v: the canvas must be recorded before its link is posted", written.Seq, delivered)
	}
	replies := h.emu.BotReplies(general, top.TS)
	if len(replies) != 1 {
		t.Fatalf("%d replies in the thread, want 1 (the link and the beginning)", len(replies))
	}
	shown := cardText(replies[0])
	if !strings.Contains(shown, w.Permalink) || !strings.Contains(shown, "Step 1: drain the node") || strings.Contains(shown, "Step 60:") {
		t.Fatalf("the thread's reply does not link the canvas with the answer's beginning only: %s", shown)
	}
	if n := utf8.RuneCountInString(replies[0].Text); n > canvas.ExcerptChars+300 {
		t.Fatalf("the thread's reply has %d characters: the whole answer, not its beginning", n)
	}
	if h.emu.Calls("canvases.create") != 1 {
		t.Fatalf("canvases.create called %d times", h.emu.Calls("canvases.create"))
	}
}

// A reply at or under canvas_over is posted whole, and no canvas is made; canvas_over 0
// (/logbook config, an admin's) turns canvases off even for a long reply.
func TestCanvasOverThresholdAndZeroTurnsItOff(t *testing.T) {
	t.Parallel()
	long := longAnswer(2000)
	short := "A short answer that fits in the thread."
	answers := []string{short, long}
	n := 0
	h := canvasHarness(t, func([]string) string { n++; return answers[min(n, len(answers))-1] }, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> short please"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if got := h.replies(general, top.TS, 1)[0]; !strings.Contains(got.Text, short) {
		t.Fatalf("the short reply: %q", got.Text)
	}
	if got := h.slash(ada, "config canvas_over 0"); !strings.Contains(got, "`canvas_over` of this channel is now `0`") {
		t.Fatalf("config canvas_over 0: %s", got)
	}
	if got := h.slash(ada, "config canvas_over lots"); !strings.Contains(got, "not a number of characters") {
		t.Fatalf("config canvas_over lots: %s", got)
	}
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> now the long one"})
	h.turns(s.ID, 2)
	if cs := h.emu.Canvases(); len(cs) != 0 || h.emu.Calls("canvases.create") != 0 {
		t.Fatalf("%d canvases (%d canvases.create calls) with canvas_over 0 and under it", len(cs), h.emu.Calls("canvases.create"))
	}
	if ts := h.turnSettings(s.ID); len(ts) == 0 || ts[len(ts)-1].CanvasOver != "0" || !slices.Contains(ts[len(ts)-1].Set, settings.CanvasOver) {
		t.Fatalf("the turn's settings do not record canvas_over 0: %+v", ts)
	}
	if evs := h.events(s.ID, session.TypeCanvasStarted, session.TypeCanvasWritten); len(evs) != 0 {
		t.Fatalf("canvas records without a canvas: %d", len(evs))
	}
	var all strings.Builder
	for _, m := range h.emu.BotReplies(general, top.TS) {
		all.WriteString(m.Text)
	}
	if !strings.Contains(all.String(), "Step 20: drain the node") {
		t.Fatalf("the long reply is not in the thread whole with canvas_over 0")
	}
}

// The answer to canvases.create is lost after Slack created the canvas (as if the cell died
// before recording it): the turn stays open, and the retry finds the canvas by the key its
// title carries (files.list) instead of creating a second one, records it once (found), and
// links it.
func TestACanvasCreatedBeforeACrashIsNotCreatedTwice(t *testing.T) {
	t.Parallel()
	answer := longAnswer(3000)
	h := canvasHarness(t, func([]string) string { return answer }, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "canvases.create", ApplyFirst: true, Drop: true, Times: 1})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> plan it"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if cs := h.emu.Canvases(); len(cs) != 1 || h.emu.Calls("canvases.create") != 1 {
		t.Fatalf("%d canvases after %d canvases.create calls, want 1 and 1", len(cs), h.emu.Calls("canvases.create"))
	}
	c := h.emu.Canvases()[0]
	recs := h.canvasRecords(s.ID)
	if len(recs) != 1 || recs[0].CanvasID != c.ID || !recs[0].Found || recs[0].SHA256 != session.FileHash([]byte(c.Markdown)) {
		t.Fatalf("canvas_written %+v for canvas %s", recs, c.ID)
	}
	if n := len(h.events(s.ID, session.TypeCanvasStarted)); n != 1 {
		t.Fatalf("%d canvas_started, want 1", n)
	}
	if h.emu.Calls("files.list") == 0 {
		t.Fatal("the retry did not look the canvas up")
	}
	replies := h.emu.BotReplies(general, top.TS)
	if len(replies) != 1 || !strings.Contains(replies[0].Text, recs[0].Permalink) || c.Access[general] != "read" {
		t.Fatalf("%d replies; the link %q; access %v", len(replies), recs[0].Permalink, c.Access)
	}
}

// A workspace with canvases off (canvas_disabled_user_team) gets the reply whole in the
// thread: nothing is lost, and no canvas_written is recorded.
func TestCanvasesDisabledPostsTheReplyWhole(t *testing.T) {
	t.Parallel()
	answer := longAnswer(1500)
	h := canvasHarness(t, func([]string) string { return answer }, harnessOptions{emu: slackemu.Options{CanvasesDisabled: true}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> plan it"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if len(h.emu.Canvases()) != 0 || len(h.canvasRecords(s.ID)) != 0 || h.emu.Calls("canvases.create") != 1 {
		t.Fatalf("canvases %d, records %d, calls %d", len(h.emu.Canvases()), len(h.canvasRecords(s.ID)), h.emu.Calls("canvases.create"))
	}
	if got := h.replies(general, top.TS, 1)[0]; !strings.Contains(got.Text, "Step 10: drain the node") {
		t.Fatalf("the reply is not whole: %q", got.Text)
	}
}

// A canvas a person shares with the agent in a public channel is read (canvases.getContent,
// not a download), stored by the hash of its content like a file, and its content reaches the
// model as a text file.
func TestSharedCanvasReachesTheModel(t *testing.T) {
	t.Parallel()
	h, model := modelHarness(t, harnessOptions{files: true})
	runbook := "# Payments runbook\n\nIf the queue backs up, run `kubectl rollout restart deploy/payments`.\n"
	id, err := h.emu.CreateCanvas(ada, "Payments runbook", runbook)
	if err != nil {
		t.Fatal(err)
	}
	model.Push(fakeprovider.Reply{Text: "Restart the deployment."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> what does the runbook say?", Files: []slackemu.File{{ID: id}}})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	ff := h.fetched(s.ID, 1)[id]
	if ff.Status != session.FileStored || ff.SHA256 != session.FileHash([]byte(runbook)) || ff.Kind != "text" || ff.Name != "Payments runbook.md" {
		t.Fatalf("the canvas's file_fetched %+v", ff)
	}
	if h.emu.Calls("canvases.getContent") != 1 || h.emu.Downloads(id) != 0 {
		t.Fatalf("canvases.getContent %d calls, %d downloads", h.emu.Calls("canvases.getContent"), h.emu.Downloads(id))
	}
	seen := false
	for _, b := range blocksOf(model.Calls()[0], "user") {
		if b.Type == "text" && strings.Contains(b.Text, "kubectl rollout restart deploy/payments") && strings.Contains(b.Text, "Payments runbook") {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("the model's request lacks the canvas's content: %+v", model.Calls()[0].Messages)
	}
}

// A canvas shared in a private channel is never read: private channels are never sessions.
func TestSharedCanvasInAPrivateChannelIsNeverRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{files: true, privateNote: true})
	id, err := h.emu.CreateCanvas(ada, "Salaries", "ada: 1\n")
	if err != nil {
		t.Fatal(err)
	}
	h.post(slackemu.Post{Channel: secret, User: ada, Text: "<@" + botUser + "> read this", Files: []slackemu.File{{ID: id}}})
	h.waitFor("the private note", func() bool { return len(h.emu.Ephemerals()) == 1 })
	if n := h.emu.Calls("canvases.getContent"); n != 0 {
		t.Fatalf("the private channel's canvas was read %d times", n)
	}
}

// The canvas is recorded but the reply that links it cannot be posted yet (Slack fails every
// attempt of the first delivery): the resumed turn links the recorded canvas, without asking
// Slack for another.
func TestARecordedCanvasIsLinkedAgainNotRewritten(t *testing.T) {
	t.Parallel()
	answer := longAnswer(3000)
	h := canvasHarness(t, func([]string) string { return answer }, harnessOptions{})
	h.emu.InjectMethodFault(slackemu.MethodFault{Method: "chat.postMessage", Error: "internal_error", Times: 3})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> plan it"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	recs := h.canvasRecords(s.ID)
	if len(recs) != 1 || len(h.emu.Canvases()) != 1 || h.emu.Calls("canvases.create") != 1 || h.emu.Calls("files.list") != 0 {
		t.Fatalf("records %d, canvases %d, creates %d, lookups %d", len(recs), len(h.emu.Canvases()), h.emu.Calls("canvases.create"), h.emu.Calls("files.list"))
	}
	if h.emu.Calls("chat.postMessage") < 4 {
		t.Fatalf("the first delivery did not fail: %d posts", h.emu.Calls("chat.postMessage"))
	}
	replies := h.emu.BotReplies(general, top.TS)
	if len(replies) != 1 || !strings.Contains(replies[0].Text, recs[0].Permalink) {
		t.Fatalf("%d replies: %+v", len(replies), replies)
	}
}

// A long reply streamed into the thread as the model wrote it: once it is written as a canvas,
// the streamed message is made to show the link and the beginning instead (one message, the
// reply's metadata), and the canvas holds the whole reply.
func TestAStreamedLongReplyEndsAsTheCanvasLink(t *testing.T) {
	t.Parallel()
	answer := longAnswer(3000)
	var pieces []string
	for i := 0; i < len(answer); i += 500 {
		pieces = append(pieces, answer[i:min(i+500, len(answer))])
	}
	h := canvasHarnessWith(t, &liveAgent{pieces: pieces}, harnessOptions{live: bot.LiveConfig{Interval: 1}})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> plan it"})
	s := h.session(general, top.TS)
	h.turns(s.ID, 1)
	if n := len(h.events(s.ID, session.TypeStreamStarted)); n == 0 {
		t.Fatal("the reply was not streamed: the test shows nothing")
	}
	recs, cs := h.canvasRecords(s.ID), h.emu.Canvases()
	if len(recs) != 1 || len(cs) != 1 || cs[0].Markdown != answer {
		t.Fatalf("%d records, %d canvases", len(recs), len(cs))
	}
	msgs := h.botMessages(top.TS)
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, recs[0].Permalink) || strings.Contains(msgs[0].Text, "Step 30:") ||
		!strings.Contains(string(msgs[0].Metadata), "logbook_reply") {
		t.Fatalf("%d bot messages; the last: %q", len(msgs), msgs[len(msgs)-1].Text)
	}
}
