package files

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// ToolAttach attaches a file of the sandbox workspace to the reply in the thread.
const ToolAttach = "attach_file"

// Uploader is what handing a file back to a thread needs of Slack (a *slack.Client): the
// two-step upload (files.upload is sunset) and files.info, to learn whether an upload was
// shared already.
type Uploader interface {
	GetUploadURLExternalContext(ctx context.Context, params slack.GetUploadURLExternalParameters) (*slack.GetUploadURLExternalResponse, error)
	UploadToURL(ctx context.Context, params slack.UploadToURLParameters) error
	CompleteUploadExternalContext(ctx context.Context, params slack.CompleteUploadExternalParameters) (*slack.CompleteUploadExternalResponse, error)
	GetFileInfoContext(ctx context.Context, fileID string, count, page int) (*slack.File, []slack.Comment, *slack.Paging, error)
}

// Keeper keeps a file's content by its hash for a session (*filestore.Store).
type Keeper interface {
	Put(ctx context.Context, id session.ID, data []byte) (string, error)
}

// Attach is the agent's attach_file tool, as a turn part: offered in the turns of a session
// with a sandbox. Each turn that answers first finishes the uploads a dead cell left
// (recorded uploaded, not recorded shared: Slack says whether they are in the thread, else
// they are shared now).
type Attach struct {
	Slack Uploader
	Store Keeper // nil: attached files are not kept
	Max   int64  // the largest file attached, bytes (LOGBOOK_FILE_MAX); default DefaultMax
	// Sleep waits between looks at Slack's record after a share that failed (default: a
	// ctx-aware timer).
	Sleep func(ctx context.Context, d time.Duration) error
}

var filesActor = session.Actor{Kind: session.ActorSystem, ID: "files"}

// Settle shares the uploads a dead cell recorded but did not record as shared (part.Settler),
// before the turn delivers anything. Only a context that ends is an error.
func (a *Attach) Settle(ctx context.Context, s part.Scope) error {
	return uploads{a: a, s: s}.finish(ctx)
}

// Offer offers attach_file when the session has a sandbox.
func (a *Attach) Offer(_ context.Context, s part.Scope) (part.Offer, error) {
	if s.Hands == nil {
		return part.Offer{}, nil
	}
	return part.Offer{Tools: []brain.Tool{attachTool{uploads{a: a, s: s}}}}, nil
}

// attachTool is attach_file in one turn.
type attachTool struct{ up uploads }

func (attachTool) Spec() brain.ToolSpec {
	return brain.ToolSpec{
		Name: ToolAttach,
		Description: "Attach a file from the sandbox workspace to the reply in the Slack thread, so people can " +
			"download it (a report, a patch, a chart, a log). Write the file first; say in the reply what it is.",
		Schema: brain.ObjectSchema(map[string]any{
			"path":  brain.Prop("string", "path relative to the workspace"),
			"title": brain.Prop("string", "optional title shown in Slack; default the file name"),
		}, "path"),
	}
}

// Doing is the live view's status while a call runs.
func (attachTool) Doing(use brain.ToolUse) string {
	var in struct{ Path string }
	_ = use.Decode(&in)
	return "attaching " + in.Path
}

// Recover says what an interrupted call did when the log records its file shared in the
// thread (brain.Recoverer): attached, not to be attached again.
func (attachTool) Recover(evs []session.Event, call session.ToolCall) (brain.Outcome, bool) {
	u, ok := upload(evs, call.CallID, uploadShared)
	if !ok {
		return brain.Outcome{}, false
	}
	return brain.Outcome{Content: fmt.Sprintf("attached %s to the thread", u.Name)}, true
}

func (t attachTool) Run(ctx context.Context, use brain.ToolUse) brain.Outcome {
	var in struct{ Path, Title string }
	if err := use.Decode(&in); err != nil {
		return brain.Failure("%v", err)
	}
	if strings.TrimSpace(in.Path) == "" {
		return brain.Failure("path is required")
	}
	res, err := t.up.attach(ctx, use.ID, in.Path, in.Title)
	if err != nil {
		return brain.Failure("%s", clip.Text(err.Error(), 200))
	}
	return brain.Outcome{Content: res}
}

// uploads are the uploads of one turn.
type uploads struct {
	a *Attach
	s part.Scope
}

// Statuses of session.FileUpload.
const (
	uploadUploaded = "uploaded"
	uploadShared   = "shared"
)

// attach hands the sandbox file at p to the thread, exactly
// once. The bytes go to Slack (files.getUploadURLExternal, then the upload URL) and the log
// records the file's id and hash (file_upload "uploaded") before the file is shared
// (files.completeUploadExternal); a cell that dies between the share and its record leaves a
// record a later one checks against Slack (files.info) before sharing anything, so the file
// never shows twice. The result is the tool's.
func (u uploads) attach(ctx context.Context, callID, p, title string) (string, error) {
	if rec, ok := upload(u.s.Log.Snapshot(), callID, uploadShared); ok {
		return fmt.Sprintf("%s is attached to the thread already", rec.Name), nil
	}
	rec, ok := upload(u.s.Log.Snapshot(), callID, uploadUploaded)
	if !ok {
		if u.s.Hands == nil {
			return "", errors.New("attach_file needs the sandbox, and this deployment has none")
		}
		data, err := u.s.Hands.ReadFile(ctx, p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("there is no file %s in the workspace", p)
		case errors.Is(err, sandbox.ErrOutsideWorkspace):
			return "", fmt.Errorf("%s is outside the sandbox workspace", p)
		case errors.Is(err, sandbox.ErrTooLarge):
			return "", fmt.Errorf("%s is too large to attach", p)
		case err != nil:
			u.s.Logger.Warn().Err(err).Str("call_id", callID).Msg("attach_file: could not read the file")
			return "", fmt.Errorf("%s could not be read from the sandbox", p)
		}
		limit := cmp.Or(u.a.Max, DefaultMax)
		switch {
		case len(data) == 0:
			return "", fmt.Errorf("%s is empty; Slack takes no empty files", p)
		case int64(len(data)) > limit:
			return "", fmt.Errorf("%s is %s, over the %s limit (LOGBOOK_FILE_MAX)", p, session.FileSize(int64(len(data))), session.FileSize(limit))
		}
		sha := session.FileHash(data)
		if prior, ok := sharedInTurn(u.s.Log.Snapshot(), u.s.Turn, SafeName(path.Base(p)), sha); ok {
			return fmt.Sprintf("%s is attached to the thread already (this turn, the same content)", prior.Name), nil
		}
		if u.a.Store != nil {
			if sha, err = u.a.Store.Put(ctx, u.s.Session.ID, data); err != nil {
				// The database's words are for operators, not for the model to quote.
				u.s.Logger.Error().Err(err).Str("call_id", callID).Msg("attach_file: could not store the file")
				return "", errors.New("the file could not be stored; the error is in the operator's log")
			}
		}
		name := SafeName(path.Base(p))
		ur, err := u.a.Slack.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: name, FileSize: len(data)})
		if err != nil {
			return "", fmt.Errorf("Slack would not take the upload: %w", err)
		}
		if err := u.a.Slack.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: ur.UploadURL, Reader: bytes.NewReader(data), Filename: name}); err != nil {
			// The upload URL is a short-lived credential: it stays out of the result.
			u.s.Logger.Warn().Str("error", withoutURL(err)).Str("call_id", callID).Msg("attach_file: the upload failed")
			return "", errors.New("the upload to Slack failed; the error is in the operator's log")
		}
		rec = session.FileUpload{CallID: callID, FileID: ur.FileID, Name: name, Title: title, Size: int64(len(data)), SHA256: sha,
			Mimetype: mime.TypeByExtension(path.Ext(name)), Status: uploadUploaded}
		if _, err := u.s.Log.Append(ctx, session.NewEvent{Type: session.TypeFileUpload, Actor: filesActor,
			IdempotencyKey: "file_upload/" + callID + "/" + uploadUploaded, Payload: rec}); err != nil {
			u.s.Logger.Error().Err(err).Str("call_id", callID).Msg("attach_file: could not record the upload")
			return "", errors.New("the upload could not be recorded; the file was not shared")
		}
	}
	if err := u.share(ctx, rec); err != nil {
		u.s.Logger.Warn().Err(err).Str("call_id", callID).Str("file_id", rec.FileID).Msg("attach_file: could not share the file")
		return "", errors.New("the file could not be shared in the thread; the error is in the operator's log")
	}
	return fmt.Sprintf("attached %s (%s) to the thread", rec.Name, session.FileSize(rec.Size)), nil
}

// share shares an uploaded file in the session's thread unless Slack says it is there
// already, and records it (file_upload "shared").
func (u uploads) share(ctx context.Context, rec session.FileUpload) error {
	ts, err := u.sharedAt(ctx, rec.FileID)
	if err != nil {
		return err
	}
	if ts == "" {
		_, err := u.a.Slack.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{
			Files: []slack.FileSummary{{ID: rec.FileID, Title: cmp.Or(rec.Title, rec.Name)}}, Channel: u.s.Session.Key.Channel,
			ThreadTimestamp: u.s.Session.Key.ThreadTS})
		// An ok answer means shared (Slack fills in files.info's shares a moment later); after
		// an error Slack's record decides, asked a few times: an answer lost after the share
		// must not lead to sharing the file again.
		for wait := 250 * time.Millisecond; err != nil && ts == "" && wait <= 2*time.Second; wait *= 2 {
			if ts, _ = u.sharedAt(ctx, rec.FileID); ts != "" {
				break
			}
			if err := u.sleep(ctx, wait); err != nil {
				return err
			}
		}
		if err != nil && ts == "" {
			return fmt.Errorf("sharing %s in the thread failed: %s", rec.Name, withoutURL(err))
		}
		if ts == "" {
			ts, _ = u.sharedAt(ctx, rec.FileID) // best-effort: the message's ts for the record
		}
	}
	rec.Status, rec.TS = uploadShared, ts
	_, err = u.s.Log.Append(ctx, session.NewEvent{Type: session.TypeFileUpload, Actor: filesActor,
		IdempotencyKey: "file_upload/" + rec.CallID + "/" + uploadShared, Payload: rec})
	return err
}

// sharedAt is the ts of the message that shares file in the session's thread, "" if none.
func (u uploads) sharedAt(ctx context.Context, file string) (string, error) {
	f, _, _, err := u.a.Slack.GetFileInfoContext(ctx, file, 0, 0)
	if slackErr(err, "file_not_found") {
		return "", nil // uploaded, never shared: Slack shows no file until it is
	}
	if err != nil {
		return "", fmt.Errorf("look up the uploaded file %s: %w", file, err)
	}
	for _, shares := range []map[string][]slack.ShareFileInfo{f.Shares.Public, f.Shares.Private} {
		for _, s := range shares[u.s.Session.Key.Channel] {
			if s.ThreadTs == u.s.Session.Key.ThreadTS || s.Ts == u.s.Session.Key.ThreadTS {
				return s.Ts, nil
			}
		}
	}
	return "", nil
}

// finish shares the files a dead cell uploaded and recorded but did not record as
// shared (it may have shared them: Slack says), before the turn goes on. Only a context that
// ends is an error.
func (u uploads) finish(ctx context.Context) error {
	snap := u.s.Log.Snapshot()
	for _, e := range session.Select(snap, session.Range{From: u.s.Turn + 1, Types: []session.Type{session.TypeFileUpload}}) {
		var rec session.FileUpload
		if e.Decode(&rec) != nil || rec.Status != uploadUploaded {
			continue
		}
		if _, ok := upload(snap, rec.CallID, uploadShared); ok {
			continue
		}
		u.s.Logger.Info().Str("file_id", rec.FileID).Str("call_id", rec.CallID).Msg("finishing an upload a dead cell left")
		if err := u.share(ctx, rec); err != nil {
			// Best-effort: one file Slack will not share must not keep the turn from its reply.
			u.s.Logger.Warn().Err(err).Str("file_id", rec.FileID).Msg("could not finish an upload a dead cell left; going on")
		}
	}
	return ctx.Err()
}

// sharedInTurn finds a file of this name and content the turn at turnSeq shared already: the
// same file attached again in one turn is shared once.
func sharedInTurn(evs []session.Event, turnSeq int64, name, sha string) (session.FileUpload, bool) {
	return session.FirstRecord(evs, session.Range{From: turnSeq + 1, Types: []session.Type{session.TypeFileUpload}}, func(rec session.FileUpload) bool {
		return rec.Status == uploadShared && rec.Name == name && rec.SHA256 == sha
	})
}

// upload finds the file_upload of call with status in evs.
func upload(evs []session.Event, call, status string) (session.FileUpload, bool) {
	return session.FirstRecord(evs, session.Range{Types: []session.Type{session.TypeFileUpload}}, func(rec session.FileUpload) bool {
		return rec.CallID == call && rec.Status == status
	})
}

// sleep waits d, or until ctx ends.
func (u uploads) sleep(ctx context.Context, d time.Duration) error {
	if u.a.Sleep != nil {
		return u.a.Sleep(ctx, d)
	}
	return wait.Sleep(ctx, d)
}

func slackErr(err error, code string) bool {
	var se slack.SlackErrorResponse
	return errors.As(err, &se) && se.Err == code
}

// withoutURL is err's text without the URL it names: an upload URL is a short-lived
// credential.
func withoutURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " upload URL: " + ue.Err.Error()
	}
	return err.Error()
}

// SafeName is a file name fit for the sandbox workspace: its last element, no leading dots,
// no control characters, at most 200 bytes (cut on a rune boundary, keeping the extension).
func SafeName(name string) string {
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
