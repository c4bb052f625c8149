// Package recall is the search of past threads, scoped the same way wherever it is asked:
// /logbook search, and the agent's search_sessions tool (brain.SearchTool over a Searcher).
package recall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session/search"
)

// Visibility is what every surface that shows logged content must know of a channel now
// (Directory has it: conversations.info, cached). A channel whose answer cannot be had counts
// as private and as shared: its content is hidden, and search from it stays inside it.
type Visibility interface {
	// ChannelPrivate reports whether the channel is no longer a public channel.
	ChannelPrivate(ctx context.Context, channel string) (bool, error)
	// ChannelExtShared reports whether the channel is shared with another organisation
	// (Slack Connect: conversations.info is_ext_shared).
	ChannelExtShared(ctx context.Context, channel string) (bool, error)
}

// Search scope, the same for /logbook search and the agent's search_sessions tool:
//
//   - every hit is re-checked against the channel's current visibility: a channel made
//     private after it was logged (or whose visibility cannot be learnt) shows nothing, as
//     on the web pages for non-auditors;
//   - in an internal public channel, search covers every public channel of the workspace;
//   - in an externally shared channel (Slack Connect), search covers that channel only,
//     whoever asks: the agent's answer is read by both organisations, and a person of the
//     other organisation must not get the company's other channels;
//   - a person whose team is not the workspace's (slash command team_id) gets results from the
//     channel they ask in only, wherever that is;
//   - the CLI (`logbook search`) is an operator's tool and is not scoped (its --help says so).
//
// scopeChannel returns the only channel a search from channel may cover, or "" for every
// public channel.
func scopeChannel(ctx context.Context, vis Visibility, channel string, external bool) string {
	if external {
		return channel
	}
	if vis == nil || channel == "" {
		return ""
	}
	shared, err := vis.ChannelExtShared(ctx, channel)
	if err != nil || shared {
		return channel
	}
	return ""
}

// visibleSearch runs q and keeps the hits whose channel is public now, at most limit.
func visibleSearch(ctx context.Context, s *search.Searcher, vis Visibility, q search.Query, limit int) ([]search.Hit, error) {
	q.Limit = min(max(limit*4, limit), search.MaxLimit) // room for hits that are dropped
	hits, err := s.Search(ctx, q)
	if err != nil || vis == nil {
		if len(hits) > limit {
			hits = hits[:limit]
		}
		return hits, err
	}
	private := map[string]bool{}
	out := hits[:0]
	for _, h := range hits {
		p, ok := private[h.Channel]
		if !ok {
			var err error
			p, err = vis.ChannelPrivate(ctx, h.Channel)
			p = p || err != nil
			private[h.Channel] = p
		}
		if !p {
			out = append(out, h)
		}
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// Searcher gives each session's turn the agent's search_sessions tool, scoped to the
// session's channel (see scopeChannel).
type Searcher interface {
	For(channel string) brain.Searcher
}

// New is the agent's search over past threads: it renders visible, scoped search hits as
// text for the model. vis nil: hits are not re-checked and no channel counts as shared
// (tests only; serve passes its Directory).
func New(s *search.Searcher, vis Visibility) Searcher { return searchTool{s: s, vis: vis} }

type searchTool struct {
	s       *search.Searcher
	vis     Visibility
	channel string
}

func (b searchTool) For(channel string) brain.Searcher {
	b.channel = channel
	return b
}

func (b searchTool) Search(ctx context.Context, query string, limit int) (string, error) {
	only := scopeChannel(ctx, b.vis, b.channel, false)
	hits, err := visibleSearch(ctx, b.s, b.vis, search.Query{Text: query, Channel: only}, limit)
	if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		if only != "" {
			return "no past sessions of this channel match (this channel is shared with another organisation: search covers it alone)", nil
		}
		return "no past sessions match", nil
	}
	var sb strings.Builder
	if only != "" {
		sb.WriteString("(this channel is shared with another organisation: only its own sessions are searched)\n")
	}
	for i, h := range hits {
		fmt.Fprintf(&sb, "%d. session %s (#%s, %s, %s): %s\n", i+1, h.SessionID, h.Channel,
			h.CreatedAt.UTC().Format(time.RFC3339), h.ActorName, h.SnippetText("", ""))
	}
	return sb.String(), nil
}

// Command is /logbook search: at most 5 visible hits, scoped as the agent's (see
// scopeChannel). vis nil: no re-check (tests only).
func Command(s *search.Searcher, vis Visibility) slashcmd.Command {
	return slashcmd.Command{Name: "search", Who: slashcmd.Anyone,
		Usage: "`/logbook search <words>` finds past threads in public channels (quotes for phrases, -word to exclude, OR); in a channel shared with another organisation, only that channel's.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			return searchCommand(ctx, s, vis, c.ChannelID, c.External, c.Args)
		}}
}

// searchCommand is /logbook search's answer: at most 5 visible hits of words, from channel
// (external: asked by a person of another organisation).
func searchCommand(ctx context.Context, s *search.Searcher, vis Visibility, channel string, external bool, words string) string {
	if words == "" {
		return searchUsage
	}
	only := scopeChannel(ctx, vis, channel, external)
	hits, err := visibleSearch(ctx, s, vis, search.Query{Text: words, Channel: only}, 5)
	if errors.Is(err, search.ErrInvalidQuery) {
		return "That search did not parse: " + err.Error()
	}
	if err != nil {
		return "Search is unavailable right now."
	}
	var sb strings.Builder
	if only != "" {
		sb.WriteString("_Only this channel's threads are searched here._\n")
	}
	if len(hits) == 0 {
		sb.WriteString("No past threads match “" + words + "”.")
		return sb.String()
	}
	for _, h := range hits {
		link := h.Permalink
		if link == "" {
			link = "session " + h.SessionID.String()
		}
		fmt.Fprintf(&sb, "• %s — %s\n", h.SnippetText("*", "*"), link)
	}
	return sb.String()
}

// searchUsage answers /logbook search without words.
const searchUsage = "Say what to look for: `/logbook search <words>` (quotes for a phrase, -word to exclude, OR between alternatives), " +
	"e.g. `/logbook search deploy timeout`."
