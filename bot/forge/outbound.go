package forge

import (
	"regexp"
	"strings"
)

// mentionRE is a GitHub @mention (a user or a team).
var mentionRE = regexp.MustCompile(`@([A-Za-z0-9])`)

// atEntityRE is an HTML character reference for "@" (&#64;, &#x40;, &commat;): GitHub decodes
// it before it looks for mentions.
var atEntityRE = regexp.MustCompile(`(?i)&(#0*64;|#x0*40;|commat;)`)

// Outbound is the model's text as GitHub gets it (a review, a pull request's title and body):
// no @mention pings anyone (a zero-width space after the @; an @ written as an HTML character
// reference is shown as written), and no marker of logbook's (an
// HTML comment) can be forged.
func Outbound(s string) string {
	s = atEntityRE.ReplaceAllString(s, "&amp;$1") // shown as written, never an @
	s = mentionRE.ReplaceAllString(s, "@\u200b$1")
	return strings.ReplaceAll(s, "<!--", "&lt;!--")
}

// withoutAttribution is a model-written pull request body without the lines only logbook
// writes: Co-authored-by trailers and the "Opened by logbook from a Slack thread" line (the
// real ones, naming who asked, are added after).
func withoutAttribution(body string) string {
	lines := strings.Split(body, "\n")
	out := lines[:0]
	for _, l := range lines {
		t := strings.ToLower(strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), ">*_#- ")))
		if strings.HasPrefix(t, "co-authored-by:") || strings.HasPrefix(t, "opened by logbook from a slack thread") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
