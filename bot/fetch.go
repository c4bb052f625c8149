package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/files"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/session"
)

var filesActor = session.Actor{Kind: session.ActorSystem, ID: "files"}

// fetchFiles stores the content of the files shared with the messages this turn answers (the
// file_refs up to its through without a file_fetched), before the model is called: each gets
// a file_fetched — stored, with its hash, or too large, or failed after retries, saying why.
// A file of a kind the model cannot read (not an image, a PDF or text) is also copied into the
// session's sandbox, where its tools can. A message is never lost for its file: whatever the
// download does, the turn goes on; only a log that cannot be written fails it.
func (t *turn) fetchFiles(ctx context.Context) error { return t.fetchThrough(ctx, t.state.through) }

// fetchThrough is fetchFiles for the messages up to through (steering moves it on).
func (t *turn) fetchThrough(ctx context.Context, through int64) error {
	if t.features.Fetcher == nil || t.features.Files == nil {
		return nil
	}
	snap := t.flog.snapshot()
	done := map[string]bool{}
	for _, e := range session.Select(snap, session.Range{Types: []session.Type{session.TypeFileFetched}}) {
		var ff session.FileFetched
		if e.Decode(&ff) == nil {
			done[ff.FileID+"/"+ff.TS] = true
		}
	}
	// The messages this turn answers (a file_ref follows its message in the same append).
	answers := map[string]bool{}
	for _, e := range session.Select(snap, session.Range{To: through, Types: []session.Type{session.TypeUserMessage}}) {
		var m session.UserMessage
		if e.Decode(&m) == nil {
			answers[m.TS] = true
		}
	}
	var evs []session.NewEvent
	for _, e := range session.Select(snap, session.Range{Types: []session.Type{session.TypeFileRef}}) {
		var ref session.FileRef
		// A ref without a download address was stored before logbook fetched files: it stays
		// named only ("not fetched"), not reported as a failure at every turn. One that says
		// check_file_info (Slack Connect) is asked of files.info first.
		if e.Decode(&ref) != nil || ref.FileID == "" || (ref.URL == "" && ref.Access != files.CheckFileInfo) ||
			!answers[ref.TS] || done[ref.FileID+"/"+ref.TS] {
			continue
		}
		done[ref.FileID+"/"+ref.TS] = true
		ff, err := t.fetchFile(ctx, ref)
		if err != nil {
			return err
		}
		t.log.Info().Str("file_id", ref.FileID).Str("status", ff.Status).Int64("size", ff.Size).Str("reason", ff.Reason).Msg("shared file")
		evs = append(evs, session.NewEvent{Type: session.TypeFileFetched, Actor: filesActor,
			IdempotencyKey: "file_fetched/" + ref.FileID + "/" + ref.TS, Payload: ff})
	}
	if len(evs) == 0 {
		return nil
	}
	_, err := t.flog.Append(ctx, evs...)
	return err
}

// fetchFile fetches and stores one file. Only a failure to store is an error.
func (t *turn) fetchFile(ctx context.Context, ref session.FileRef) (session.FileFetched, error) {
	if ref.URL == "" {
		// Shared with file_access check_file_info (a Slack Connect channel): the message
		// carried only the file's id, files.info has the rest.
		info, err := t.features.Fetcher.Info(ctx, ref.FileID)
		if err != nil {
			if ctx.Err() != nil {
				return session.FileFetched{}, ctx.Err()
			}
			return session.FileFetched{FileID: ref.FileID, TS: ref.TS, Name: ref.FileID, Status: session.FileFailed,
				Reason: "Slack gave the file without its details and " + err.Error()}, nil
		}
		ref.Name, ref.Title, ref.Mimetype = cmp.Or(info.Name, ref.Name), cmp.Or(info.Title, ref.Title), cmp.Or(info.Mimetype, ref.Mimetype)
		ref.Size, ref.URL = int64(info.Size), cmp.Or(info.URLPrivateDownload, info.URLPrivate)
		if ref.URL == "" {
			return session.FileFetched{FileID: ref.FileID, TS: ref.TS, Name: cmp.Or(ref.Name, ref.FileID), Mimetype: ref.Mimetype,
				Status: session.FileFailed, Reason: "files.info gave no address to download it from"}, nil
		}
	}
	ff := session.FileFetched{FileID: ref.FileID, TS: ref.TS, Name: cmp.Or(ref.Name, ref.Title, ref.FileID),
		Mimetype: ref.Mimetype, Size: ref.Size}
	limit := t.features.Fetcher.Max()
	if ref.Size > limit {
		size, max := sizes(ref.Size, limit)
		ff.Status, ff.Reason = session.FileTooLarge, fmt.Sprintf("%s is over the %s limit (LOGBOOK_FILE_MAX)", size, max)
		return ff, nil
	}
	data, attempts, err := t.features.Fetcher.Fetch(ctx, ref.URL)
	ff.Attempts = attempts
	switch {
	case errors.Is(err, files.ErrTooLarge):
		ff.Status, ff.Reason = session.FileTooLarge, fmt.Sprintf("it is over the %s limit (LOGBOOK_FILE_MAX)", session.FileSize(limit))
		return ff, nil
	case ctx.Err() != nil:
		return ff, ctx.Err()
	case err != nil:
		ff.Status, ff.Reason = session.FileFailed, err.Error()
		return ff, nil
	}
	sha, err := t.features.Files.Put(ctx, t.sess.ID, data)
	if err != nil {
		if ctx.Err() != nil {
			return ff, ctx.Err()
		}
		// Recorded as failed, not retried at every turn; the database's words stay in the
		// operator's log.
		t.log.Error().Err(err).Str("file_id", ref.FileID).Msg("could not store a shared file")
		ff.Status, ff.Reason = session.FileFailed, "it could not be stored (the error is in the operator's log)"
		return ff, nil
	}
	ff.Status, ff.SHA256, ff.Size = session.FileStored, sha, int64(len(data))
	ff.Kind = brain.FileKind(ref.Mimetype, ff.Name, data)
	if ff.Kind == brain.FileKindOther && t.hands != nil {
		p := workspacePath(ref.FileID, ff.Name)
		if err := t.hands.WriteFile(ctx, p, data); err != nil {
			t.log.Warn().Err(err).Str("file_id", ref.FileID).Msg("could not copy a shared file into the sandbox")
		} else {
			ff.Workspace = p
			t.carried.copied[p] = true
		}
	}
	return ff, nil
}

// workspacePath is where a shared file is copied in the sandbox: unique per file.
func workspacePath(fileID, name string) string {
	return "shared/" + safeName(fileID) + "-" + safeName(name)
}

// restoreCopies writes the session's shared files that were copied into a sandbox into this
// cell's (sandboxes are disposable: an evicted cell's is gone), so what the model was told is
// in the sandbox is there. Best-effort.
func (t *turn) restoreCopies(ctx context.Context) {
	if t.hands == nil || t.features.Files == nil {
		return
	}
	for _, e := range session.Select(t.flog.snapshot(), session.Range{Types: []session.Type{session.TypeFileFetched}}) {
		var ff session.FileFetched
		if e.Decode(&ff) != nil || ff.Workspace == "" || ff.SHA256 == "" || t.carried.copied[ff.Workspace] {
			continue
		}
		t.carried.copied[ff.Workspace] = true
		data, err := t.features.Files.FileContent(ctx, ff.SHA256)
		if err == nil {
			err = t.hands.WriteFile(ctx, ff.Workspace, data)
		}
		if err != nil {
			t.log.Warn().Err(err).Str("file_id", ff.FileID).Msg("could not restore a shared file into the sandbox")
		}
	}
}

// safeName is a file name fit for the sandbox workspace: its last element, no leading dots,
// no control characters, at most 200 bytes (cut on a rune boundary, keeping the extension).
func safeName(name string) string {
	name = strings.Trim(strings.ReplaceAll(name, "\\", "/"), "/")
	name = strings.TrimLeft(path.Base(name), ".")
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' {
			return '_'
		}
		return r
	}, name)
	if len(name) > 200 {
		ext := path.Ext(name)
		if len(ext) > 20 {
			ext = ""
		}
		base := name[:200-len(ext)]
		for len(base) > 0 && !utf8.RuneStart(name[len(base)]) {
			base = base[:len(base)-1]
		}
		name = base + ext
	}
	return cmp.Or(name, "file")
}

// sizes renders a size against a limit, exactly when rounding would make them look alike.
func sizes(n, limit int64) (string, string) {
	a, b := session.FileSize(n), session.FileSize(limit)
	if a == b {
		return fmt.Sprintf("%d bytes", n), fmt.Sprintf("%d bytes", limit)
	}
	return a, b
}

// fileNotes are the lines the turn's reply carries about files it could not read, so the
// people in the thread know, whatever the model says: too large, failed, or of a kind
// nothing here reads.
func (t *turn) fileNotes() []string {
	var notes []string
	for _, e := range session.Select(t.flog.snapshot(), session.Range{From: t.state.turnSeq + 1, Types: []session.Type{session.TypeFileFetched}}) {
		var ff session.FileFetched
		if e.Decode(&ff) != nil {
			continue
		}
		name := "`" + mrkdwn.EscapeText(strings.ReplaceAll(ff.Name, "`", "'")) + "`"
		switch {
		case ff.Status == session.FileTooLarge, ff.Status == session.FileFailed:
			notes = append(notes, fmt.Sprintf(":warning: I could not read %s: %s.", name, mrkdwn.EscapeText(strings.TrimSuffix(ff.Reason, "."))))
		case ff.Status == session.FileStored && ff.Workspace == "" && cmp.Or(ff.Kind, brain.FileKind(ff.Mimetype, ff.Name, nil)) == brain.FileKindOther:
			notes = append(notes, fmt.Sprintf(":warning: I cannot read %s (%s): it is not text, an image or a PDF.", name, mrkdwn.EscapeText(cmp.Or(ff.Mimetype, "unknown type"))))
		}
	}
	return notes
}
