package bot

import (
	"context"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// A Surface is a capability that answers Slack outside a thread's turn: a message shortcut
// (callback_id), a button on a message it posted (action_id), an Events API event the engine
// does not handle (app_home_opened, say). Like a turn's parts, the engine knows none by name:
// cmd/logbook lists them in Deps.Surfaces, one a line.
//
// The gateway acks the envelope first (Slack allows 3 s), then offers it to each surface in
// order; the first that claims it answers it. A surface posts its answers itself (a
// response_url, chat.postEphemeral, views.publish) and records what it must through the log.
type Surface interface {
	// Interaction reports whether cb is this surface's, and answers it if so.
	Interaction(ctx context.Context, cb slack.InteractionCallback) bool
	// Event reports whether ev is this surface's, and answers it if so. Message and mention
	// events never reach a surface: they belong to sessions.
	Event(ctx context.Context, ev slackevents.EventsAPIEvent) bool
}

// surfaceInteraction offers cb to the surfaces in order; false: none claimed it.
func (g *Gateway) surfaceInteraction(ctx context.Context, cb slack.InteractionCallback) bool {
	for _, s := range g.surfaces {
		if s.Interaction(ctx, cb) {
			return true
		}
	}
	return false
}

// surfaceEvent offers ev to the surfaces in order; false: none claimed it.
func (g *Gateway) surfaceEvent(ctx context.Context, ev slackevents.EventsAPIEvent) bool {
	for _, s := range g.surfaces {
		if s.Event(ctx, ev) {
			return true
		}
	}
	return false
}
