package web

import (
	"cmp"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// fileURL is the route of a session's file content.
func fileURL(id session.ID, sha string) string {
	return "/sessions/" + url.PathEscape(id.String()) + "/files/" + url.PathEscape(sha)
}

// fileMeta is what the session's log says of a content: the name and type it was shared
// or handed back with (the latest record that names it; the type from the name's extension
// when the record has none).
type fileMeta struct {
	name, mimetype string
}

func metaOf(evs []session.Event, sha string) (fileMeta, bool) {
	var m fileMeta
	found := false
	for _, e := range evs {
		switch e.Type {
		case session.TypeFileFetched:
			var ff session.FileFetched
			if e.Decode(&ff) == nil && ff.SHA256 == sha && ff.Status == session.FileStored {
				m, found = fileMeta{name: ff.Name, mimetype: ff.Mimetype}, true
			}
		case session.TypeFileUpload:
			var up session.FileUpload
			if e.Decode(&up) == nil && up.SHA256 == sha {
				m, found = fileMeta{name: up.Name, mimetype: up.Mimetype}, true
			}
		case session.TypeToolResult: // an image a tool (an MCP server's) returned
			var r session.ToolResult
			if e.Decode(&r) != nil {
				continue
			}
			for _, im := range r.Images {
				if im.SHA256 == sha {
					m, found = fileMeta{name: im.Label(), mimetype: im.MediaType}, true
				}
			}
		}
	}
	if m.mimetype == "" {
		m.mimetype = mime.TypeByExtension(strings.ToLower(path.Ext(m.name)))
	}
	return m, found
}

// inlineImages are the types shown inline, when the content is what they say (sniffed).
var inlineImages = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// servedType is the Content-Type a file is served with and whether it is shown inline:
// images (PNG, JPEG, GIF, WebP) whose bytes are one inline; anything a browser would run
// or render as a document (HTML, XHTML, SVG, XML, scripts), an image whose bytes are not
// that image, or a type that does not parse, as application/octet-stream; everything else
// as recorded (without parameters), as an attachment.
func servedType(recorded string, data []byte) (string, bool) {
	mt, _, err := mime.ParseMediaType(recorded)
	if err != nil || mt == "" {
		return "application/octet-stream", false
	}
	mt = strings.ToLower(mt)
	if inlineImages[mt] {
		if http.DetectContentType(data) == mt {
			return mt, true
		}
		return "application/octet-stream", false
	}
	switch {
	case mt == "text/html", mt == "application/xhtml+xml", mt == "image/svg+xml",
		mt == "text/xml", mt == "application/xml", strings.HasSuffix(mt, "+xml"), strings.HasSuffix(mt, "/xml"),
		strings.Contains(mt, "javascript"), strings.Contains(mt, "ecmascript"), mt == "text/xsl",
		strings.HasPrefix(mt, "multipart/"), strings.Contains(mt, "html"):
		return "application/octet-stream", false
	}
	return mt, false
}

// file serves the content of a file the session holds, to a reader who may see the session:
// the same checks as the transcript page (visibility included), and only content the
// session references (Store.HasFile). Anything else is 404, recorded like every access.
func (s *server) file(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sha := r.PathValue("sha256")
	a := access{action: "download", format: "file"}
	if session.ValidFileHash(sha) {
		a.format = "file:" + sha
	}
	sess, evs, ok := s.load(w, r, a)
	if !ok {
		return
	}
	a.session = sess.ID
	if s.cfg.Files == nil || !session.ValidFileHash(sha) {
		s.notFound(w, r, a)
		return
	}
	has, err := s.cfg.Sessions.HasFile(ctx, sess.ID, sha)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !has || !shown(sess, evs, sha, identityFrom(ctx).Auditor) {
		s.notFound(w, r, a)
		return
	}
	data, err := s.cfg.Files.FileContent(ctx, sha)
	if errors.Is(err, session.ErrNotFound) {
		s.notFound(w, r, a)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if session.FileHash(data) != sha {
		s.fail(w, r, errors.New("stored content of "+sha+" does not hash to it"))
		return
	}
	meta, _ := metaOf(evs, sha)
	ct, inline := servedType(meta.mimetype, data)
	a.status, a.results = http.StatusOK, 1
	if err := record(ctx, s.cfg.AccessLog, r, a); err != nil {
		s.unrecorded(w, err)
		return
	}
	disposition := "attachment"
	if inline {
		disposition = "inline"
	}
	name := cmp.Or(strings.TrimSpace(meta.name), sha)
	if cd := mime.FormatMediaType(disposition, map[string]string{"filename": name}); cd != "" {
		disposition = cd
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Disposition", disposition)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'; sandbox")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	w.Write(data) //nolint:errcheck // the client went away
}

// shown reports whether the session's transcript shows the content sha to this reader — a
// shared file, one handed back, or an image a tool returned: a file of a deleted message is
// shown (and served) to auditors only, as its text is.
func shown(sess session.Session, evs []session.Event, sha string, auditor bool) bool {
	t := transcript.Build(sess, evs, transcript.Options{All: true, RevealDeleted: auditor})
	for _, e := range t.Entries {
		files := e.Files
		if e.Tool != nil {
			files = append(slices.Clip(files), e.Tool.Images...) // an MCP tool's images
		}
		for _, f := range files {
			if f.SHA256 == sha {
				return true
			}
		}
	}
	return false
}
