package mrkdwn

import "strings"

// Inert makes model-written Markdown safe to hand to Slack as it is (a streamed message's
// markdown_text, which Slack renders itself): no "@here", "@channel" or "@everyone", no
// "<!here>", "<!channel>", "<!everyone>", "<!subteam^…>" or "<!group>" and no user mention
// "<@U…>" can ping — a zero-width space after the "@" or the "<" keeps them visible and
// inert, as FromMarkdown does. Dates "<!date…>" are kept.
func Inert(md string) string {
	if strings.Contains(md, "<!") || strings.Contains(md, "<@") {
		var b strings.Builder
		for {
			i := indexMention(md)
			if i < 0 {
				break
			}
			b.WriteString(md[:i+1])
			if !strings.HasPrefix(md[i+1:], "!date") {
				b.WriteString(zwsp)
			}
			md = md[i+1:]
		}
		b.WriteString(md)
		md = b.String()
	}
	return neutralizeBroadcasts(md)
}

// indexMention is the index of the first "<!" or "<@" in s, or -1.
func indexMention(s string) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '<' && (s[i+1] == '!' || s[i+1] == '@') {
			return i
		}
	}
	return -1
}

// HoldBack splits streamed text into what may be shown now and a tail that could still turn
// into a mention, a token or an entity once more text arrives (an "@her" that may become
// "@here", an unclosed "<…" or "&…"): the tail waits for the next piece.
func HoldBack(s string) (ready, tail string) {
	cut := len(s)
	if i := strings.LastIndexAny(s, "<&"); i >= 0 && !strings.ContainsAny(s[i:], ">; \n") {
		cut = i
	}
	if i := strings.LastIndexByte(s[:cut], '@'); i >= 0 && !strings.ContainsAny(s[i:cut], " \n\t") {
		cut = i
	}
	return s[:cut], s[cut:]
}
