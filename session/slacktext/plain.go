package slacktext

import (
	"cmp"
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

// Names resolves a Slack ID of the given kind (KindUser, KindChannel, KindUsergroup) to a
// display name without any "@" or "#" prefix. It returns "" when the name is unknown; the ID
// is then shown instead. A nil Names always falls back to IDs and labels.
type Names func(kind, id string) string

// Lookup is n(kind, id), or "" when n is nil.
func (n Names) Lookup(kind, id string) string {
	if n == nil {
		return ""
	}
	return n(kind, id)
}

// Map returns Names that looks user and channel ids up in m (Slack id -> display name, as
// a user_message captured them when it was stored). A nil or empty m gives nil Names.
func Map(m map[string]string) Names {
	if len(m) == 0 {
		return nil
	}
	return func(_, id string) string { return m[id] }
}

// ToPlain decodes Slack-formatted message text (as it arrives in an event's text field) into
// plain text for the model, the transcript and search:
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
// A "<" that does not open one of these is kept as it is. Formatting marks (*bold*,
// _italic_) are left in place: they read naturally as text.
func ToPlain(text string, names Names) string { return decode(text, names, Unescape) }

// Markup decodes the control sequences of text as ToPlain does and leaves everything else,
// entities included, as it is: for text whose entities were decoded already, which must not
// be decoded twice ("&amp;lt;" stays "&amp;lt;").
func Markup(text string, names Names) string {
	return decode(text, names, func(s string) string { return s })
}

func decode(text string, names Names, unescape func(string) string) string {
	if !strings.ContainsAny(text, "<&") {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '<')
		if j < 0 {
			b.WriteString(unescape(text[i:]))
			break
		}
		b.WriteString(unescape(text[i : i+j]))
		i += j
		tok, n := Scan(text[i:])
		if n == 0 {
			b.WriteByte('<')
			i++
			continue
		}
		b.WriteString(tok.plain(names, unescape))
		i += n
	}
	return b.String()
}

func (t Token) plain(names Names, unescape func(string) string) string {
	label := unescape(t.Label)
	switch t.Target[0] {
	case '@':
		id := t.Target[1:]
		return "@" + cmp.Or(names.Lookup(KindUser, id), strings.TrimPrefix(label, "@"), id)
	case '#':
		id := t.Target[1:]
		return "#" + cmp.Or(strings.TrimPrefix(label, "#"), names.Lookup(KindChannel, id), id)
	case '!':
		word, arg, _ := strings.Cut(t.Target[1:], "^")
		switch word {
		case "here", "channel", "everyone":
			return "@" + word
		case "subteam":
			id, _, _ := strings.Cut(arg, "^")
			return "@" + cmp.Or(strings.TrimPrefix(label, "@"), names.Lookup(KindUsergroup, id), id)
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
		return cmp.Or(label, word)
	}
	url := unescape(t.Target)
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

// Unescape decodes Slack's three entities (&amp; &lt; &gt;) and nothing else, in a single
// left-to-right pass, so "&amp;lt;" becomes "&lt;".
func Unescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] == '&' {
			switch {
			case strings.HasPrefix(s[i:], "&amp;"):
				b.WriteByte('&')
				i += 5
				continue
			case strings.HasPrefix(s[i:], "&lt;"):
				b.WriteByte('<')
				i += 4
				continue
			case strings.HasPrefix(s[i:], "&gt;"):
				b.WriteByte('>')
				i += 4
				continue
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

func stripScheme(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		return u[i+3:]
	}
	return u
}
