package transcript

import (
	"regexp"
	"strings"

	"github.com/logbook/logbook/session/slacktext"
)

// readable returns a message's text for reading. text is the stored readable text (Slack's
// escapes already decoded at store time); when it is empty, raw (as Slack sent it) is
// decoded instead, with slacktext.ToPlain. Slack markup left in the text (the model writes
// <url|label> links too) is decoded by the same rules, entities excepted, since they were
// decoded once already: mentions as display names from names (captured at store time),
// channels as #name, links as "label (url)". Emoji shortcodes become emoji. Code (```
// blocks and `spans`) is left exactly as written.
func readable(text, raw string, names map[string]string) string {
	n := slacktext.Map(names)
	if strings.TrimSpace(text) == "" && raw != "" {
		return outsideCode(slacktext.ToPlain(raw, n), emojify)
	}
	return outsideCode(text, func(s string) string { return emojify(slacktext.Markup(s, n)) })
}

// outsideCode applies f to the parts of s that are not code.
func outsideCode(s string, f func(string) string) string {
	var b strings.Builder
	for i, block := range strings.Split(s, "```") {
		if i%2 == 1 {
			b.WriteString("```" + block + "```")
			continue
		}
		for j, span := range strings.Split(block, "`") {
			if j > 0 {
				b.WriteString("`")
			}
			if j%2 == 1 {
				b.WriteString(span)
				continue
			}
			b.WriteString(f(span))
		}
	}
	out := b.String()
	// An unclosed fence was closed above by the split; give the text back as written.
	if strings.Count(s, "```")%2 == 1 {
		out = strings.TrimSuffix(out, "```")
	}
	return out
}

// Block is a piece of message text: prose or a fenced code block.
type Block struct {
	Code bool   `json:"code,omitempty"`
	Lang string `json:"lang,omitempty"` // the fence's info string
	Text string `json:"text"`
}

// Blocks splits text on ``` fences. An unclosed fence runs to the end.
func Blocks(text string) []Block {
	var out []Block
	parts := strings.Split(text, "```")
	for i, p := range parts {
		if i%2 == 0 {
			if strings.TrimSpace(p) != "" {
				out = append(out, Block{Text: strings.Trim(p, "\n")})
			}
			continue
		}
		lang, body, ok := strings.Cut(p, "\n")
		if !ok || strings.ContainsAny(lang, " \t`") {
			lang, body = "", p
		}
		out = append(out, Block{Code: true, Lang: lang, Text: strings.TrimSuffix(body, "\n")})
	}
	return out
}

var emojiCodes = map[string]string{
	"+1": "👍", "thumbsup": "👍", "-1": "👎", "thumbsdown": "👎", "tada": "🎉", "rocket": "🚀",
	"fire": "🔥", "eyes": "👀", "warning": "⚠️", "x": "❌", "white_check_mark": "✅",
	"heavy_check_mark": "✔️", "smile": "😄", "slightly_smiling_face": "🙂", "joy": "😂",
	"thinking_face": "🤔", "pray": "🙏", "bug": "🐛", "wave": "👋", "heart": "❤️", "100": "💯",
	"ok_hand": "👌", "raised_hands": "🙌", "clap": "👏", "sweat_smile": "😅", "sob": "😭",
	"rotating_light": "🚨", "construction": "🚧", "memo": "📝", "lock": "🔒", "key": "🔑",
	"hourglass": "⌛", "zap": "⚡", "sparkles": "✨", "point_right": "👉", "question": "❓",
	"exclamation": "❗", "bulb": "💡", "wrench": "🔧", "hammer": "🔨", "gear": "⚙️",
}

var shortcode = regexp.MustCompile(`:([a-z0-9_+\-]+):`)

// emojify turns the common Slack emoji shortcodes into emoji; others stay as written.
func emojify(s string) string {
	if !strings.Contains(s, ":") {
		return s
	}
	return shortcode.ReplaceAllStringFunc(s, func(m string) string {
		if e, ok := emojiCodes[m[1:len(m)-1]]; ok {
			return e
		}
		return m
	})
}
