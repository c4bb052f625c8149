package webhooks

import (
	"context"
	"fmt"

	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/session"
)

// LetterStore is what a redelivery reads and records (*session.Store).
type LetterStore interface {
	Store
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
	DeadLetters(ctx context.Context, f session.DeadLetterFilter) ([]session.DeadLetter, error)
	DeadLetterRedelivered(ctx context.Context, id int64, ok bool, lastError string) error
}

// Redelivery is the outcome of one dead letter's redelivery.
type Redelivery struct {
	Letter session.DeadLetter
	Err    error // nil: delivered
}

// Redeliver sends the dead letters f selects again, each to its webhook of ws, its body made
// again from the log (so a payload purged since is not sent) with its original webhook-id, and
// records each outcome. A letter whose webhook is no longer configured fails with a clear
// error. The returned error is a failure to list the letters.
func Redeliver(ctx context.Context, store LetterStore, ws map[string]Webhook, f session.DeadLetterFilter, o Options) ([]Redelivery, error) {
	o.defaults()
	letters, err := store.DeadLetters(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]Redelivery, 0, len(letters))
	for _, d := range letters {
		err := redeliverOne(ctx, store, ws, d, o)
		if rerr := store.DeadLetterRedelivered(ctx, d.ID, err == nil, errText(err)); rerr != nil && err == nil {
			err = rerr
		}
		out = append(out, Redelivery{Letter: d, Err: err})
	}
	return out, nil
}

func redeliverOne(ctx context.Context, store LetterStore, ws map[string]Webhook, d session.DeadLetter, o Options) error {
	w, ok := ws[d.Sink]
	if !ok {
		return fmt.Errorf("no webhook %q in LOGBOOK_WEBHOOKS", d.Sink)
	}
	evs, err := store.Events(ctx, d.Session, session.Range{From: d.Seq, To: d.Seq})
	if err != nil {
		return err
	}
	if len(evs) != 1 {
		return fmt.Errorf("event %d of session %s is not in the log", d.Seq, d.Session)
	}
	sess, err := store.Session(ctx, d.Session)
	if err != nil {
		return err
	}
	typ, ok := TypeOf(evs[0])
	if !ok {
		typ = d.WebhookType
	}
	body, err := Body(w, typ, evs[0], Place{Channel: sess.Key.Channel, ThreadTS: sess.Key.ThreadTS}, o.PublicURL)
	if err != nil {
		return err
	}
	return Post(ctx, o.Client, w, stream.ID(evs[0]), body, o.Now(), o.Timeout)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
