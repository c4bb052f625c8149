package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/logbook/logbook/session"
)

// AbandonedText is what a thread is told when its turn is abandoned: taken up by more than
// maxResumes cells (each died, lost its lease or kept failing) without finishing.
const AbandonedText = "Sorry — I could not finish answering this: my attempts kept failing " +
	"(the service restarted or an error repeated). Send your message again to retry."

// giveUp abandons a turn no cell could finish (cells took it up), never silently: the live
// messages the dead cells left are removed first (best-effort: the turn is abandoned whatever
// Slack says), then the thread gets one plain message saying so and how to retry, not a
// half-written reply left streaming above it, and the error event says why. The
// message is stored first as an assistant_message with an idempotency key and delivered
// like any reply (the thread searched first), so a crash while it is posted is recovered
// like any reply: it is stored once and shown once. A reply of the turn that the log
// already records as delivered needs no notice: the turn is closed as answered. When even
// the notice cannot reach the thread after maxResumes more cells, the turn is closed with
// the error alone.
func (t *turn) giveUp(ctx context.Context, cells int) error {
	if _, err := t.recoverLive(ctx, session.Event{}, false); err != nil {
		t.log.Warn().Err(err).Msg("live view: could not remove the live messages of an abandoned turn")
	}
	st := t.state
	why := fmt.Sprintf("the turn was taken up by %d cells and none finished it (each died, lost its lease or kept failing); "+
		"the thread was told to send the message again", cells)
	if _, tn := t.turns(); tn.Reply.Seq > 0 && tn.Delivered {
		return t.complete(ctx, outcome{status: session.StatusOK})
	}
	if cells > 2*maxResumes {
		t.log.Warn().Int("cells", cells).Msg("turn abandoned; the notice could not be delivered either")
		return t.complete(ctx, abandoned(fmt.Sprintf(
			"the turn was taken up by %d cells and none finished it; the notice to the thread could not be delivered either", cells)))
	}
	stored, err := t.flog.Append(ctx, session.NewEvent{Type: session.TypeAssistantMessage,
		Actor:          session.Actor{Kind: session.ActorBot, ID: cmp.Or(t.cfg.Where.BotUserID, "logbook")},
		IdempotencyKey: "abandoned/" + strconv.FormatInt(st.turnSeq, 10),
		Payload:        session.AssistantMessage{Text: AbandonedText, Own: true}})
	if err != nil {
		return err
	}
	notice := stored[0]
	if ts, _ := t.turns(); ts.Delivered(notice) {
		return t.complete(ctx, abandoned(why))
	}
	t.log.Warn().Int("cells", cells).Msg("turn abandoned after repeated failures; telling the thread")
	// A notice stored by an earlier cell may have been posted already: search first.
	posted, err := t.deliverer.Deliver(ctx, t.out(), notice, true, "")
	switch {
	case err == nil:
		done := abandoned(why)
		done.evs, done.delivered = append(done.evs, deliveredEvent(notice, t.out().Key.Channel, posted)), true
		return t.complete(ctx, done)
	case ctx.Err() != nil || !errors.Is(err, ErrDeliveryFailed):
		return err // the turn stays open; the next attempt finds the notice stored
	default:
		return t.complete(ctx, abandoned(why+"; but the notice could not be delivered: "+shortError(err)))
	}
}

// abandoned is the outcome of an abandoned turn: an error, whose event says why (msg).
func abandoned(msg string) outcome {
	return outcome{status: session.StatusError, reason: session.ReasonAbandoned, evs: []session.NewEvent{{Type: session.TypeError,
		Actor: cellActor, Payload: session.ErrorEvent{Stage: "turn", Code: "abandoned", Message: msg}}}}
}
