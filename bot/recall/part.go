package recall

import (
	"context"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/part"
)

// Part offers each turn search_sessions over s, scoped to the session's channel.
func Part(s Searcher) part.Part {
	return part.Func(func(_ context.Context, sc part.Scope) (part.Offer, error) {
		return part.Offer{Tools: []brain.Tool{brain.SearchTool(s.For(sc.Session.Key.Channel), sc.Logger)}}, nil
	})
}
