package main

import (
	"context"
	"strings"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/apphome"
	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/canvas"
	"github.com/logbook/logbook/bot/checkout"
	"github.com/logbook/logbook/bot/codechannel"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/bot/feedback"
	"github.com/logbook/logbook/bot/files"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/fork"
	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/recall"
	"github.com/logbook/logbook/bot/review"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
)

// turnParts are the turn's optional parts (bot/part), one a line, in the order their tools
// are offered to the model; toolNames names their tools.
func (w *wiring) turnParts(fileStore *filestore.Store, mem *memory.Memory, bgt *budget.Budget, mcp *connectors.Connectors) []part.Part {
	parts := []part.Part{&files.Attach{Slack: w.api, Store: fileStore, Max: w.cfg.FileMax}}
	parts = append(parts, recall.Part(recall.New(w.search, w.dir)))
	if gh := pullRequests(w.cfg); gh != nil {
		parts = append(parts, &forge.Pulls{Forge: gh, Repo: w.repos.OnForge, Follow: followupFeature(w.follow), Transcript: w.transcriptURL,
			People: w.person})
		parts = append(parts, w.reviewPart())
	}
	parts = append(parts, &files.Shared{Fetcher: files.NewFetcher(w.api, files.FetchConfig{Max: w.cfg.FileMax}), Store: fileStore})
	parts = append(parts, &canvas.Part{Slack: w.api})
	parts = append(parts, mem.Part())
	if mcp != nil {
		parts = append(parts, mcp.Part(w.dir.ChannelName))
	}
	parts = append(parts, &codechannel.Part{Slack: w.api, Commands: w.slash.AgentCommands(), Spend: w.sessionSpend})
	return append(parts, checkout.Part(), settings.Part(), bgt.Part())
}

// sessionSpend is a session's model spend at the deployment's prices, for its code channel's
// context bar ("" when no call was priced).
func (w *wiring) sessionSpend(evs []session.Event) string {
	var total budget.Money
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeAssistantMessage}}) {
		var m session.AssistantMessage
		if e.Decode(&m) != nil || m.Usage == nil {
			continue
		}
		if p, ok := w.cfg.Budget.Prices.For(m.Usage.Provider, m.Usage.Model); ok {
			total += p.Cost(budget.Usage{Input: m.Usage.InputTokens, Output: m.Usage.OutputTokens,
				CacheRead: m.Usage.CacheReadTokens, CacheWrite: m.Usage.CacheWriteTokens})
		}
	}
	if total == 0 {
		return ""
	}
	return strings.TrimSpace(w.cfg.Budget.Prices.Currency + " " + total.String() + " spent")
}

// surfaces answer Slack outside a turn (bot.Surface): message shortcuts, buttons of their own,
// events such as app_home_opened — one a line, in the order the gateway offers them an envelope.
func (w *wiring) surfaces(store *session.Store) []bot.Surface {
	var s []bot.Surface
	s = append(s, &fork.Surface{Forker: w.forker(store), Dir: w.dir, Members: w.api, Log: w.log.With().Str("part", "fork").Logger()})
	s = append(s, &feedback.Surface{Store: w.deps.Store, Privacy: w.dir, Log: w.log.With().Str("part", "feedback").Logger()})
	s = append(s, &apphome.Surface{Store: w.deps.Store, Slack: w.api, Privacy: w.dir, Currency: w.cfg.Budget.Prices.Currency,
		Link: w.transcriptURL, Log: w.log.With().Str("part", "apphome").Logger()})
	return s
}

// forker starts forks (bot/fork): posted with the bot's token, linked with chat.getPermalink.
func (w *wiring) forker(store *session.Store) *fork.Forker {
	return &fork.Forker{Store: store, Starter: bot.NewStarter(w.api, store, func(session.ID) {}, w.me.TeamID), Link: fork.SlackLink(w.api)}
}

// replyActions are the actions under each reply the model wrote (the engine's
// DeliveryConfig.Actions): Slack's 👍/👎, whose clicks the feedback surface records.
func replyActions() bot.DeliveryConfig {
	return bot.DeliveryConfig{Actions: feedback.Buttons}
}

// toolNames is every tool an approvals policy may name: the brain's and the turn parts'.
func toolNames() []string {
	return append(brain.ToolNames(), files.ToolAttach, forge.ToolPullRequest, memory.ToolRemember, review.ToolDiff, review.ToolFinding, review.ToolSubmit)
}

// person is who a Slack user is, for what the agent ships on their behalf (forge.Pulls.People).
func (w *wiring) person(ctx context.Context, user string) (name, email string, err error) {
	p, err := w.dir.Person(ctx, user)
	return p.Name, p.Email, err
}

// transcriptURL is a session's transcript link ("" without LOGBOOK_PUBLIC_URL).
func (w *wiring) transcriptURL(id session.ID) string {
	if w.cfg.Footer.PublicURL == "" {
		return ""
	}
	return bot.TranscriptURL(w.cfg.Footer.PublicURL, id)
}
