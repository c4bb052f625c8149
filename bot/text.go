package bot

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session/slacktext"
)

var userMention = regexp.MustCompile(`<@([UW][A-Z0-9]+)(?:\|[^>]*)?>`)

// readable turns a message's Slack text (or, when the text is empty, its blocks) into the
// text the model and the transcript read: escapes decoded, the bot's own mention removed,
// other mentions shown by display name. It returns that text, the raw Slack text, and the
// display names it used, captured now so a later rename does not rewrite history.
func (g *Gateway) readable(ctx context.Context, text string, blocks slack.Blocks) (string, string, map[string]string) {
	names := map[string]string{}
	lookup := func(kind, id string) string {
		switch kind {
		case "user":
			if n, ok := names[id]; ok {
				return n
			}
			n := g.dir.UserName(ctx, id)
			names[id] = n
			return n
		case "channel":
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if k, err := g.dir.Channel(cctx, id); err == nil {
				return k.Name
			}
		}
		return ""
	}
	raw := text
	src := mrkdwn.StripBotMention(text, g.me.UserID)
	var plain string
	if strings.TrimSpace(text) == "" && len(blocks.BlockSet) > 0 {
		if b, err := json.Marshal(blocks); err == nil {
			if s, err := mrkdwn.BlocksText(b, lookup); err == nil {
				plain = slacktext.ToPlain(mrkdwn.StripBotMention(s, g.me.UserID), lookup)
			}
		}
	} else {
		plain = slacktext.ToPlain(src, lookup)
	}
	if g.me.UserID != "" {
		delete(names, g.me.UserID)
	}
	for _, m := range userMention.FindAllStringSubmatch(raw, -1) {
		if m[1] != g.me.UserID {
			lookup("user", m[1])
		}
	}
	if len(names) == 0 {
		names = nil
	}
	return strings.TrimSpace(plain), raw, names
}
