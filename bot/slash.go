package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/session/search"
)

// SearchTool is the agent's search_sessions tool over past threads: it renders search hits
// as text for the model.
func SearchTool(s *search.Searcher) brain.Searcher { return searchTool{s} }

type searchTool struct{ s *search.Searcher }

func (b searchTool) Search(ctx context.Context, query string, limit int) (string, error) {
	hits, err := b.s.Search(ctx, search.Query{Text: query, Limit: limit})
	if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		return "no past sessions match", nil
	}
	var sb strings.Builder
	for i, h := range hits {
		fmt.Fprintf(&sb, "%d. session %s (#%s, %s, %s): %s\n", i+1, h.SessionID, h.Channel,
			h.CreatedAt.UTC().Format(time.RFC3339), h.ActorName, h.SnippetText("", ""))
	}
	return sb.String(), nil
}

// SlashCommands answers /logbook: help, search and transcript.
func SlashCommands(s *search.Searcher) SlashHandler {
	return func(ctx context.Context, cmd slack.SlashCommand) string {
		sub, rest, _ := strings.Cut(strings.TrimSpace(cmd.Text), " ")
		switch sub {
		case "search":
			rest = strings.TrimSpace(rest)
			hits, err := s.Search(ctx, search.Query{Text: rest, Limit: 5})
			if errors.Is(err, search.ErrInvalidQuery) {
				return "That search did not parse: " + err.Error()
			}
			if err != nil {
				return "Search is unavailable right now."
			}
			if len(hits) == 0 {
				return "No past threads match “" + rest + "”."
			}
			var sb strings.Builder
			for _, h := range hits {
				link := h.Permalink
				if link == "" {
					link = "session " + h.SessionID.String()
				}
				fmt.Fprintf(&sb, "• %s — %s\n", h.SnippetText("*", "*"), link)
			}
			return sb.String()
		case "transcript":
			return "Slack does not tell a slash command which thread it was typed in: on any message of the thread, " +
				"open its ⋯ menu and choose *Open transcript* (a message shortcut), or open the thread's page on logbook's web pages."
		default:
			return "logbook — an agent whose every thread is a searchable record.\n" +
				"• Mention @" + "logbook in a public channel to start a thread; reply in the thread to continue.\n" +
				"• `/logbook search <words>` finds past threads (quotes for phrases, -word to exclude, OR).\n" +
				"• `/logbook transcript` links this thread's transcript.\n" +
				"Private channels and DMs are never stored."
		}
	}
}
