package mrkdwn

import (
	"strings"

	"github.com/logbook/logbook/session/slacktext"
)

// Kinds of ID a Names lookup is asked about (see slacktext).
const (
	KindUser      = slacktext.KindUser      // "U0000001", "W0000001"
	KindChannel   = slacktext.KindChannel   // "C0000001"
	KindUsergroup = slacktext.KindUsergroup // "S0000001"
)

// Names resolves a Slack ID of the given kind (KindUser, KindChannel,
// KindUsergroup) to a display name without any "@" or "#" prefix; see
// slacktext.Names.
type Names = slacktext.Names

func lookup(n Names, kind, id string) string {
	if n == nil {
		return ""
	}
	return n(kind, id)
}

// ToPlain decodes Slack-formatted message text into plain text for the
// model, the transcript and search. It is slacktext.ToPlain, the one decoder
// of Slack markup, which session's readers use too.
func ToPlain(text string, names Names) string { return slacktext.ToPlain(text, names) }

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// StripBotMention removes every mention of botUserID ("<@UB1>" or
// "<@UB1|name>") from Slack-formatted text, before ToPlain. A leading mention
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
		tok, n := scanToken(text[i:])
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
