package bot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
	"github.com/rs/zerolog"
)

// leftovers removes what dead or fenced cells left of a turn in its thread — live messages the
// log names but no cell finished, messages the log does not name — and records each removal.
// A turn takes them up before it goes on (turn.recoverLive), and after a delivery whose
// record was refused (turn.unpost).
type leftovers struct {
	d       *Deliverer
	flog    *cellLog
	clock   Clock
	log     zerolog.Logger
	sess    session.Session
	turnSeq int64
	botUser string
}

// leftoversOf is the leftovers of turn t.
func leftoversOf(t *turn) leftovers {
	return leftovers{d: t.deliverer, flog: t.flog, clock: t.clock, log: t.log, sess: t.out(), turnSeq: t.state.turnSeq, botUser: t.cfg.Where.BotUserID}
}

// appendRecords appends evs, the records of removed orphans, when there are any. With the
// turn's live messages left open (a delivered turn's), their streams are stopped first.
func (l leftovers) appendRecords(ctx context.Context, keep []thread.LiveMessage, evs []session.NewEvent) error {
	for _, m := range keep {
		if err := l.stopLive(ctx, m.TS, m.Open && m.Mode == "stream"); err != nil {
			return err
		}
	}
	if len(evs) == 0 {
		return nil
	}
	_, err := l.flog.Append(ctx, evs...)
	return err
}

// removeOrphans removes the bot's messages of this turn that the log does not name (known:
// more of this cell's own), and records them (found, then deleted): a cell killed, or fenced, between
// Slack's answer and its record leaves such a message, after the message this turn answers
// (not after the newest: one written after it — the person saw the reply begin — would hide
// it). They are never taken over, only removed: a cell that lost its lease while alive
// removes the message it could not record too (liveView.fenceOut), so both sides agree and
// the thread shows one reply. searched says the thread was searched: a reply posted after
// that is not looked for again by metadata (a fenced cell's post may be going away).
func (l leftovers) removeOrphans(ctx context.Context, known ...string) (searched bool, err error) {
	channel := l.sess.Key.Channel
	s := orphanSearch{d: l.d, clock: l.clock, flog: l.flog, channel: channel, thread: l.sess.Key.ThreadTS,
		turnSeq: l.turnSeq, botUser: l.botUser}
	orphans, searched, err := s.find(ctx, known...)
	if err != nil {
		return false, fmt.Errorf("live view: %w; the turn is left for a later attempt", err)
	}
	if !searched {
		l.log.Warn().Msg("live view: the thread cannot be searched for messages a dead cell left; going on")
	}
	if len(orphans) == 0 {
		return searched, nil
	}
	// The orphans are recorded before anything is deleted: an append refused as fenced stops
	// a cell that no longer owns the session before it removes a message of the new owner's.
	var found []session.NewEvent
	for _, o := range orphans {
		found = append(found, session.NewEvent{Type: session.TypeStreamStarted, Actor: deliveryActor, IdempotencyKey: "stream/" + o.TS,
			Payload: session.StreamStarted{Turn: l.turnSeq, Channel: channel, TS: o.TS, Mode: "found"}})
	}
	if err := appendSure(ctx, l.flog, l.clock, found...); err != nil {
		return searched, fmt.Errorf("record the turn's messages the log did not name: %w", err)
	}
	// Every orphan is tried, whatever became of the others; each delete that happened is
	// recorded, whatever failed after it.
	var evs []session.NewEvent
	var errs []error
	for _, o := range orphans {
		// It may be a stream or a post: a stop is only tried (a stream still streaming cannot
		// be deleted), the delete must succeed.
		if err := l.stopLive(ctx, o.TS, true); err != nil {
			l.log.Debug().Err(err).Str("ts", o.TS).Msg("live view: stop a message the log does not name")
		}
		if err := l.deleteLive(ctx, o.TS); err != nil {
			errs = append(errs, err) // named now (found): a later attempt finishes or removes it
			continue
		}
		evs = append(evs, streamStopped(o.TS, session.StreamDeleted, 0))
	}
	l.log.Info().Int("removed", len(evs)).Int("left", len(errs)).Msg("live view: removed the turn's messages the log did not name")
	// Recorded here, not by the caller: the found records are in the log already, and a
	// caller reading the turn's live messages must see these ones deleted.
	if err := l.recordRemoved(ctx, evs); err != nil {
		errs = append(errs, err)
	}
	return searched, errors.Join(errs...)
}

// recordRemoved appends evs, the records of messages removed from the thread, when there are
// any. A delete that happened is recorded whatever comes after it: a later step that fails,
// the turn's context ending (the append outlives it, with its own timeout, and is tried again
// while the answer is neither success nor a refusal).
func (l leftovers) recordRemoved(ctx context.Context, evs []session.NewEvent) error {
	if len(evs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := appendSure(ctx, l.flog, l.clock, evs...); err != nil {
		return fmt.Errorf("record %d messages removed from the thread: %w", len(evs), err)
	}
	return nil
}

// stopLive stops the stream of live message ts, when stream says it may still stream.
// Best-effort: a stream Slack already closed (or a message that is no stream) is fine.
func (l leftovers) stopLive(ctx context.Context, ts string, stream bool) error {
	if !stream {
		return nil
	}
	err := l.d.call(ctx, "chat.stopStream", func() error {
		_, _, err := l.d.api.StopStreamContext(ctx, l.sess.Key.Channel, ts)
		return err
	})
	if err != nil && !streamClosed(err) && !isSlackErr(err, "message_not_found") && !isSlackErr(err, "stopped_by_user") &&
		!errors.Is(err, errUnavailable) && !isSlackErr(err, "cant_update_message") {
		return fmt.Errorf("stop live message %s: %w", ts, err)
	}
	return nil
}

// deleteLive removes live message ts (one already gone is fine).
func (l leftovers) deleteLive(ctx context.Context, ts string) error {
	if err := l.d.call(ctx, "chat.delete", func() error {
		_, _, err := l.d.api.DeleteMessageContext(ctx, l.sess.Key.Channel, ts)
		return err
	}); err != nil && !isSlackErr(err, "message_not_found") {
		return fmt.Errorf("remove live message %s: %w", ts, err)
	}
	return nil
}
