package bot

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
)

// Catch-up: Slack redelivers an unacked envelope three times (at once, after a minute, after
// five) and then drops it; what it sends while the socket is down may never arrive. After
// such a gap — an append or session lookup that failed, a socket that reconnected — the
// gateway reads back from Slack what it may have missed, once the log takes writes again:
//
//   - for each session of the team active since the gap began (minus CatchUpConfig.Margin,
//     at most Window ago, at most Sessions of them), its thread's messages since then
//     (conversations.replies with oldest);
//   - for each channel those sessions are in, its top-level messages since then
//     (conversations.history with oldest), so a mention that would open a thread is not
//     lost with its whole thread (the late-opened session takes in its thread's replies as a
//     redelivered mention does, withThread).
//
// Each message goes through process, the envelopes' own path: the same classification and
// idempotency key (team/channel/ts), so what is already stored is a duplicate and nothing is
// stored twice; what is new is appended and its session signalled, so it is answered. Pages
// are bounded, rate limits waited out (Retry-After). A catch-up that fails (the database
// still down) is tried again every CatchUpConfig.Interval until one succeeds.

// CatchUpConfig bounds the gateway's catch-up after a gap. Zero values take defaults.
type CatchUpConfig struct {
	// Interval is how often a pending catch-up is tried (default 5s).
	Interval time.Duration
	// Margin is read back before the gap's first sign (default 1m): a message can fail to be
	// stored some time after it was posted.
	Margin time.Duration
	// Window is the furthest back a catch-up reads (default 1h).
	Window time.Duration
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
	from := since.Add(-c.Margin)
	if earliest := time.Now().Add(-c.Window); from.Before(earliest) {
		from = earliest
	}
	sessions, err := g.store.Recent(ctx, g.me.Team, from, c.Sessions)
	if err != nil {
		return n, err
	}
	g.metrics.catchUps.Inc()
	oldest := slackTS(from)
	log := g.log.With().Str("part", "catch_up").Logger()
	var channels []string
	seen := map[string]bool{}
	for _, s := range sessions {
		if !seen[s.Key.Channel] {
			seen[s.Key.Channel] = true
			channels = append(channels, s.Key.Channel)
		}
	}
	// Top-level messages first: a thread opened during the gap is opened by its mention, which
	// takes in the thread's replies.
	for _, ch := range channels {
		n.channels++
		err := g.pages(ctx, func(cursor string) ([]slack.Message, string, error) {
			r, err := g.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: ch, Oldest: oldest, Limit: 200, Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return r.Messages, r.ResponseMetaData.NextCursor, nil
		}, func(m slack.Message) error {
			if m.ThreadTimestamp != "" && m.ThreadTimestamp != m.Timestamp && m.SubType != "thread_broadcast" {
				return nil
			}
			return g.caught(ctx, log, &n, inboundFromMessage(g.me.Team, ch, "", m))
		})
		if err != nil {
			return n, fmt.Errorf("catch up channel %s: %w", ch, err)
		}
	}
	for _, s := range sessions {
		n.threads++
		err := g.pages(ctx, func(cursor string) ([]slack.Message, string, error) {
			msgs, more, next, err := g.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: s.Key.Channel, Timestamp: s.Key.ThreadTS, Oldest: oldest, Limit: 200, Cursor: cursor})
			if !more {
				next = ""
			}
			return msgs, next, err
		}, func(m slack.Message) error {
			in := inboundFromMessage(s.Key.Team, s.Key.Channel, "", m)
			if in.ThreadTS == "" {
				in.ThreadTS = s.Key.ThreadTS
			}
			return g.caught(ctx, log, &n, in)
		})
		if err != nil {
			return n, fmt.Errorf("catch up thread %s/%s: %w", s.Key.Channel, s.Key.ThreadTS, err)
		}
	}
	return n, nil
}

// caught stores one message read back from Slack through the envelopes' path.
func (g *Gateway) caught(ctx context.Context, log zerolog.Logger, n *catchUpCounts, in inbound) error {
	n.read++
	// A message read back is a late delivery: a mention that opens a session takes in its
	// thread (withThread), as a redelivered one does.
	in.RetryAttempt = 1
	fresh, err := g.process(ctx, log.With().Str("channel", in.Channel).Str("ts", in.TS).Logger(), in)
	if err != nil && !unstorable(err) {
		return err
	}
	if fresh {
		n.stored++
		g.metrics.caughtUp.Inc()
	}
	return nil
}

// pages reads at most CatchUpConfig.Pages pages through fetch, waiting out rate limits (up
// to three times), and hands each message to each.
func (g *Gateway) pages(ctx context.Context, fetch func(cursor string) ([]slack.Message, string, error), each func(slack.Message) error) error {
	cursor := ""
	for page, limited := 0, 0; page < g.cfg.CatchUp.Pages; page++ {
		msgs, next, err := fetch(cursor)
		if wait, ok := rateLimited(err); ok && limited < 3 {
			limited++
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cmp.Or(wait, time.Second)):
			}
			page--
			continue
		}
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := each(m); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
	return nil
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
