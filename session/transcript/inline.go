package transcript

import (
	"regexp"
	"strings"
)

// slackToken matches Slack's angle-bracket markup: <@U123>, <@U123|name>, <#C123|general>,
// <!here>, <!subteam^S123|@team>, <https://x|label>, <mailto:a@b|a@b>. Anything else in
// angle brackets (a user's literal "<tag>") is left alone.
var slackToken = regexp.MustCompile(`<([@#!][^<>|\s]+|(?:https?|mailto):[^<>|\s]+)(?:\|([^<>]*))?>`)

var entities = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// readable returns a message's text for reading. text is the stored readable text (Slack's
// escapes already decoded at store time); when it is empty, raw (as Slack sent it) is
// decoded instead. Slack markup left in the text becomes plain: mentions as display names
// from names (captured at store time), channels as #name, links as "label (url)". Emoji
// shortcodes become emoji. Code (``` blocks and `spans`) is left exactly as written.
func readable(text, raw string, names map[string]string) string {
	if strings.TrimSpace(text) == "" && raw != "" {
		text = entities.Replace(raw)
	}
	return outsideCode(text, func(s string) string {
		s = slackToken.ReplaceAllStringFunc(s, func(tok string) string {
			m := slackToken.FindStringSubmatch(tok)
			target, label := m[1], m[2]
			switch {
			case strings.HasPrefix(target, "@"):
				id := target[1:]
				if n := names[id]; n != "" {
					return "@" + n
				}
				if label != "" {
					return "@" + strings.TrimPrefix(label, "@")
				}
				return "@" + id
			case strings.HasPrefix(target, "#"):
				if label != "" {
					return "#" + label
				}
				if n := names[target[1:]]; n != "" {
					return "#" + n
				}
				return target
			case strings.HasPrefix(target, "!"):
				if label != "" {
					return label
				}
				name, _, _ := strings.Cut(target[1:], "^")
				return "@" + name
			}
			url := target
			if label == "" || label == url || "mailto:"+label == url {
				return strings.TrimPrefix(url, "mailto:")
			}
			return label + " (" + url + ")"
		})
		return emojify(s)
	})
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
