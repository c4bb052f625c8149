package bot

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/files"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
)

// Uploader is what handing a file back to a thread needs of Slack (a *slack.Client): the
// two-step upload (files.upload is sunset) and files.info, to learn whether an upload was
// shared already.
type Uploader interface {
	GetUploadURLExternalContext(ctx context.Context, params slack.GetUploadURLExternalParameters) (*slack.GetUploadURLExternalResponse, error)
	UploadToURL(ctx context.Context, params slack.UploadToURLParameters) error
	CompleteUploadExternalContext(ctx context.Context, params slack.CompleteUploadExternalParameters) (*slack.CompleteUploadExternalResponse, error)
	GetFileInfoContext(ctx context.Context, fileID string, count, page int) (*slack.File, []slack.Comment, *slack.Paging, error)
}

// Statuses of session.FileUpload.
const (
	uploadUploaded = "uploaded"
	uploadShared   = "shared"
)

// attach is the brain's Turn.Attach: it hands the sandbox file at p to the thread, exactly
// once. The bytes go to Slack (files.getUploadURLExternal, then the upload URL) and the log
// records the file's id and hash (file_upload "uploaded") before the file is shared
// (files.completeUploadExternal); a cell that dies between the share and its record leaves a
// record a later one checks against Slack (files.info) before sharing anything, so the file
// never shows twice. The result is the tool's.
func (t *turn) attach(ctx context.Context, callID, p, title string) (string, error) {
	if rec, ok := upload(t.flog.snapshot(), callID, uploadShared); ok {
		return fmt.Sprintf("%s is attached to the thread already", rec.Name), nil
	}
	rec, ok := upload(t.flog.snapshot(), callID, uploadUploaded)
	if !ok {
		if t.hands == nil {
			return "", errors.New("attach_file needs the sandbox, and this deployment has none")
		}
		data, err := t.hands.ReadFile(ctx, p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("there is no file %s in the workspace", p)
		case errors.Is(err, sandbox.ErrOutsideWorkspace):
			return "", fmt.Errorf("%s is outside the sandbox workspace", p)
		case errors.Is(err, sandbox.ErrTooLarge):
			return "", fmt.Errorf("%s is too large to attach", p)
		case err != nil:
			t.log.Warn().Err(err).Str("call_id", callID).Msg("attach_file: could not read the file")
			return "", fmt.Errorf("%s could not be read from the sandbox", p)
		}
		limit := int64(files.DefaultMax)
		if t.features.Fetcher != nil {
			limit = t.features.Fetcher.Max()
		}
		switch {
		case len(data) == 0:
			return "", fmt.Errorf("%s is empty; Slack takes no empty files", p)
		case int64(len(data)) > limit:
			return "", fmt.Errorf("%s is %s, over the %s limit (LOGBOOK_FILE_MAX)", p, session.FileSize(int64(len(data))), session.FileSize(limit))
		}
		sha := session.FileHash(data)
		if prior, ok := sharedInTurn(t.flog.snapshot(), t.state.turnSeq, safeName(path.Base(p)), sha); ok {
			return fmt.Sprintf("%s is attached to the thread already (this turn, the same content)", prior.Name), nil
		}
		if t.features.Files != nil {
			if sha, err = t.features.Files.Put(ctx, t.sess.ID, data); err != nil {
				// The database's words are for operators, not for the model to quote.
				t.log.Error().Err(err).Str("call_id", callID).Msg("attach_file: could not store the file")
				return "", errors.New("the file could not be stored; the error is in the operator's log")
			}
		}
		name := safeName(path.Base(p))
		u, err := t.features.Uploader.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: name, FileSize: len(data)})
		if err != nil {
			return "", fmt.Errorf("Slack would not take the upload: %w", err)
		}
		if err := t.features.Uploader.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: u.UploadURL, Reader: bytes.NewReader(data), Filename: name}); err != nil {
			// The upload URL is a short-lived credential: it stays out of the result.
			t.log.Warn().Str("error", withoutURL(err)).Str("call_id", callID).Msg("attach_file: the upload failed")
			return "", errors.New("the upload to Slack failed; the error is in the operator's log")
		}
		rec = session.FileUpload{CallID: callID, FileID: u.FileID, Name: name, Title: title, Size: int64(len(data)), SHA256: sha,
			Mimetype: mime.TypeByExtension(path.Ext(name)), Status: uploadUploaded}
		if _, err := t.flog.Append(ctx, session.NewEvent{Type: session.TypeFileUpload, Actor: filesActor,
			IdempotencyKey: "file_upload/" + callID + "/" + uploadUploaded, Payload: rec}); err != nil {
			t.log.Error().Err(err).Str("call_id", callID).Msg("attach_file: could not record the upload")
			return "", errors.New("the upload could not be recorded; the file was not shared")
		}
	}
	if err := t.share(ctx, rec); err != nil {
		t.log.Warn().Err(err).Str("call_id", callID).Str("file_id", rec.FileID).Msg("attach_file: could not share the file")
		return "", errors.New("the file could not be shared in the thread; the error is in the operator's log")
	}
	return fmt.Sprintf("attached %s (%s) to the thread", rec.Name, session.FileSize(rec.Size)), nil
}

// share shares an uploaded file in the session's thread unless Slack says it is there
// already, and records it (file_upload "shared").
func (t *turn) share(ctx context.Context, rec session.FileUpload) error {
	ts, err := t.sharedAt(ctx, rec.FileID)
	if err != nil {
		return err
	}
	if ts == "" {
		_, err := t.features.Uploader.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{
			Files: []slack.FileSummary{{ID: rec.FileID, Title: cmp.Or(rec.Title, rec.Name)}}, Channel: t.sess.Key.Channel,
			ThreadTimestamp: t.sess.Key.ThreadTS})
		// An ok answer means shared (Slack fills in files.info's shares a moment later); after
		// an error Slack's record decides, asked a few times: an answer lost after the share
		// must not lead to sharing the file again.
		for wait := 250 * time.Millisecond; err != nil && ts == "" && wait <= 2*time.Second; wait *= 2 {
			if ts, _ = t.sharedAt(ctx, rec.FileID); ts != "" {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.clock.After(wait):
			}
		}
		if err != nil && ts == "" {
			return fmt.Errorf("sharing %s in the thread failed: %s", rec.Name, withoutURL(err))
		}
		if ts == "" {
			ts, _ = t.sharedAt(ctx, rec.FileID) // best-effort: the message's ts for the record
		}
	}
	rec.Status, rec.TS = uploadShared, ts
	_, err = t.flog.Append(ctx, session.NewEvent{Type: session.TypeFileUpload, Actor: filesActor,
		IdempotencyKey: "file_upload/" + rec.CallID + "/" + uploadShared, Payload: rec})
	return err
}

// sharedAt is the ts of the message that shares file in the session's thread, "" if none.
func (t *turn) sharedAt(ctx context.Context, file string) (string, error) {
	f, _, _, err := t.features.Uploader.GetFileInfoContext(ctx, file, 0, 0)
	if isSlackErr(err, "file_not_found") {
		return "", nil // uploaded, never shared: Slack shows no file until it is
	}
	if err != nil {
		return "", fmt.Errorf("look up the uploaded file %s: %w", file, err)
	}
	for _, shares := range []map[string][]slack.ShareFileInfo{f.Shares.Public, f.Shares.Private} {
		for _, s := range shares[t.sess.Key.Channel] {
			if s.ThreadTs == t.sess.Key.ThreadTS || s.Ts == t.sess.Key.ThreadTS {
				return s.Ts, nil
			}
		}
	}
	return "", nil
}

// finishUploads shares the files a dead cell uploaded and recorded but did not record as
// shared (it may have shared them: Slack says), before the turn goes on. Only a context that
// ends is an error.
func (t *turn) finishUploads(ctx context.Context) error {
	if t.features.Uploader == nil {
		return nil
	}
	snap := t.flog.snapshot()
	for _, e := range session.Select(snap, session.Range{From: t.state.turnSeq + 1, Types: []session.Type{session.TypeFileUpload}}) {
		var rec session.FileUpload
		if e.Decode(&rec) != nil || rec.Status != uploadUploaded {
			continue
		}
		if _, ok := upload(snap, rec.CallID, uploadShared); ok {
			continue
		}
		t.log.Info().Str("file_id", rec.FileID).Str("call_id", rec.CallID).Msg("finishing an upload a dead cell left")
		if err := t.share(ctx, rec); err != nil {
			// Best-effort: one file Slack will not share must not keep the turn from its reply.
			t.log.Warn().Err(err).Str("file_id", rec.FileID).Msg("could not finish an upload a dead cell left; going on")
		}
	}
	return ctx.Err()
}

// sharedInTurn finds a file of this name and content the turn at turnSeq shared already: the
// same file attached again in one turn is shared once.
func sharedInTurn(evs []session.Event, turnSeq int64, name, sha string) (session.FileUpload, bool) {
	return firstRecord(evs, session.Range{From: turnSeq + 1, Types: []session.Type{session.TypeFileUpload}}, func(rec session.FileUpload) bool {
		return rec.Status == uploadShared && rec.Name == name && rec.SHA256 == sha
	})
}

// upload finds the file_upload of call with status in evs.
func upload(evs []session.Event, call, status string) (session.FileUpload, bool) {
	return firstRecord(evs, session.Range{Types: []session.Type{session.TypeFileUpload}}, func(rec session.FileUpload) bool {
		return rec.CallID == call && rec.Status == status
	})
}
