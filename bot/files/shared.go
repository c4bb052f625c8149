package files

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

// Shared is the files people share in the thread, as a turn part: the files shared with the
// messages a turn answers are fetched and stored before its first model call (and those of
// messages that steer it, as they join), copied into the sandbox when the model cannot read
// them, put back in a new cell's sandbox, and the reply says which ones could not be read.
type Shared struct {
	Fetcher *Fetcher
	Store   SharedStore
}

// SharedStore keeps the shared files' content by hash (*filestore.Store).
type SharedStore interface {
	Keeper
	FileContent(ctx context.Context, sha string) ([]byte, error)
}

// copies are the sandbox paths of shared files written into a cell's sandbox.
type copies struct {
	mu sync.Mutex
	m  map[string]bool
}

// add records p, reporting whether it is new.
func (c *copies) add(p string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[p] {
		return false
	}
	c.m[p] = true
	return true
}

type copiesKey struct{}

// sharedTurn is Shared in one turn.
type sharedTurn struct {
	p      *Shared
	s      part.Scope
	copied *copies
}

// Offer fetches the files of the messages the turn answers and puts back the copies a dead
// cell's sandbox had; an error is the log's (or ctx's).
func (p *Shared) Offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	v, _ := s.Cell.Value(copiesKey{}, func() (any, func()) { return &copies{m: map[string]bool{}}, nil })
	c, _ := v.(*copies)
	if c == nil {
		c = &copies{m: map[string]bool{}}
	}
	t := sharedTurn{p: p, s: s, copied: c}
	if err := t.fetch(ctx, s.Through); err != nil {
		return part.Offer{}, err
	}
	t.restoreCopies(ctx)
	return part.Offer{Steered: t.fetch}, nil
}

// Footer is the reply's lines on the files the turn could not read (part.Footer).
func (p *Shared) Footer(s part.Scope) []string { return sharedTurn{p: p, s: s}.notes() }

// fetch stores the content of the files shared with the messages up to through (the
// file_refs without a file_fetched), before the model is called: each gets a file_fetched —
// stored, with its hash, or too large, or failed after retries, saying why. A file of a kind
// the model cannot read (not an image, a PDF or text) is also copied into the session's
// sandbox, where its tools can. A message is never lost for its file: whatever the download
// does, the turn goes on; only a log that cannot be written fails it.
func (t sharedTurn) fetch(ctx context.Context, through int64) error {
	snap := t.s.Log.Snapshot()
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
		if e.Decode(&ref) != nil || ref.FileID == "" || (ref.URL == "" && ref.Access != CheckFileInfo && !IsCanvas(ref.Mimetype, ref.Permalink)) ||
			!answers[ref.TS] || done[ref.FileID+"/"+ref.TS] {
			continue
		}
		done[ref.FileID+"/"+ref.TS] = true
		ff, err := t.fetchFile(ctx, ref)
		if err != nil {
			return err
		}
		t.s.Logger.Info().Str("file_id", ref.FileID).Str("status", ff.Status).Int64("size", ff.Size).Str("reason", ff.Reason).Msg("shared file")
		evs = append(evs, session.NewEvent{Type: session.TypeFileFetched, Actor: filesActor,
			IdempotencyKey: "file_fetched/" + ref.FileID + "/" + ref.TS, Payload: ff})
	}
	if len(evs) == 0 {
		return nil
	}
	_, err := t.s.Log.Append(ctx, evs...)
	return err
}

// fetchFile fetches and stores one file. Only a failure to store is an error.
func (t sharedTurn) fetchFile(ctx context.Context, ref session.FileRef) (session.FileFetched, error) {
	if IsCanvas(ref.Mimetype, ref.Permalink) {
		return t.fetchCanvas(ctx, ref)
	}
	if ref.URL == "" {
		// Shared with file_access check_file_info (a Slack Connect channel): the message
		// carried only the file's id, files.info has the rest.
		info, err := t.p.Fetcher.Info(ctx, ref.FileID)
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
	limit := t.p.Fetcher.Max()
	if ref.Size > limit {
		size, max := sizes(ref.Size, limit)
		ff.Status, ff.Reason = session.FileTooLarge, fmt.Sprintf("%s is over the %s limit (LOGBOOK_FILE_MAX)", size, max)
		return ff, nil
	}
	data, attempts, err := t.p.Fetcher.Fetch(ctx, ref.URL)
	ff, ok, err := t.store(ctx, ff, data, attempts, err, "it")
	if !ok {
		return ff, err
	}
	ff.Kind = brain.FileKind(ref.Mimetype, ff.Name, data)
	if ff.Kind == brain.FileKindOther && t.s.Hands != nil {
		p := workspacePath(ref.FileID, ff.Name)
		if err := t.s.Hands.WriteFile(ctx, p, data); err != nil {
			t.s.Logger.Warn().Err(err).Str("file_id", ref.FileID).Msg("could not copy a shared file into the sandbox")
		} else {
			ff.Workspace = p
			t.copied.add(p)
		}
	}
	return ff, nil
}

// fetchCanvas reads and stores a canvas shared in the thread: its content as markdown
// (canvases.getContent), stored by hash like a file's and given to the model as a text file
// named after the canvas's title. Only a failure to store is an error.
func (t sharedTurn) fetchCanvas(ctx context.Context, ref session.FileRef) (session.FileFetched, error) {
	name := strings.TrimSuffix(cmp.Or(ref.Title, ref.Name, ref.FileID), ".md") + ".md"
	ff := session.FileFetched{FileID: ref.FileID, TS: ref.TS, Name: name, Mimetype: "text/markdown"}
	data, attempts, err := t.p.Fetcher.Canvas(ctx, ref.FileID)
	ff, ok, err := t.store(ctx, ff, data, attempts, err, "the canvas")
	if ok {
		ff.Kind = brain.FileKindText
	}
	return ff, err
}

// store records what a fetch of ff's content gave (data, after attempts; fetchErr) and stores
// the content by hash: ok when it is stored. Otherwise ff says why (what names the file in
// the reason), and err is set only when ctx ended. A failure to store is recorded as failed,
// not retried at every turn; the database's words stay in the operator's log.
func (t sharedTurn) store(ctx context.Context, ff session.FileFetched, data []byte, attempts int, fetchErr error, what string) (session.FileFetched, bool, error) {
	ff.Attempts = attempts
	switch {
	case errors.Is(fetchErr, ErrTooLarge):
		ff.Status, ff.Reason = session.FileTooLarge, fmt.Sprintf("%s is over the %s limit (LOGBOOK_FILE_MAX)", what, session.FileSize(t.p.Fetcher.Max()))
		return ff, false, nil
	case ctx.Err() != nil:
		return ff, false, ctx.Err()
	case fetchErr != nil:
		ff.Status, ff.Reason = session.FileFailed, fetchErr.Error()
		return ff, false, nil
	}
	sha, err := t.p.Store.Put(ctx, t.s.Session.ID, data)
	if err != nil {
		if ctx.Err() != nil {
			return ff, false, ctx.Err()
		}
		t.s.Logger.Error().Err(err).Str("file_id", ff.FileID).Msg("could not store a shared file")
		ff.Status, ff.Reason = session.FileFailed, "it could not be stored (the error is in the operator's log)"
		return ff, false, nil
	}
	ff.Status, ff.SHA256, ff.Size = session.FileStored, sha, int64(len(data))
	return ff, true, nil
}

// workspacePath is where a shared file is copied in the sandbox: unique per file.
func workspacePath(fileID, name string) string {
	return "shared/" + SafeName(fileID) + "-" + SafeName(name)
}

// restoreCopies writes the session's shared files that were copied into a sandbox into this
// cell's (sandboxes are disposable: an evicted cell's is gone), so what the model was told is
// in the sandbox is there. Best-effort.
func (t sharedTurn) restoreCopies(ctx context.Context) {
	if t.s.Hands == nil {
		return
	}
	for _, e := range session.Select(t.s.Log.Snapshot(), session.Range{Types: []session.Type{session.TypeFileFetched}}) {
		var ff session.FileFetched
		if e.Decode(&ff) != nil || ff.Workspace == "" || ff.SHA256 == "" || !t.copied.add(ff.Workspace) {
			continue
		}
		data, err := t.p.Store.FileContent(ctx, ff.SHA256)
		if err == nil {
			err = t.s.Hands.WriteFile(ctx, ff.Workspace, data)
		}
		if err != nil {
			t.s.Logger.Warn().Err(err).Str("file_id", ff.FileID).Msg("could not restore a shared file into the sandbox")
		}
	}
}

// sizes renders a size against a limit, exactly when rounding would make them look alike.
func sizes(n, limit int64) (string, string) {
	a, b := session.FileSize(n), session.FileSize(limit)
	if a == b {
		return fmt.Sprintf("%d bytes", n), fmt.Sprintf("%d bytes", limit)
	}
	return a, b
}

// notes are the lines the turn's reply carries about files it could not read, so the
// people in the thread know, whatever the model says: too large, failed, or of a kind
// nothing here reads.
func (t sharedTurn) notes() []string {
	var notes []string
	for _, e := range session.Select(t.s.Log.Snapshot(), session.Range{From: t.s.Turn + 1, Types: []session.Type{session.TypeFileFetched}}) {
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
