package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/brain"
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

// SearchTool is the agent's search_sessions tool over past threads: it renders visible,
// scoped search hits as text for the model. vis nil: hits are not re-checked and no channel
// counts as shared (tests only; serve passes its Directory).
func SearchTool(s *search.Searcher, vis Visibility) Searcher { return searchTool{s: s, vis: vis} }

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

// SlashCommands answers /logbook: help, search, transcript and repo. Search results are
// scoped and re-checked as the agent's (see scopeChannel); team is the workspace's team id, to
// tell people of other organisations. vis nil: no re-check (tests only). repos and admins are
// for /logbook repo (nil repos: no repositories).
func SlashCommands(s *search.Searcher, vis Visibility, team string, repos *ChannelRepos, admins []string) SlashHandler {
	return func(ctx context.Context, cmd slack.SlashCommand) string {
		sub, rest, _ := strings.Cut(strings.TrimSpace(cmd.Text), " ")
		switch sub {
		case "repo":
			if team != "" && cmd.TeamID != "" && cmd.TeamID != team {
				return "Only people of this workspace's organisation may see or set a channel's repository."
			}
			return repoCommand(ctx, repos, admins, cmp.Or(cmd.TeamID, team), cmd.ChannelID, cmd.UserID, rest)
		case "search":
			rest = strings.TrimSpace(rest)
			if rest == "" {
				return searchUsage
			}
			external := team != "" && cmd.TeamID != "" && cmd.TeamID != team
			only := scopeChannel(ctx, vis, cmd.ChannelID, external)
			hits, err := visibleSearch(ctx, s, vis, search.Query{Text: rest, Channel: only}, 5)
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
				sb.WriteString("No past threads match “" + rest + "”.")
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
		case "transcript":
			return "Slack does not tell a slash command which thread it was typed in: on any message of the thread, " +
				"open its ⋯ menu and choose *Open transcript* (a message shortcut), or open the thread's page on logbook's web pages."
		case "", "help":
			return slashHelp
		default:
			return "There is no `/logbook " + cutCommand(sub) + "`: type `/logbook help`, `/logbook search <words>`, " +
				"`/logbook repo`, `/logbook schedule` or `/logbook transcript`.\n" + slashHelp
		}
	}
}

// searchUsage answers /logbook search without words.
const searchUsage = "Say what to look for: `/logbook search <words>` (quotes for a phrase, -word to exclude, OR between alternatives), " +
	"e.g. `/logbook search deploy timeout`."

// cutCommand is an unknown subcommand as the answer names it: at most 40 characters, shown
// as typed inside a code span (no backtick to end it, Slack's &, < and > escaped).
func cutCommand(sub string) string {
	if r := []rune(sub); len(r) > 40 {
		sub = string(r[:40]) + "…"
	}
	return strings.NewReplacer("`", "'", "&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(sub)
}

// slashHelp answers /logbook and /logbook help.
const slashHelp = "logbook — an agent whose every thread is a searchable record.\n" +
	"• Mention @" + "logbook in a public channel to start a thread; reply in the thread to continue.\n" +
	"• `/logbook search <words>` finds past threads in public channels (quotes for phrases, -word to exclude, OR); in a channel shared with another organisation, only that channel's.\n" +
	"• *Open transcript* in the ⋯ menu of any message of a thread links that thread's transcript.\n" +
	"• `stop` in a thread (or the 🛑 reaction, or the stop button) stops a running answer; `mute` / `unmute` silence and resume me there.\n" +
	"• `/logbook mcp` lists the MCP servers and tools offered in this channel, and whether each is reachable.\n" +
	"• `/logbook repo` says which repository this channel's sandboxes check out; an admin sets it with `/logbook repo <https-url> [branch]` or `off`.\n" +
	"Private channels and DMs are never stored."
