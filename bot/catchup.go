package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/session"
)

// Catch-up: Slack redelivers an unacked envelope three times (at once, after a minute, after
// five) and then drops it; what it sends while the socket is down may never arrive. After
// such a gap — an append or session lookup that failed, a socket that reconnected — the
// gateway reads back from Slack what it may have missed, once the log takes writes again.
// "Since" is the gap's first sign minus CatchUpConfig.Margin, at most Window ago:
//
//   - the active channels are those of sessions with an event in the last Horizon (at most
//     Sessions of them, whichever team hosts the channel);
//   - for each, its top-level messages back to Horizon (conversations.history with oldest,
//     newest first, cursor pages): those posted since are stored (a mention that would open a
//     thread is not lost with its whole thread: the late-opened session takes in its thread's
//     replies as a redelivered mention does, withThread), and a thread parent whose
//     latest_reply is since then names a thread with new replies — a quiet older thread too;
//   - for each such thread that is a session, and each session active since then, its
//     messages since then (conversations.replies with oldest, cursor pages while has_more):
//     new ones are stored, edits made since then (a message's edited.ts) are stored as
//     user_message_edited, and a message the log has from since then that Slack no longer
//     returns (or returns as a tombstone) is stored as user_message_deleted — only when every
//     page was read, so a cut read never invents a deletion.
//
// Each message goes through process, the envelopes' own path: the same classification and
// idempotency key (the session's team/channel/ts), so what is already stored is a duplicate
// and nothing is stored twice; what is new is appended and its session signalled, so it is
// answered. Pages are bounded, rate limits waited out (Retry-After). A catch-up that fails
// (the database still down) is tried again every CatchUpConfig.Interval until one succeeds.

// CatchUpConfig bounds the gateway's catch-up after a gap. Zero values take defaults.
type CatchUpConfig struct {
	// Interval is how often a pending catch-up is tried (default 5s).
	Interval time.Duration
	// Margin is read back before the gap's first sign (default 1m): a message can fail to be
	// stored some time after it was posted.
	Margin time.Duration
	// Window is the furthest back a catch-up reads messages (default 1h).
	Window time.Duration
	// Horizon is how far back a channel counts as active and a thread parent is looked at for
	// new replies (default 7 days).
	Horizon time.Duration
	// Sessions bounds the threads read per catch-up (default 200), newest sessions first.
	Sessions int
	// Pages bounds the pages read per thread or channel (default 10).
	Pages int
	// Timeout bounds one catch-up (default 2m).
	Timeout time.Duration
}

func (c CatchUpConfig) withDefaults() CatchUpConfig {
	c.Interval = cmp.Or(c.Interval, 5*time.Second)
	c.Margin = cmp.Or(c.Margin, time.Minute)
	c.Window = cmp.Or(c.Window, time.Hour)
	c.Horizon = max(cmp.Or(c.Horizon, 7*24*time.Hour), c.Window)
	c.Sessions = cmp.Or(c.Sessions, 200)
	c.Pages = cmp.Or(c.Pages, 10)
	c.Timeout = cmp.Or(c.Timeout, 2*time.Minute)
	return c
}

// gap is the earliest moment since the last catch-up at which something may have been
// missed; gen counts the marks, so a catch-up clears only the gap it covered.
type gap struct {
	mu    sync.Mutex
	since time.Time
	gen   uint64
}

func (g *gap) mark(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.since.IsZero() || t.Before(g.since) {
		g.since = t
	}
	g.gen++
}

// pending returns the gap's start (zero: none) and its generation.
func (g *gap) pending() (time.Time, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.since, g.gen
}

// clear forgets the gap if nothing was marked since gen.
func (g *gap) clear(gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen == gen {
		g.since = time.Time{}
	}
}

func (g *Gateway) kickCatchUp() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// catchUpLoop runs pending catch-ups until ctx ends.
func (g *Gateway) catchUpLoop(ctx context.Context) {
	tick := time.NewTicker(g.cfg.CatchUp.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-g.kick:
		}
		since, gen := g.gap.pending()
		if since.IsZero() {
			continue
		}
		n, err := g.catchUp(ctx, since)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Info().Err(err).Time("gap_since", since).Msg("catch-up from Slack failed; trying again")
			}
			continue
		}
		g.gap.clear(gen)
		g.log.Info().Time("gap_since", since).Int("threads", n.threads).Int("channels", n.channels).
			Int("read", n.read).Int("stored", n.stored).Msg("caught up from Slack after a gap")
	}
}

type catchUpCounts struct{ threads, channels, read, stored int }

// catchUp reads back what Slack has since since (see the top of this file) and stores what the
// log lacks. An error means it should be tried again.
func (g *Gateway) catchUp(ctx context.Context, since time.Time) (catchUpCounts, error) {
	var n catchUpCounts
	c := g.cfg.CatchUp
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	now := time.Now() // the gap is marked on the wall clock
	from := since.Add(-c.Margin)
	if earliest := now.Add(-c.Window); from.Before(earliest) {
		from = earliest
	}
	active, err := g.store.Recent(ctx, from, c.Sessions)
	if err != nil {
		return n, err
	}
	known, err := g.store.Recent(ctx, now.Add(-c.Horizon), c.Sessions)
	if err != nil {
		return n, err
	}
	g.metrics.catchUps.Inc()
	oldest := slackTS(from)
	log := g.log.With().Str("part", "catch_up").Logger()
	threads := map[session.ThreadKey]session.Session{}
	var order []session.Session
	want := func(s session.Session) {
		k := session.ThreadKey{Channel: s.Key.Channel, ThreadTS: s.Key.ThreadTS}
		if _, ok := threads[k]; !ok {
			threads[k] = s
			order = append(order, s)
		}
	}
	for _, s := range active {
		want(s)
	}
	// Top-level messages first: a thread opened during the gap is opened by its mention, which
	// takes in the thread's replies.
	for _, ch := range channelsOf(append(active, known...)) {
		n.channels++
		replied, err := g.catchUpChannel(ctx, log, &n, ch, oldest, slackTS(now.Add(-c.Horizon)))
		if err != nil {
			return n, fmt.Errorf("catch up channel %s: %w", ch.Key.Channel, err)
		}
		for _, thread := range replied {
			s, err := g.session(ctx, session.ThreadKey{Channel: ch.Key.Channel, ThreadTS: thread}, false)
			if err == nil {
				want(s)
			} else if !errors.Is(err, session.ErrNotFound) {
				return n, err
			}
		}
	}
	for _, s := range order {
		n.threads++
		if err := g.catchUpThread(ctx, log, &n, s, oldest); err != nil {
			return n, fmt.Errorf("catch up thread %s/%s: %w", s.Key.Channel, s.Key.ThreadTS, err)
		}
	}
	return n, nil
}

// channelsOf is each channel of sessions once, as the first session of it (its team is the
// channel's owner).
func channelsOf(sessions []session.Session) []session.Session {
	var out []session.Session
	seen := map[string]bool{}
	for _, s := range sessions {
		if !seen[s.Key.Channel] {
			seen[s.Key.Channel] = true
			out = append(out, s)
		}
	}
	return out
}

// catchUpChannel reads the channel's top-level messages back to horizon: it stores those
// posted after oldest and returns the threads whose latest reply is after oldest.
func (g *Gateway) catchUpChannel(ctx context.Context, log zerolog.Logger, n *catchUpCounts, ch session.Session, oldest, horizon string) ([]string, error) {
	var replied []string
	err := g.pages(ctx, func(cursor string) ([]slack.Message, string, error) {
		r, err := g.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
			ChannelID: ch.Key.Channel, Oldest: horizon, Limit: 200, Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		if !r.HasMore {
			return r.Messages, "", nil
		}
		return r.Messages, r.ResponseMetaData.NextCursor, nil
	}, func(m slack.Message) error {
		if m.ReplyCount > 0 && m.LatestReply != "" && tsLess(oldest, m.LatestReply) {
			replied = append(replied, m.Timestamp)
		}
		if !tsLess(oldest, m.Timestamp) || (m.ThreadTimestamp != "" && m.ThreadTimestamp != m.Timestamp && m.SubType != "thread_broadcast") {
			return nil
		}
		return g.caught(ctx, log, n, inboundFromMessage(ch.Key.Team, ch.Key.Channel, "", m))
	})
	return replied, err
}

// catchUpThread reads the session's thread after oldest and stores its new messages, the
// edits made since then and the deletions (see the top of this file).
func (g *Gateway) catchUpThread(ctx context.Context, log zerolog.Logger, n *catchUpCounts, s session.Session, oldest string) error {
	seen := map[string]bool{}
	complete, err := g.pagesAll(ctx, func(cursor string) ([]slack.Message, string, error) {
		msgs, more, next, err := g.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: s.Key.Channel, Timestamp: s.Key.ThreadTS, Oldest: oldest, Limit: 200, Cursor: cursor})
		if !more {
			next = ""
		}
		return msgs, next, err
	}, func(m slack.Message) error {
		if m.SubType == "tombstone" {
			return nil // deleted: not seen
		}
		seen[m.Timestamp] = true
		in := inboundFromMessage(s.Key.Team, s.Key.Channel, "", m)
		if in.ThreadTS == "" {
			in.ThreadTS = s.Key.ThreadTS
		}
		fresh, err := g.caughtFresh(ctx, log, n, in)
		if err != nil || fresh || m.Edited == nil || !tsLess(oldest, m.Edited.Timestamp) {
			return err
		}
		msg := m.Msg
		if msg.ThreadTimestamp == "" {
			msg.ThreadTimestamp = s.Key.ThreadTS
		}
		edit := inbound{Team: s.Key.Team, Kind: "message", Subtype: "message_changed", Channel: s.Key.Channel,
			TS: m.Edited.Timestamp, Changed: &msg}
		_, err = g.caughtFresh(ctx, log, n, edit)
		return err
	})
	var nf slack.SlackErrorResponse
	if errors.As(err, &nf) && nf.Err == "thread_not_found" {
		err, complete = nil, true // the parent is gone, replies and all
	}
	if err != nil || !complete {
		return err
	}
	return g.caughtDeletions(ctx, log, n, s, oldest, seen)
}

// caughtDeletions stores a deletion for each message the session holds from after oldest
// that Slack did not return (seen) and that is not deleted already.
func (g *Gateway) caughtDeletions(ctx context.Context, log zerolog.Logger, n *catchUpCounts, s session.Session, oldest string, seen map[string]bool) error {
	evs, err := g.store.Events(ctx, s.ID, session.Range{Types: []session.Type{session.TypeUserMessage, session.TypeUserMessageDeleted}})
	if err != nil {
		return err
	}
	stored := map[string]string{} // ts -> author, of messages not deleted
	for _, e := range evs {
		var p struct {
			TS        string `json:"ts"`
			DeletedTS string `json:"deleted_ts"`
			User      string `json:"user"`
		}
		if e.Decode(&p) != nil {
			continue
		}
		if e.Type == session.TypeUserMessageDeleted {
			delete(stored, p.DeletedTS)
		} else if p.TS != "" && tsLess(oldest, p.TS) {
			stored[p.TS] = p.User
		}
	}
	for ts, user := range stored {
		if seen[ts] {
			continue
		}
		del := inbound{Team: s.Key.Team, Kind: "message", Subtype: "message_deleted", Channel: s.Key.Channel, DeletedTS: ts,
			Previous: &slack.Msg{User: user, Timestamp: ts, ThreadTimestamp: s.Key.ThreadTS}}
		if _, err := g.caughtFresh(ctx, log, n, del); err != nil {
			return err
		}
	}
	return nil
}

// caught stores one message read back from Slack through the envelopes' path.
func (g *Gateway) caught(ctx context.Context, log zerolog.Logger, n *catchUpCounts, in inbound) error {
	_, err := g.caughtFresh(ctx, log, n, in)
	return err
}

// caughtFresh is caught that also reports whether something new was stored.
func (g *Gateway) caughtFresh(ctx context.Context, log zerolog.Logger, n *catchUpCounts, in inbound) (bool, error) {
	n.read++
	// A message read back is a late delivery: a mention that opens a session takes in its
	// thread (withThread), as a redelivered one does.
	in.RetryAttempt = 1
	fresh, err := g.process(ctx, log.With().Str("channel", in.Channel).Str("ts", in.TS).Logger(), in)
	if err != nil && !unstorable(err) {
		return false, err
	}
	if fresh {
		n.stored++
		g.metrics.caughtUp.Inc()
	}
	return fresh, nil
}

// pages reads at most CatchUpConfig.Pages pages through fetch, waiting out rate limits (up
// to three times), and hands each message to each.
func (g *Gateway) pages(ctx context.Context, fetch func(cursor string) ([]slack.Message, string, error), each func(slack.Message) error) error {
	_, err := g.pagesAll(ctx, fetch, each)
	return err
}

// pagesAll is pages that also reports whether the last page was read (no page left unread).
func (g *Gateway) pagesAll(ctx context.Context, fetch func(cursor string) ([]slack.Message, string, error), each func(slack.Message) error) (bool, error) {
	cursor := ""
	for page, limited := 0, 0; page < g.cfg.CatchUp.Pages; page++ {
		msgs, next, err := fetch(cursor)
		if wait, ok := rateLimited(err); ok && limited < 3 {
			limited++
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(cmp.Or(wait, time.Second)):
			}
			page--
			continue
		}
		if err != nil {
			return false, err
		}
		for _, m := range msgs {
			if err := each(m); err != nil {
				return false, err
			}
		}
		if next == "" {
			return true, nil
		}
		cursor = next
	}
	return false, nil
}

// inboundFromMessage is a message read from the Web API as the gateway's input.
func inboundFromMessage(team, channel, channelType string, m slack.Message) inbound {
	return inbound{Team: team, Kind: "message", Subtype: m.SubType, Channel: channel, ChannelType: channelType,
		User: m.User, BotID: m.BotID, Text: m.Text, Blocks: m.Blocks, TS: m.Timestamp, ThreadTS: m.ThreadTimestamp,
		Files: m.Files}
}

// slackTS is t as a Slack ts ("1700000000.000000").
func slackTS(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10) + ".000000"
}
