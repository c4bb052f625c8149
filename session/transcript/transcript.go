// Package transcript renders a session's events as a readable record: plain text, Markdown,
// HTML or JSON.
//
// By default a transcript is the conversation: user and assistant messages, and tool calls
// with their results, compactly. Options.All adds every marker event (turns, deliveries,
// lifecycle, errors) and full tool output. Markers are recognised by their type, never by
// their position. Edits show the latest text with "(edited)"; a deletion shows "[message
// deleted]", and what the message said only with Options.RevealDeleted, which callers grant
// to auditors alone. Mentions are shown with the display names captured when the message
// was stored, so a later rename does not rewrite history. A user entry lists the files shared
// with that message (file_ref, matched by ts) with what became of their content (file_fetched:
// stored under its sha256, too large, failed, or not fetched); a file the agent handed back
// (file_upload, shared) is an assistant entry of its own. A deleted message's files are shown
// only with RevealDeleted.
package transcript

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/thread"
)

// Format is an output format.
type Format string

// Formats.
const (
	FormatText     Format = "text"
	FormatMarkdown Format = "md"
	FormatHTML     Format = "html"
	FormatJSON     Format = "json"
)

// ParseFormat accepts text, md (or markdown), html and json.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "text", "txt":
		return FormatText, nil
	case "md", "markdown":
		return FormatMarkdown, nil
	case "html":
		return FormatHTML, nil
	case "json":
		return FormatJSON, nil
	}
	return "", fmt.Errorf("unknown transcript format %q: use text, md, html or json", s)
}

// Options configure Build and Render. Zero values take defaults.
type Options struct {
	Format Format // default FormatText
	// All adds marker events and full tool output; by default only the conversation is shown.
	All bool
	// Location shows times in the reader's timezone ("2006-01-02 15:04:05 MST"); nil shows
	// them as ISO 8601 in UTC.
	Location *time.Location
	// RevealDeleted shows what a deleted message said, and the text of a memory note forgotten
	// since a turn was offered it. Only auditors may get it.
	RevealDeleted bool
	// BotName names the assistant; default "logbook".
	BotName string
	// Permalink links the Slack thread in the header, when set.
	Permalink string
	// ChannelName shows the channel by name (#general) instead of its id, when set.
	ChannelName string
	// ToolLines is how many lines of tool input and output the compact view shows; default 8.
	ToolLines int
	// FileURL, when set, links the stored content of a file (by its sha256) in the HTML and
	// Markdown formats, and the HTML shows images inline; nil: files are listed, not linked.
	FileURL func(sha256 string) string
	// Notes are the channel memory notes the session's turn_settings events name, as
	// session.Store.NotesByID returns them for NoteIDs: a turn that was offered notes shows
	// them, in every view. A note missing from Notes is shown by its id alone.
	Notes []session.Note
	// Forks are the sessions branched from this one (session.Store.Forks), shown in the
	// header; the parent of a fork is read from its own first event.
	Forks []session.Fork
}

// ForkLink is one end of a fork's reference: the other session, its thread, and the parent's
// seq the fork was taken at.
type ForkLink struct {
	Session  session.ID `json:"session_id"`
	Channel  string     `json:"channel"`
	ThreadTS string     `json:"thread_ts"`
	Seq      int64      `json:"seq"`
	Hash     string     `json:"hash,omitempty"` // the parent's event's hash, on a fork's link to its parent
}

// String is the link in one line.
func (l ForkLink) String() string {
	return fmt.Sprintf("session %s (thread %s %s) at seq %d", l.Session, l.Channel, l.ThreadTS, l.Seq)
}

// Transcript is a session made readable.
type Transcript struct {
	SessionID session.ID `json:"session_id"`
	Team      string     `json:"team"`
	Channel   string     `json:"channel"`
	// ChannelName is the channel's name when the caller knew it (Options.ChannelName).
	ChannelName string `json:"channel_name,omitempty"`
	ThreadTS    string `json:"thread_ts"`
	Title       string `json:"title,omitempty"`
	Permalink   string `json:"permalink,omitempty"`
	All         bool   `json:"all"` // markers and full tool output included
	// ForkOf is the session this one was branched from (its session_forked event); Forks
	// those branched from it (Options.Forks).
	ForkOf *ForkLink  `json:"fork_of,omitempty"`
	Forks  []ForkLink `json:"forks,omitempty"`
	// EvalOf is, for an eval record (a what-if: its replay_started event), the session whose
	// turn it ran again, at the user message it ran from.
	EvalOf  *ForkLink `json:"eval_of,omitempty"`
	Entries []Entry   `json:"entries"`

	opts Options
}

// Kind of an entry.
const (
	KindUser      = "user"
	KindAssistant = "assistant"
	KindTool      = "tool"
	KindMarker    = "marker"
)

// Entry is one line of the transcript.
type Entry struct {
	Seq      int64        `json:"seq"`
	Type     session.Type `json:"type"`
	Kind     string       `json:"kind"` // KindUser, KindAssistant, KindTool, KindMarker
	Time     time.Time    `json:"time"`
	TimeText string       `json:"time_text"` // Time as the options ask
	Author   string       `json:"author,omitempty"`
	AuthorID string       `json:"author_id,omitempty"`
	TS       string       `json:"ts,omitempty"` // the Slack ts of a user message
	// Text is readable: Slack markup decoded, mentions as display names, emoji shortcodes as
	// emoji. Empty for a deleted message.
	Text        string `json:"text,omitempty"`
	Edited      bool   `json:"edited,omitempty"`
	Deleted     bool   `json:"deleted,omitempty"`
	DeletedText string `json:"deleted_text,omitempty"` // only with RevealDeleted
	Tool        *Tool  `json:"tool,omitempty"`
	// Files are the files shared with a user message (matched by its ts), or the file an
	// assistant entry of type file_upload handed back to the thread.
	Files  []File `json:"files,omitempty"`
	Marker string `json:"marker,omitempty"` // what a marker event says, in one line
	// Notes are the channel memory notes a turn was offered (a turn_settings entry).
	Notes []Note `json:"notes,omitempty"`
	// Unposted marks an assistant text that never reached Slack: the words that came with
	// tool calls, or a reply whose delivery is not recorded. It is shown as such, not as a
	// message of the thread.
	Unposted bool `json:"unposted,omitempty"`
}

// unpostedLabel names an assistant text that never reached Slack, in every format.
const unpostedLabel = "(not posted to Slack)"

// Tool is a tool call with its result, when one was recorded.
type Tool struct {
	CallID       string `json:"call_id"`
	Name         string `json:"name"`
	Input        string `json:"input"`
	HasResult    bool   `json:"has_result"`
	Output       string `json:"output,omitempty"`
	IsError      bool   `json:"is_error,omitempty"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	DurationMS   int64  `json:"duration_ms,omitempty"`
	Truncated    bool   `json:"truncated,omitempty"` // the sandbox cut the output
	Synthetic    bool   `json:"synthetic,omitempty"`
	StoppedBy    string `json:"stopped_by,omitempty"` // a stop cancelled it while it ran
	ResultSeq    int64  `json:"result_seq,omitempty"`
	HiddenLines  int    `json:"hidden_lines,omitempty"`  // output lines left out of the compact view
	HiddenInputs int    `json:"hidden_inputs,omitempty"` // input lines left out of the compact view
	// Images are the images the tool returned (an MCP tool's), kept in the file store.
	Images []File `json:"images,omitempty"`
	// Approval is what a person decided on the call before it ran (approved, denied, …, by
	// whom), when the policy asked: "approved by U0000001".
	Approval string `json:"approval,omitempty"`
}

// Note statuses: why a note offered to a turn shows no text.
const (
	// NoteForgotten: someone removed the note since (/logbook forget); its text is shown only
	// with Options.RevealDeleted, like a deleted message's.
	NoteForgotten = "forgotten"
	// NotePurged: retention emptied the note's text.
	NotePurged = "purged"
	// NoteUnknown: the note was not read (Options.Notes has no such note).
	NoteUnknown = "unknown"
)

// Note is a channel memory note a turn was offered, as the channel's memory holds it now.
type Note struct {
	ID int64 `json:"id"`
	// Text is the note ("" when Status says why not).
	Text string `json:"text,omitempty"`
	// By is who asked for it: a Slack user id, or "the agent".
	By string    `json:"by,omitempty"`
	At time.Time `json:"at,omitzero"` // when it was added
	// Status is "" for a note offered still, else NoteForgotten, NotePurged or NoteUnknown.
	Status      string `json:"status,omitempty"`
	ForgottenBy string `json:"forgotten_by,omitempty"`
	// ForgottenText is a forgotten note's text, only with Options.RevealDeleted.
	ForgottenText string `json:"forgotten_text,omitempty"`
}

// Label is the note in one line, without its text: "note 3 by U0000001, 2024-05-01 (forgotten
// by U0000002)".
func (n Note) Label() string {
	s := fmt.Sprintf("note %d", n.ID)
	if n.By != "" {
		s += " by " + n.By
	}
	if !n.At.IsZero() {
		s += ", " + n.At.UTC().Format("2006-01-02 15:04 UTC")
	}
	switch n.Status {
	case NoteForgotten:
		s += " (forgotten since"
		if n.ForgottenBy != "" {
			s += " by " + n.ForgottenBy
		}
		s += ")"
	case NotePurged:
		s += " (text purged by retention)"
	case NoteUnknown:
		s += " (not found in the channel's memory)"
	}
	return s
}

// NoteIDs are the ids of the channel memory notes the turn_settings events offered, each once,
// in the order they first appear: what Options.Notes needs.
func NoteIDs(events []session.Event) []int64 {
	var ids []int64
	seen := map[int64]bool{}
	for _, e := range events {
		var m session.TurnSettings
		if e.Type != session.TypeTurnSettings || e.Decode(&m) != nil {
			continue
		}
		for _, id := range m.Memory {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// offeredNotes are the notes a turn_settings event names, as opts.Notes holds them (notes,
// by id).
func offeredNotes(e session.Event, notes map[int64]session.Note, opts Options) []Note {
	var m session.TurnSettings
	if e.Decode(&m) != nil {
		return nil
	}
	var out []Note
	for _, id := range m.Memory {
		sn, ok := notes[id]
		n := Note{ID: id}
		switch {
		case !ok:
			n.Status = NoteUnknown
		default:
			n.By, n.At = sn.By, sn.At.UTC()
			if sn.ByKind == session.NoteByAgent {
				n.By = "the agent"
			}
			switch {
			case sn.Purged:
				n.Status = NotePurged
			case sn.Forgotten:
				n.Status, n.ForgottenBy = NoteForgotten, sn.ForgottenBy
				if opts.RevealDeleted {
					n.ForgottenText = sn.Text
				}
			default:
				n.Text = sn.Text
			}
		}
		out = append(out, n)
	}
	return out
}

// File statuses beyond session.FileStored, FileTooLarge and FileFailed.
const (
	// FileNotFetched is a file shared in the thread whose content no fetch recorded (the
	// deployment keeps no files, or the turn that would fetch it has not run).
	FileNotFetched = "not_fetched"
	// FileShared is a file the agent handed back, shared in the thread.
	FileShared = "shared"
)

// File is a file shared with a message, or handed back by the agent, as the log records it.
type File struct {
	FileID   string `json:"file_id,omitempty"` // Slack's id
	Name     string `json:"name"`
	Mimetype string `json:"mimetype,omitempty"`
	Size     int64  `json:"size"`             // bytes
	SHA256   string `json:"sha256,omitempty"` // hex, when the content is stored
	// Status is session.FileStored, FileTooLarge or FileFailed, FileNotFetched, or
	// FileShared (handed back by the agent).
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"` // why it was not stored
	// URL links the stored content (Options.FileURL); not part of the JSON.
	URL string `json:"-"`
}

// Stored reports whether the file's content is kept (under SHA256).
func (f File) Stored() bool {
	return f.SHA256 != "" && (f.Status == session.FileStored || f.Status == FileShared)
}

// Image reports whether the file is an image a page may show inline (PNG, JPEG, GIF, WebP),
// by its type or, when none is recorded, its name's extension.
func (f File) Image() bool {
	mt := f.Mimetype
	if strings.TrimSpace(mt) == "" {
		mt = mime.TypeByExtension(strings.ToLower(path.Ext(f.Name)))
	}
	switch strings.ToLower(strings.TrimSpace(strings.SplitN(mt, ";", 2)[0])) {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

// ShortSHA is the first 12 hex digits of the hash, enough to tell files apart when reading.
func (f File) ShortSHA() string {
	if len(f.SHA256) > 12 {
		return f.SHA256[:12]
	}
	return f.SHA256
}

// SizeText is the size for people: 512 B, 3.4 KB, 45.0 MB.
func (f File) SizeText() string { return session.FileSize(f.Size) }

// StatusText says in a few words what became of a file that is not stored ("" when stored).
func (f File) StatusText() string {
	var s string
	switch f.Status {
	case session.FileStored, FileShared:
		if f.SHA256 != "" {
			return ""
		}
		s = "content not recorded"
	case session.FileTooLarge:
		s = "too large, not stored"
	case session.FileFailed:
		s = "fetch failed, not stored"
	case FileNotFetched:
		s = "not fetched"
	default:
		s = strings.ReplaceAll(cmp.Or(f.Status, "unknown"), "_", " ")
	}
	if r := strings.TrimSuffix(strings.TrimSpace(f.Reason), "."); r != "" {
		s += ": " + r
	}
	return s
}

// describe is the file in one line, without its name: type, size, and the hash or what
// became of it.
func (f File) describe() string {
	s := fmt.Sprintf("(%s, %s)", cmp.Or(f.Mimetype, "unknown type"), f.SizeText())
	if st := f.StatusText(); st != "" {
		return s + " — " + st
	}
	return s + " sha256 " + f.ShortSHA()
}

// sharedFiles are the files shared with each message, by its ts, in log order, with what
// became of their content.
func sharedFiles(events []session.Event) map[string][]File {
	fetched := map[string]session.FileFetched{} // FileID/TS -> the last record
	for _, e := range events {
		var ff session.FileFetched
		if e.Type == session.TypeFileFetched && e.Decode(&ff) == nil {
			fetched[ff.FileID+"/"+ff.TS] = ff
		}
	}
	out := map[string][]File{}
	seen := map[string]bool{}
	for _, e := range events {
		var ref session.FileRef
		if e.Type != session.TypeFileRef || e.Decode(&ref) != nil || ref.TS == "" || seen[ref.FileID+"/"+ref.TS] {
			continue
		}
		seen[ref.FileID+"/"+ref.TS] = true
		f := File{FileID: ref.FileID, Name: cmp.Or(ref.Name, ref.Title, ref.FileID), Mimetype: ref.Mimetype, Size: ref.Size, Status: FileNotFetched}
		if ff, ok := fetched[ref.FileID+"/"+ref.TS]; ok {
			f.Status, f.Reason = ff.Status, ff.Reason
			f.Name, f.Mimetype = cmp.Or(ff.Name, f.Name), cmp.Or(ff.Mimetype, f.Mimetype)
			if ff.Status == session.FileStored {
				f.SHA256, f.Size = ff.SHA256, ff.Size
			}
		}
		out[ref.TS] = append(out[ref.TS], f)
	}
	return out
}

// fileTS is the ts of the message a file_ref or file_fetched event is about.
func fileTS(e session.Event) (string, bool) {
	var v struct {
		TS string `json:"ts"`
	}
	if (e.Type != session.TypeFileRef && e.Type != session.TypeFileFetched) || json.Unmarshal(e.Payload, &v) != nil || v.TS == "" {
		return "", false
	}
	return v.TS, true
}

// linkFiles sets the URL of every stored file when the options link them.
func linkFiles(fs []File, opts Options) []File {
	if opts.FileURL == nil {
		return fs
	}
	for i := range fs {
		if fs[i].Stored() {
			fs[i].URL = opts.FileURL(fs[i].SHA256)
		}
	}
	return fs
}

// Build makes a transcript of sess from its events (in seq order, as session.Store.Events
// returns them).
func Build(sess session.Session, events []session.Event, opts Options) *Transcript {
	opts.BotName = cmp.Or(opts.BotName, "logbook")
	opts.ToolLines = cmp.Or(opts.ToolLines, 8)
	t := &Transcript{
		SessionID: sess.ID, Team: sess.Key.Team, Channel: sess.Key.Channel, ChannelName: opts.ChannelName, ThreadTS: sess.Key.ThreadTS,
		Permalink: opts.Permalink, All: opts.All, Entries: []Entry{}, opts: opts,
	}
	b := builder{t: t, th: thread.Fold(events), files: sharedFiles(events), turns: thread.FoldTurns(events), notes: map[int64]session.Note{}, opts: opts}
	for _, n := range opts.Notes {
		b.notes[n.ID] = n
	}
	t.Title = b.th.Title
	if f, ok, err := session.ForkedBy(events); err == nil && ok {
		t.ForkOf = &ForkLink{Session: f.Parent, Channel: f.ParentChannel, ThreadTS: f.ParentThreadTS, Seq: f.Seq, Hash: f.Hash}
	}
	if r, ok, err := session.ReplayOf(events); err == nil && ok {
		t.EvalOf = &ForkLink{Session: r.Original, Channel: r.OriginalChannel, ThreadTS: r.OriginalThreadTS, Seq: r.Seq, Hash: r.Hash}
	}
	for _, f := range opts.Forks {
		t.Forks = append(t.Forks, ForkLink{Session: f.Session, Channel: f.Channel, ThreadTS: f.ThreadTS, Seq: f.Seq})
	}
	for _, it := range b.th.Items {
		b.item(it)
	}
	for i := range t.Entries {
		t.Entries[i].TimeText = formatTime(t.Entries[i].Time, opts.Location)
	}
	return t
}

// builder makes a transcript's entries from the folds of its events.
type builder struct {
	t     *Transcript
	th    *thread.Thread
	files map[string][]File // by the ts of the message that shared them
	turns *thread.Turns
	notes map[int64]session.Note // Options.Notes by id
	opts  Options
}

func (b *builder) add(en Entry) { b.t.Entries = append(b.t.Entries, en) }

// marker adds en as a marker line, shown only with Options.All.
func (b *builder) marker(en Entry, format string, args ...any) {
	if b.opts.All {
		en.Kind, en.Marker = KindMarker, fmt.Sprintf(format, args...)
		b.add(en)
	}
}

// item adds the entry of one item of the fold, if it has one.
func (b *builder) item(it thread.Item) {
	e := it.Event
	en := Entry{Seq: e.Seq, Type: e.Type, Time: e.CreatedAt.UTC(), AuthorID: e.Actor.ID}
	if e.Payload == nil {
		if e.Type.Conversation() || b.opts.All {
			en.Kind, en.Marker = KindMarker, fmt.Sprintf("%s (payload purged by retention)", e.Type)
			b.add(en)
		}
		return
	}
	switch it.Kind {
	case thread.KindUnreadable:
		// An unreadable payload is a visible marker entry, never a silent gap.
		en.Kind, en.Marker = KindMarker, fmt.Sprintf("%s event with an unreadable payload", e.Type)
		b.add(en)
	case thread.KindUser:
		b.user(en, it.Message)
	case thread.KindChange:
		verb := "edited"
		if e.Type == session.TypeUserMessageDeleted {
			verb = "deleted"
		}
		b.marker(en, "message %s %s", b.th.Items[it.Target].Message.TS, verb)
	case thread.KindAssistant:
		b.assistant(en, e, it.Assistant)
	case thread.KindTool:
		b.tool(en, it.Tool)
	case thread.KindMarker:
		b.other(en, e)
	}
}

func (b *builder) user(en Entry, m *thread.Message) {
	opts := b.opts
	en.Kind, en.TS, en.Edited, en.Deleted = KindUser, m.TS, m.Edited, m.Deleted
	en.AuthorID = cmp.Or(m.User, en.AuthorID)
	en.Author = en.AuthorID
	if !m.Stray {
		// The edited message is not in this session's log (e.g. sent before logbook
		// joined) when it is a stray: the edit or deletion itself is shown.
		en.Author = cmp.Or(m.UserName, m.Names[en.AuthorID], en.AuthorID)
		if ts, ok := slackTime(m.TS); ok {
			en.Time = ts
		}
	}
	en.Text = readable(m.Text, m.Raw, m.Names)
	if m.Deleted && opts.RevealDeleted {
		en.DeletedText = readable(m.DeletedText, m.DeletedRaw, m.Names)
	}
	// The files went with the message: a deleted message's are shown to auditors only.
	if !m.Stray && (!m.Deleted || opts.RevealDeleted) {
		en.Files = linkFiles(slices.Clone(b.files[m.TS]), opts)
	}
	b.add(en)
}

func (b *builder) assistant(en Entry, e session.Event, m *session.AssistantMessage) {
	if strings.TrimSpace(m.Text) == "" {
		b.marker(en, "assistant called %d tool(s) without text", len(m.ToolCallIDs))
		return
	}
	en.Kind, en.Author = KindAssistant, b.opts.BotName
	en.Text = readable(m.Text, "", nil)
	// A turn shown live had its text, tool rounds' included, in Slack.
	tn, ok := b.turns.Turn(m.Turn)
	shown := ok && m.Turn != 0 && len(tn.Live) > 0
	en.Unposted = !shown && (!m.Reply() || !b.turns.Delivered(e))
	b.add(en)
}

func (b *builder) tool(en Entry, it *thread.Tool) {
	opts := b.opts
	en.Kind, en.Author = KindTool, opts.BotName
	tool := &Tool{}
	if c := it.Call; c != nil {
		tool.CallID, tool.Name, tool.Input = c.CallID, c.Name, toolInput(c.Input)
		if !opts.All {
			tool.Input, tool.HiddenInputs = clipLines(tool.Input, opts.ToolLines)
		}
	} else {
		en.Author = "tool"
		tool.CallID, tool.Name = it.Result.CallID, "(unknown call)"
	}
	if r := it.Result; r != nil {
		tool.HasResult, tool.Output, tool.IsError, tool.ExitCode = true, r.Content, r.IsError, r.ExitCode
		tool.DurationMS, tool.Truncated, tool.Synthetic, tool.ResultSeq = r.DurationMS, r.Truncated, r.Synthetic, it.ResultEvent.Seq
		tool.StoppedBy = r.StoppedBy
		// Images a tool returned are named, never inlined: "image (png, 12.0 KB)".
		for _, im := range r.Images {
			tool.Output = strings.TrimRight(tool.Output, "\n") + "\n" + im.Label()
			tool.Images = append(tool.Images, File{Name: im.Label(), Mimetype: im.MediaType, Size: im.Size, SHA256: im.SHA256, Status: session.FileStored})
		}
		tool.Output = strings.TrimPrefix(tool.Output, "\n")
		tool.Images = linkFiles(tool.Images, opts)
		if !opts.All {
			tool.Output, tool.HiddenLines = clipLines(tool.Output, opts.ToolLines)
		}
	}
	if dec, p, ok := b.turns.Decision(tool.CallID); ok {
		tool.Approval = p.Decision + " by " + dec.Actor.ID
	}
	en.Tool = tool
	b.add(en)
}

// other adds a marker's entry: a file the agent handed back as the bot's message, else its
// marker line (markers of people in charge always, the rest with Options.All).
func (b *builder) other(en Entry, e session.Event) {
	opts := b.opts
	var up session.FileUpload
	if e.Type == session.TypeFileUpload && e.Decode(&up) == nil && up.Status == FileShared {
		// A file the agent handed back is a message of the bot's in the thread.
		en.Kind, en.Author, en.TS = KindAssistant, opts.BotName, up.TS
		if ts, ok := slackTime(up.TS); ok {
			en.Time = ts
		}
		en.Files = linkFiles([]File{{FileID: up.FileID, Name: cmp.Or(up.Title, up.Name, up.FileID), Mimetype: up.Mimetype,
			Size: up.Size, SHA256: up.SHA256, Status: FileShared}}, opts)
		b.add(en)
		return
	}
	var notes []Note
	if e.Type == session.TypeTurnSettings {
		// The notes a turn was offered shape its answers: shown in every view.
		notes = offeredNotes(e, b.notes, opts)
	}
	if !opts.All && !inCharge[e.Type] && len(notes) == 0 {
		return
	}
	if ts, ok := fileTS(e); ok {
		if m, ok := b.th.Message(ts); ok && m.Deleted && !opts.RevealDeleted {
			// What a deleted message shared is for auditors, like what it said.
			b.marker(en, "%s of deleted message %s", strings.ReplaceAll(string(e.Type), "_", " "), ts)
			return
		}
	}
	if e.Type == session.TypeTitle {
		var m session.Title
		_ = json.Unmarshal(e.Payload, &m) // the fold read it already
		b.marker(en, "title: %s", strings.TrimSpace(m.Text))
		return
	}
	en.Kind, en.Marker, en.Notes = KindMarker, describeMarker(e, b.turns), notes
	b.add(en)
}

// Render writes the transcript of sess in opts.Format.
func Render(w io.Writer, sess session.Session, events []session.Event, opts Options) error {
	return Build(sess, events, opts).Write(w)
}

// Write writes t in the format it was built with.
func (t *Transcript) Write(w io.Writer) error {
	switch cmp.Or(t.opts.Format, FormatText) {
	case FormatText:
		return t.writeText(w)
	case FormatMarkdown:
		return t.writeMarkdown(w)
	case FormatHTML:
		return t.writeHTML(w)
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(t)
	}
	return fmt.Errorf("render transcript: unknown format %q", t.opts.Format)
}

// Heading is the title, or a description of the thread.
func (t *Transcript) Heading() string {
	if t.Title != "" {
		return t.Title
	}
	return "Thread " + t.ThreadTS + " in #" + t.ChannelLabel()
}

// ChannelLabel is the channel's name when known, else its id.
func (t *Transcript) ChannelLabel() string { return cmp.Or(t.ChannelName, t.Channel) }

func formatTime(t time.Time, loc *time.Location) string {
	if loc == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

// slackTime parses a Slack ts ("1700000000.001200") as a time.
func slackTime(ts string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s <= 0 {
		return time.Time{}, false
	}
	var us int64
	if frac != "" {
		frac = (frac + "000000")[:6]
		if us, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(s, us*1000).UTC(), true
}

func toolInput(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	// A single string argument (a command, a query) reads best bare.
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for _, x := range m {
			if s, ok := x.(string); ok {
				return s
			}
		}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// clipLines keeps the first n lines of s and returns how many it left out.
func clipLines(s string, n int) (string, int) {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s, 0
	}
	return strings.Join(lines[:n], "\n"), len(lines) - n
}

// inCharge are the markers of what people did to the bot's work — stops, approvals,
// takeovers —,
// shown in every transcript, not only with Options.All.
var inCharge = map[session.Type]bool{
	session.TypeStopRequested: true, session.TypeTurnStopped: true,
	session.TypeApprovalRequested: true, session.TypeApprovalDecided: true,
	session.TypeApprovalVote: true, session.TypeApprovalRefused: true,
	session.TypeApprovalGrant: true, session.TypeApprovalGrantRevoked: true,
	session.TypeTakenOver: true, session.TypeHandedBack: true,
}

// describeMarker is the line of marker e; a turn's lines are read off turns, the fold of the
// transcript's events.
func describeMarker(e session.Event, turns *thread.Turns) string {
	line := strings.ReplaceAll(string(e.Type), "_", " ")
	detail := markerDetail(e, turns)
	if detail != "" {
		line += ": " + detail
	}
	return line
}

// withTrace adds the OpenTelemetry trace a turn's marker names (trace_id), so a transcript
// leads to the turn's trace.
func withTrace(detail string, e session.Event) string {
	var m struct {
		TraceID string `json:"trace_id"`
	}
	if json.Unmarshal(e.Payload, &m) != nil || m.TraceID == "" {
		return detail
	}
	if detail == "" {
		return "trace " + m.TraceID
	}
	return detail + ", trace " + m.TraceID
}

// markerDetail is the detail of marker e: a turn's read off turns, the fold, for turn_started
// and turn_completed; any other marker's is markerDetails'.
func markerDetail(e session.Event, turns *thread.Turns) (detail string) {
	switch e.Type {
	case session.TypeTurnStarted:
		if t, ok := turns.Turn(e.Seq); ok && !t.Unread {
			detail = fmt.Sprintf("through #%d", t.Through)
			if t.Reason != "" {
				detail += ", " + t.Reason
			}
		}
		return withTrace(detail, e)
	case session.TypeTurnCompleted:
		if t, ok := turns.Completed(e.Seq); ok && !t.CompletionUnread {
			detail = cmp.Or(t.Status, "?")
			if t.StatusReason != "" {
				detail += ": " + t.StatusReason
			}
		}
		return withTrace(detail, e)
	}
	if f := markerDetails[e.Type]; f != nil {
		return f(e)
	}
	return ""
}

// payload is a marker's detail read off its payload, a T ("" when the payload is not one).
func payload[T any](f func(e session.Event, m T) string) func(session.Event) string {
	return func(e session.Event) string {
		var m T
		if json.Unmarshal(e.Payload, &m) != nil {
			return ""
		}
		return f(e, m)
	}
}

// markerDetails are the details of every other marker, by type: a turn's queue, stops and
// approvals; files shared, fetched, handed back; cells and sandboxes; errors, summaries,
// deliveries again, manners, takeovers.
var markerDetails = map[session.Type]func(session.Event) string{
	session.TypeQueued: payload(func(_ session.Event, m session.Queued) string {
		return fmt.Sprintf("message #%d waits for the next turn", m.MessageSeq)
	}),
	session.TypeDelivered: payload(func(_ session.Event, m session.Delivered) string {
		return fmt.Sprintf("#%d posted as %s", m.Seq, strings.Join(m.TS, ", "))
	}),
	session.TypeSteered: payload(func(_ session.Event, m session.Steered) string {
		return fmt.Sprintf("#%d handed to the running turn", m.MessageSeq)
	}),
	session.TypeFeedback: payload(func(e session.Event, m session.Feedback) string {
		return fmt.Sprintf("%s by %s on the reply posted as %s", m.Rating, e.Actor.ID, m.MessageTS)
	}),
	session.TypeCanvasStarted: payload(func(_ session.Event, m session.CanvasStarted) string {
		return fmt.Sprintf("the reply's %d characters to be written as the canvas %q, sha256 %s", m.Chars, m.Title, File{SHA256: m.SHA256}.ShortSHA())
	}),
	session.TypeCanvasWritten: payload(func(_ session.Event, m session.CanvasWritten) string {
		how := "written"
		if m.Found {
			how = "found at Slack"
		}
		return fmt.Sprintf("canvas %s %q %s for %s: %d characters, sha256 %s", m.CanvasID, m.Title, how, m.Channel, m.Chars, File{SHA256: m.SHA256}.ShortSHA())
	}),
	session.TypeCodeChannelRequested: payload(func(_ session.Event, m session.CodeChannelRequested) string {
		return fmt.Sprintf("turn #%d asks Slack for code channel %q", m.Turn, m.Name)
	}),
	session.TypeCodeChannelCreated: payload(func(_ session.Event, m session.CodeChannelCreated) string {
		return fmt.Sprintf("code channel %s (%q) made by turn #%d", m.ChannelID, m.Name, m.Turn)
	}),
	session.TypeStopRequested: payload(func(e session.Event, m session.StopRequested) string {
		return fmt.Sprintf("by %s (%s)", e.Actor.ID, m.Source)
	}),
	session.TypeTurnStopped: payload(func(_ session.Event, m session.TurnStopped) string {
		return fmt.Sprintf("turn #%d stopped by %s (%s)", m.Turn, m.By, m.Source)
	}),
	session.TypeApprovalRequested: payload(func(_ session.Event, m session.ApprovalRequested) string {
		return fmt.Sprintf("%s call %s waits for a person: %s", m.Tool, m.CallID, firstLine(m.Summary))
	}),
	session.TypeApprovalDecided: payload(func(e session.Event, m session.ApprovalDecided) string {
		line := fmt.Sprintf("call %s %s by %s (%s)", m.CallID, m.Decision, e.Actor.ID, m.Via)
		if len(m.Approvers) > 0 {
			line += ", approvers " + strings.Join(m.Approvers, ", ")
		}
		if m.Grant != "" {
			line += ", grant " + m.Grant
		}
		return line
	}),
	session.TypeApprovalVote: payload(func(e session.Event, m session.ApprovalVote) string {
		return fmt.Sprintf("call %s approved by %s (%d of %d)", m.CallID, e.Actor.ID, m.Count, m.Needed)
	}),
	session.TypeApprovalRefused: payload(func(e session.Event, m session.ApprovalRefused) string {
		return fmt.Sprintf("call %s: %s's %s refused (%s)", m.CallID, e.Actor.ID, m.Action, m.Reason)
	}),
	session.TypeApprovalGrant: payload(func(e session.Event, m session.ApprovalGrant) string {
		return fmt.Sprintf("grant %s by %s: %s calls under %q in this thread until %s", m.ID, strings.Join(m.GrantedBy, ", "),
			m.Tool, m.Rule, m.ExpiresAt.UTC().Format(time.RFC3339))
	}),
	session.TypeApprovalGrantRevoked: payload(func(e session.Event, m session.ApprovalGrantRevoked) string {
		return fmt.Sprintf("grant %s revoked by %s", m.ID, e.Actor.ID)
	}),
	session.TypeTurnSuspended: payload(func(e session.Event, m session.TurnSuspended) string {
		return fmt.Sprintf("turn #%d sleeps until call %s is decided (at the latest %s)", m.Turn, m.CallID, m.Until.UTC().Format(time.RFC3339))
	}),
	session.TypeStreamStarted: payload(func(_ session.Event, m session.StreamStarted) string {
		return fmt.Sprintf("%s %s (%s)", m.Channel, m.TS, m.Mode)
	}),
	session.TypeStreamStopped: payload(func(_ session.Event, m session.StreamStopped) string {
		return fmt.Sprintf("%s %s, %d characters", m.TS, m.Reason, m.Chars)
	}),
	session.TypeFileRef: payload(func(_ session.Event, m session.FileRef) string {
		return fmt.Sprintf("%s (%s, %d bytes)", cmp.Or(m.Title, m.Name, m.FileID), cmp.Or(m.Mimetype, "unknown type"), m.Size)
	}),
	session.TypeFileFetched: payload(func(_ session.Event, m session.FileFetched) string {
		f := File{Name: m.Name, Mimetype: m.Mimetype, Size: m.Size, SHA256: m.SHA256, Status: m.Status, Reason: m.Reason}
		return f.Name + " " + f.describe()
	}),
	session.TypeFileUpload: payload(func(_ session.Event, m session.FileUpload) string {
		detail := fmt.Sprintf("%s (%s, %s) %s for call %s, sha256 %s", cmp.Or(m.Title, m.Name, m.FileID), cmp.Or(m.Mimetype, "unknown type"),
			session.FileSize(m.Size), m.Status, m.CallID, File{SHA256: m.SHA256}.ShortSHA())
		return detail
	}),
	session.TypeCellWoken: payload(func(_ session.Event, m session.CellWoken) string {
		return fmt.Sprintf("%s on %s (epoch %d)", m.Reason, m.Host, m.Epoch)
	}),
	session.TypeCellEvicted: payload(func(_ session.Event, m session.CellEvicted) string {
		return m.Reason
	}),
	session.TypeSandboxProvisioned: payload(func(_ session.Event, m session.SandboxProvisioned) string {
		detail := fmt.Sprintf("%s, %d steps, %d ms", m.Provider, m.Steps, m.DurationMS)
		if m.Repo != "" {
			detail += fmt.Sprintf(", %s at %s", m.Repo, m.Commit)
		}
		if m.Instructions != "" {
			detail += fmt.Sprintf(", %s %s", m.Instructions, shortID(m.InstructionsHash))
		}
		return detail
	}),
	session.TypeWorkSaved: payload(func(_ session.Event, m session.WorkSaved) string {
		detail := "HEAD " + shortID(cmp.Or(m.Head, m.Commit))
		if m.Branch != "" {
			detail += " on " + m.Branch
		}
		if m.BundleSize > 0 {
			detail += fmt.Sprintf(", commits since %s in a %d-byte bundle", shortID(m.Commit), m.BundleSize)
		}
		if m.Size > 0 {
			detail += fmt.Sprintf(", %d bytes of uncommitted changes", m.Size)
		} else {
			detail += ", nothing uncommitted"
		}
		return detail
	}),
	session.TypeEgressConnection: payload(func(_ session.Event, m session.EgressConnection) string {
		verdict := "refused"
		if m.Allowed {
			verdict = "allowed"
		}
		detail := fmt.Sprintf("%s %s:%d %s, %d bytes out, %d in", m.Kind, m.Host, m.Port, verdict, m.BytesOut, m.BytesIn)
		if len(m.Refs) > 0 {
			detail += ", refs " + strings.Join(m.Refs, " ")
		}
		if len(m.Pushed) > 0 {
			detail += ", pushed " + strings.Join(m.Pushed, " ")
		}
		if m.Reason != "" {
			detail += " (" + m.Reason + ")"
		}
		return detail
	}),
	session.TypeTurnSettings: payload(func(_ session.Event, m session.TurnSettings) string {
		detail := fmt.Sprintf("turn %d: model %s, settings %s", m.Turn, m.Model, shortID(m.Hash))
		if len(m.Set) > 0 {
			detail += " (channel's: " + strings.Join(m.Set, ", ") + ")"
		}
		if m.RepoInstructions != "" {
			detail += fmt.Sprintf(", %s %s", m.RepoInstructions, shortID(m.RepoInstructionsHash))
		}
		if len(m.Memory) > 0 {
			detail += fmt.Sprintf(", %d memory notes", len(m.Memory))
		}
		if m.LedgerSeq > 0 {
			detail += fmt.Sprintf(", channel ledger #%d %s", m.LedgerSeq, shortID(m.LedgerHash))
		}
		return detail
	}),
	// A channel's ledger (its transcript is the channel's history of changes).
	session.TypeSettingChanged: payload(func(_ session.Event, m session.SettingChanged) string {
		val := func(v *string) string {
			if v == nil {
				return "default"
			}
			return strconv.Quote(*v)
		}
		return fmt.Sprintf("%s: %s → %s (%s)", m.Name, val(m.Old), val(m.New), m.Via)
	}),
	session.TypeNoteAdded: payload(func(_ session.Event, m session.NoteAdded) string {
		return fmt.Sprintf("note %d: %s (%s)", m.ID, strconv.Quote(m.Text), m.Via)
	}),
	session.TypeNoteForgotten: payload(func(_ session.Event, m session.NoteForgotten) string {
		return fmt.Sprintf("note %d forgotten (%s)", m.Note, m.Via)
	}),
	session.TypeRepoSet: payload(func(_ session.Event, m session.RepoSet) string {
		if m.URL == "" {
			return fmt.Sprintf("no repository (%s)", m.Via)
		}
		return fmt.Sprintf("%s %s (%s)", m.URL, m.Branch, m.Via)
	}),
	session.TypeBudgetRaised: payload(func(_ session.Event, m session.BudgetRaised) string {
		return fmt.Sprintf("%s budget of %s raised by %d micros for %s (%s)", m.Scope, m.Subject, m.Amount, m.Day, m.Via)
	}),
	session.TypeScheduleAdded: payload(func(_ session.Event, m session.ScheduleAdded) string {
		return fmt.Sprintf("schedule %d: %s (%s)", m.ID, m.Spec, m.Via)
	}),
	session.TypeScheduleRemoved: payload(func(_ session.Event, m session.ScheduleRemoved) string {
		if m.Reason != "" {
			return fmt.Sprintf("schedule %d removed: %s (%s)", m.Schedule, m.Reason, m.Via)
		}
		return fmt.Sprintf("schedule %d removed (%s)", m.Schedule, m.Via)
	}),
	session.TypeConnectorConnected: payload(func(_ session.Event, m session.ConnectorConnected) string {
		return fmt.Sprintf("%s connected (%s)", m.Server, m.Via)
	}),
	session.TypeSandboxLost: payload(func(_ session.Event, m session.SandboxLost) string {
		return m.Reason
	}),
	session.TypeError: payload(func(_ session.Event, m session.ErrorEvent) string {
		detail := strings.TrimSpace(m.Stage + " " + m.Code)
		if m.Message != "" {
			detail += ": " + m.Message
		}
		return detail
	}),
	session.TypeContextSummary: payload(func(_ session.Event, m session.ContextSummary) string {
		return fmt.Sprintf("#%d–#%d summarised", m.FromSeq, m.ToSeq)
	}),
	session.TypeDuplicateDelivery: payload(func(_ session.Event, m session.DuplicateDelivery) string {
		return fmt.Sprintf("Slack delivered %s again (retry %d)", m.TS, m.RetryAttempt)
	}),
	session.TypeNotAddressed: payload(func(_ session.Event, m session.NotAddressed) string {
		return fmt.Sprintf("#%d not answered (%s)", m.MessageSeq, strings.ReplaceAll(m.Reason, "_", " "))
	}),
	session.TypeHandedBack: payload(func(e session.Event, m session.HandedBack) string {
		return fmt.Sprintf("by %s (%s)", e.Actor.ID, m.Source)
	}),
	session.TypeThreadMuted:   func(e session.Event) string { return "by " + e.Actor.ID },
	session.TypeThreadUnmuted: func(e session.Event) string { return "by " + e.Actor.ID },
	session.TypeTakenOver: func(e session.Event) string {
		return "by " + e.Actor.ID + "; the bot stays silent until it is handed back"
	},
}

// firstLine is s's first line, marked when more follows.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// shortID is a commit id cut to 12 characters, as git shows them.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
