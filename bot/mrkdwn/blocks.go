package mrkdwn

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/logbook/logbook/session/slacktext"
)

// BlocksText flattens a message's Block Kit blocks (the JSON array in an
// event's "blocks" field) into plain text, for messages whose content lives
// only in blocks. rich_text blocks are rendered element by element:
//
//	rich_text_section       its inline elements, concatenated
//	rich_text_list          one line per item, "• " or "1. " (from offset),
//	                        two spaces of indent per level
//	rich_text_quote         lines prefixed "> "
//	rich_text_preformatted  between ``` lines
//	text → text (in backticks if styled code); link → "text (url)" or url; user → @name; channel → #name;
//	usergroup → @name; emoji → its character (from "unicode") or :name:;
//	broadcast → @here/@channel/@everyone; date → fallback; color → value
//
// section, header, context, markdown and image blocks contribute their text
// (mrkdwn text objects are decoded with slacktext.ToPlain). An element or block of an
// unknown type contributes its "text", "fallback", "url", "name" or "value"
// field, or its nested elements, so new Slack types lose as little as
// possible. Blocks are separated by newlines; the result is trimmed.
//
// Empty or null input gives "", nil. Input that is not JSON gives an error
// that wraps the decoder's; a single block object is accepted too. To use a
// slack-go value (slack.Blocks, []slack.Block), marshal it with encoding/json.
func BlocksText(blocks json.RawMessage, names slacktext.Names) (string, error) {
	return joinTexts(blocks, "blocks", func(blk any) string { return blockText(blk, names) })
}

// AttachmentsText flattens legacy message attachments (the JSON array in an
// event's "attachments" field): pretext, title (with its link), text and
// fields as "title: value", or else fallback; attachments are separated by
// newlines. Text fields are decoded with slacktext.ToPlain. Errors as for BlocksText.
func AttachmentsText(attachments json.RawMessage, names slacktext.Names) (string, error) {
	return joinTexts(attachments, "attachments", func(a any) string { return attachmentText(a, names) })
}

// joinTexts decodes raw, a JSON list of what (or one object), and joins the text of each item
// that has any, a line apart, without trailing newlines; the result is trimmed.
func joinTexts(raw json.RawMessage, what string, text func(any) string) (string, error) {
	items, err := decodeList(raw, what)
	if err != nil {
		return "", err
	}
	var out []string
	for _, it := range items {
		if s := text(it); strings.TrimSpace(s) != "" {
			out = append(out, strings.TrimRight(s, "\n"))
		}
	}
	return strings.TrimSpace(strings.Join(out, "\n")), nil
}

// attachmentText is one attachment's lines (see AttachmentsText), "" for one that is not an
// object or says nothing.
func attachmentText(it any, names slacktext.Names) string {
	a, ok := it.(map[string]any)
	if !ok {
		return ""
	}
	var lines []string
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" {
			lines = append(lines, s)
		}
	}
	add(slacktext.ToPlain(str(a, "pretext"), names))
	title := slacktext.ToPlain(str(a, "title"), names)
	if link := str(a, "title_link"); link != "" && title != "" {
		title += " (" + link + ")"
	}
	add(title)
	add(slacktext.ToPlain(str(a, "text"), names))
	for _, f := range list(a, "fields") {
		if fm, ok := f.(map[string]any); ok {
			t, v := slacktext.ToPlain(str(fm, "title"), names), slacktext.ToPlain(str(fm, "value"), names)
			if t != "" && v != "" {
				add(t + ": " + v)
			} else {
				add(t + v)
			}
		}
	}
	if len(lines) == 0 {
		add(slacktext.ToPlain(str(a, "fallback"), names))
	}
	return strings.Join(lines, "\n")
}

func decodeList(raw json.RawMessage, what string) ([]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	switch v := v.(type) {
	case []any:
		return v, nil
	case map[string]any:
		return []any{v}, nil
	default:
		return nil, fmt.Errorf("decode %s: want a JSON array, got %T", what, v)
	}
}

func blockText(v any, names slacktext.Names) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	switch str(m, "type") {
	case "rich_text":
		return richElements(list(m, "elements"), names)
	case "section":
		parts := []string{textObject(m["text"], names)}
		for _, f := range list(m, "fields") {
			parts = append(parts, textObject(f, names))
		}
		return joinNonEmpty(parts, "\n")
	case "header":
		return textObject(m["text"], names)
	case "context":
		var parts []string
		for _, e := range list(m, "elements") {
			if em, ok := e.(map[string]any); ok && str(em, "type") == "image" {
				parts = append(parts, str(em, "alt_text"))
				continue
			}
			parts = append(parts, textObject(e, names))
		}
		return joinNonEmpty(parts, " ")
	case "markdown":
		return str(m, "text")
	case "image":
		return cmp.Or(textObject(m["title"], names), str(m, "alt_text"))
	case "divider", "actions", "input", "file", "video":
		return ""
	}
	return fallbackText(m, names)
}

// textObject reads a composition text object ({"type":"mrkdwn","text":…} or
// plain_text) or a bare string.
func textObject(v any, names slacktext.Names) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		t := str(v, "text")
		if str(v, "type") == "mrkdwn" {
			return slacktext.ToPlain(t, names)
		}
		return t
	}
	return ""
}

// richElements renders the children of a rich_text block, one per line.
func richElements(elems []any, names slacktext.Names) string {
	var b strings.Builder
	for _, e := range elems {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		var s string
		switch str(m, "type") {
		case "rich_text_section":
			s = inlineElements(list(m, "elements"), names)
		case "rich_text_list":
			s = richList(m, names)
		case "rich_text_quote":
			s = prefixLines(strings.TrimRight(inlineElements(list(m, "elements"), names), "\n"), "> ", ">")
		case "rich_text_preformatted":
			s = "```\n" + strings.TrimRight(inlineElements(list(m, "elements"), names), "\n") + "\n```"
		default:
			s = inlineElement(m, names)
		}
		if s == "" {
			continue
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString(s)
	}
	return b.String()
}

func richList(m map[string]any, names slacktext.Names) string {
	indent := strings.Repeat("  ", max(0, min(10, intField(m, "indent"))))
	ordered := str(m, "style") == "ordered"
	n := intField(m, "offset") + 1
	var lines []string
	for _, it := range list(m, "elements") {
		im, ok := it.(map[string]any)
		if !ok {
			continue
		}
		var s string
		if str(im, "type") == "rich_text_section" {
			s = inlineElements(list(im, "elements"), names)
		} else {
			s = richElements([]any{im}, names)
		}
		marker := "• "
		if ordered {
			marker = strconv.Itoa(n) + ". "
			n++
		}
		lines = append(lines, indent+marker+strings.TrimRight(s, "\n"))
	}
	return strings.Join(lines, "\n")
}

func inlineElements(elems []any, names slacktext.Names) string {
	var b strings.Builder
	for _, e := range elems {
		if m, ok := e.(map[string]any); ok {
			b.WriteString(inlineElement(m, names))
		}
	}
	return b.String()
}

func inlineElement(m map[string]any, names slacktext.Names) string {
	switch str(m, "type") {
	case "text":
		t := str(m, "text")
		if style, ok := m["style"].(map[string]any); ok && style["code"] == true && t != "" {
			return "`" + t + "`"
		}
		return t
	case "link":
		url, text := str(m, "url"), str(m, "text")
		if text == "" || text == url {
			return url
		}
		return text + " (" + url + ")"
	case "user":
		id := str(m, "user_id")
		return "@" + cmp.Or(names.Lookup(slacktext.KindUser, id), id)
	case "channel":
		id := str(m, "channel_id")
		return "#" + cmp.Or(names.Lookup(slacktext.KindChannel, id), id)
	case "usergroup":
		id := str(m, "usergroup_id")
		return "@" + cmp.Or(names.Lookup(slacktext.KindUsergroup, id), id)
	case "emoji":
		if s := emojiChars(str(m, "unicode")); s != "" {
			return s
		}
		if name := str(m, "name"); name != "" {
			return ":" + name + ":"
		}
		return ""
	case "broadcast":
		return "@" + str(m, "range")
	case "date":
		if f := str(m, "fallback"); f != "" {
			return f
		}
		if ts, err := strconv.ParseInt(str(m, "timestamp"), 10, 64); err == nil {
			return time.Unix(ts, 0).UTC().Format(time.RFC3339)
		}
		return ""
	case "color":
		return str(m, "value")
	}
	return fallbackText(m, names)
}

// fallbackText gets what text it can from an element or block of a type this
// package does not know.
func fallbackText(m map[string]any, names slacktext.Names) string {
	if s := textObject(m["text"], names); s != "" {
		return s
	}
	for _, k := range []string{"fallback", "url", "name", "value"} {
		if s := str(m, k); s != "" {
			return s
		}
	}
	if els := list(m, "elements"); len(els) > 0 {
		if _, rich := firstType(els); rich {
			return richElements(els, names)
		}
		return inlineElements(els, names)
	}
	return ""
}

func firstType(els []any) (string, bool) {
	for _, e := range els {
		if m, ok := e.(map[string]any); ok {
			t := str(m, "type")
			return t, strings.HasPrefix(t, "rich_text_")
		}
	}
	return "", false
}

// emojiChars decodes an emoji element's "unicode" field ("1f44d" or
// "1f44d-1f3fb") into its characters, or "" if it is not hex code points.
func emojiChars(u string) string {
	if u == "" {
		return ""
	}
	var b strings.Builder
	for _, cp := range strings.Split(u, "-") {
		v, err := strconv.ParseUint(cp, 16, 32)
		if err != nil || v == 0 || v > 0x10FFFF || v >= 0xD800 && v <= 0xDFFF {
			return ""
		}
		b.WriteRune(rune(v))
	}
	return b.String()
}

func str(m map[string]any, k string) string {
	switch v := m[k].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

func list(m map[string]any, k string) []any {
	l, _ := m[k].([]any)
	return l
}

func intField(m map[string]any, k string) int {
	n, err := strconv.Atoi(str(m, k))
	if err != nil {
		return 0
	}
	return n
}

func joinNonEmpty(parts []string, sep string) string {
	var keep []string
	for _, p := range parts {
		if strings.TrimSpace(p) != "" {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, sep)
}
