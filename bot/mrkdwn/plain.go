package mrkdwn

import (
	"strconv"
	"strings"
	"time"
)

// Kinds of ID a Names lookup is asked about.
const (
	KindUser      = "user"      // "U0000001", "W0000001"
	KindChannel   = "channel"   // "C0000001"
	KindUsergroup = "usergroup" // "S0000001"
)

// Names resolves a Slack ID of the given kind (KindUser, KindChannel,
// KindUsergroup) to a display name without any "@" or "#" prefix. It returns
// "" when the name is unknown; the ID is then shown instead. A nil Names
// always falls back to IDs and labels.
type Names func(kind, id string) string

func (n Names) lookup(kind, id string) string {
	if n == nil {
		return ""
	}
	return n(kind, id)
}

// ToPlain decodes Slack-formatted message text (as it arrives in an event's
// text field) into plain text for the model, the transcript and search:
//
//	&amp; &lt; &gt;            → & < >        (no other entity is touched)
//	<@U123> / <@U123|ada>      → @DisplayName (names, else the label, else @U123)
//	<#C1|general> / <#C1>      → #general     (label, else names, else #C1)
//	<!here> <!channel> <!everyone> → @here @channel @everyone
//	<!subteam^S1|@team>        → @team        (label, else names, else @S1)
//	<!date^1700000000^{date_short}|Nov 14> → Nov 14 (fallback, else RFC 3339 UTC)
//	<https://x|docs>           → docs (https://x)
//	<https://x> / <https://x|https://x> → https://x
//	<mailto:a@b.c|a@b.c>       → a@b.c
//
// A "<" that does not open one of these is kept as it is. Formatting marks
// (*bold*, _italic_) are left in place: they read naturally as text.
func ToPlain(text string, names Names) string {
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '<')
		if j < 0 {
			b.WriteString(unescapeText(text[i:]))
			break
		}
		b.WriteString(unescapeText(text[i : i+j]))
		i += j
		tok, n := scanToken(text[i:])
		if n == 0 {
			b.WriteByte('<')
			i++
			continue
		}
		b.WriteString(tok.plain(names))
		i += n
	}
	return b.String()
}

func (t token) plain(names Names) string {
	label := unescapeText(t.label)
	switch t.target[0] {
	case '@':
		id := t.target[1:]
		return "@" + firstNonEmpty(names.lookup(KindUser, id), strings.TrimPrefix(label, "@"), id)
	case '#':
		id := t.target[1:]
		return "#" + firstNonEmpty(strings.TrimPrefix(label, "#"), names.lookup(KindChannel, id), id)
	case '!':
		word, arg, _ := strings.Cut(t.target[1:], "^")
		switch word {
		case "here", "channel", "everyone":
			return "@" + word
		case "subteam":
			id, _, _ := strings.Cut(arg, "^")
			return "@" + firstNonEmpty(strings.TrimPrefix(label, "@"), names.lookup(KindUsergroup, id), id)
		case "date":
			if label != "" {
				return label
			}
			ts, _, _ := strings.Cut(arg, "^")
			if sec, err := strconv.ParseInt(ts, 10, 64); err == nil {
				return time.Unix(sec, 0).UTC().Format(time.RFC3339)
			}
			return ts
		}
		return firstNonEmpty(label, word)
	}
	url := unescapeText(t.target)
	if addr, ok := strings.CutPrefix(url, "mailto:"); ok {
		if label == "" || label == addr || label == url {
			return addr
		}
		return label + " (" + addr + ")"
	}
	if label == "" || label == url || strings.TrimSuffix(label, "/") == strings.TrimSuffix(stripScheme(url), "/") {
		return url
	}
	return label + " (" + url + ")"
}

func stripScheme(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		return u[i+3:]
	}
	return u
}

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
		if n == 0 || tok.target != "@"+botUserID {
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
