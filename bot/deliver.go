package bot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// The message metadata event_types of the bot's messages in a session's thread. Each payload
// names, where known, the session ("session"), the turn ("turn": its turn_started seq) and the
// lease epoch of the cell that wrote it ("epoch"): a cell looking for the messages of a turn
// the log does not name (orphanSearch) takes as its own only those of its own epoch, removes
// an older owner's, and never touches a newer owner's. A message without an epoch (written
// before epochs were stamped, or a stream: chat.startStream takes no metadata) is judged as
// before, by the log alone.
const (
	// MetadataEventType is every part of a reply; its payload's event_id is the reply's
	// assistant_message, part and parts its place in the reply.
	MetadataEventType = "logbook_reply"
	// LiveMetadataType is a live message posted (not streamed) while a turn runs, until it
	// is replaced by the reply.
	LiveMetadataType = "logbook_live"
	// NoteMetadataType is an operator's note in the thread (logbook takeover, logbook
	// handback): no turn's message, so never removed as a turn's unrecorded one.
	NoteMetadataType = "logbook_note"
)

// NoteMetadata is the metadata of an operator's note of kind ("takeover", "handback") in
// sess's thread.
func NoteMetadata(sess session.Session, kind string) slack.SlackMetadata {
	return slack.SlackMetadata{EventType: NoteMetadataType, EventPayload: map[string]any{"session": sess.ID.String(), "kind": kind}}
}

// stamp is which session and turn (0: none) a message belongs to; payload adds the epoch of
// the writing cell's lease from ctx's fence.
type stamp struct {
	session string
	turn    int64
}

// payload is p with the stamp's keys, and the epoch of ctx's lease, added.
func (s stamp) payload(ctx context.Context, p map[string]any) map[string]any {
	if p == nil {
		p = map[string]any{}
	}
	if s.session != "" {
		p["session"] = s.session
	}
	if s.turn > 0 {
		p["turn"] = s.turn
	}
	if e := epochOf(ctx); e > 0 {
		p["epoch"] = e
	}
	return p
}

// replyStamp is the stamp of reply's messages in sess's thread.
func replyStamp(sess session.Session, msg session.AssistantMessage) stamp {
	return stamp{session: sess.ID.String(), turn: msg.Turn}
}

// replyMetadata is the metadata of part (of parts) of reply, written under ctx's lease.
func replyMetadata(ctx context.Context, st stamp, eventID string, part, parts int) slack.MsgOption {
	return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: MetadataEventType,
		EventPayload: st.payload(ctx, map[string]any{"event_id": eventID, "part": part, "parts": parts})})
}

// metadataEpoch is the lease epoch a message's metadata names: 0 when none (an older message,
// a stream, another app's).
func metadataEpoch(md slack.SlackMetadata) int64 {
	switch md.EventType {
	case MetadataEventType, LiveMetadataType:
	default:
		return 0
	}
	switch v := md.EventPayload["epoch"].(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		return n
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// foreignEpoch reports a message of another lease's cell than own's: both epochs known and
// different. Such a message is never taken as own's (an older owner's is an orphan; a newer
// owner's is not own's to touch at all).
func foreignEpoch(own, msg int64) bool { return own > 0 && msg > 0 && msg != own }

// DeliveryConfig configures a Deliverer. Zero values take defaults.
type DeliveryConfig struct {
	PartLimit int                                              // characters per posted part; default mrkdwn.DefaultLimit (3,900)
	Attempts  int                                              // posts of one part that fail other than by a rate limit; default 3
	MaxWait   time.Duration                                    // how long one part may keep being retried (rate limits included); default 2m
	Reaction  string                                           // reaction that shows the bot is working; default "eyes"; "-" for none
	Sleep     func(ctx context.Context, d time.Duration) error // default: waits on Clock
	Clock     Clock                                            // default: the wall clock
	// Actions, when set, gives the block of actions under a reply's last part (a
	// context_actions block: Slack's feedback buttons), or nil for none. cmd/logbook sets it
	// from the capability that answers the clicks (bot/feedback); the engine knows none by name.
	Actions func(sess session.Session, reply session.Event, msg session.AssistantMessage) slack.Block
}

// Deliverer posts replies to Slack exactly once (see the package documentation). One
// Deliverer serves the whole workspace: a rate limit seen by any post delays every post.
type Deliverer struct {
	api     slackAPI
	log     zerolog.Logger
	metrics *Metrics
	cfg     DeliveryConfig

	mu        sync.Mutex
	notBefore map[string]time.Time // per Web API method: no call before this (Retry-After)
	// unavailable holds the Web API methods this workspace refused for good (unknown_method,
	// missing_scope, not_allowed_token_type, ...): not called again by this process.
	unavailable map[string]bool
}

// NewDeliverer returns a Deliverer posting with api.
func NewDeliverer(api slackAPI, log zerolog.Logger, metrics *Metrics, cfg DeliveryConfig) *Deliverer {
	if cfg.PartLimit <= 0 {
		cfg.PartLimit = mrkdwn.DefaultLimit
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 2 * time.Minute
	}
	if cfg.Reaction == "" {
		cfg.Reaction = "eyes"
	}
	cfg.Clock = clockOr(cfg.Clock)
	if cfg.Sleep == nil {
		clock := cfg.Clock
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			select {
			case <-clock.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return &Deliverer{api: api, log: log, metrics: metrics, cfg: cfg, notBefore: map[string]time.Time{}, unavailable: map[string]bool{}}
}

// Deliver posts the reply to the session's thread and returns the ts of every part it
// consists of, in order. It neither reads nor writes the log: the turn decides whether the
// reply was delivered before and records the delivery. search says the reply may be in the
// thread already (a resumed turn): parts found there by metadata are not posted again. After
// an ambiguous failure the thread is searched in any case. footer, when set, is a small
// context line (mrkdwn) under the last part: the transcript link, the turn's usage.
func (d *Deliverer) Deliver(ctx context.Context, sess session.Session, reply session.Event, search bool, footer string) ([]string, error) {
	var msg session.AssistantMessage
	if err := reply.Decode(&msg); err != nil {
		return nil, err
	}
	text := msg.Text
	if text == "" {
		text = "(empty reply)"
	}
	parts := mrkdwn.Split(replyText(msg, text), d.cfg.PartLimit)
	channel, thread := sess.Key.Channel, sess.Key.ThreadTS
	posted := make([]string, len(parts))
	if search {
		if err := d.lookup(ctx, channel, thread, reply.ID.String(), posted); err != nil {
			if !errors.Is(err, ErrDeliveryFailed) {
				return nil, err
			}
			// The thread can never be searched (no scope, say): losing the reply is worse
			// than perhaps showing a part twice.
			d.log.Warn().Err(err).Msg("cannot search the thread; posting the reply again, parts may repeat")
		}
	}
	resplit := false
	for i := 0; i < len(parts); i++ {
		if posted[i] != "" {
			continue
		}
		var foot under
		if i == len(parts)-1 {
			foot = d.under(sess, reply, msg, footer)
		}
		ts, err := d.post(ctx, channel, thread, replyStamp(sess, msg), reply.ID.String(), i, len(parts), parts[i], foot)
		if errors.Is(err, errTooLong) && resplit {
			return nil, fmt.Errorf("%w: slack refused part %d as too long even after splitting it finer", ErrDeliveryFailed, i+1)
		}
		if errors.Is(err, errTooLong) {
			// Slack measured the part longer than we did (it answered msg_too_long): split it
			// finer and retry once, rather than show the person a generic error.
			resplit = true
			pieces := mrkdwn.Split(parts[i], max(d.cfg.PartLimit/2, 500))
			parts = append(parts[:i:i], append(pieces, parts[i+1:]...)...)
			posted = append(posted[:i:i], append(make([]string, len(pieces)), posted[i+1:]...)...)
			i--
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("post part %d of %d of reply %s: %w", i+1, len(parts), reply.ID, err)
		}
		posted[i] = ts
	}
	return posted, nil
}

// replyText is reply text as Slack mrkdwn: the model's can mention nobody; one logbook wrote
// itself (Own: a canned reply, a turn ended early — mute, the attempts used up, a budget)
// keeps the mentions of the people it names.
func replyText(msg session.AssistantMessage, text string) string {
	if msg.Own {
		return mrkdwn.FromMarkdownMentioning(text)
	}
	return mrkdwn.FromMarkdown(text)
}

// SetTitle shows the session's title in Slack, where the workspace allows it: on the thread's
// agent session (agents.sessions.rename), else as the thread's title
// (assistant.threads.setTitle). Best-effort: a refusal is logged at debug level, and a method
// the workspace refuses for good is not tried again.
func (d *Deliverer) SetTitle(ctx context.Context, channel, thread, title string) bool {
	title = mrkdwn.Inert(title) // the model wrote it
	try := func(method string, call func() error) bool {
		if d.isUnavailable(method) {
			return false
		}
		err := call()
		if err == nil {
			return true
		}
		// Not through call: a title is not worth waiting out a rate limit for.
		if se := (slack.SlackErrorResponse{}); errors.As(err, &se) && unavailableCodes[se.Err] {
			d.mu.Lock()
			d.unavailable[method] = true
			d.mu.Unlock()
		}
		d.log.Debug().Err(err).Str("method", method).Msg("set the thread's title")
		return false
	}
	return try("agents.sessions.rename", func() error {
		_, err := d.api.RenameAgentSessionContext(ctx, slack.AgentSessionRenameParameters{ChannelID: channel, ThreadTS: thread, Title: title})
		return err
	}) || try("assistant.threads.setTitle", func() error {
		return d.api.SetAssistantThreadsTitleContext(ctx, slack.AssistantThreadsSetTitleParameters{ChannelID: channel, ThreadTS: thread, Title: title})
	})
}

// Working shows that the bot works on the message at ts (a reaction) and returns the function
// that removes it. Both are best-effort.
func (d *Deliverer) Working(ctx context.Context, channel, ts string) func() {
	if d.cfg.Reaction == "-" || ts == "" {
		return func() {}
	}
	item := slack.NewRefToMessage(channel, ts)
	// The reaction is added off the turn's path; the returned func waits for it, then
	// removes it.
	added := make(chan bool, 1)
	go func() {
		err := d.api.AddReactionContext(ctx, d.cfg.Reaction, item)
		if err != nil {
			d.log.Debug().Err(err).Msg("working reaction")
		}
		added <- err == nil
	}()
	return func() {
		if !<-added {
			return
		}
		rm, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := d.api.RemoveReactionContext(rm, d.cfg.Reaction, item); err != nil {
			d.log.Debug().Err(err).Msg("remove working reaction")
		}
	}
}

// sectionLimit is the most text a section block holds.
const sectionLimit = 3000

// under is what goes under a reply's last part: the footer (a context line, mrkdwn) and the
// block of actions (DeliveryConfig.Actions; nil: none).
type under struct {
	footer  string
	actions slack.Block
}

func (u under) empty() bool { return u.footer == "" && u.actions == nil }

// under is what goes under reply's last part.
func (d *Deliverer) under(sess session.Session, reply session.Event, msg session.AssistantMessage, footer string) under {
	u := under{footer: footer}
	if d.cfg.Actions != nil {
		u.actions = d.cfg.Actions(sess, reply, msg)
	}
	return u
}

// blocks are u's blocks alone (under a stream, whose text is its own).
func (u under) blocks() []slack.Block {
	var bs []slack.Block
	if u.footer != "" {
		bs = append(bs, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, u.footer, false, false)))
	}
	if u.actions != nil {
		bs = append(bs, u.actions)
	}
	return bs
}

// withFooter shows u under text: the text goes in a section block (the message's text stays
// as the notification fallback), the footer in a context block, the actions last. A part too
// long for a section keeps its text and gets the footer as a last line instead; with actions,
// which need blocks, its text is cut into several sections.
func withFooter(text string, u under) slack.MsgOption {
	if utf8.RuneCountInString(text) > sectionLimit && u.actions == nil {
		return slack.MsgOptionText(text+"\n\n"+u.footer, false)
	}
	var bs []slack.Block
	for _, piece := range mrkdwn.Split(text, sectionLimit) {
		bs = append(bs, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, piece, false, false), nil, nil))
	}
	return slack.MsgOptionBlocks(append(bs, u.blocks()...)...)
}

// ErrDeliveryFailed wraps a delivery failure that a retry cannot change (a deleted or archived
// channel, an invalid message): the turn ends with an error. Other delivery errors leave the
// turn open, to be resumed — the thread is searched before anything is posted again.
var ErrDeliveryFailed = errors.New("delivery failed for good")

var errTooLong = errors.New("slack says the message is too long")

// post posts one part. Rate limits are waited out (for up to MaxWait in all); after an
// ambiguous failure (the post may have landed) the thread is searched by metadata, and when
// that search fails too, post gives up rather than risk a second copy.
func (d *Deliverer) post(ctx context.Context, channel, thread string, st stamp, eventID string, part, parts int, text string, footer under) (string, error) {
	opts := []slack.MsgOption{
		slack.MsgOptionText(text, false),
		slack.MsgOptionTS(thread),
		replyMetadata(ctx, st, eventID, part, parts),
	}
	if !footer.empty() {
		opts = append(opts, withFooter(text, footer))
	}
	deadline := d.cfg.Clock.Now().Add(d.cfg.MaxWait)
	var lastErr error
	limited := 0 // rate limits in a row that said no Retry-After
	for attempt := 0; attempt < d.cfg.Attempts && d.cfg.Clock.Now().Before(deadline); {
		if err := d.waitTurn(ctx, "chat.postMessage"); err != nil {
			return "", err
		}
		if err := fenceOf(ctx).check(ctx); err != nil {
			return "", err // the cell's lease may have ended: it posts nothing more
		}
		_, ts, err := d.api.PostMessageContext(ctx, channel, opts...)
		if err == nil {
			return ts, nil
		}
		lastErr = err
		d.metrics.deliveryRetries.Inc()
		var se slack.SlackErrorResponse
		if wait, ok := rateLimited(err); ok {
			if wait == 0 {
				wait = noRetryAfter(limited)
				limited++
			}
			d.hold("chat.postMessage", wait)
			continue // a 429 posted nothing, and does not count as an attempt
		}
		switch {
		case ctx.Err() != nil:
			return "", ctx.Err()
		case errors.As(err, &se) && (se.Err == "msg_too_long" || se.Err == "msg_blocks_too_long"):
			return "", errTooLong
		case permanent(err):
			return "", fmt.Errorf("%w: %w", ErrDeliveryFailed, err)
		}
		attempt++
		// Ambiguous: the post may have landed. Look before posting again.
		found := make([]string, parts)
		lerr := d.lookup(ctx, channel, thread, eventID, found)
		switch {
		case lerr == nil && found[part] != "":
			return found[part], nil
		case errors.Is(lerr, ErrDeliveryFailed):
			// The thread can never be searched: post again rather than lose the part.
			d.log.Warn().Err(lerr).Msg("cannot search the thread after an ambiguous post; posting again, it may repeat")
		case lerr != nil:
			return "", fmt.Errorf("post failed (%v) and the thread could not be searched: %w", err, lerr)
		}
		if err := d.cfg.Sleep(ctx, time.Duration(attempt)*200*time.Millisecond); err != nil {
			return "", err
		}
	}
	return "", lastErr
}

// rateLimited reports whether err is Slack saying "too many requests", and the Retry-After it
// gave (0 when it gave none: an HTTP 429 without the header, or an ok:false "ratelimited").
func rateLimited(err error) (time.Duration, bool) {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return max(rl.RetryAfter, time.Second), true
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) && sc.Code == http.StatusTooManyRequests {
		return 0, true
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && (se.Err == "ratelimited" || se.Err == "rate_limited") {
		return 0, true
	}
	return 0, false
}

// noRetryAfter is the wait after the n-th rate limit in a row (from 0) that named no
// Retry-After: a second, doubling to 30 s. Slack allows about one message a second per
// channel, so anything shorter asks to be limited again.
func noRetryAfter(n int) time.Duration {
	return min(time.Second<<min(n, 5), 30*time.Second)
}

// permanent reports Slack answers that a retry cannot change.
func permanent(err error) bool {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout":
			return false
		}
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return sc.Code < 500 && sc.Code != 429
	}
	return false
}

// hold records a Retry-After for a Web API method: Slack limits each method separately.
func (d *Deliverer) hold(method string, wait time.Duration) {
	if wait < time.Second {
		wait = time.Second
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.cfg.Clock.Now().Add(wait); t.After(d.notBefore[method]) {
		d.notBefore[method] = t
	}
}

// waitTurn waits until method may be called again.
func (d *Deliverer) waitTurn(ctx context.Context, method string) error {
	d.mu.Lock()
	wait := d.notBefore[method].Sub(d.cfg.Clock.Now())
	d.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	return d.cfg.Sleep(ctx, wait)
}

// lookup fills posted[part] with the ts of every part of eventID's reply already in the
// thread, found by message metadata. A part another lease's cell posted is not taken (see
// foreignEpoch): an older owner's was never recorded, and is removed as an orphan, not
// shown as this cell's reply; a newer owner's is that owner's to record.
func (d *Deliverer) lookup(ctx context.Context, channel, thread, eventID string, posted []string) error {
	cursor := ""
	for {
		if err := d.waitTurn(ctx, "conversations.replies"); err != nil {
			return err
		}
		msgs, more, next, err := d.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: channel, Timestamp: thread, Cursor: cursor, Limit: 200, IncludeAllMetadata: true})
		if wait, ok := rateLimited(err); ok {
			d.hold("conversations.replies", cmp.Or(wait, noRetryAfter(0)))
			continue
		}
		if err != nil {
			if permanent(err) {
				// The thread cannot be searched, now or later: give up rather than loop.
				return fmt.Errorf("%w: look for reply %s in thread %s: %w", ErrDeliveryFailed, eventID, thread, err)
			}
			return fmt.Errorf("look for reply %s in thread %s: %w", eventID, thread, err)
		}
		own := epochOf(ctx)
		for _, m := range msgs {
			if m.Metadata.EventType != MetadataEventType || m.Metadata.EventPayload["event_id"] != eventID {
				continue
			}
			if foreignEpoch(own, metadataEpoch(m.Metadata)) {
				continue
			}
			// A part counts only under the same split: after a re-split, part numbers mean
			// other text (then a part may be posted twice, never lost).
			if n, ok := m.Metadata.EventPayload["parts"].(float64); !ok || int(n) != len(posted) {
				continue
			}
			if p, ok := m.Metadata.EventPayload["part"].(float64); ok && int(p) >= 0 && int(p) < len(posted) && posted[int(p)] == "" {
				posted[int(p)] = m.Timestamp
			}
		}
		if !more || next == "" {
			return nil
		}
		cursor = next
	}
}

// unavailableCodes are Slack's answers meaning a method will not work for this app or
// workspace, however often it is called.
var unavailableCodes = map[string]bool{
	"unknown_method": true, "missing_scope": true, "not_allowed_token_type": true, "method_deprecated": true,
	"not_allowed": true, "feature_not_enabled": true, "team_not_allowed": true, "not_enabled": true,
}

func (d *Deliverer) isUnavailable(method string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unavailable[method]
}

// call makes one Web API call through f, once the cell's lease fence (fence.go) allows: rate limits (429 with or without Retry-After, ok:false
// ratelimited) are waited out, for up to MaxWait; an answer that the method is unavailable is
// remembered (later calls fail at once) and returned wrapped in errUnavailable.
func (d *Deliverer) call(ctx context.Context, method string, f func() error) error {
	if d.isUnavailable(method) {
		return fmt.Errorf("%s: %w", method, errUnavailable)
	}
	deadline := d.cfg.Clock.Now().Add(d.cfg.MaxWait)
	for limited := 0; ; {
		if err := d.waitTurn(ctx, method); err != nil {
			return err
		}
		if err := fenceOf(ctx).check(ctx); err != nil {
			return fmt.Errorf("%s: %w", method, err) // the cell's lease may have ended
		}
		err := f()
		if wait, ok := rateLimited(err); ok && d.cfg.Clock.Now().Before(deadline) {
			if wait == 0 {
				wait = noRetryAfter(limited)
				limited++
			}
			d.hold(method, wait)
			d.metrics.deliveryRetries.Inc()
			continue
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && unavailableCodes[se.Err] {
			d.mu.Lock()
			d.unavailable[method] = true
			d.mu.Unlock()
			return fmt.Errorf("%s: %w (%s)", method, errUnavailable, se.Err)
		}
		return err
	}
}

// replace shows reply in the live message target (chat.update: its first part, with the
// reply's metadata; the footer under the last part), removes the live messages in drop, and
// posts the reply's other parts after it. It returns the ts of every part, and the messages of
// drop it removed (removed: also when it fails after removing them, for the caller to record).
func (d *Deliverer) replace(ctx context.Context, sess session.Session, reply session.Event, target string, drop []string, footer string) (posted, removed []string, err error) {
	var msg session.AssistantMessage
	if err := reply.Decode(&msg); err != nil {
		return nil, nil, err
	}
	text := msg.Text
	if strings.TrimSpace(text) == "" {
		text = "(empty reply)"
	}
	parts := mrkdwn.Split(replyText(msg, text), d.cfg.PartLimit)
	channel, thread := sess.Key.Channel, sess.Key.ThreadTS
	opts := []slack.MsgOption{slack.MsgOptionText(parts[0], false), replyMetadata(ctx, replyStamp(sess, msg), reply.ID.String(), 0, len(parts))}
	tail := d.under(sess, reply, msg, footer)
	if len(parts) == 1 && !tail.empty() {
		opts = append(opts, withFooter(parts[0], tail))
	} else {
		opts = append(opts, slack.MsgOptionBlocks()) // the stream's cards and text give way to the reply
	}
	if err := d.call(ctx, "chat.update", func() error {
		_, _, _, err := d.api.UpdateMessageContext(ctx, channel, target, opts...)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("show reply %s in message %s: %w", reply.ID, target, err)
	}
	for _, ts := range drop {
		if err := d.call(ctx, "chat.delete", func() error {
			_, _, err := d.api.DeleteMessageContext(ctx, channel, ts)
			return err
		}); err != nil && !isSlackErr(err, "message_not_found") {
			return nil, removed, fmt.Errorf("remove live message %s: %w", ts, err)
		}
		removed = append(removed, ts)
	}
	posted = []string{target}
	for i := 1; i < len(parts); i++ {
		var foot under
		if i == len(parts)-1 {
			foot = tail
		}
		ts, err := d.post(ctx, channel, thread, replyStamp(sess, msg), reply.ID.String(), i, len(parts), parts[i], foot)
		if err != nil {
			return nil, removed, fmt.Errorf("post part %d of %d of reply %s: %w", i+1, len(parts), reply.ID, err)
		}
		posted = append(posted, ts)
	}
	return posted, removed, nil
}

func isSlackErr(err error, code string) bool {
	var se slack.SlackErrorResponse
	return errors.As(err, &se) && se.Err == code
}

// threadStatus is what shows that the bot works on a thread, from the turn's start to its
// end: the thread's agent session (processing, with Slack's stop button), else the assistant
// thread status with a loading message, else the working reaction.
type threadStatus struct {
	d               *Deliverer
	channel, thread string
	mu              sync.Mutex
	kind            string // "agent", "assistant", "reaction" or ""
	shown           string // the loading message shown
	ready           chan struct{}
	clearReaction   func()
}

// startStatus shows at once that the bot works on the thread (see threadStatus); title names a
// new agent session. It returns without waiting for Slack; the status's end func waits for it,
// then clears it.
func (d *Deliverer) startStatus(ctx context.Context, channel, thread, ts, title string) *threadStatus {
	st := &threadStatus{d: d, channel: channel, thread: thread, ready: make(chan struct{})}
	go func() {
		defer close(st.ready)
		if err := d.call(ctx, "agents.sessions.setStatus", func() error {
			_, err := d.api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{
				Status: "processing", ChannelID: channel, ThreadTS: thread, Title: mrkdwn.Inert(title)})
			return err
		}); err == nil {
			st.kind = "agent"
			return
		}
		if err := d.call(ctx, "assistant.threads.setStatus", func() error {
			return d.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
				ChannelID: channel, ThreadTS: thread, Status: "is working on it…", LoadingMessages: []string{"Reading the thread…"}})
		}); err == nil {
			st.kind, st.shown = "assistant", "Reading the thread…"
			return
		}
		st.kind, st.clearReaction = "reaction", d.Working(ctx, channel, ts)
	}()
	return st
}

// update shows what the turn does now, where the status can say it (assistant threads).
func (st *threadStatus) update(ctx context.Context, text string) {
	select {
	case <-st.ready:
	default:
		return // not shown yet: the next update will do
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.kind != "assistant" || text == "" || text == st.shown {
		return
	}
	r, size := utf8.DecodeRuneInString(text)
	msg := clip.Text(mrkdwn.Inert(string(unicode.ToUpper(r))+text[size:]), 100)
	if err := st.d.call(ctx, "assistant.threads.setStatus", func() error {
		return st.d.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
			ChannelID: st.channel, ThreadTS: st.thread, Status: "is working on it…", LoadingMessages: []string{msg}})
	}); err == nil {
		st.shown = text
	}
}

// end clears the status: the agent session goes back to active, the assistant status is
// cleared, the reaction removed. It outlives ctx's cancellation (a turn cut short still
// clears its status).
func (st *threadStatus) end() {
	<-st.ready
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch st.kind {
	case "agent":
		err = st.d.call(ctx, "agents.sessions.setStatus", func() error {
			_, err := st.d.api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{
				Status: "active", ChannelID: st.channel, ThreadTS: st.thread})
			return err
		})
	case "assistant":
		err = st.d.call(ctx, "assistant.threads.setStatus", func() error {
			return st.d.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
				ChannelID: st.channel, ThreadTS: st.thread, Status: ""})
		})
	case "reaction":
		st.clearReaction()
	}
	if err != nil {
		st.d.log.Debug().Err(err).Str("status", st.kind).Msg("clear the thread's status")
	}
}

// botMessage is one of the bot's messages in a thread, and the lease epoch its metadata
// names (0: none).
type botMessage struct {
	TS    string
	Epoch int64
}

// unknownBotMessages lists the bot's messages (by user botUser) in the thread after the ts
// `after` that known does not name. A message whose metadata names a newer lease epoch than
// own (a newer owner's, not recorded yet) is left out: it is never this cell's to take or to
// remove. Nor are an operator's notes (NoteMetadataType), approval cards, or files.
func (d *Deliverer) unknownBotMessages(ctx context.Context, channel, thread, after, botUser string, known map[string]bool, own int64) ([]botMessage, error) {
	if botUser == "" || after == "" {
		return nil, nil
	}
	var out []botMessage
	cursor := ""
	for {
		var msgs []slack.Message
		var more bool
		var next string
		err := d.call(ctx, "conversations.replies", func() error {
			var err error
			msgs, more, next, err = d.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: channel, Timestamp: thread, Cursor: cursor, Limit: 200, Oldest: after, IncludeAllMetadata: true})
			return err
		})
		if err != nil {
			return out, err
		}
		for _, m := range msgs {
			if m.User != botUser || known[m.Timestamp] || !tsLess(after, m.Timestamp) || m.Timestamp == thread {
				continue
			}
			// An approval card the log does not know yet is found again by its metadata
			// (findCard), not removed. Nor is a file the bot shared (finishUploads records
			// those), nor an operator's note (a takeover's: no turn's message).
			if t := m.Metadata.EventType; t == ApprovalMetadataType || t == NoteMetadataType || len(m.Files) > 0 {
				continue
			}
			epoch := metadataEpoch(m.Metadata)
			if own > 0 && epoch > own {
				continue
			}
			out = append(out, botMessage{TS: m.Timestamp, Epoch: epoch})
		}
		if !more || next == "" {
			return out, nil
		}
		cursor = next
	}
}

// slackAPI is the part of slack-go's Web API client the bot uses.
type slackAPI interface {
	GetConversationInfoContext(ctx context.Context, input *slack.GetConversationInfoInput) (*slack.Channel, error)
	GetUserInfoContext(ctx context.Context, user string, options ...slack.GetUserInfoOption) (*slack.User, error)
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	PostEphemeralContext(ctx context.Context, channelID, userID string, options ...slack.MsgOption) (string, error)
	GetConversationRepliesContext(ctx context.Context, params *slack.GetConversationRepliesParameters) ([]slack.Message, bool, string, error)
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
	AddReactionContext(ctx context.Context, name string, item slack.ItemRef) error
	RemoveReactionContext(ctx context.Context, name string, item slack.ItemRef) error
	GetPermalinkContext(ctx context.Context, params *slack.PermalinkParameters) (string, error)
	RenameAgentSessionContext(ctx context.Context, params slack.AgentSessionRenameParameters) (*slack.AgentSessionRenameResponse, error)
	SetAssistantThreadsTitleContext(ctx context.Context, params slack.AssistantThreadsSetTitleParameters) error
	SetAssistantThreadsStatusContext(ctx context.Context, params slack.AssistantThreadsSetStatusParameters) error
	SetAgentSessionStatusContext(ctx context.Context, params slack.AgentSessionSetStatusParameters) (*slack.AgentSessionSetStatusResponse, error)
	StartStreamContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	AppendStreamContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, error)
	StopStreamContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, error)
	UpdateMessageContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, string, error)
	DeleteMessageContext(ctx context.Context, channel, messageTimestamp string) (string, string, error)
	GetUserGroupMembersContext(ctx context.Context, userGroup string, options ...slack.GetUserGroupMembersOption) ([]string, error)
}
