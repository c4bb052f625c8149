package checkout

import (
	"context"

	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

// Workspace is what the turn gets of the session's sandbox here (hands.Hands): the channel's
// setup, run once in a new sandbox, and the instruction files of its checkout.
type Workspace interface {
	// Ready provisions the sandbox now when the channel has a setup command, so that the
	// setup runs before the first model call; note is what the thread should be told (a
	// failed setup), once.
	Ready(ctx context.Context) (note string, err error)
	// Instructions is the checkout's instruction file, read again each turn.
	Instructions(ctx context.Context) (Instructions, error)
	// NestedInstructions is the instruction files of the directories of files the agent
	// touched in the session (evs), nearest first.
	NestedInstructions(ctx context.Context, evs []session.Event) []Instructions
}

// Part runs the channel's setup before the turn's first model call (a failure goes under the
// reply) and gives the system prompt the repository's instruction files, recording their
// paths and hashes in turn_settings. What cannot be read or provisioned now is logged and
// left out: the first tool call provisions the sandbox, and says so to the model if it cannot.
func Part() part.Part { return part.Func(offer) }

func offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	w, ok := s.Hands.(Workspace)
	if !ok {
		return part.Offer{}, nil
	}
	var o part.Offer
	if note, err := w.Ready(ctx); err != nil {
		s.Logger.Warn().Err(err).Msg("setup: could not provision the sandbox before the model call")
	} else if note != "" {
		o.Notes = append(o.Notes, note)
	}
	r, err := w.Instructions(ctx)
	if err != nil {
		s.Logger.Warn().Err(err).Msg("the repository's instruction file could not be read: the turn goes without it")
	}
	o.Guidance.Repo = r.RepoInstructions
	var nested []string
	for _, n := range w.NestedInstructions(ctx, s.Log.Snapshot()) {
		o.Guidance.Nested = append(o.Guidance.Nested, n.RepoInstructions)
		nested = append(nested, n.Path+"@"+n.Hash)
	}
	if r.Path != "" || len(nested) > 0 {
		o.Settings = func(rec *session.TurnSettings) {
			rec.RepoInstructions, rec.RepoInstructionsHash = r.Path, r.Hash
			rec.NestedInstructions = append(rec.NestedInstructions, nested...)
		}
	}
	return o, nil
}
