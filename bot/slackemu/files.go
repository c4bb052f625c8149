package slackemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// File limits applied by the emulator.
const (
	// maxUploadBytes caps one POST to an upload URL (Slack allows 1 GB; the emulator keeps
	// files in memory and in Options.StateFile).
	maxUploadBytes = 64 << 20
	maxAltTxtRunes = 1_000 // files.getUploadURLExternal answers alt_txt_too_large beyond this
)

// fileState is a file of the workspace: what was shared by Post (or ShareFile), or uploaded
// through files.getUploadURLExternal, the upload URL and files.completeUploadExternal.
type fileState struct {
	File
	user        string // the uploader
	created     int64  // unix seconds
	deleted     bool
	altTxt      string
	snippetType string
	// The upload flow: uploadToken names the upload URL ("" for files shared by Post),
	// length is the declared size, received is set once the bytes arrived and completed
	// once files.completeUploadExternal ran (it may run again: each call shares again).
	uploadToken string
	length      int
	received    bool
	completed   bool
	// A canvas's (canvases.go): access level by channel or person id, the channel it is
	// tabbed in ("" none).
	access map[string]string
	tab    string
}

// meta is the file's metadata without its content, as messages carry it.
func (f *fileState) meta() File {
	m := f.File
	m.Content = nil
	return m
}

// readable reports whether the file may be read (files.info, downloads): it is not deleted
// and its upload, if it was uploaded through the Web API, is complete.
func (f *fileState) readable() bool {
	return !f.deleted && (f.uploadToken == "" || f.completed)
}

// downloadFault makes downloads of a file answer an HTTP status.
type downloadFault struct {
	fileID string // "" matches every file
	status int    // 0 breaks the connection half way through the content
	times  int    // < 1: every download until ClearFaults
}

// newFileIDLocked returns a new file id ("F000000001").
func (s *Server) newFileIDLocked() string {
	s.fileSeq++
	s.dirty = true
	return fmt.Sprintf("F%09d", s.fileSeq)
}

// addFileLocked stores f (replacing a file of the same id) and registers its upload URL.
func (s *Server) addFileLocked(f *fileState) {
	if _, ok := s.files[f.ID]; !ok {
		s.fileOrder = append(s.fileOrder, f.ID)
	}
	s.files[f.ID] = f
	if f.uploadToken != "" {
		s.uploads[f.uploadToken] = f.ID
	}
	s.dirty = true
}

// sharedFileLocked returns the stored file a driver post shares: the known file f.ID names,
// or a new one made from f (its id assigned when empty, its size defaulting to its content's
// length, its types inferred from its name and content when not given).
func (s *Server) sharedFileLocked(f File, user string, created int64) *fileState {
	if fs := s.files[f.ID]; fs != nil && f.ID != "" {
		if f.Content != nil {
			fs.Content = slices.Clone(f.Content)
			fs.Size = cmpOrInt(f.Size, len(f.Content))
			s.dirty = true
		}
		return fs
	}
	f.Content = slices.Clone(f.Content)
	if f.ID == "" {
		f.ID = s.newFileIDLocked()
	}
	f.Size = cmpOrInt(f.Size, len(f.Content))
	f.Title = cmpOr(f.Title, f.Name)
	mt, ft := inferFileTypes(f.Name, f.Content)
	f.Mimetype, f.Filetype = cmpOr(f.Mimetype, mt), cmpOr(f.Filetype, ft)
	fs := &fileState{File: f, user: user, created: created}
	s.addFileLocked(fs)
	return fs
}

func cmpOrInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// Known file types by extension: mimetype, Slack filetype and pretty_type.
var fileTypes = map[string][3]string{
	"txt":  {"text/plain", "text", "Plain Text"},
	"log":  {"text/plain", "text", "Plain Text"},
	"md":   {"text/markdown", "markdown", "Markdown (raw)"},
	"csv":  {"text/csv", "csv", "CSV"},
	"json": {"application/json", "json", "JSON"},
	"yaml": {"text/plain", "yaml", "YAML"},
	"yml":  {"text/plain", "yaml", "YAML"},
	"html": {"text/html", "html", "HTML"},
	"go":   {"text/plain", "go", "Go"},
	"py":   {"text/plain", "python", "Python"},
	"js":   {"text/javascript", "javascript", "JavaScript/JSON"},
	"diff": {"text/plain", "diff", "Diff"},
	"png":  {"image/png", "png", "PNG"},
	"jpg":  {"image/jpeg", "jpg", "JPEG"},
	"jpeg": {"image/jpeg", "jpg", "JPEG"},
	"gif":  {"image/gif", "gif", "GIF"},
	"pdf":  {"application/pdf", "pdf", "PDF"},
	"zip":  {"application/zip", "zip", "Zip"},
	"gz":   {"application/gzip", "gzip", "GZip"},
}

// inferFileTypes returns the mimetype and Slack filetype of a file named name holding
// content: from the extension when known, else sniffed from the content ("text" or "binary").
func inferFileTypes(name string, content []byte) (mimetype, filetype string) {
	ext := extension(name)
	if t, ok := fileTypes[ext]; ok {
		return t[0], t[1]
	}
	mt, _, _ := mime.ParseMediaType(http.DetectContentType(content))
	switch {
	case ext != "":
		filetype = ext
	case strings.HasPrefix(mt, "text/") || utf8.Valid(content):
		filetype = "text"
	default:
		filetype = "binary"
	}
	return mt, filetype
}

// extension is name's extension in lower case, without the dot.
func extension(name string) string {
	return strings.ToLower(strings.TrimPrefix(path.Ext(name), "."))
}

func prettyType(filetype string) string {
	for _, t := range fileTypes {
		if t[1] == filetype {
			return t[2]
		}
	}
	switch filetype {
	case CanvasFiletype:
		return "Canvas"
	case "text":
		return "Plain Text"
	case "binary":
		return "Binary"
	}
	return strings.ToUpper(filetype)
}

// fileURLs returns url_private and url_private_download of f, served by the emulator.
func (s *Server) fileURLs(f *fileState) (string, string) {
	base := s.URL() + "/files-pri/" + s.opts.TeamID + "-" + f.ID + "/"
	name := url.PathEscape(cmpOr(f.Name, "file"))
	return base + name, base + "download/" + name
}

// renderFileLocked is f in Web API shape: a message's files[] element, or with full set
// files.info's file (channels, groups, ims and shares where the bot can see them). A deleted
// file is a tombstone in messages.
func (s *Server) renderFileLocked(f *fileState, full bool) map[string]any {
	if f.deleted {
		return map[string]any{"id": f.ID, "mode": "tombstone"}
	}
	private, download := s.fileURLs(f)
	var shares map[string]any
	var channels, groups, ims []string
	public := false
	if full {
		shares, channels, groups, ims = s.fileSharesLocked(f.ID)
		public = len(channels) > 0
	} else {
		public = s.sharedPubliclyLocked(f.ID)
	}
	name := cmpOr(f.Name, "file")
	out := map[string]any{
		"id": f.ID, "created": f.created, "timestamp": f.created, "name": name, "title": cmpOr(f.Title, name),
		"mimetype": f.Mimetype, "filetype": f.Filetype, "pretty_type": prettyType(f.Filetype),
		"user": f.user, "user_team": s.opts.TeamID, "editable": false, "size": f.Size, "mode": "hosted",
		"is_external": false, "external_type": "", "is_public": public, "public_url_shared": false,
		"display_as_bot": false, "username": "", "url_private": private, "url_private_download": download,
		"permalink":        "https://" + s.opts.TeamDomain + ".slack.com/files/" + f.user + "/" + f.ID + "/" + url.PathEscape(name),
		"permalink_public": "https://slack-files.com/" + s.opts.TeamID + "-" + f.ID + "-" + fmt.Sprintf("%010x", f.created),
		"has_rich_preview": false, "file_access": "visible",
	}
	if f.altTxt != "" {
		out["alt_txt"] = f.altTxt
	}
	if f.isCanvas() {
		// A canvas's link opens the canvas (/docs/<team>/<id>), not a file page.
		out["permalink"] = "https://" + s.opts.TeamDomain + ".slack.com/docs/" + s.opts.TeamID + "/" + f.ID
		out["editable"] = true
	}
	if full {
		out["channels"], out["groups"], out["ims"] = channels, groups, ims
		out["shares"] = shares
		out["comments_count"], out["is_starred"], out["has_more_shares"] = 0, false, false
	}
	return out
}

// fileSharesLocked lists the messages that carry file id, in files.info's shape: shares
// {"public":{C…:[…]},"private":{G…|D…:[…]}} (public channels, and private conversations the bot
// is in) and the ids of those public channels, private channels and DMs. Each share has ts,
// channel_name, team_id and share_user_id; a thread reply's also thread_ts and its thread's
// reply_count, reply_users, reply_users_count and latest_reply (a top-level message's, when it
// has replies).
func (s *Server) fileSharesLocked(id string) (shares map[string]any, channels, groups, ims []string) {
	public, private := map[string]any{}, map[string]any{}
	channels, groups, ims = []string{}, []string{}, []string{}
	for _, cid := range s.channelOrder {
		ch := s.channels[cid]
		isPrivate := ch.Private || ch.IM || ch.MPIM
		if isPrivate && !ch.members[s.opts.BotUserID] {
			continue
		}
		var list []map[string]any
		for _, m := range ch.msgs {
			if m.Subtype == "tombstone" || !slices.ContainsFunc(m.Files, func(f File) bool { return f.ID == id }) {
				continue
			}
			sh := map[string]any{"ts": m.TS, "channel_name": ch.Name, "team_id": s.opts.TeamID, "share_user_id": m.User}
			thread := m
			if m.ThreadTS != "" {
				sh["thread_ts"] = m.ThreadTS
				thread = ch.byTS[m.ThreadTS]
			} else if m.ReplyCount > 0 {
				sh["thread_ts"] = m.TS
			}
			if thread != nil && thread.ReplyCount > 0 {
				sh["reply_count"], sh["reply_users"] = thread.ReplyCount, slices.Clone(thread.ReplyUsers)
				sh["reply_users_count"], sh["latest_reply"] = len(thread.ReplyUsers), thread.LatestReply
			}
			list = append(list, sh)
		}
		if len(list) == 0 {
			continue
		}
		switch {
		case ch.IM:
			private[ch.ID] = list
			ims = append(ims, ch.ID)
		case isPrivate:
			private[ch.ID] = list
			groups = append(groups, ch.ID)
		default:
			public[ch.ID] = list
			channels = append(channels, ch.ID)
		}
	}
	shares = map[string]any{}
	if len(public) > 0 {
		shares["public"] = public
	}
	if len(private) > 0 {
		shares["private"] = private
	}
	return shares, channels, groups, ims
}

// sharedPubliclyLocked reports whether a message of a public channel carries file id.
func (s *Server) sharedPubliclyLocked(id string) bool {
	for _, ch := range s.channels {
		if ch.Private || ch.IM || ch.MPIM {
			continue
		}
		for _, m := range ch.msgs {
			if slices.ContainsFunc(m.Files, func(f File) bool { return f.ID == id }) {
				return true
			}
		}
	}
	return false
}

// botMayReadLocked reports whether the bot can see f: it uploaded f, or f is in a message of
// a conversation the bot is in.
func (s *Server) botMayReadLocked(f *fileState) bool {
	if f.user == s.opts.BotUserID {
		return true
	}
	for _, ch := range s.channels {
		if !ch.members[s.opts.BotUserID] {
			continue
		}
		for _, m := range ch.msgs {
			if slices.ContainsFunc(m.Files, func(x File) bool { return x.ID == f.ID }) {
				return true
			}
		}
	}
	return false
}

// filesGetUploadURLExternal reserves a file id and an upload URL (files.getUploadURLExternal:
// filename and length required, length above 0; snippet_type, alt_txt).
func (s *Server) filesGetUploadURLExternal(_ *http.Request, p url.Values) map[string]any {
	length, err := strconv.Atoi(p.Get("length"))
	if p.Get("filename") == "" || err != nil || length <= 0 {
		e := fail("invalid_arguments")
		e["response_metadata"] = map[string]any{"messages": []string{"[ERROR] filename and a length above 0 are required"}}
		return e
	}
	if utf8.RuneCountInString(p.Get("alt_txt")) > maxAltTxtRunes {
		return fail("alt_txt_too_large")
	}
	name := p.Get("filename")
	mt, ft := inferFileTypes(name, nil)
	f := &fileState{
		File: File{ID: s.newFileIDLocked(), Name: name, Title: name, Mimetype: mt, Filetype: cmpOr(p.Get("snippet_type"), ft)},
		user: s.opts.BotUserID, created: time.Now().Unix(), altTxt: p.Get("alt_txt"), snippetType: p.Get("snippet_type"),
		uploadToken: strings.ReplaceAll(uuid.NewString(), "-", ""), length: length,
	}
	if f.snippetType != "" {
		f.Mimetype = "text/plain"
	}
	s.addFileLocked(f)
	return map[string]any{"ok": true, "upload_url": s.URL() + "/upload/v1/" + f.uploadToken, "file_id": f.ID}
}

// handleUpload serves POST /upload/v1/{token}: the bytes of a file reserved by
// files.getUploadURLExternal, raw or multipart (the first file part, e.g. slack-go's "file"
// or curl's -F filename=@…). It answers 200 "OK - <bytes>", 404 for an unknown URL or one
// whose file was already completed or deleted.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	data, err := readUpload(w, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token := strings.TrimPrefix(r.URL.Path, "/upload/v1/")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		return
	}
	f := s.files[s.uploads[token]]
	if f == nil || f.completed || f.deleted {
		http.Error(w, "invalid upload url", http.StatusNotFound)
		return
	}
	f.Content, f.Size, f.received = data, len(data), true
	if _, known := fileTypes[extension(f.Name)]; !known && f.snippetType == "" {
		f.Mimetype, f.Filetype = inferFileTypes(f.Name, data)
	}
	s.dirty = true
	s.notifyLocked()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "OK - %d", len(data))
}

// readUpload returns the file bytes of an upload request: the first file part of a
// multipart body (or its "file" or "filename" field), else the raw body.
func readUpload(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUploadBytes)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "multipart/form-data" {
		return io.ReadAll(r.Body)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, err
	}
	var field []byte
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return nil, err
		}
		if part.FileName() != "" {
			return b, nil
		}
		if name := part.FormName(); field == nil && (name == "file" || name == "filename") {
			field = b
		}
	}
	if field == nil {
		return nil, errors.New("no file in the multipart body")
	}
	return field, nil
}

// filesCompleteUploadExternal shares uploaded files (files.completeUploadExternal: files
// [{"id","title"}], channel_id and/or channels, thread_ts, initial_comment, blocks): one bot
// message with subtype file_share per conversation, carrying them all. Without a channel the
// files stay private. Completing a file again shares it again.
func (s *Server) filesCompleteUploadExternal(_ *http.Request, p url.Values) map[string]any {
	var items []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(p.Get("files")), &items); err != nil || len(items) == 0 {
		return fail("invalid_arguments")
	}
	files := make([]*fileState, 0, len(items))
	for _, it := range items {
		f := s.files[it.ID]
		if f == nil || f.deleted || f.uploadToken == "" || !f.received || f.user != s.opts.BotUserID {
			return fail("file_not_found")
		}
		files = append(files, f)
	}
	var targets []*channelState
	ids := []string{}
	if c := p.Get("channel_id"); c != "" {
		ids = append(ids, c)
	}
	for c := range strings.SplitSeq(p.Get("channels"), ",") {
		if c = strings.TrimSpace(c); c != "" && !slices.Contains(ids, c) {
			ids = append(ids, c)
		}
	}
	for _, id := range ids {
		ch, code := s.botChannel(s.dmFor(id), true)
		if code != "" {
			return fail(code)
		}
		if ch.Archived {
			return fail("is_archived")
		}
		targets = append(targets, ch)
	}
	comment := p.Get("initial_comment")
	var blocks json.RawMessage
	if comment == "" {
		var bad map[string]any
		if blocks, bad = validateBlocks(p.Get("blocks")); bad != nil {
			return bad
		}
	}
	for i, f := range files {
		f.completed = true
		if items[i].Title != "" {
			f.Title = items[i].Title
		}
	}
	s.dirty = true
	for _, ch := range targets {
		m := &Message{
			Channel: ch.ID, TS: s.nextTS(), User: s.opts.BotUserID, BotID: s.opts.BotID, AppID: s.opts.AppID,
			Subtype: "file_share", Text: comment, Blocks: blocks,
		}
		for _, f := range files {
			m.Files = append(m.Files, f.meta())
		}
		if parent := ch.byTS[p.Get("thread_ts")]; parent != nil && parent.ThreadTS == "" {
			m.ThreadTS, m.ParentUserID = parent.TS, parent.User
			s.clearStatusLocked(ch.ID, parent.TS)
		}
		s.insertLocked(ch, m)
		s.publishNewLocked(ch, m)
	}
	out := make([]map[string]any, 0, len(files))
	for _, f := range files {
		out = append(out, s.renderFileLocked(f, false))
	}
	return map[string]any{"ok": true, "files": out}
}

// dmFor maps a user id (as files.completeUploadExternal's channels may hold) to the bot's DM
// with that user; any other id is returned as is.
func (s *Server) dmFor(id string) string {
	if !strings.HasPrefix(id, "U") && !strings.HasPrefix(id, "W") {
		return id
	}
	for _, cid := range s.channelOrder {
		if ch := s.channels[cid]; ch.IM && ch.members[id] && ch.members[s.opts.BotUserID] {
			return ch.ID
		}
	}
	return id
}

// filesInfo answers files.info (file): the file with its shares; file_not_found for an unknown
// file, one the bot cannot see or an upload not completed, file_deleted for a deleted one.
func (s *Server) filesInfo(_ *http.Request, p url.Values) map[string]any {
	f := s.files[p.Get("file")]
	switch {
	case f == nil || (f.uploadToken != "" && !f.completed) || !s.botMayReadLocked(f):
		return fail("file_not_found")
	case f.deleted:
		return fail("file_deleted")
	}
	return map[string]any{
		"ok": true, "file": s.renderFileLocked(f, true), "comments": []any{},
		"paging":            map[string]any{"count": 100, "total": 0, "page": 1, "pages": 0},
		"response_metadata": map[string]any{"next_cursor": ""},
	}
}

// filesDelete answers files.delete (file): the bot may delete the files it uploaded.
func (s *Server) filesDelete(_ *http.Request, p url.Values) map[string]any {
	f := s.files[p.Get("file")]
	switch {
	case f == nil || !s.botMayReadLocked(f):
		return fail("file_not_found")
	case f.deleted:
		return fail("file_deleted")
	case f.user != s.opts.BotUserID:
		return fail("cant_delete_file")
	}
	s.deleteFileLocked(f)
	return map[string]any{"ok": true}
}

func (s *Server) deleteFileLocked(f *fileState) {
	f.deleted, f.Content = true, nil
	if f.uploadToken != "" {
		delete(s.uploads, f.uploadToken)
	}
	s.dirty = true
}

// handleFileDownload serves GET /files-pri/{team}-{file}/{name} and
// /files-pri/{team}-{file}/download/{name}: the file's bytes with its Content-Type (and an
// attachment Content-Disposition for the download URL) to the bot token in a Bearer header.
// No or another token, or a file the bot cannot see, answers 403 (or, with
// Options.FileAuthRedirect, a redirect to a sign-in page); an unknown or deleted file 404.
func (s *Server) handleFileDownload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	key, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/files-pri/"), "/")
	team, id, _ := strings.Cut(key, "-")
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	status, f, broken := s.downloadLocked(team, id, strings.TrimSpace(bearer))
	switch {
	case status == http.StatusForbidden && s.opts.FileAuthRedirect:
		http.Redirect(w, r, s.URL()+"/signin?"+url.Values{"redir": {r.URL.Path}}.Encode(), http.StatusFound)
		return
	case status != http.StatusOK:
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, http.StatusText(status), status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", cmpOr(f.Mimetype, "application/octet-stream"))
	h.Set("Content-Length", strconv.Itoa(len(f.Content)))
	if strings.HasPrefix(rest, "download/") {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": cmpOr(f.Name, "file")}))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodGet {
		return
	}
	if broken {
		// Half the bytes, then the connection breaks: the client reads an unexpected EOF. (A
		// connection closed before any answer would be retried by Go's transport for a GET.)
		_, _ = w.Write(f.Content[:len(f.Content)/2])
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	_, _ = w.Write(f.Content)
}

// downloadLocked counts a download of file id by a client holding token and returns the HTTP
// status to answer and, for 200, the file (its Content is never changed in place, so it may be
// written after s.mu is released) and whether the transfer is to break half way (a fault).
func (s *Server) downloadLocked(team, id, token string) (int, File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return http.StatusServiceUnavailable, File{}, false
	}
	defer s.notifyLocked()
	s.dlAttempts[id]++
	f := s.files[id]
	switch {
	case token != s.opts.BotToken || (f != nil && f.readable() && !s.botMayReadLocked(f)):
		return http.StatusForbidden, File{}, false
	case team != s.opts.TeamID || f == nil || !f.readable():
		return http.StatusNotFound, File{}, false
	}
	if ft := s.takeDownloadFaultLocked(id); ft != nil {
		if ft.status == 0 {
			return http.StatusOK, f.File, true
		}
		return ft.status, File{}, false
	}
	s.downloads[id]++
	return http.StatusOK, f.File, false
}

// handleSignin is the page FileAuthRedirect sends unauthorised downloads to, as
// files.slack.com sends them to the workspace's sign-in page.
func (s *Server) handleSignin(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, "<!DOCTYPE html><html><head><title>Sign in | Slack</title></head><body>Sign in to "+s.opts.TeamName+"</body></html>")
}

func (s *Server) takeDownloadFaultLocked(id string) *downloadFault {
	f, _ := takeFault(&s.dlfaults, func(f *downloadFault) bool { return f.fileID == "" || f.fileID == id },
		func(f *downloadFault) *int { return &f.times })
	return f
}

// dropConnection closes the client's connection without an answer: the client sees a
// transport error (EOF) and cannot tell whether the request took effect.
func dropConnection(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// InjectDownloadFault makes the next times downloads of fileID ("" = any file) answer HTTP
// status instead of the file (429 with Retry-After: 1); status 0 breaks the transfer: 200 and
// half the bytes, then the connection closes (the client reads an unexpected EOF). times < 1
// means every download until ClearFaults. Only authorised downloads of
// readable files hit a fault; they count in DownloadAttempts, not in Downloads.
func (s *Server) InjectDownloadFault(fileID string, status, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dlfaults = append(s.dlfaults, &downloadFault{fileID: fileID, status: status, times: times})
}

// Downloads returns how many times fileID's content was served (HTTP 200).
func (s *Server) Downloads(fileID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads[fileID]
}

// DownloadAttempts returns how many GETs fileID's URLs received, refused and failed ones included.
func (s *Server) DownloadAttempts(fileID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dlAttempts[fileID]
}

// UploadedFile returns file id with its content: a file shared by Post or ShareFile, or uploaded
// through the upload URL (completed or not; Content is nil until the bytes arrived). False for
// an unknown or deleted file.
func (s *Server) UploadedFile(id string) (File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil || f.deleted {
		return File{}, false
	}
	out := f.File
	out.Content = slices.Clone(f.Content)
	return out, true
}

// DeleteFile deletes file id as its owner would: its URLs answer 404, files.info file_deleted,
// and the messages that carried it show a tombstone ({"id","mode":"tombstone"}) in its place.
// No event is fired.
func (s *Server) DeleteFile(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil || f.deleted {
		return fmt.Errorf("delete file %s: %w", id, ErrNotFound)
	}
	s.deleteFileLocked(f)
	s.notifyLocked()
	return nil
}

// FileURL returns file id's url_private_download, "" for an unknown file.
func (s *Server) FileURL(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil {
		return ""
	}
	_, download := s.fileURLs(f)
	return download
}
