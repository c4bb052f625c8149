package brain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"image"
	_ "image/gif" // image.DecodeConfig of shared images
	_ "image/jpeg"
	_ "image/png"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// FileReader reads the content of files shared in the thread, by the content address a
// file_fetched event records (its SHA256, hex). *session.Store is one.
type FileReader interface {
	FileContent(ctx context.Context, sha256 string) ([]byte, error)
}

// Media is an image or a document a user message carries to the model.
type Media struct {
	MediaType string // "image/png", "image/jpeg", "image/gif", "image/webp"; "application/pdf"
	Data      []byte // the content (the providers' requests carry it base64-encoded)
	Name      string // the file's name, for the model (a document's title)
}

// Kinds of file, as FileKind tells them.
const (
	FileKindImage = "image" // an image both providers take: PNG, JPEG, GIF, WebP
	FileKindPDF   = "pdf"
	FileKindText  = "text"
	FileKindOther = "other"
)

// Limits on the files a request carries.
const (
	// maxImageBase64 is Anthropic's limit per image, 5 MB, which the API applies to the
	// base64 text (a raw image of at most 3.75 MiB).
	maxImageBase64 = 5 << 20
	// maxImageSide is Anthropic's limit on an image's width and height, in pixels (for
	// requests of at most 20 images; maxMediaBlocks keeps them there).
	maxImageSide = 8000
	maxPDFBytes  = 32 << 20 // raw; maxRequestMedia is the tighter bound in practice
	maxPDFPages  = 100      // Anthropic's limit of PDF pages per request
	// maxRequestMedia bounds the base64 text of all images and documents of one request:
	// Anthropic takes at most 32 MB a request, and OpenAI 32 MB of file content.
	maxRequestMedia = 28 << 20
	maxMediaBlocks  = 20       // images and documents in one request
	maxFileText     = 32 << 10 // bytes of one text file shown
	maxFilesText    = 96 << 10 // bytes of all text files of a request shown
	minFileText     = 512      // less room than this shows no text at all
	// Token estimates of media (the budget's estimate; Anthropic's count endpoint counts them
	// exactly): an image as Anthropic bills a resized one (at most ~1600), a PDF page as its
	// text plus its page image.
	imageTokens   = 1600
	pdfPageTokens = 2500
)

// providerImages are the image types both providers take.
var providerImages = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// FileKind classifies a shared file: "image" (PNG, JPEG, GIF or WebP: what the providers take
// as images), "pdf", "text" or "other". With data it decides by the content, whatever the
// mimetype says: an image or a PDF by its signature; text when the content is valid UTF-8
// without NUL bytes, or when the mimetype or name says text and no NUL byte says otherwise.
// With data nil it decides by the mimetype, and by the name's extension when the mimetype is
// missing or generic (application/octet-stream). It is the one classification of shared files:
// the brain shows files by it, the bot decides by it what to copy into the sandbox.
func FileKind(mimetype, name string, data []byte) string {
	mt := baseMime(mimetype)
	if data != nil {
		switch {
		case imageType(data) != "":
			return FileKindImage
		case isPDF(data):
			return FileKindPDF
		case bytes.IndexByte(data, 0) >= 0:
			return FileKindOther
		case utf8.Valid(data), textMime(mt), (mt == "" || genericMime(mt)) && textName(name):
			return FileKindText
		}
		return FileKindOther
	}
	switch {
	case providerImages[mt]:
		return FileKindImage
	case mt == "application/pdf":
		return FileKindPDF
	case textMime(mt):
		return FileKindText
	case mt != "" && !genericMime(mt):
		return FileKindOther
	}
	switch ext := strings.ToLower(path.Ext(name)); {
	case ext == ".png", ext == ".jpg", ext == ".jpeg", ext == ".gif", ext == ".webp":
		return FileKindImage
	case ext == ".pdf":
		return FileKindPDF
	case textName(name):
		return FileKindText
	}
	return FileKindOther
}

// baseMime is a mimetype without parameters, in lower case.
func baseMime(mt string) string {
	mt, _, _ = strings.Cut(mt, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

func genericMime(mt string) bool {
	return mt == "application/octet-stream" || mt == "binary/octet-stream" || mt == "application/unknown"
}

// textMime reports whether a (base) mimetype is text: text/*, JSON, XML, YAML, CSV,
// JavaScript, shell, TOML, logs, ...
func textMime(mt string) bool {
	if strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") ||
		strings.HasSuffix(mt, "+yaml") {
		return true
	}
	switch strings.TrimPrefix(mt, "application/") {
	case "json", "x-ndjson", "ndjson", "jsonl", "xml", "yaml", "x-yaml", "csv", "x-csv", "javascript",
		"x-javascript", "ecmascript", "typescript", "x-typescript", "x-sh", "x-shellscript", "x-bash", "toml",
		"x-toml", "x-log", "sql", "x-sql", "graphql", "x-httpd-php", "x-php", "x-python", "x-ruby", "x-perl",
		"x-tex", "x-latex", "x-diff", "x-patch", "x-subrip", "x-properties", "x-ini", "x-www-form-urlencoded":
		return true
	}
	return false
}

// textExts are extensions of text files whose mimetype says nothing.
var textExts = map[string]bool{
	".txt": true, ".md": true, ".markdown": true, ".rst": true, ".log": true, ".csv": true, ".tsv": true,
	".json": true, ".jsonl": true, ".ndjson": true, ".yaml": true, ".yml": true, ".toml": true, ".ini": true,
	".cfg": true, ".conf": true, ".env": true, ".properties": true, ".xml": true, ".html": true, ".htm": true,
	".css": true, ".scss": true, ".svg": true, ".sql": true, ".graphql": true, ".proto": true, ".go": true,
	".mod": true, ".sum": true, ".py": true, ".rb": true, ".rs": true, ".java": true, ".kt": true, ".scala": true,
	".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true, ".cs": true, ".swift": true, ".m": true,
	".js": true, ".mjs": true, ".cjs": true, ".ts": true, ".tsx": true, ".jsx": true, ".vue": true, ".php": true,
	".pl": true, ".lua": true, ".r": true, ".sh": true, ".bash": true, ".zsh": true, ".fish": true, ".ps1": true,
	".tf": true, ".hcl": true, ".dockerfile": true, ".mk": true, ".diff": true, ".patch": true, ".tex": true,
	".srt": true, ".vtt": true, ".gradle": true, ".lock": true,
}

func textName(name string) bool {
	base := strings.ToLower(path.Base(name))
	switch base {
	case "dockerfile", "makefile", "readme", "license", "changelog", "jenkinsfile", "procfile", "gemfile":
		return true
	}
	return textExts[path.Ext(base)]
}

// imageType is the type of an image the providers take, by its signature, or "".
func imageType(data []byte) string {
	if mt := http.DetectContentType(data); providerImages[mt] {
		return mt
	}
	return ""
}

func isPDF(data []byte) bool { return bytes.HasPrefix(data, []byte("%PDF-")) }

// pdfProblem says why the providers would refuse data, a PDF, as a document ("" when they
// take it, as far as can be told without parsing it).
func pdfProblem(data []byte) string {
	tail := data[max(0, len(data)-2048):]
	switch {
	case !bytes.Contains(tail, []byte("%%EOF")):
		return "it could not be read as a PDF (it has no end marker: it looks cut short or damaged)"
	case bytes.Contains(data, []byte("/Encrypt")):
		return "it is an encrypted (password-protected) PDF, which the model cannot read"
	}
	if n := pdfPages(data); n > maxPDFPages {
		return fmt.Sprintf("it has %d pages, more than the %d a request may carry, so it is not shown", n, maxPDFPages)
	}
	return ""
}

// imageProblem says why the providers would refuse data as an image ("" when they take it).
func imageProblem(data []byte) string {
	if n := base64.StdEncoding.EncodedLen(len(data)); n > maxImageBase64 {
		return fmt.Sprintf("it is too large to show as an image (%s; the limit is %s base64-encoded, about %s)",
			session.FileSize(int64(len(data))), session.FileSize(maxImageBase64), session.FileSize(maxImageBase64/4*3))
	}
	w, h, ok := imageSize(data)
	if !ok {
		return "it could not be read as an image (the data is damaged or not what its type says)"
	}
	if w > maxImageSide || h > maxImageSide {
		return fmt.Sprintf("it is too large to show as an image (%d×%d pixels; the limit is %d on each side)", w, h, maxImageSide)
	}
	return ""
}

// imageSize is an image's width and height from its header.
func imageSize(data []byte) (w, h int, ok bool) {
	if imageType(data) == "image/webp" {
		return webpSize(data)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return 0, 0, false
	}
	return cfg.Width, cfg.Height, true
}

// webpSize reads a WebP's canvas size from its first chunk (VP8X, VP8L or VP8).
func webpSize(d []byte) (w, h int, ok bool) {
	if len(d) < 30 || string(d[:4]) != "RIFF" || string(d[8:12]) != "WEBP" {
		return 0, 0, false
	}
	le24 := func(b []byte) int { return int(b[0]) | int(b[1])<<8 | int(b[2])<<16 }
	switch string(d[12:16]) {
	case "VP8X":
		return le24(d[24:27]) + 1, le24(d[27:30]) + 1, true
	case "VP8L":
		if d[20] != 0x2f {
			return 0, 0, false
		}
		bits := binary.LittleEndian.Uint32(d[21:25])
		return int(bits&0x3fff) + 1, int(bits>>14&0x3fff) + 1, true
	case "VP8 ":
		if d[23] != 0x9d || d[24] != 0x01 || d[25] != 0x2a {
			return 0, 0, false
		}
		return int(binary.LittleEndian.Uint16(d[26:28]) & 0x3fff), int(binary.LittleEndian.Uint16(d[28:30]) & 0x3fff), true
	}
	return 0, 0, false
}

// pdfPages counts a PDF's page objects: exact for most PDFs, 0 when they are hidden in
// compressed object streams.
func pdfPages(data []byte) int {
	n := 0
	for rest := data; ; {
		i := bytes.Index(rest, []byte("/Type"))
		if i < 0 {
			return n
		}
		rest = rest[i+len("/Type"):]
		t := bytes.TrimLeft(rest[:min(len(rest), 16)], " \t\r\n")
		if bytes.HasPrefix(t, []byte("/Page")) && (len(t) == len("/Page") || !isNameChar(t[len("/Page")])) {
			n++
		}
	}
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// mediaTokens is the estimate of a media block's input tokens.
func mediaTokens(b Block) int {
	switch {
	case b.Image != nil:
		return imageTokens
	case b.Document != nil:
		return max(1, pdfPages(b.Document.Data)) * pdfPageTokens
	}
	return 0
}

// maxLoad is the largest file a Run reads into memory: more than a request takes in any form.
const maxLoad = 32 << 20

// fileCache holds the content of the shared files of one Run, by hash: each is read from the
// turn's FileReader once, the first time a history shows its file_fetched. A failed read is
// kept too: the file is then shown as a note, and not read again in the Run.
type fileCache struct {
	reader FileReader
	files  map[string]fileData
}

type fileData struct {
	data []byte
	err  error
}

// newFileCache returns a cache over r; nil when r is nil (files are then only named).
func newFileCache(r FileReader) *fileCache {
	if r == nil {
		return nil
	}
	return &fileCache{reader: r, files: map[string]fileData{}}
}

// load reads the content of every stored file of evs that the cache lacks. Failures are
// logged and kept; they never fail the turn.
func (c *fileCache) load(ctx context.Context, evs []session.Event, log zerolog.Logger) {
	if c == nil {
		return
	}
	type stored struct{ sha, fileID string }
	var want []stored
	for _, e := range evs {
		if e.Type == session.TypeToolResult && e.Payload != nil {
			var r session.ToolResult
			if e.Decode(&r) == nil {
				for _, im := range r.Images {
					if im.SHA256 != "" && im.Size <= maxLoad {
						want = append(want, stored{sha: strings.ToLower(im.SHA256), fileID: "tool_result:" + r.CallID})
					}
				}
			}
			continue
		}
		if e.Type != session.TypeFileFetched || e.Payload == nil {
			continue
		}
		var f session.FileFetched
		if e.Decode(&f) != nil || f.Status != session.FileStored || f.SHA256 == "" || f.Size > maxLoad {
			continue // larger than anything a request can carry (LOGBOOK_FILE_MAX may allow more)
		}
		want = append(want, stored{sha: strings.ToLower(f.SHA256), fileID: f.FileID})
	}
	for _, f := range want {
		sha := f.sha
		if _, ok := c.files[sha]; ok {
			continue
		}
		data, err := c.reader.FileContent(ctx, sha)
		if err == nil {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != sha {
				err = fmt.Errorf("the content read for %s does not hash to it", sha)
			}
		}
		if err != nil {
			log.Warn().Err(err).Str("file_id", f.fileID).Str("sha256", sha).Msg("could not load a shared file's content; the model gets a note")
			data = nil
		}
		c.files[sha] = fileData{data: data, err: err}
	}
}

// get returns the content stored under sha, and whether it was loaded.
func (c *fileCache) get(sha string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	d, ok := c.files[strings.ToLower(sha)]
	return d.data, ok && d.err == nil
}

// sharedFile is a file shared with a user message: its file_ref and the newest file_fetched
// for it (nil when its content was never fetched).
type sharedFile struct {
	Seq     int64 // the file_ref's seq
	Ref     session.FileRef
	Fetched *session.FileFetched
}

// sharedFiles indexes the file_ref events of evs by the ts of the message that shared them,
// in seq order, each with its newest file_fetched (matched by file id and ts). Unreadable or
// purged file events are left out.
func sharedFiles(evs []session.Event) map[string][]sharedFile {
	type key struct{ id, ts string }
	fetched := map[key]*session.FileFetched{}
	for _, e := range evs {
		if e.Type != session.TypeFileFetched || e.Payload == nil {
			continue
		}
		var f session.FileFetched
		if e.Decode(&f) == nil {
			fetched[key{f.FileID, f.TS}] = &f
		}
	}
	byTS := map[string][]sharedFile{}
	seen := map[key]bool{}
	for _, e := range evs {
		if e.Type != session.TypeFileRef || e.Payload == nil {
			continue
		}
		var r session.FileRef
		if e.Decode(&r) != nil || r.TS == "" {
			continue
		}
		k := key{r.FileID, r.TS}
		if r.FileID != "" && seen[k] {
			continue // the same share logged twice
		}
		seen[k] = true
		f := sharedFile{Seq: e.Seq, Ref: r}
		if r.FileID != "" {
			f.Fetched = fetched[k]
		}
		byTS[r.TS] = append(byTS[r.TS], f)
	}
	return byTS
}

// fileView is a shared file as a history shows it.
type fileView struct {
	sharedFile
	who string // the display name of who shared it
}

func (v fileView) name() string {
	name := v.Ref.Name
	if v.Fetched != nil && v.Fetched.Name != "" {
		name = v.Fetched.Name
	}
	return strings.ReplaceAll(nonEmpty(name, nonEmpty(v.Ref.Title, nonEmpty(v.Ref.FileID, "unnamed file"))), "\n", " ")
}

func (v fileView) mimetype() string {
	if v.Fetched != nil && v.Fetched.Mimetype != "" {
		return v.Fetched.Mimetype
	}
	return v.Ref.Mimetype
}

func (v fileView) size() int64 {
	if v.Fetched != nil && v.Fetched.Size > 0 {
		return v.Fetched.Size
	}
	return v.Ref.Size
}

func (v fileView) workspace() string {
	if v.Fetched == nil {
		return ""
	}
	return v.Fetched.Workspace
}

// label opens every text about the file: "[File report.pdf (application/pdf, 1.2 MB) shared
// by Alice", without the closing bracket.
func (v fileView) label() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "[File %s", v.name())
	if t := strings.ReplaceAll(strings.TrimSpace(v.Ref.Title), "\n", " "); t != "" && t != v.name() {
		fmt.Fprintf(&sb, " titled %q", t)
	}
	fmt.Fprintf(&sb, " (%s, %s) shared by %s", nonEmpty(v.mimetype(), "unknown type"), session.FileSize(v.size()), v.who)
	return sb.String()
}

// fileBudget is what the files of one request may still use, filled newest file first.
type fileBudget struct {
	text   int // bytes of text files
	media  int // base64 bytes of images and documents
	blocks int // images and documents
}

// renderFiles returns the blocks that show each file of files (the shared files of a
// history's messages, in history order), by file_ref seq. The request's budgets go to the
// newest files first: the latest share is the likeliest subject, and older files that no
// longer fit become notes that name them.
func renderFiles(files []fileView, opt historyOptions) map[int64][]Block {
	out := make(map[int64][]Block, len(files))
	budget := fileBudget{text: maxFilesText, media: maxRequestMedia, blocks: maxMediaBlocks}
	for i := len(files) - 1; i >= 0; i-- {
		out[files[i].Seq] = renderFile(files[i], opt, &budget)
	}
	return out
}

// renderFile is the blocks that show one file: a label and an image or document; a label and
// the text in a fenced block; or a note that names the file and says why its content is not
// here.
func renderFile(v fileView, opt historyOptions, budget *fileBudget) []Block {
	note := func(why string) []Block {
		return []Block{{Text: v.label() + ": " + why + "]"}}
	}
	ws := v.workspace()
	copyNote := func() string {
		switch {
		case ws == "":
			return ""
		case opt.Sandbox:
			return fmt.Sprintf(" A copy is in the sandbox at %s; run_command can work on it.", ws)
		}
		return fmt.Sprintf(" A copy is in the sandbox at %s, but this turn has no sandbox tools.", ws)
	}
	f := v.Fetched
	if f == nil {
		return note("it was shared, but its content was not fetched, so it is not available here.")
	}
	switch f.Status {
	case session.FileTooLarge:
		return note("its content was not fetched: " + nonEmpty(oneLineReason(f.Reason), "it is over the size limit for shared files") + "." + copyNote())
	case session.FileFailed:
		return note("its content could not be fetched: " + nonEmpty(oneLineReason(f.Reason), "the download failed") + "." + copyNote())
	case session.FileStored:
	default:
		return note(fmt.Sprintf("its content is not available (status %q).", f.Status) + copyNote())
	}
	if opt.Files == nil {
		return note("its content is not loaded in this conversation; only its name is." + copyNote())
	}
	data, ok := opt.Files.get(f.SHA256)
	if !ok {
		return note("its content could not be loaded." + copyNote())
	}
	switch FileKind(v.mimetype(), v.name(), data) {
	case FileKindImage:
		if why := imageProblem(data); why != "" {
			return note(why + "." + copyNote())
		}
		enc := base64.StdEncoding.EncodedLen(len(data))
		if budget.blocks == 0 || enc > budget.media {
			return note("it is not shown as an image: later files already fill what one request may carry." + copyNote())
		}
		budget.blocks--
		budget.media -= enc
		return []Block{{Text: v.label() + withCopy(ws) + "]"}, {Image: &Media{MediaType: imageType(data), Data: data, Name: v.name()}}}
	case FileKindPDF:
		if len(data) > maxPDFBytes {
			return note(fmt.Sprintf("it is too large to show as a document (the limit is %s).", session.FileSize(maxPDFBytes)) + copyNote())
		}
		if why := pdfProblem(data); why != "" {
			return note(why + "." + copyNote())
		}
		enc := base64.StdEncoding.EncodedLen(len(data))
		if enc > maxRequestMedia {
			return note(fmt.Sprintf("it is too large to show as a document (%s; a request carries at most %s of images and documents, base64-encoded).",
				session.FileSize(int64(len(data))), session.FileSize(maxRequestMedia)) + copyNote())
		}
		if budget.blocks == 0 || enc > budget.media {
			return note("it is not shown as a document: later files already fill what one request may carry." + copyNote())
		}
		budget.blocks--
		budget.media -= enc
		return []Block{{Text: v.label() + withCopy(ws) + "]"}, {Document: &Media{MediaType: "application/pdf", Data: data, Name: v.name()}}}
	case FileKindText:
		return []Block{{Text: renderText(v, data, opt, budget)}}
	}
	if ws != "" {
		return note("it is not readable here as text or image." + copyNote())
	}
	return note("it is not readable as text or image, and nothing here can read it (no copy is in the sandbox).")
}

func withCopy(ws string) string {
	if ws == "" {
		return ""
	}
	return "; a copy is in the sandbox at " + ws
}

func oneLineReason(s string) string {
	return clip.Text(strings.Join(strings.Fields(s), " "), 300)
}

// renderText shows a text file: its label, then its content in a fenced block, cut to its
// share of the budget (head and tail kept) with a line that says what was cut.
func renderText(v fileView, data []byte, opt historyOptions, budget *fileBudget) string {
	s := strings.TrimPrefix(strings.ToValidUTF8(string(data), "\uFFFD"), "\uFEFF")
	ws := v.workspace()
	where := ""
	if ws != "" {
		where = " The whole file is in the sandbox at " + ws + "."
	}
	room := min(maxFileText, budget.text)
	if len(s) > room && room < minFileText {
		return v.label() + ": its text is not shown: the files shared later already fill the " +
			session.FileSize(maxFilesText) + " of file text one request may carry." + where + "]"
	}
	content, omitted := headTailWith(s, room, func(n int) string {
		return fmt.Sprintf("\n[… %d bytes of the file left out here …]\n", n)
	})
	budget.text -= len(content)
	if content == "" {
		return v.label() + ": the file is empty.]"
	}
	var sb strings.Builder
	sb.WriteString(v.label() + withCopy(ws) + "]\n" + mrkdwn.Fence(content))
	if omitted > 0 {
		fmt.Fprintf(&sb, "\n[The file has %d bytes; %d bytes from its middle are left out above (a request shows at most %s of one file and %s of all shared files).%s]",
			len(s), omitted, session.FileSize(maxFileText), session.FileSize(maxFilesText), where)
	}
	return sb.String()
}

// mediaNote is the one line that stands for an image or a document where no media may go (a
// summary's or a title's transcript).
func mediaNote(b Block) string {
	m, what := b.Image, "image"
	if m == nil {
		m, what = b.Document, "document"
	}
	return fmt.Sprintf("[%s %s (%s, %s) was shown to the model here; it is not included in this text]",
		what, nonEmpty(m.Name, "unnamed"), m.MediaType, session.FileSize(int64(len(m.Data))))
}
