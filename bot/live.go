package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// StreamMode says how a turn shows itself while it runs (LOGBOOK_STREAM).
type StreamMode string

// The stream modes.
const (
	// StreamAuto streams the reply as it is written (chat.startStream), falling back to a
	// post updated as the text grows where the workspace refuses streaming.
	StreamAuto StreamMode = "auto"
	// StreamOff posts the whole reply when the turn ends.
	StreamOff StreamMode = "off"
)

// ParseStreamMode parses a StreamMode; "" is auto.
func ParseStreamMode(s string) (StreamMode, error) {
	return parseChoice(s, StreamAuto, StreamOff)
}

// LiveConfig configures the live view of turns. Zero values take defaults.
type LiveConfig struct {
	Mode StreamMode // default StreamAuto
	// Interval is the least time between two appends to one message (LOGBOOK_STREAM_INTERVAL);
	// text that arrives meanwhile is sent together. Default 1s: chat.appendStream and
	// chat.update are rate-limited per workspace, and a second apart keeps many turns at once
	// under those limits.
	Interval time.Duration
	// MaxAge and MaxChars roll a message over to a new one before Slack stops accepting
	// appends to it (about five minutes, and its size limit). Defaults 4m and 10,000.
	MaxAge   time.Duration
	MaxChars int
}

func (c LiveConfig) withDefaults() LiveConfig {
	if c.Mode == "" {
		c.Mode = StreamAuto
	}
	c.Interval = nonZero(c.Interval, time.Second)
	c.MaxAge = nonZero(c.MaxAge, 4*time.Minute)
	if c.MaxChars <= 0 {
		c.MaxChars = 10_000
	}
	return c
}

// liveMsg is one Slack message of a turn's live view.
type liveMsg struct {
	ts      string
	started time.Time
	chars   int    // characters of text sent to it
	text    string // the text sent to it (a posted message is updated with all of it)
	closed  bool   // rolled over: the view goes on in a new message
}

// liveView shows one turn in Slack while it runs: the model's text as it is written and a
// task card per tool call, in a streamed message (chat.startStream), or in a posted message
// updated as it grows where streaming is unavailable. It implements brain.Live. The log
// records every message it starts (stream_started) and finishes (stream_stopped); the reply's
// assistant_message stays the truth, and finish makes the thread show it exactly once.
//
// The brain's calls (Text, EndRound, Tool, Status) only buffer, under mu, and return at once.
// One sender sends: the flusher goroutine every Interval, then finish once the flusher has
// stopped; the messages and the mode are the sender's alone.
type liveView struct {
	d       *Deliverer
	flog    *cellLog
	log     zerolog.Logger
	clock   Clock
	cfg     LiveConfig
	sess    session.Session
	turnSeq int64
	user    string // the recipient: the author of the message the turn answers
	team    string
	title   string // the plan's title: the session's title when there is one

	// The brain's side.
	mu         sync.Mutex
	buf        string // text not sent yet
	sending    int    // bytes at buf's start the sender is sending now: Restart cannot take them back
	roundAtBuf int    // where in buf the current round's text begins (before it: earlier rounds' unsent text)
	round      int    // rounds ended with tool calls so far
	roundText  string // everything the model wrote in the current round, sent or not
	cards      map[string]slack.TaskUpdateChunk
	order      []string // card ids in order
	dirty      []string // cards changed since the last send
	doing      string   // what the turn does now (Status)
	voided     bool     // a retried call's text reached Slack: finish replaces the text

	// The sender's side.
	mode       string // "stream" or "update"; "" until the first send
	off        bool   // the view gave up: the reply is delivered whole at the end
	msgs       []*liveMsg
	sentRound  int    // the round of the last text sent
	roundSent  string // the text sent of that round (a retried call's void text included: Slack shows it)
	roundAt    int    // index in msgs of the message the current round's text began in
	failures   int
	status     *threadStatus // the thread's status, told what the turn does (may be nil)
	statusSaid string        // the status text last given to it
	// haltedAt is the ts of the message Slack halted (a send answered stopped_by_user: a
	// person pressed stop in Slack); "" while none was. onHalt, when set, is called once then,
	// after the stop request is in the log, so the turn looks at once.
	haltedAt string
	onHalt   func()
	// fenced says a record of the view was refused as fenced: another cell owns the session,
	// and the view writes nothing more to Slack (the message it could not record is removed).
	// doubt says a new message's call went unanswered and the thread could not be searched
	// for it: the turn looks again (sweep) before the reply is shown.
	fenced, doubt bool
	// orphans searches the thread for the turn's messages the log does not name.
	orphans orphanSearch

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

var (
	_ brain.Live = (*liveView)(nil)

	errUnavailable = errors.New("unavailable in this workspace")
	// errViewFenced: the lease moved to another cell while the view ran.
	errViewFenced = errors.New("live view: another cell took the session over")
)

func newLiveView(d *Deliverer, flog *cellLog, log zerolog.Logger, clock Clock, cfg LiveConfig, sess session.Session,
	turnSeq int64, user, team, title string) *liveView {
	return &liveView{d: d, flog: flog, log: log, clock: clock, cfg: cfg.withDefaults(), sess: sess, turnSeq: turnSeq,
		user: user, team: team, title: title, cards: map[string]slack.TaskUpdateChunk{}, sentRound: -1,
		orphans: orphanSearch{d: d, clock: clock, flog: flog, channel: sess.Key.Channel, thread: sess.Key.ThreadTS, turnSeq: turnSeq},
		wake:    make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// run is the flusher: it sends what the brain buffered, at most once per Interval, until
// close.
func (v *liveView) run(ctx context.Context) {
	defer close(v.done)
	for {
		select {
		case <-v.stop:
			return
		case <-ctx.Done():
			return
		case <-v.wake:
		}
		if !v.flush(ctx) {
			continue // nothing was sent: the next piece goes out at once
		}
		select {
		case <-v.stop:
			return
		case <-ctx.Done():
			return
		case <-v.clock.After(v.cfg.Interval):
		}
	}
}

// close stops the flusher and waits for it: the sender's side is then the caller's.
func (v *liveView) close() {
	select {
	case <-v.stop:
	default:
		close(v.stop)
	}
	<-v.done
}

func (v *liveView) poke() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// Status keeps what the turn does now, for the thread's status.
func (v *liveView) Status(text string) {
	v.mu.Lock()
	v.doing = text
	v.mu.Unlock()
	v.poke()
}

// Text buffers a piece of the model's text.
func (v *liveView) Text(delta string) {
	if delta == "" {
		return
	}
	v.mu.Lock()
	v.buf += delta
	v.roundText += delta
	v.mu.Unlock()
	v.poke()
}

// Restart voids the text of the current round (the model call is being retried): what was
// not sent yet is dropped; what was sent stays until finish replaces it with the reply.
func (v *liveView) Restart() {
	v.mu.Lock()
	defer v.mu.Unlock()
	unsent := v.buf[v.sending:] // what is in flight reaches Slack: it counts as sent
	if len(unsent) > len(v.roundText) {
		unsent = unsent[len(unsent)-len(v.roundText):]
	}
	if strings.HasSuffix(v.buf, unsent) && strings.HasSuffix(v.roundText, unsent) {
		v.buf = strings.TrimSuffix(v.buf, unsent)
		if len(unsent) < len(v.roundText) {
			v.voided = true // part of the void text is in Slack already
		}
	}
	v.roundText = ""
	v.roundAtBuf = min(v.roundAtBuf, len(v.buf))
}

// EndRound separates the text of a round that came with tool calls from what follows.
func (v *liveView) EndRound(reply bool) {
	if reply {
		return
	}
	v.mu.Lock()
	if strings.TrimSpace(v.roundText) != "" {
		v.buf += "\n\n"
	}
	v.roundText = ""
	v.roundAtBuf = len(v.buf)
	v.round++
	v.mu.Unlock()
	v.poke()
}

// Tool updates the tool call's card.
func (v *liveView) Tool(p brain.ToolProgress) {
	v.mu.Lock()
	c, seen := v.cards[p.CallID]
	if !seen {
		c = slack.NewTaskUpdateChunk(p.CallID, clip.Text(mrkdwn.Inert(cmpText(p.Title, p.Name)), 200))
		v.order = append(v.order, p.CallID)
	}
	c.Status = slack.TaskCardStatus(p.Status)
	if p.Output != "" {
		c.Output = clip.Text(mrkdwn.Inert(p.Output), 500)
	}
	v.cards[p.CallID] = c
	v.dirty = append(v.dirty, p.CallID)
	v.mu.Unlock()
	v.poke()
}

// take returns what is ready to send: text (without a tail that may still become a mention
// or a token), the changed cards, and the round the text belongs to.
func (v *liveView) take() (text string, cards []slack.StreamChunk, ndirty, round int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	text, _ = mrkdwn.HoldBack(v.buf)
	v.sending = len(text)
	for _, id := range dedupe(v.dirty) {
		cards = append(cards, v.cards[id])
	}
	return text, cards, len(v.dirty), v.round
}

// sent drops what was sent from the buffers (they may have grown meanwhile).
func (v *liveView) sent(text string, ndirty int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.buf = v.buf[len(text):]
	v.roundAtBuf = max(0, v.roundAtBuf-len(text))
	v.dirty = v.dirty[ndirty:]
	v.sending = 0
}

// unsent says the send of what take returned failed: it stays in the buffer, to be sent again
// (had Restart come meanwhile, it marked the view voided, and finish replaces the text).
func (v *liveView) unsent() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sending = 0
}

// flush sends the buffered text and card changes (the sender), and reports whether it sent
// anything.
func (v *liveView) flush(ctx context.Context) bool {
	v.mu.Lock()
	doing := v.doing
	v.mu.Unlock()
	if v.status != nil && doing != v.statusSaid {
		v.status.update(ctx, doing)
		v.statusSaid = doing
	}
	if v.off || v.fenced {
		return false
	}
	text, cards, ndirty, round := v.take()
	if text == "" && len(cards) == 0 {
		return false
	}
	if err := v.send(ctx, text, cards, round); err != nil {
		v.unsent()
		if ctx.Err() != nil || v.fenced || errors.Is(err, errLeaseEnding) {
			return false // the lease is going or gone: nothing more is sent
		}
		if isSlackErr(err, "stopped_by_user") {
			v.halt(ctx)
			return false
		}
		v.failures++
		v.log.Warn().Err(err).Int("failures", v.failures).Msg("live view: send")
		if v.failures >= 3 {
			v.log.Warn().Msg("live view: giving up; the reply is delivered whole at the end")
			v.off = true
		}
		return true // wait before trying again
	}
	v.failures = 0
	v.sent(text, ndirty)
	return true
}

// send shows text and cards in the current message, or in a new one (the sender).
func (v *liveView) send(ctx context.Context, text string, cards []slack.StreamChunk, round int) error {
	if v.mode == "" {
		v.mode = "stream"
		if v.d.isUnavailable("chat.startStream") {
			v.mode = "update"
		}
	}
	cur := v.current()
	if cur != nil && (v.clock.Now().Sub(cur.started) > v.cfg.MaxAge || cur.chars+utf8.RuneCountInString(text) > v.cfg.MaxChars) {
		v.rollover(ctx, cur, session.StreamRollover)
		cur = nil
	}
	var err error
	switch {
	case v.mode == "update":
		err = v.update(ctx, cur, text)
	case cur == nil:
		err = v.start(ctx, text, cards)
		if errors.Is(err, errUnavailable) {
			v.mode = "update"
			err = v.update(ctx, nil, text)
		}
	default:
		err = v.appendTo(ctx, cur, text, cards)
		if streamClosed(err) {
			// Slack stopped taking appends (its age or size limit came first): go on in a
			// new message, nothing lost.
			v.rollover(ctx, cur, session.StreamRollover)
			err = v.start(ctx, text, cards)
		}
	}
	if err == nil && text != "" {
		if round != v.sentRound {
			v.sentRound, v.roundAt, v.roundSent = round, len(v.msgs)-1, ""
		}
		v.roundSent += text
	}
	return err
}

// current is the message the view sends to now; nil before the first and after a rollover.
func (v *liveView) current() *liveMsg {
	if len(v.msgs) == 0 || v.msgs[len(v.msgs)-1].closed {
		return nil
	}
	return v.msgs[len(v.msgs)-1]
}

func (v *liveView) appendTo(ctx context.Context, cur *liveMsg, text string, cards []slack.StreamChunk) error {
	var chunks []slack.StreamChunk
	if text != "" {
		chunks = append(chunks, slack.NewMarkdownTextChunk(mrkdwn.Inert(text)))
	}
	chunks = append(chunks, cards...)
	err := v.d.call(ctx, "chat.appendStream", func() error {
		_, _, err := v.d.api.AppendStreamContext(ctx, v.sess.Key.Channel, cur.ts, slack.MsgOptionChunks(chunks...))
		return err
	})
	if err == nil {
		cur.chars += utf8.RuneCountInString(text)
		cur.text += text
	}
	return err
}

// stamp is the stamp of the view's messages (deliver.go): its session and turn.
func (v *liveView) stamp() stamp { return stamp{session: v.sess.ID.String(), turn: v.turnSeq} }

// start starts a streamed message with text and cards, and records it. (chat.startStream
// takes no metadata: the stream is stamped as the reply when it stops.)
func (v *liveView) start(ctx context.Context, text string, cards []slack.StreamChunk) error {
	var chunks []slack.StreamChunk
	if v.title != "" && len(v.msgs) == 0 {
		chunks = append(chunks, slack.NewPlanUpdateChunk(clip.Text(mrkdwn.Inert(v.title), 150)))
	}
	if text != "" {
		chunks = append(chunks, slack.NewMarkdownTextChunk(mrkdwn.Inert(text)))
	}
	chunks = append(chunks, cards...)
	opts := []slack.MsgOption{slack.MsgOptionTS(v.sess.Key.ThreadTS),
		slack.MsgOptionRecipientUserID(v.user), slack.MsgOptionRecipientTeamID(v.team),
		slack.MsgOptionTaskDisplayMode(slack.TaskDisplayModeTimeline)}
	if len(chunks) > 0 {
		opts = append(opts, slack.MsgOptionChunks(chunks...))
	}
	ts, err := v.create(ctx, "chat.startStream", func() (string, error) {
		_, ts, err := v.d.api.StartStreamContext(ctx, v.sess.Key.Channel, opts...)
		return ts, err
	})
	if err != nil {
		return err
	}
	return v.record(ctx, ts, "stream", text)
}

// update shows text in a posted message that is updated as it grows: where streaming is
// unavailable, the same live view by other means.
func (v *liveView) update(ctx context.Context, cur *liveMsg, text string) error {
	if cur == nil {
		ts, err := v.create(ctx, "chat.postMessage", func() (string, error) {
			_, ts, err := v.d.api.PostMessageContext(ctx, v.sess.Key.Channel,
				slack.MsgOptionText(mrkdwn.FromMarkdown(cmpText(text+v.cardLines(), "…")), false), slack.MsgOptionTS(v.sess.Key.ThreadTS),
				slack.MsgOptionMetadata(slack.SlackMetadata{EventType: LiveMetadataType, EventPayload: v.stamp().payload(ctx, nil)}))
			return ts, err
		})
		if err != nil {
			return err
		}
		return v.record(ctx, ts, "update", text)
	}
	full := cur.text + text
	if utf8.RuneCountInString(mrkdwn.FromMarkdown(full)) > v.d.cfg.PartLimit {
		v.rollover(ctx, cur, session.StreamRollover)
		return v.update(ctx, nil, text)
	}
	err := v.d.call(ctx, "chat.update", func() error {
		_, _, _, err := v.d.api.UpdateMessageContext(ctx, v.sess.Key.Channel, cur.ts,
			slack.MsgOptionText(mrkdwn.FromMarkdown(cmpText(full+v.cardLines(), "…")), false))
		return err
	})
	if err == nil {
		cur.text, cur.chars = full, utf8.RuneCountInString(full)
	}
	return err
}

// cardLines renders the cards as lines, for a posted (not streamed) message.
func (v *liveView) cardLines() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	for _, id := range v.order {
		c := v.cards[id]
		fmt.Fprintf(&b, "\n\n• %s — %s", c.Title, strings.ReplaceAll(string(c.Status), "_", " "))
	}
	return b.String()
}

// record appends stream_started for a new message of the view. Refused as fenced (another
// cell took the session over, perhaps after it searched the thread), the message is removed
// and the view sends nothing more: the new owner never takes over a message the log does not
// name, so the thread shows its reply alone.
func (v *liveView) record(ctx context.Context, ts, mode, text string) error {
	m := &liveMsg{ts: ts, started: v.clock.Now(), chars: utf8.RuneCountInString(text), text: text}
	v.msgs = append(v.msgs, m)
	// The message is in the thread now: its record must not be lost to the turn's
	// cancellation (a shutdown), or the next cell could not finish it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ev := session.NewEvent{Type: session.TypeStreamStarted, Actor: deliveryActor,
		IdempotencyKey: "stream/" + ts, Payload: session.StreamStarted{Turn: v.turnSeq, Channel: v.sess.Key.Channel, TS: ts, Mode: mode}}
	err := appendSure(ctx, v.flog, v.clock, ev)
	switch {
	case errors.Is(err, session.ErrFenced):
		v.fenceOut(ctx, m)
		return errViewFenced
	case err != nil:
		// The text is in Slack: it counts as sent (sending it again would show it twice). A
		// later cell finds the message as one of the bot's the log does not know.
		v.log.Warn().Err(err).Str("ts", ts).Msg("live view: record a live message")
	}
	return nil
}

// fenceOut stops the view for good (the lease moved) and removes m, the message it made but
// could not record.
func (v *liveView) fenceOut(ctx context.Context, m *liveMsg) {
	v.fenced, v.off = true, true
	v.msgs = v.msgs[:len(v.msgs)-1]
	ctx, cancel := unfenced(ctx)
	defer cancel()
	if ok, err := named(ctx, v.flog, v.clock, m.ts); ok {
		if err != nil {
			v.log.Warn().Err(err).Str("ts", m.ts).Msg("live view: the lease moved; kept the message it could not record")
		}
		return
	}
	if v.mode == "stream" {
		if err := v.stopStream(ctx, m.ts); err != nil && !streamClosed(err) {
			v.log.Debug().Err(err).Str("ts", m.ts).Msg("live view: stop the stream of a lost lease")
		}
	}
	err := v.d.call(ctx, "chat.delete", func() error {
		_, _, err := v.d.api.DeleteMessageContext(ctx, v.sess.Key.Channel, m.ts)
		return err
	})
	if err != nil && !isSlackErr(err, "message_not_found") {
		v.log.Warn().Err(err).Str("ts", m.ts).Msg("live view: the lease moved; could not remove the message it could not record")
		return
	}
	v.log.Info().Str("ts", m.ts).Msg("live view: the lease moved to another cell; removed the message it could not record")
}

// create makes a new message of the view (chat.startStream, chat.postMessage) and returns its
// ts. Neither call is idempotent: one whose answer was lost (a timeout, a reset connection)
// may have made the message, so the thread is searched for it before anything is sent again
// — found, it is the view's. When the search fails too, the view sends nothing more and the
// turn looks again before it shows the reply (doubt).
func (v *liveView) create(ctx context.Context, method string, f func() (string, error)) (string, error) {
	var ts string
	err := v.d.call(ctx, method, func() error {
		var err error
		ts, err = f()
		return err
	})
	if err == nil || !ambiguous(err) {
		return ts, err
	}
	var mine []string
	for _, m := range v.msgs {
		mine = append(mine, m.ts)
	}
	found, searched, serr := v.orphans.find(ctx, mine...)
	// Only a message of this cell's own epoch (or one that names none: a stream, which
	// chat.startStream cannot stamp) may be the one the lost answer made; an older owner's
	// is an orphan, removed before the reply is shown.
	var ours []string
	for _, m := range found {
		if !foreignEpoch(v.flog.epoch, m.Epoch) {
			ours = append(ours, m.TS)
		}
	}
	switch {
	case serr != nil || !searched:
		v.off, v.doubt = true, serr != nil
		v.log.Warn().Err(err).AnErr("search", serr).Str("method", method).Msg("live view: a new message's answer was lost; sending nothing more")
		return "", fmt.Errorf("%s: %w", method, err)
	case len(ours) > 0:
		v.doubt = v.doubt || len(found) > 1 // the turn removes the others before it shows the reply
		v.log.Info().Str("ts", ours[len(ours)-1]).Str("method", method).Msg("live view: a new message's answer was lost; found it in the thread")
		return ours[len(ours)-1], nil
	case len(found) > 0:
		v.doubt = true // an older owner's messages only: removed before the reply is shown
	}
	return "", err // not in the thread: nothing was made, the next send tries again
}

// ambiguous reports an error after which a Slack write may have happened: no answer came
// (a timeout, a reset connection, the call cut short) or the server failed (5xx). An answer
// (ok:false, a rate limit, a 4xx) says nothing was written. (It sorts the same kinds of
// error as deliver.go's permanent, alike in shape; the question each asks of them differs.)
func ambiguous(err error) bool {
	if err == nil || errors.Is(err, errUnavailable) || errors.Is(err, errLeaseEnding) {
		return false
	}
	if _, limited := rateLimited(err); limited {
		return false
	}
	if errors.As(err, new(slack.SlackErrorResponse)) {
		return false
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return sc.Code >= 500
	}
	return true
}

// rollover finishes cur so the turn goes on in a new message, and records it.
func (v *liveView) rollover(ctx context.Context, cur *liveMsg, reason string) {
	if v.fenced {
		return
	}
	if v.mode == "stream" {
		if err := v.stopStream(ctx, cur.ts); err != nil && !streamClosed(err) {
			v.log.Warn().Err(err).Msg("live view: stop a stream to roll over")
		}
	}
	if _, err := v.flog.Append(ctx, streamStopped(cur.ts, reason, cur.chars)); err != nil {
		v.log.Warn().Err(err).Msg("live view: record a rollover")
	}
	cur.closed = true
}

// shown reports whether the view showed anything (the sender's side: after close). Then
// finish completes it; otherwise the reply is delivered as usual. A view that gave up still
// has its messages in the thread: finish replaces them, rather than leaving them partial (and
// streaming) next to the reply posted anew.
func (v *liveView) shown() bool { return len(v.msgs) > 0 }

// finish makes the live view show the turn's reply, exactly once; call it after close. When
// what the view sent of the final round is the reply's beginning, the rest of the reply goes
// into the current message as it stops (with the reply's metadata); otherwise the message the
// final round began in gets the whole reply (chat.update) and the view's later messages are
// removed. It returns the ts of the messages that show the reply, and the events that record
// the end of the view's messages, for the turn's delivered append.
func (v *liveView) finish(ctx context.Context, reply session.Event, footer string) ([]string, []session.NewEvent, error) {
	v.close()
	if v.fenced {
		return nil, nil, errViewFenced // the new owner shows the reply
	}
	var msg session.AssistantMessage
	if err := reply.Decode(&msg); err != nil {
		return nil, nil, err
	}
	v.mu.Lock()
	// buf holds what earlier rounds left unsent, then what the final round left unsent.
	cut := min(v.roundAtBuf, len(v.buf))
	earlier, finalUnsent := v.buf[:cut], v.buf[cut:]
	sentOfRound := strings.TrimSuffix(v.roundText, finalUnsent)
	var cards []slack.StreamChunk
	for _, id := range dedupe(v.dirty) {
		cards = append(cards, v.cards[id])
	}
	voidedRound := v.voided
	v.mu.Unlock()
	cur := v.current()
	meta := replyMetadata(ctx, v.stamp(), reply.ID.String(), 0, 1)
	whole := strings.TrimLeft(msg.Text, " \n\t")
	sent := strings.TrimLeft(sentOfRound, " \n\t")
	rest, continues := strings.CutPrefix(whole, sent)
	// logbook's own text (Own) is never streamed as the model's: it replaces the stream, its
	// mentions kept (replyText).
	continues = continues && !msg.Own && !voidedRound && !v.off && cur != nil && v.mode == "stream" && whole != "" &&
		utf8.RuneCountInString(rest)+cur.chars <= v.cfg.MaxChars+2000 // a rest too long for one message is replaced instead
	var stopped []session.NewEvent
	stop := func(m *liveMsg, reason string) { stopped = append(stopped, streamStopped(m.ts, reason, m.chars)) }
	if continues {
		var chunks []slack.StreamChunk
		if earlier+rest != "" {
			chunks = append(chunks, slack.NewMarkdownTextChunk(mrkdwn.Inert(earlier+rest)))
		}
		chunks = append(chunks, cards...)
		opts := []slack.MsgOption{meta}
		if len(chunks) > 0 {
			opts = append(opts, slack.MsgOptionChunks(chunks...))
		}
		if bs := v.d.under(v.sess, reply, msg, footer).blocks(); len(bs) > 0 {
			opts = append(opts, slack.MsgOptionBlocks(bs...))
		}
		err := v.stopStream(ctx, cur.ts, opts...)
		if err == nil {
			cur.chars += utf8.RuneCountInString(earlier + rest)
			stop(cur, session.StreamDone)
			return v.tsList(v.roundAt), stopped, nil
		}
		if isSlackErr(err, "stopped_by_user") {
			v.halt(ctx) // a person stopped it in Slack: the turn stops, the reply is not posted
			return nil, nil, errHalted
		}
		if !streamClosed(err) {
			return nil, nil, err
		}
		// The stream closed under us: show the reply by replacing instead.
	}
	if cur != nil && v.mode == "stream" {
		if err := v.stopStream(ctx, cur.ts); isSlackErr(err, "stopped_by_user") {
			v.halt(ctx)
			return nil, nil, errHalted
		} else if err != nil && !streamClosed(err) {
			v.log.Warn().Err(err).Msg("live view: stop the stream before replacing its text")
		}
	}
	at := min(max(v.roundAt, 0), len(v.msgs)-1)
	var drop []string
	for _, m := range v.msgs[at+1:] {
		drop = append(drop, m.ts)
	}
	posted, removed, err := v.d.replace(ctx, v.sess, reply, v.msgs[at].ts, drop, footer)
	if err != nil {
		// The messages it removed before it failed are recorded now (the turn stays open:
		// the next attempt finishes the others).
		if len(removed) > 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			var evs []session.NewEvent
			for _, ts := range removed {
				evs = append(evs, streamStopped(ts, session.StreamDeleted, v.charsOf(ts)))
			}
			err = errors.Join(err, appendSure(rctx, v.flog, v.clock, evs...))
		}
		return nil, nil, err
	}
	for i, m := range v.msgs {
		if !m.closed {
			reason := session.StreamDone
			if i > at {
				reason = session.StreamDeleted
			}
			stop(m, reason)
		}
	}
	for _, m := range v.msgs[at+1:] {
		if m.closed {
			stop(m, session.StreamDeleted)
		}
	}
	return posted, stopped, nil
}

// charsOf is the characters sent to the view's message ts.
func (v *liveView) charsOf(ts string) int {
	for _, m := range v.msgs {
		if m.ts == ts {
			return m.chars
		}
	}
	return 0
}

// tsList is the ts of the view's messages from index at on: those that show the reply.
func (v *liveView) tsList(at int) []string {
	var out []string
	for _, m := range v.msgs[min(max(at, 0), len(v.msgs)):] {
		out = append(out, m.ts)
	}
	return out
}

// cmpText is s, or def when s is only white space.
func cmpText(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// stopStream ends the stream of message ts (chat.stopStream), with opts' last content.
func (v *liveView) stopStream(ctx context.Context, ts string, opts ...slack.MsgOption) error {
	return v.d.call(ctx, "chat.stopStream", func() error {
		_, _, err := v.d.api.StopStreamContext(ctx, v.sess.Key.Channel, ts, opts...)
		return err
	})
}

// streamClosed reports Slack saying a stream takes no more appends.
func streamClosed(err error) bool {
	var se slack.SlackErrorResponse
	return errors.As(err, &se) && (se.Err == "message_not_in_streaming_state" || se.Err == "msg_too_long" ||
		se.Err == "msg_blocks_too_long")
}

func dedupe(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// deliveredEvent is the record that reply was posted to channel as the messages ts. Its key
// makes it once per reply, whichever cell writes it.
func deliveredEvent(reply session.Event, channel string, ts []string) session.NewEvent {
	return session.NewEvent{Type: session.TypeDelivered, Actor: deliveryActor, IdempotencyKey: "delivered/" + reply.ID.String(),
		Payload: session.Delivered{EventID: reply.ID.String(), Seq: reply.Seq, Channel: channel, TS: ts}}
}

// streamStopped is the record of a live message's end. A deletion has a key of its own: a
// message may be stopped (rolled over) first and deleted later.
func streamStopped(ts, reason string, chars int) session.NewEvent {
	key := "stream_stopped/" + ts
	if reason == session.StreamDeleted {
		key = "stream_deleted/" + ts
	}
	return session.NewEvent{Type: session.TypeStreamStopped, Actor: deliveryActor, IdempotencyKey: key,
		Payload: session.StreamStopped{TS: ts, Reason: reason, Chars: chars}}
}

// halt is Slack answering a send with stopped_by_user: a person stopped the stream in Slack
// (the stop button halts the thread's streams), whether or not its agent_session_stopped
// reached logbook. The view sends nothing more, and the log gets a stop request for the
// running turn (source "stream"), which stops it as the button's would. Slack's answer names
// nobody; the request is the stream's recipient's (recipient_user_id, the person the turn
// answers) — when the button's event arrives first, the turn is stopped by whom it names.
func (v *liveView) halt(ctx context.Context) {
	cur := v.current()
	if cur == nil || v.haltedAt != "" {
		return
	}
	v.haltedAt, v.off = cur.ts, true
	v.log.Info().Str("ts", cur.ts).Msg("live view: Slack says the stream was stopped by a person; stopping the turn")
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := v.flog.Append(ctx, session.NewEvent{Type: session.TypeStopRequested,
		Actor: session.Actor{Kind: session.ActorUser, ID: v.user}, IdempotencyKey: "stop/stream/" + v.sess.Key.Channel + "/" + cur.ts,
		Payload: session.StopRequested{Source: StopSourceStream}}); err != nil {
		v.log.Warn().Err(err).Msg("live view: record the stop Slack reported")
	}
	if v.onHalt != nil {
		v.onHalt()
	}
}

// StopSourceStream is the source of a stop request the live view records when Slack answers
// a stream append with stopped_by_user.
const StopSourceStream = "stream"

// halted reports that Slack halted the view's stream (the sender's side: after close).
func (v *liveView) halted() bool { return v.haltedAt != "" }

// stoppedText is the text of the final round the view showed in Slack: what the thread read of
// the model call a stop cut short (the sender's side: after close).
func (v *liveView) stoppedText() string {
	v.mu.Lock()
	round := v.round
	v.mu.Unlock()
	if len(v.msgs) == 0 || v.sentRound != round {
		return "" // nothing of the final round reached Slack
	}
	return strings.TrimSpace(v.roundSent)
}

// stopWith finishes the view's message with a note (a stopped turn: no reply follows) and
// returns the records of its end. Best-effort: a message Slack no longer takes is left as it is.
func (v *liveView) stopWith(ctx context.Context, note string) []session.NewEvent {
	v.close()
	cur := v.current()
	if cur == nil || v.fenced {
		return nil
	}
	var err error
	switch v.mode {
	case "stream":
		err = v.stopStream(ctx, cur.ts, slack.MsgOptionChunks(slack.NewMarkdownTextChunk("\n\n"+note)))
	case "update":
		err = v.d.call(ctx, "chat.update", func() error {
			_, _, _, err := v.d.api.UpdateMessageContext(ctx, v.sess.Key.Channel, cur.ts,
				slack.MsgOptionText(mrkdwn.FromMarkdown(cur.text)+"\n\n"+note, false))
			return err
		})
	}
	if v.mode == "stream" && (streamClosed(err) || isSlackErr(err, "stopped_by_user")) {
		// Slack ended the stream itself (its stop button does): the note goes on by update.
		err = v.d.call(ctx, "chat.update", func() error {
			_, _, _, err := v.d.api.UpdateMessageContext(ctx, v.sess.Key.Channel, cur.ts,
				slack.MsgOptionText(mrkdwn.FromMarkdown(cmpText(cur.text, "…"))+"\n\n"+note, false))
			return err
		})
	}
	if err != nil {
		v.log.Warn().Err(err).Msg("live view: finish a stopped turn's message")
	}
	return []session.NewEvent{streamStopped(cur.ts, session.StreamCutShort, cur.chars)}
}
