package slackemu

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Slack's size limits applied by the emulator.
const (
	maxTextRunes       = 40_000 // chat.postMessage truncates beyond this
	maxUpdateTextRunes = 4_000  // chat.update answers msg_too_long beyond this (per its docs page)
	maxBlocks          = 50
	maxSectionText     = 3_000
	maxHeaderText      = 150
)

// Request is a Web API call as received, without its token.
type Request struct {
	Method string     `json:"method"`
	Params url.Values `json:"params"`
	At     time.Time  `json:"at"`
}

type apiHandler func(r *http.Request, p url.Values) map[string]any

func fail(code string) map[string]any { return map[string]any{"ok": false, "error": code} }

func parseBool(v string) bool { return v == "true" || v == "1" }

// parseParams reads form or JSON parameters (query string included).
func parseParams(r *http.Request) (url.Values, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "application/json" {
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		return r.Form, nil
	}
	q := r.URL.Query()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return q, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	for k, v := range obj {
		var str string
		if json.Unmarshal(v, &str) == nil {
			q.Set(k, str)
		} else {
			q.Set(k, string(v))
		}
	}
	return q, nil
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// handleAPI serves POST/GET /api/{method}.
func (s *Server) handleAPI(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	r.Body = http.MaxBytesReader(w, r.Body, 10<<20)
	params, err := parseParams(r)
	if err != nil {
		writeJSON(w, http.StatusOK, fail("invalid_form_data"))
		return
	}
	bearer := ""
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		bearer = strings.TrimSpace(b)
	}
	token := params.Get("token")
	if method == "apps.connections.open" {
		token = bearer // header only: a POST parameter is an error for this method
	} else if token == "" {
		token = bearer
	}
	params.Del("token")
	status, retryAfter, body, drop := s.callAPI(r, method, token, params)
	if drop {
		dropConnection(w)
		return
	}
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeJSON(w, status, body)
}

// callAPI performs method; drop means the connection is to be closed without an answer
// (MethodFault.Drop).
func (s *Server) callAPI(r *http.Request, method, token string, params url.Values) (status, retryAfter int, body map[string]any, drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return http.StatusServiceUnavailable, 0, fail("service_unavailable"), false
	}
	s.calls[method]++
	s.requests = capped(append(s.requests, Request{Method: method, Params: maps.Clone(params), At: time.Now()}), s.opts.RecordLimit)
	defer s.notifyLocked()

	h := s.handler(method)
	if h == nil {
		return http.StatusOK, 0, fail("unknown_method"), false
	}
	if code := s.checkToken(method, token); code != "" {
		return http.StatusOK, 0, fail(code), false
	}
	f := s.takeMethodFaultLocked(method)
	if f != nil && f.Hold != nil {
		s.notifyLocked() // the held call is counted: a test waiting for it may go on
		s.mu.Unlock()
		select {
		case <-f.Hold:
		case <-r.Context().Done():
		}
		s.mu.Lock()
		if s.closed {
			return http.StatusServiceUnavailable, 0, fail("service_unavailable"), false
		}
		if f.Error == "" && f.Status == 0 && !f.Drop {
			f = nil
		}
	}
	if f != nil && !f.ApplyFirst {
		return faultResponse(f)
	}
	if wait := s.rateLimitLocked(method, cmpOr(params.Get("channel"), params.Get("channel_id")), time.Now()); wait > 0 {
		return http.StatusTooManyRequests, wait, fail("ratelimited"), false
	}
	body = h(r, params)
	if f != nil {
		return faultResponse(f)
	}
	return http.StatusOK, 0, body, false
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func faultResponse(f *MethodFault) (int, int, map[string]any, bool) {
	switch {
	case f.Drop:
		return 0, 0, nil, true
	case f.Status == 0 || f.Status == http.StatusOK:
		return http.StatusOK, 0, fail(f.Error), false
	case f.Status == http.StatusTooManyRequests:
		return f.Status, max(1, f.RetryAfter), fail("ratelimited"), false
	default:
		return f.Status, 0, fail(cmpOr(f.Error, "internal_error")), false
	}
}

// checkToken returns the Slack error for a token that may not call method, or "".
func (s *Server) checkToken(method, token string) string {
	want, other := s.opts.BotToken, s.opts.AppToken
	if method == "apps.connections.open" {
		want, other = other, want
	}
	switch token {
	case "":
		return "not_authed"
	case want:
		return ""
	case other:
		return "not_allowed_token_type"
	default:
		return "invalid_auth"
	}
}

func (s *Server) handler(method string) apiHandler {
	switch method {
	case "auth.test":
		return s.authTest
	case "apps.connections.open":
		return func(r *http.Request, _ url.Values) map[string]any { return s.openConnectionLocked(r) }
	case "chat.postMessage":
		return s.chatPostMessage
	case "chat.update":
		return s.chatUpdate
	case "chat.delete":
		return s.chatDelete
	case "chat.getPermalink":
		return s.chatGetPermalink
	case "chat.postEphemeral":
		return s.chatPostEphemeral
	case "conversations.info":
		return s.conversationsInfo
	case "conversations.members":
		return s.conversationsMembers
	case "conversations.replies":
		return s.conversationsReplies
	case "conversations.history":
		return s.conversationsHistory
	case "users.info":
		return s.usersInfo
	case "usergroups.users.list":
		return s.usergroupsUsersList
	case "reactions.add":
		return func(_ *http.Request, p url.Values) map[string]any { return s.reaction(p, true) }
	case "reactions.remove":
		return func(_ *http.Request, p url.Values) map[string]any { return s.reaction(p, false) }
	case "chat.startStream":
		return s.chatStartStream
	case "chat.appendStream":
		return s.chatAppendStream
	case "chat.stopStream":
		return s.chatStopStream
	case "assistant.threads.setStatus":
		return s.assistantSetStatus
	case "assistant.threads.setTitle":
		return s.assistantSetTitle
	case "agents.sessions.setStatus":
		return s.agentSessionSetStatus
	case "agents.sessions.rename":
		return s.agentSessionRename
	case "agents.conversations.create":
		return s.agentsConversationsCreate
	case "agents.conversations.setProperties":
		return s.agentsConversationsSetProperties
	case "agents.conversations.setCommands":
		return s.agentsConversationsSetCommands
	case "agents.conversations.archive":
		return s.agentsConversationsArchive
	case "files.getUploadURLExternal":
		return s.filesGetUploadURLExternal
	case "files.completeUploadExternal":
		return s.filesCompleteUploadExternal
	case "files.info":
		return s.filesInfo
	case "files.delete":
		return s.filesDelete
	case "views.publish":
		return s.viewsPublish
	case "canvases.create":
		return s.canvasesCreate
	case "canvases.access.set":
		return s.canvasesAccessSet
	case "canvases.getContent":
		return s.canvasesGetContent
	case "files.list":
		return s.filesList
	}
	return nil
}

func (s *Server) authTest(_ *http.Request, _ url.Values) map[string]any {
	return map[string]any{
		"ok": true, "url": "https://" + s.opts.TeamDomain + ".slack.com/", "team": s.opts.TeamName,
		"user": s.opts.BotName, "team_id": s.opts.TeamID, "user_id": s.opts.BotUserID,
		"bot_id": s.opts.BotID, "is_enterprise_install": false,
	}
}

// botThread resolves the bot's channel (channel_id) and checks that it holds the message
// thread_ts names: the preamble of the assistant.threads and agents.sessions methods.
func (s *Server) botThread(p url.Values) (*channelState, string) {
	ch, code := s.botChannel(p.Get("channel_id"), false)
	if code != "" {
		return nil, code
	}
	if p.Get("thread_ts") == "" || ch.byTS[p.Get("thread_ts")] == nil {
		return nil, "invalid_thread_ts"
	}
	return ch, ""
}

// botChannel resolves a channel for the bot. Private conversations the bot is not
// in do not exist for it (channel_not_found); public ones need membership when
// member is set (not_in_channel).
func (s *Server) botChannel(id string, member bool) (*channelState, string) {
	ch := s.channels[id]
	if ch == nil || ch.gone {
		return nil, "channel_not_found"
	}
	in := ch.members[s.opts.BotUserID]
	if !in && (ch.Private || ch.IM || ch.MPIM) {
		return nil, "channel_not_found"
	}
	if member && !in {
		return nil, "not_in_channel"
	}
	return ch, ""
}

// writableChannel is botChannel(id, true) for a method that writes to the channel: an
// archived one answers is_archived.
func (s *Server) writableChannel(id string) (*channelState, string) {
	ch, code := s.botChannel(id, true)
	if code == "" && ch.Archived {
		return nil, "is_archived"
	}
	return ch, code
}

// validateBlocks checks raw as chat.postMessage's blocks parameter.
func validateBlocks(raw string) (json.RawMessage, map[string]any) {
	if raw == "" {
		return nil, nil
	}
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &blocks); err != nil {
		return nil, fail("invalid_blocks_format")
	}
	invalid := func(msg string) map[string]any {
		e := fail("invalid_blocks")
		e["errors"] = []string{msg}
		e["response_metadata"] = map[string]any{"messages": []string{"[ERROR] " + msg}}
		return e
	}
	if len(blocks) > maxBlocks {
		return nil, invalid(fmt.Sprintf("no more than %d items allowed [json-pointer:/blocks]", maxBlocks))
	}
	for i, b := range blocks {
		var typ string
		if json.Unmarshal(b["type"], &typ) != nil || typ == "" {
			return nil, invalid(fmt.Sprintf("missing required field: type [json-pointer:/blocks/%d]", i))
		}
		var text struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(b["text"], &text)
		n := utf8.RuneCountInString(text.Text)
		if typ == "context_actions" {
			if msg := contextActionsError(b["elements"], i); msg != "" {
				return nil, invalid(msg)
			}
		}
		switch {
		case typ == "section" && n > maxSectionText:
			return nil, invalid(fmt.Sprintf("must be less than %d characters [json-pointer:/blocks/%d/text/text]", maxSectionText+1, i))
		case typ == "header" && n > maxHeaderText:
			return nil, invalid(fmt.Sprintf("must be less than %d characters [json-pointer:/blocks/%d/text/text]", maxHeaderText+1, i))
		}
	}
	return json.RawMessage(raw), nil
}

// contextActionsError checks a context_actions block's elements as Slack documents them: one
// to five, each a feedback_buttons element (with a positive and a negative button, each with
// a value) or an icon_button. It returns Slack's error message, "" when they are valid.
func contextActionsError(raw json.RawMessage, i int) string {
	var els []map[string]json.RawMessage
	if json.Unmarshal(raw, &els) != nil || len(els) == 0 {
		return fmt.Sprintf("missing required field: elements [json-pointer:/blocks/%d]", i)
	}
	if len(els) > 5 {
		return fmt.Sprintf("no more than 5 items allowed [json-pointer:/blocks/%d/elements]", i)
	}
	for j, e := range els {
		var typ string
		_ = json.Unmarshal(e["type"], &typ)
		switch typ {
		case "icon_button":
		case "feedback_buttons":
			for _, side := range []string{"positive_button", "negative_button"} {
				var btn struct {
					Value string `json:"value"`
				}
				if json.Unmarshal(e[side], &btn) != nil || btn.Value == "" {
					return fmt.Sprintf("missing required field: %s [json-pointer:/blocks/%d/elements/%d]", side, i, j)
				}
			}
		default:
			return fmt.Sprintf("must be one of feedback_buttons, icon_button [json-pointer:/blocks/%d/elements/%d/type]", i, j)
		}
	}
	return ""
}

// validateMetadata checks raw as the metadata parameter ({"event_type","event_payload"}).
func validateMetadata(raw string) (json.RawMessage, bool) {
	if raw == "" {
		return nil, true
	}
	var md struct {
		EventType    string          `json:"event_type"`
		EventPayload json.RawMessage `json:"event_payload"`
	}
	if json.Unmarshal([]byte(raw), &md) != nil || md.EventType == "" || len(md.EventPayload) == 0 || md.EventPayload[0] != '{' {
		return nil, false
	}
	return json.RawMessage(raw), true
}

func truncateRunes(s string, n int) (string, bool) {
	if utf8.RuneCountInString(s) <= n {
		return s, false
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos], true
		}
		i++
	}
	return s, false
}

func (s *Server) chatPostMessage(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.writableChannel(p.Get("channel"))
	if code != "" {
		return fail(code)
	}
	text, markdown := p.Get("text"), p.Get("markdown_text")
	if markdown != "" && (text != "" || p.Get("blocks") != "") {
		return fail("markdown_text_conflict")
	}
	if text == "" && markdown == "" && p.Get("blocks") == "" && p.Get("attachments") == "" {
		return fail("no_text")
	}
	blocks, bad := validateBlocks(p.Get("blocks"))
	if bad != nil {
		return bad
	}
	metadata, ok := validateMetadata(p.Get("metadata"))
	if !ok {
		return fail("invalid_metadata_format")
	}
	text = cmpOr(text, markdown)
	text, truncated := truncateRunes(text, maxTextRunes)
	m := &Message{
		Channel: ch.ID, TS: s.nextTS(), User: s.opts.BotUserID, BotID: s.opts.BotID, AppID: s.opts.AppID,
		Text: text, Blocks: blocks, Metadata: metadata,
	}
	// thread_ts must name a top-level message; otherwise the post is not threaded.
	if parent := ch.byTS[p.Get("thread_ts")]; parent != nil && parent.ThreadTS == "" {
		m.ThreadTS, m.ParentUserID = parent.TS, parent.User
		if parseBool(p.Get("reply_broadcast")) {
			m.Subtype = "thread_broadcast"
		}
		s.clearStatusLocked(ch.ID, parent.TS)
	}
	s.insertLocked(ch, m)
	s.publishNewLocked(ch, m)
	resp := map[string]any{"ok": true, "channel": ch.ID, "ts": m.TS, "message": s.renderMessage(m, true)}
	if truncated {
		resp["warning"] = "message_truncated"
		resp["response_metadata"] = map[string]any{
			"warnings": []string{"message_truncated"},
			"messages": []string{"[WARN] A message was truncated since it was longer than 40000 characters."},
		}
	}
	return resp
}

func (s *Server) chatUpdate(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.writableChannel(p.Get("channel"))
	if code != "" {
		return fail(code)
	}
	m, refused := s.ownMessageLocked(ch, p.Get("ts"), "cant_update_message", "streaming_state_conflict")
	if refused != nil {
		return refused
	}
	text, hasBlocks := p.Get("text"), p.Has("blocks")
	if text == "" && !hasBlocks && p.Get("markdown_text") == "" {
		return fail("no_text")
	}
	if utf8.RuneCountInString(text) > maxUpdateTextRunes {
		return fail("msg_too_long")
	}
	blocks, bad := validateBlocks(p.Get("blocks"))
	if bad != nil {
		return bad
	}
	prev := m.clone()
	m.Text = cmpOr(text, p.Get("markdown_text"))
	s.touchLocked(m)
	m.Blocks = blocks // omitting blocks while sending text removes them
	if p.Has("metadata") {
		if p.Get("metadata") == "{}" {
			m.Metadata = nil
		} else if md, ok := validateMetadata(p.Get("metadata")); ok {
			m.Metadata = md
		} else {
			*m = prev
			return fail("invalid_metadata_format")
		}
	}
	editTS := s.nextTS()
	m.Edited = &Edited{User: s.opts.BotUserID, TS: editTS}
	s.publishChangedLocked(ch, m, prev, editTS)
	return map[string]any{"ok": true, "channel": ch.ID, "ts": m.TS, "text": m.Text, "message": s.renderMessage(m, true)}
}

// ownMessageLocked is the bot's own message ts of ch for chat.update or chat.delete, else
// Slack's answer: message_not_found, notOwn for another's message, streaming for one that is
// still being streamed (each method has its own codes).
func (s *Server) ownMessageLocked(ch *channelState, ts, notOwn, streaming string) (*Message, map[string]any) {
	m := ch.byTS[ts]
	if m == nil || m.Subtype == "tombstone" {
		return nil, fail("message_not_found")
	}
	if m.User != s.opts.BotUserID {
		return nil, fail(notOwn)
	}
	s.expireStreamsLocked(time.Now())
	if m.Streaming {
		return nil, fail(streaming)
	}
	return m, nil
}

func (s *Server) chatDelete(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), true)
	if code != "" {
		return fail(code)
	}
	m, refused := s.ownMessageLocked(ch, p.Get("ts"), "cant_delete_message", "cant_delete_message")
	if refused != nil {
		return refused
	}
	prev := m.clone()
	s.removeLocked(ch, m)
	s.publishDeletedLocked(ch, prev, s.nextTS())
	return map[string]any{"ok": true, "channel": ch.ID, "ts": prev.TS}
}

func (s *Server) permalink(ch *channelState, m *Message) string {
	link := "https://" + s.opts.TeamDomain + ".slack.com/archives/" + ch.ID + "/p" + strings.Replace(m.TS, ".", "", 1)
	if m.ThreadTS != "" {
		link += "?" + url.Values{"thread_ts": {m.ThreadTS}, "cid": {ch.ID}}.Encode()
	}
	return link
}

func (s *Server) chatGetPermalink(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), false)
	if code != "" {
		return fail(code)
	}
	m := ch.byTS[p.Get("message_ts")]
	if m == nil {
		return fail("message_not_found")
	}
	return map[string]any{"ok": true, "channel": ch.ID, "permalink": s.permalink(ch, m)}
}

func (s *Server) chatPostEphemeral(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.writableChannel(p.Get("channel"))
	if code != "" {
		return fail(code)
	}
	user := p.Get("user")
	if s.users[user] == nil {
		return fail("user_not_found")
	}
	if !ch.members[user] {
		return fail("user_not_in_channel")
	}
	if p.Get("text") == "" && p.Get("blocks") == "" && p.Get("attachments") == "" {
		return fail("no_text")
	}
	blocks, bad := validateBlocks(p.Get("blocks"))
	if bad != nil {
		return bad
	}
	e := Ephemeral{Channel: ch.ID, User: user, Text: p.Get("text"), Blocks: blocks, ThreadTS: p.Get("thread_ts"), TS: s.nextTS()}
	s.ephemerals = append(s.ephemerals, e)
	return map[string]any{"ok": true, "message_ts": e.TS}
}

func (s *Server) conversationsInfo(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), false)
	if code != "" {
		return fail(code)
	}
	return map[string]any{"ok": true, "channel": s.renderChannel(ch)}
}

// conversationsMembers lists a channel's members in one page (no cursor); a private channel
// without the bot is channel_not_found, as for conversations.info.
func (s *Server) conversationsMembers(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), false)
	if code != "" {
		return fail(code)
	}
	members := make([]string, 0, len(ch.Members))
	for _, m := range ch.Members {
		if ch.members[m] {
			members = append(members, m)
		}
	}
	return map[string]any{"ok": true, "members": members, "response_metadata": map[string]any{"next_cursor": ""}}
}

// cursor encodes the ts a page starts at, as Slack's opaque "next_ts:…" cursors do.
func encodeCursor(ts string) string {
	return base64.StdEncoding.EncodeToString([]byte("next_ts:" + ts))
}

func decodeCursor(c string) (string, bool) {
	b, err := base64.StdEncoding.DecodeString(c)
	if err != nil {
		return "", false
	}
	ts, ok := strings.CutPrefix(string(b), "next_ts:")
	return ts, ok && ts != ""
}

func pageLimit(v string, def, maxLimit int) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return def
	}
	return min(n, maxLimit)
}

// inRange applies oldest/latest/inclusive to ts (ts strings of equal shape compare as numbers).
func inRange(ts string, p url.Values) bool {
	less := func(a, b string) bool {
		x, _ := strconv.ParseFloat(a, 64)
		y, _ := strconv.ParseFloat(b, 64)
		return x < y
	}
	incl := parseBool(p.Get("inclusive"))
	if o := p.Get("oldest"); o != "" && (less(ts, o) || (!incl && ts == o)) {
		return false
	}
	if l := p.Get("latest"); l != "" && (less(l, ts) || (!incl && ts == l)) {
		return false
	}
	return true
}

func (s *Server) page(msgs []*Message, p url.Values, def, maxLimit int, found func(m *Message, ts string) bool) map[string]any {
	start := 0
	if c := p.Get("cursor"); c != "" {
		ts, ok := decodeCursor(c)
		if !ok {
			return fail("invalid_cursor")
		}
		start = slices.IndexFunc(msgs, func(m *Message) bool { return found(m, ts) })
		if start < 0 {
			return fail("invalid_cursor")
		}
	}
	limit := pageLimit(p.Get("limit"), def, maxLimit)
	end := min(start+limit, len(msgs))
	withMD := parseBool(p.Get("include_all_metadata"))
	out := make([]map[string]any, 0, end-start)
	for _, m := range msgs[start:end] {
		out = append(out, s.renderMessage(m, withMD))
	}
	next := ""
	if end < len(msgs) {
		next = encodeCursor(msgs[end].TS)
	}
	return map[string]any{"ok": true, "messages": out, "has_more": next != "", "response_metadata": map[string]any{"next_cursor": next}}
}

func (s *Server) conversationsReplies(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), true)
	if code != "" {
		return fail(code)
	}
	if s.opts.RepliesForbidden && !ch.IM && !ch.MPIM {
		e := fail("missing_scope")
		e["needed"], e["provided"] = "channels:history", "chat:write"
		return e
	}
	var thread []*Message
	for _, m := range s.threadLocked(ch, p.Get("ts")) {
		if inRange(m.TS, p) {
			thread = append(thread, m)
		}
	}
	if len(s.threadLocked(ch, p.Get("ts"))) == 0 {
		return fail("thread_not_found")
	}
	return s.page(thread, p, s.opts.RepliesMaxLimit, s.opts.RepliesMaxLimit, func(m *Message, ts string) bool { return m.TS >= ts })
}

func (s *Server) conversationsHistory(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), true)
	if code != "" {
		return fail(code)
	}
	var msgs []*Message
	for i := len(ch.msgs) - 1; i >= 0; i-- {
		m := ch.msgs[i]
		if (m.ThreadTS == "" || m.Subtype == "thread_broadcast") && inRange(m.TS, p) {
			msgs = append(msgs, m)
		}
	}
	return s.page(msgs, p, min(100, s.opts.HistoryMaxLimit), s.opts.HistoryMaxLimit, func(m *Message, ts string) bool { return m.TS <= ts })
}

func (s *Server) usersInfo(_ *http.Request, p url.Values) map[string]any {
	u := s.users[p.Get("user")]
	if u == nil {
		return fail("user_not_found")
	}
	return map[string]any{"ok": true, "user": s.renderUser(u)}
}

func (s *Server) reaction(p url.Values, add bool) map[string]any {
	ch, code := s.botChannel(p.Get("channel"), true)
	if code != "" {
		return fail(code)
	}
	name := p.Get("name")
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r == ':' || unicode.IsSpace(r) }) {
		return fail("invalid_name")
	}
	m := ch.byTS[p.Get("timestamp")]
	if m == nil || m.Subtype == "tombstone" {
		return fail("message_not_found")
	}
	if add && ch.Archived {
		return fail("is_archived")
	}
	bot := s.opts.BotUserID
	users := m.Reactions[name]
	has := slices.Contains(users, bot)
	switch {
	case add && has:
		return fail("already_reacted")
	case !add && !has:
		return fail("no_reaction")
	case add:
		if m.Reactions == nil {
			m.Reactions = map[string][]string{}
		}
		m.Reactions[name] = append(users, bot)
	default:
		m.Reactions[name] = slices.DeleteFunc(users, func(u string) bool { return u == bot })
		if len(m.Reactions[name]) == 0 {
			delete(m.Reactions, name)
		}
	}
	s.dirty = true
	return map[string]any{"ok": true}
}

// assistantSetStatus stores the status best-effort (Slack shows it only in
// assistant threads); it clears when the bot replies in the thread.
func (s *Server) assistantSetStatus(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botThread(p)
	if code != "" {
		return fail(code)
	}
	key := ch.ID + "/" + p.Get("thread_ts")
	if st := p.Get("status"); st != "" {
		s.statuses[key] = st
		s.loadingMessages[key] = parseLoadingMessages(p.Get("loading_messages"))
	} else {
		s.clearStatusLocked(ch.ID, p.Get("thread_ts"))
	}
	return map[string]any{"ok": true}
}

// assistantSetTitle records a thread's title (assistant.threads.setTitle: channel_id,
// thread_ts, title).
func (s *Server) assistantSetTitle(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botThread(p)
	if code != "" {
		return fail(code)
	}
	if p.Get("title") == "" {
		return fail("invalid_arguments")
	}
	s.titles[ch.ID+"/"+p.Get("thread_ts")] = p.Get("title")
	return map[string]any{"ok": true}
}

// agentSessionSetStatus creates or updates the thread's agent session (agents.sessions.setStatus:
// channel_id, thread_ts, status processing|active|suspended|closed, title on creation).
func (s *Server) agentSessionSetStatus(_ *http.Request, p url.Values) map[string]any {
	var ch *channelState
	code := ""
	if p.Get("thread_ts") == "" && s.codeChannels.byID[p.Get("channel_id")] != nil {
		// A code channel's own session: its channel_id alone.
		ch, code = s.botChannel(p.Get("channel_id"), false)
		s.dirty = true // kept with the code channel (state.go)
	} else {
		ch, code = s.botThread(p)
	}
	if code != "" {
		return fail(code)
	}
	switch st := p.Get("status"); st {
	case "processing", "active", "suspended", "closed":
		key := ch.ID + "/" + p.Get("thread_ts")
		if _, ok := s.agentSessions[key]; !ok && p.Get("title") != "" {
			s.titles[key] = p.Get("title")
		}
		s.setAgentStatusLocked(key, st)
		return map[string]any{"ok": true, "status": st, "agent_status": st, "title": s.titles[key]}
	}
	return fail("invalid_status")
}

// agentSessionRename sets the title of the thread's agent session, which setStatus must have
// created (the emulator answers agent_session_not_found otherwise).
func (s *Server) agentSessionRename(_ *http.Request, p url.Values) map[string]any {
	ch, code := s.botChannel(p.Get("channel_id"), false)
	if code != "" {
		return fail(code)
	}
	key := ch.ID + "/" + p.Get("thread_ts")
	if _, ok := s.agentSessions[key]; !ok {
		return fail("agent_session_not_found")
	}
	if p.Get("title") == "" {
		return fail("invalid_arguments")
	}
	s.titles[key] = p.Get("title")
	return map[string]any{"ok": true, "title": p.Get("title")}
}
