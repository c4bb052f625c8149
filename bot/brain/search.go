package brain

import (
	"context"
	"strings"

	"github.com/rs/zerolog"
)

// ToolSearchSessions searches past threads (SearchTool).
const ToolSearchSessions = "search_sessions"

// Searcher searches past sessions' transcripts and renders the hits as text for the model.
type Searcher interface {
	Search(ctx context.Context, query string, limit int) (string, error)
}

// SearchTool is search_sessions over s, a full-text search of past threads; a failed search
// is logged to log and told to the model without the database's words.
func SearchTool(s Searcher, log zerolog.Logger) Tool {
	return searchTool{s: s, log: log}
}

type searchTool struct {
	s   Searcher
	log zerolog.Logger
}

func (searchTool) Spec() ToolSpec {
	return ToolSpec{
		Name:        ToolSearchSessions,
		Description: "Full-text search of past conversations (other Slack threads) this bot took part in.",
		Schema: ObjectSchema(map[string]any{
			"query": Prop("string", "words to look for"),
			"limit": Prop("integer", "how many hits, default 5"),
		}, "query"),
	}
}

// Doing is the live view's status while a search runs.
func (searchTool) Doing(ToolUse) string { return "searching past threads" }

func (t searchTool) Run(ctx context.Context, use ToolUse) Outcome {
	var in struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if err := use.Decode(&in); err != nil {
		return Failure("%v", err)
	}
	if strings.TrimSpace(in.Query) == "" {
		return Failure("query is required")
	}
	limit := in.Limit
	if limit <= 0 || limit > 20 {
		limit = 5
	}
	s, err := t.s.Search(ctx, in.Query, limit)
	if err != nil {
		if ctx.Err() != nil {
			return Failure("search stopped: the turn ran out of time")
		}
		// The searcher's error is the database's: ids and SQL are for operators, not for the
		// model, which could quote them in the thread.
		t.log.Error().Err(err).Msg("search_sessions failed")
		return Failure("search failed; the error is recorded in the operator's log. Answer without it or try again later")
	}
	return Outcome{Content: nonEmpty(s, "no matches")}
}
