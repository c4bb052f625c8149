package fork_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/bot/fork"
	"github.com/logbook/logbook/session"
)

// events is a Store over a fixed log (only Events is asked).
type events struct {
	fork.Store
	evs []session.Event
}

func (e events) Events(context.Context, session.ID, session.Range) ([]session.Event, error) {
	return e.evs, nil
}

// A message maps to the event that recorded it (a person's user_message, the delivered record
// of a reply, any of a reply's posted parts); one the log does not name to the newest event at
// or before its time; one before every event to none.
func TestSeqAtIsTheNewestEventAtOrBeforeTheMessage(t *testing.T) {
	t.Parallel()
	at := func(sec int64) time.Time { return time.Unix(sec, 500_000_000) }
	payload := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	log := events{evs: []session.Event{
		{Seq: 1, Type: session.TypeUserMessage, CreatedAt: at(1700000000), Payload: payload(session.UserMessage{TS: "1700000000.000100"})},
		{Seq: 2, Type: session.TypeAssistantMessage, CreatedAt: at(1700000005), Payload: payload(session.AssistantMessage{Text: "hi"})},
		{Seq: 3, Type: session.TypeDelivered, CreatedAt: at(1700000006), Payload: payload(session.Delivered{TS: []string{"1700000006.000100", "1700000006.000200"}})},
		{Seq: 4, Type: session.TypeTurnCompleted, CreatedAt: at(1700000007), Payload: payload(map[string]any{})},
		{Seq: 5, Type: session.TypeUserMessage, CreatedAt: at(1700000020), Payload: nil}, // purged
	}}
	for _, c := range []struct {
		ts   string
		want int64
	}{
		{"1700000000.000100", 1},
		{"1700000006.000100", 3},
		{"1700000006.000200", 3},
		{"1700000010.000000", 4}, // someone's message the log does not name
		{"1700000030.000000", 5},
		{"1600000000.000000", 0},
		{"not-a-ts", 0},
	} {
		got, err := fork.SeqAt(context.Background(), log, uuid.UUID{}, c.ts)
		if err != nil || got != c.want {
			t.Errorf("SeqAt(%s) = %d, %v; want %d", c.ts, got, err, c.want)
		}
	}
}
