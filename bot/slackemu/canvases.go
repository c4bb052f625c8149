package slackemu

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Canvases are files of the workspace (filetype "quip", mimetype "application/vnd.slack-docs",
// pretty_type "Canvas"), their content the markdown they were created with. A standalone
// canvas is its creator's alone until canvases.access.set gives a channel or a person access;
// one shared in a message is readable where the message is.
const (
	CanvasFiletype = "quip"
	CanvasMimetype = "application/vnd.slack-docs"
	// maxCanvasMarkdown is the most markdown canvases.create takes (1 MiB, its docs page).
	maxCanvasMarkdown = 1 << 20
	// maxAccessIDs is how many channel_ids or user_ids canvases.access.set takes.
	maxAccessIDs = 20
)

// Canvas is a canvas as the emulator keeps it, for tests and `logbook dev`.
type Canvas struct {
	ID, Title, Markdown, Creator string
	// Access is the access level (read, write, owner) given to channels and people by id.
	Access map[string]string
	// Channel is the channel it is tabbed in (canvases.create with channel_id), "" none.
	Channel string
	Created int64
}

func (f *fileState) isCanvas() bool { return f.Filetype == CanvasFiletype }

func invalidArguments(msg string) map[string]any {
	e := fail("invalid_arguments")
	e["response_metadata"] = map[string]any{"messages": []string{"[ERROR] " + msg}}
	return e
}

// canvasesCreate is canvases.create as Slack documents it: title, document_content (a JSON
// object {"type":"markdown","markdown":…}, at most 1 MiB of markdown) and channel_id are
// optional; a canvas without them is untitled and empty. A workspace with canvases off
// (Options.CanvasesDisabled) answers canvas_disabled_user_team; an unknown channel_id
// channel_not_found; content that is not markdown invalid_arguments. With channel_id the
// canvas is tabbed in that channel, which gets write access.
func (s *Server) canvasesCreate(_ *http.Request, p url.Values) map[string]any {
	if s.opts.CanvasesDisabled {
		return fail("canvas_disabled_user_team")
	}
	var md string
	if raw := p.Get("document_content"); raw != "" {
		var dc struct {
			Type     string `json:"type"`
			Markdown string `json:"markdown"`
		}
		if json.Unmarshal([]byte(raw), &dc) != nil {
			return invalidArguments("document_content must be a JSON object [json-pointer:/document_content]")
		}
		if dc.Type != "markdown" {
			return invalidArguments("must be one of: markdown [json-pointer:/document_content/type]")
		}
		if len(dc.Markdown) > maxCanvasMarkdown {
			return invalidArguments(fmt.Sprintf("markdown must be at most %d characters [json-pointer:/document_content/markdown]", maxCanvasMarkdown))
		}
		md = dc.Markdown
	}
	channel := p.Get("channel_id")
	if channel != "" && s.channels[channel] == nil {
		return fail("channel_not_found")
	}
	title := p.Get("title")
	f := &fileState{File: File{ID: s.newFileIDLocked(), Name: cmpOr(title, "Untitled"), Title: cmpOr(title, "Untitled"),
		Mimetype: CanvasMimetype, Filetype: CanvasFiletype, Size: len(md), Content: []byte(md)},
		user: s.opts.BotUserID, created: time.Now().Unix(), access: map[string]string{}}
	if channel != "" {
		f.access[channel], f.tab = "write", channel
	}
	s.addFileLocked(f)
	return map[string]any{"ok": true, "canvas_id": f.ID}
}

// canvasLocked is the canvas id names that the bot may see, else Slack's error for it
// (canvas_not_found).
func (s *Server) canvasLocked(id string) (*fileState, map[string]any) {
	f := s.files[id]
	if id == "" || f == nil || f.deleted || !f.isCanvas() || !s.botMaySeeCanvasLocked(f) {
		return nil, fail("canvas_not_found")
	}
	return f, nil
}

// botMaySeeCanvasLocked: the bot created it, or it is shared in a conversation the bot is in,
// or a channel the bot is in, or the bot itself, was given access.
func (s *Server) botMaySeeCanvasLocked(f *fileState) bool {
	if s.botMayReadLocked(f) || f.access[s.opts.BotUserID] != "" {
		return true
	}
	for id := range f.access {
		if ch := s.channels[id]; ch != nil && ch.members[s.opts.BotUserID] {
			return true
		}
	}
	return false
}

// canvasesAccessSet is canvases.access.set: canvas_id and access_level (read, write, owner)
// are required, and exactly one of channel_ids and user_ids (JSON arrays of 1 to 20 ids;
// owner for people only), else invalid_arguments (both or neither: invalid_parameters). Only
// the canvas's creator may change its access (restricted_action); a canvas the bot cannot see
// is canvas_not_found, an unknown channel channel_not_found (a DM's or a group DM's too:
// only regular channels are accepted), an unknown person user_not_found.
func (s *Server) canvasesAccessSet(_ *http.Request, p url.Values) map[string]any {
	if s.opts.CanvasesDisabled {
		return fail("canvas_disabled_user_team")
	}
	level := p.Get("access_level")
	if p.Get("canvas_id") == "" || level == "" {
		return invalidArguments("missing required field: canvas_id and access_level")
	}
	if !slices.Contains([]string{"read", "write", "owner"}, level) {
		return invalidArguments("must be one of: read, write, owner [json-pointer:/access_level]")
	}
	rawChannels, rawUsers := p.Get("channel_ids"), p.Get("user_ids")
	if (rawChannels == "") == (rawUsers == "") {
		return fail("invalid_parameters")
	}
	var ids []string
	if json.Unmarshal([]byte(rawChannels+rawUsers), &ids) != nil || len(ids) == 0 || len(ids) > maxAccessIDs {
		return invalidArguments(fmt.Sprintf("must be an array of 1 to %d ids", maxAccessIDs))
	}
	if rawChannels != "" && level == "owner" {
		return invalidArguments("owner may be given to users only [json-pointer:/access_level]")
	}
	f, e := s.canvasLocked(p.Get("canvas_id"))
	if e != nil {
		return e
	}
	if f.user != s.opts.BotUserID {
		return fail("restricted_action")
	}
	for _, id := range ids {
		if rawChannels != "" {
			if ch := s.channels[id]; ch == nil || ch.IM || ch.MPIM {
				return fail("channel_not_found")
			}
		} else if s.users[id] == nil {
			return fail("user_not_found")
		}
	}
	if f.access == nil {
		f.access = map[string]string{}
	}
	for _, id := range ids {
		f.access[id] = level
	}
	s.dirty = true
	return map[string]any{"ok": true}
}

// canvasesGetContent is canvases.getContent: the whole content of a canvas the bot can view,
// as markdown (content_type markdown, the default) or HTML; canvas_not_found otherwise, an
// unknown content_type invalid_arguments.
func (s *Server) canvasesGetContent(_ *http.Request, p url.Values) map[string]any {
	if p.Get("canvas_id") == "" {
		return invalidArguments("missing required field: canvas_id")
	}
	ct := cmpOr(p.Get("content_type"), "markdown")
	if ct != "markdown" && ct != "html" {
		return invalidArguments("must be one of: html, markdown [json-pointer:/content_type]")
	}
	f, e := s.canvasLocked(p.Get("canvas_id"))
	if e != nil {
		return e
	}
	content := string(f.Content)
	if ct == "html" {
		var b strings.Builder
		for _, para := range strings.Split(content, "\n\n") {
			b.WriteString("<p>" + strings.ReplaceAll(html.EscapeString(para), "\n", "<br>") + "</p>")
		}
		content = b.String()
	}
	return map[string]any{"ok": true, "content": content}
}

// filesList is files.list: the files the bot can see, newest first, filtered by user,
// channel (shared there), ts_from and ts_to (unix seconds, inclusive) and types (all, the
// default, or a comma-separated list of spaces, snippets, images, gdocs, zips, pdfs, canvas;
// another answers unknown_type), count per page (default 100) and page (from 1). Canvases are
// listed with the other files (filetype quip).
func (s *Server) filesList(_ *http.Request, p url.Values) map[string]any {
	user, channel := p.Get("user"), p.Get("channel")
	if user != "" && s.users[user] == nil {
		return fail("user_not_found")
	}
	from, _ := strconv.ParseInt(cmpOr(p.Get("ts_from"), "0"), 10, 64)
	to, err := strconv.ParseInt(cmpOr(p.Get("ts_to"), "0"), 10, 64)
	if err != nil || to <= 0 {
		to = 1 << 62
	}
	types := map[string]bool{}
	for _, t := range strings.Split(cmpOr(p.Get("types"), "all"), ",") {
		t = strings.TrimSpace(t)
		if !slices.Contains([]string{"all", "spaces", "snippets", "images", "gdocs", "zips", "pdfs", "canvas"}, t) {
			return fail("unknown_type")
		}
		types[t] = true
	}
	count, _ := strconv.Atoi(p.Get("count"))
	if count <= 0 || count > 1000 {
		count = 100
	}
	page, _ := strconv.Atoi(p.Get("page"))
	page = max(page, 1)
	var all []map[string]any
	for i := len(s.fileOrder) - 1; i >= 0; i-- {
		f := s.files[s.fileOrder[i]]
		if f == nil || !f.readable() || !s.botMaySeeCanvasLocked(f) || (user != "" && f.user != user) ||
			f.created < from || f.created > to || !fileOfTypes(f, types) {
			continue
		}
		if channel != "" && !s.sharedInLocked(f.ID, channel) && f.access[channel] == "" {
			continue
		}
		all = append(all, s.renderFileLocked(f, false))
	}
	pages := (len(all) + count - 1) / count
	lo, hi := min((page-1)*count, len(all)), min(page*count, len(all))
	return map[string]any{"ok": true, "files": append([]map[string]any{}, all[lo:hi]...),
		"paging": map[string]any{"count": count, "total": len(all), "page": page, "pages": pages}}
}

// fileOfTypes reports whether f is of one of files.list's types.
func fileOfTypes(f *fileState, types map[string]bool) bool {
	if types["all"] {
		return true
	}
	switch {
	case f.isCanvas():
		return types["canvas"]
	case strings.HasPrefix(f.Mimetype, "image/"):
		return types["images"]
	case f.Filetype == "pdf":
		return types["pdfs"]
	case f.Filetype == "zip":
		return types["zips"]
	case f.snippetType != "":
		return types["snippets"]
	}
	return false
}

// sharedInLocked reports whether file id is in a message of channel.
func (s *Server) sharedInLocked(id, channel string) bool {
	ch := s.channels[channel]
	if ch == nil {
		return false
	}
	for _, m := range ch.msgs {
		if slices.ContainsFunc(m.Files, func(f File) bool { return f.ID == id }) {
			return true
		}
	}
	return false
}

// CreateCanvas is user creating a standalone canvas in Slack's client (no API call, no
// event): it returns its id, to share in a message (Post with Files: []File{{ID: id}}).
func (s *Server) CreateCanvas(user, title, markdown string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[user] == nil {
		return "", fmt.Errorf("create a canvas for %s: %w", user, ErrNotFound)
	}
	title = cmpOr(title, "Untitled")
	f := &fileState{File: File{ID: s.newFileIDLocked(), Name: title, Title: title, Mimetype: CanvasMimetype, Filetype: CanvasFiletype,
		Size: len(markdown), Content: []byte(markdown)}, user: user, created: time.Now().Unix(), access: map[string]string{}}
	s.addFileLocked(f)
	s.notifyLocked()
	return f.ID, nil
}

// Canvases returns every canvas of the workspace, oldest first.
func (s *Server) Canvases() []Canvas {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Canvas
	for _, id := range s.fileOrder {
		if f := s.files[id]; f != nil && f.isCanvas() && !f.deleted {
			out = append(out, f.canvas())
		}
	}
	return out
}

// CanvasByID returns canvas id; false when there is none.
func (s *Server) CanvasByID(id string) (Canvas, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil || !f.isCanvas() || f.deleted {
		return Canvas{}, false
	}
	return f.canvas(), true
}

func (f *fileState) canvas() Canvas {
	c := Canvas{ID: f.ID, Title: f.Title, Markdown: string(f.Content), Creator: f.user, Channel: f.tab, Created: f.created,
		Access: map[string]string{}}
	for k, v := range f.access {
		c.Access[k] = v
	}
	return c
}

// CanvasChars is how many characters canvas c holds.
func (c Canvas) CanvasChars() int { return utf8.RuneCountInString(c.Markdown) }
