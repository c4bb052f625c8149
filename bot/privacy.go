package bot

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// Privacy changes, at once. A channel made private, shared with or unshared from another
// organisation, archived or deleted, or left by the bot, changes what every surface may show
// of its sessions (/logbook search, the agent's search_sessions tool, the web pages). The
// gateway follows those events — the message subtypes channel_convert_to_private and
// channel_convert_to_public, and channel_shared, channel_unshared, channel_archive,
// channel_deleted and member_left_channel (for the bot) — and drops the directory's
// conversations.info answer for the channel on each (a conversion to private is taken as
// private at once, before Slack is asked again). Every surface that shows content decides with
// the same Directory, from an answer at most VisibilityMaxAge old, so a replica that did not
// receive the event hides the channel within that time too.

// VisibilityMaxAge is how old a conversations.info answer may be when a surface decides
// whether to show a channel's logged content (Directory.ChannelPrivate, ChannelExtShared).
const VisibilityMaxAge = 2 * time.Second

// channelChanged handles an event that changes a channel's visibility: ok false when ev is
// none. It acks once the directory has forgotten the channel.
func (g *Gateway) channelChanged(log zerolog.Logger, req socketmode.Request, ev slackevents.EventsAPIEvent) bool {
	channel, private := "", false
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.MessageEvent:
		switch e.SubType {
		case "channel_convert_to_private":
			channel, private = e.Channel, true
		case "channel_convert_to_public":
			channel = e.Channel
		default:
			return false
		}
	case *slackevents.ChannelSharedEvent:
		channel = e.Channel
	case *slackevents.ChannelUnsharedEvent:
		channel = e.Channel
	case *slackevents.ChannelArchiveEvent:
		channel = e.Channel
	case *slackevents.ChannelDeletedEvent:
		channel, private = e.Channel, true
	case *slackevents.MemberLeftChannelEvent:
		if e.User != g.me.UserID {
			return false
		}
		channel = e.Channel
	default:
		return false
	}
	if channel != "" {
		g.dir.forget(channel, private)
		g.metrics.ignored.WithLabelValues("visibility_" + ev.InnerEvent.Type).Inc()
		log.Info().Str("channel", channel).Str("event", ev.InnerEvent.Type).Bool("private", private).
			Msg("a channel's visibility changed; every surface decides it afresh")
	}
	g.ack(log, req, nil)
	return true
}

// forget drops what conversations.info said of the channel; private records it as private
// until Slack is asked again (a conversion to private, a deletion).
func (d *directory) forget(id string, private bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !private {
		delete(d.channels, id)
		return
	}
	c := d.channels[id]
	c.v.Public, c.v.Marked, c.at = false, true, d.now()
	d.channels[id] = c
}

// fresh returns the channel's kind from an answer at most maxAge old.
func (d *directory) fresh(ctx context.Context, id string, maxAge time.Duration) (channelKind, error) {
	d.mu.Lock()
	c, ok := d.channels[id]
	d.mu.Unlock()
	if ok && c.v.Name != "" && d.now().Sub(c.at) < maxAge {
		return c.v, nil
	}
	if ok && c.v.Marked && d.now().Sub(c.at) < maxAge {
		return c.v, nil // made private by an event: no need to ask yet
	}
	return d.refresh(ctx, id)
}
