package settings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

// Part is the channel's settings in each turn: its instructions in the system prompt, and the
// settings the turn runs under in its turn_settings record. (The model, the approvals policy
// and the thread-replies mode are applied by the turn itself, which records their effective
// values.)
func Part() part.Part { return part.Func(offer) }

func offer(_ context.Context, s part.Scope) (part.Offer, error) {
	ch := s.Channel
	if ch == nil {
		return part.Offer{}, nil
	}
	var o part.Offer
	o.Guidance.Instructions = ch.Value(Instructions)
	o.Settings = func(rec *session.TurnSettings) {
		rec.Instructions, rec.Approvals = ch.Value(Instructions), ch.Value(Approvals)
		rec.DailyBudget, rec.Setup = ch.Value(DailyBudget), ch.Value(Setup)
		for _, n := range Names {
			if _, ok := ch.Record(n); ok {
				rec.Set = append(rec.Set, n)
			}
		}
		if c, ok := ch.(Channel); ok && c.ledger.Seq > 0 {
			rec.LedgerSeq, rec.LedgerHash = c.ledger.Seq, hex.EncodeToString(c.ledger.Hash)
		}
	}
	return o, nil
}

var cellActor = session.Actor{Kind: session.ActorSystem, ID: "cell"}

// RecordTurn appends turn_settings rec, unless the session's latest one has the same hash: a
// turn with no turn_settings of its own ran under the latest one before it, so an unchanged
// channel costs no append per turn and the log still says, for every reply, which settings
// produced it.
func RecordTurn(ctx context.Context, log part.Log, rec session.TurnSettings) error {
	rec.Hash = turnHash(rec)
	for _, e := range slices.Backward(session.Select(log.Snapshot(), session.Range{Types: []session.Type{session.TypeTurnSettings}})) {
		var prev session.TurnSettings
		if e.Decode(&prev) == nil && prev.Hash == rec.Hash {
			return nil
		}
		break
	}
	_, err := log.Append(ctx, session.NewEvent{Type: session.TypeTurnSettings, Actor: cellActor, Payload: rec})
	return err
}

// turnHash is the sha256 (hex) of rec without its turn and hash: the same settings give the
// same hash in every turn.
func turnHash(rec session.TurnSettings) string {
	rec.Turn, rec.Hash = 0, ""
	b, _ := json.Marshal(rec)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
