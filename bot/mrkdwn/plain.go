package mrkdwn

import (
	"strings"

	"github.com/logbook/logbook/session/slacktext"
)

// StripBotMention removes every mention of botUserID ("<@UB1>" or
// "<@UB1|name>") from Slack-formatted text, before slacktext.ToPlain. A leading mention
// takes the ":" or "," and spaces after it with it ("<@UB1>: deploy" →
// "deploy"); the result is trimmed of surrounding white space. It returns ""
// when the text was only the mention: the caller must not send that to a
// model as an empty turn.
func StripBotMention(text, botUserID string) string {
	if botUserID == "" {
		return strings.TrimSpace(text)
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '<')
		if j < 0 {
			b.WriteString(text[i:])
			break
		}
		b.WriteString(text[i : i+j])
		i += j
		tok, n := slacktext.Scan(text[i:])
		if n == 0 || tok.Target != "@"+botUserID {
			if n == 0 {
				n = 1
			}
			b.WriteString(text[i : i+n])
			i += n
			continue
		}
		i += n
		sofar := b.String()
		if strings.TrimSpace(sofar) == "" {
			rest := strings.TrimLeft(text[i:], " \t")
			if rest != "" && (rest[0] == ':' || rest[0] == ',') {
				rest = rest[1:]
			}
			i = len(text) - len(strings.TrimLeft(rest, " \t"))
		} else if strings.HasSuffix(sofar, " ") {
			i = len(text) - len(strings.TrimLeft(text[i:], " \t"))
		}
	}
	return strings.TrimSpace(b.String())
}
