package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/session/clip"
)

// DefaultMax is the largest file fetched by default (LOGBOOK_FILE_MAX): 20 MB.
const DefaultMax = 20 << 20

// ErrTooLarge is Fetch's error for a file over the size limit.
var ErrTooLarge = errors.New("file over the size limit")

// Downloader is the Slack client's file download (slack.Client.GetFileContext): it sends the
// bot token, only to Slack's own hosts, and reports a redirect to the sign-in page.
type Downloader interface {
	GetFileContext(ctx context.Context, downloadURL string, writer io.Writer) error
}

// Fetcher downloads shared files.
type Fetcher struct {
	slack    Downloader
	max      int64
	attempts int
	sleep    func(ctx context.Context, d time.Duration) error
}

// FetchConfig configures a Fetcher; zero values take the defaults.
type FetchConfig struct {
	Max      int64 // bytes; default DefaultMax
	Attempts int   // downloads of one file before it is reported failed; default 3
	// Sleep waits between attempts (1 s, then 2 s, …); default a timer. Tests pass their clock.
	Sleep func(ctx context.Context, d time.Duration) error
}

// NewFetcher returns a Fetcher downloading through d.
func NewFetcher(d Downloader, cfg FetchConfig) *Fetcher {
	f := &Fetcher{slack: d, max: cfg.Max, attempts: cfg.Attempts, sleep: cfg.Sleep}
	if f.max <= 0 {
		f.max = DefaultMax
	}
	if f.attempts <= 0 {
		f.attempts = 3
	}
	if f.sleep == nil {
		f.sleep = wait.Sleep
	}
	return f
}

// Max is the size limit in bytes.
func (f *Fetcher) Max() int64 { return f.max }

// Fetch downloads url (a file's url_private_download). Failures — Slack down, a refusal, a
// deleted file — are tried again, up to the attempts, with a growing pause; a file over the
// limit is not (ErrTooLarge). It returns the content and the attempts made; the error's text
// is fit for a log line and the model (it holds no token and no URL).
func (f *Fetcher) Fetch(ctx context.Context, downloadURL string) ([]byte, int, error) {
	var last error
	for attempt := 1; ; attempt++ {
		var buf bytes.Buffer
		err := f.slack.GetFileContext(ctx, downloadURL, &limitWriter{w: &buf, left: f.max})
		if err == nil {
			return buf.Bytes(), attempt, nil
		}
		if errors.Is(err, ErrTooLarge) {
			return nil, attempt, err
		}
		last = describe(err)
		if attempt >= f.attempts || ctx.Err() != nil || permanent(err) {
			return nil, attempt, last
		}
		if err := f.sleep(ctx, time.Duration(attempt)*time.Second); err != nil {
			return nil, attempt, last
		}
	}
}

// permanent reports a failure no retry can change: the file is gone, or the token may not
// be sent to where it lives (a remote file), or the download led to a sign-in page.
func permanent(err error) bool {
	var sc slack.StatusCodeError
	msg := err.Error()
	return (errors.As(err, &sc) && (sc.Code == 404 || sc.Code == 410)) ||
		strings.Contains(msg, "refusing to send the token") || strings.Contains(msg, "sign-in page")
}

// describe says what went wrong in a fixed sentence: no URL (net/http errors and slack-go's
// refusals name it), no token.
func describe(err error) error {
	var sc slack.StatusCodeError
	msg := err.Error()
	switch {
	case strings.Contains(msg, "refusing to send the token"):
		return errors.New("the file is not stored at Slack (a remote file), so it cannot be fetched with the bot token")
	case strings.Contains(msg, "sign-in page"):
		return errors.New("Slack sent the download to its sign-in page: the app cannot read this file (files:read, or not shared with it)")
	case errors.As(err, &sc) && sc.Code == 403:
		return errors.New("Slack refused the download (HTTP 403): the app may lack files:read")
	case errors.As(err, &sc) && (sc.Code == 404 || sc.Code == 410):
		return fmt.Errorf("the file is gone from Slack (HTTP %d): deleted, or never shared here", sc.Code)
	case errors.As(err, &sc):
		return fmt.Errorf("Slack answered HTTP %d", sc.Code)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return errors.New("the download was cut short")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New("the download failed: " + clip.Text(ue.Err.Error(), 160)) // without the URL
	}
	return errors.New("the download failed")
}

// limitWriter fails once more than left bytes are written.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, ErrTooLarge
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

// infoer is files.info (slack.Client.GetFileInfoContext).
type infoer interface {
	GetFileInfoContext(ctx context.Context, fileID string, count, page int) (*slack.File, []slack.Comment, *slack.Paging, error)
}

// CheckFileInfo is the file_access of a file that a message carries without its name, type or
// address — files shared in Slack Connect channels: files.info has them.
const CheckFileInfo = "check_file_info"

// Info asks files.info for a file (its name, type, size and url_private_download), for a file
// shared with file_access check_file_info. The error's text is fit for the model (no token, no
// URL); a client without files.info is an error.
func (f *Fetcher) Info(ctx context.Context, fileID string) (slack.File, error) {
	in, ok := f.slack.(infoer)
	if !ok {
		return slack.File{}, errors.New("files.info is not available to logbook here")
	}
	var last error
	for attempt := 1; ; attempt++ {
		file, _, _, err := in.GetFileInfoContext(ctx, fileID, 0, 0)
		if err == nil && file != nil {
			return *file, nil
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) {
			return slack.File{}, fmt.Errorf("files.info answered %s", se.Err)
		}
		last = describe(cmpErr(err))
		if attempt >= f.attempts || ctx.Err() != nil {
			return slack.File{}, last
		}
		if err := f.sleep(ctx, time.Duration(attempt)*time.Second); err != nil {
			return slack.File{}, last
		}
	}
}

// CanvasMimetype is the mimetype Slack gives a canvas shared as a file (filetype quip).
const CanvasMimetype = "application/vnd.slack-docs"

// IsCanvas reports whether a shared file is a Slack canvas: by its mimetype, else by its
// permalink, which opens a canvas at /docs/<team>/<id> (a file's is /files/…).
func IsCanvas(mimetype, permalink string) bool {
	return strings.EqualFold(strings.TrimSpace(mimetype), CanvasMimetype) ||
		(mimetype == "" && strings.Contains(permalink, ".slack.com/docs/"))
}

// canvasReader is canvases.getContent (slack.Client.GetCanvasContentContext).
type canvasReader interface {
	GetCanvasContentContext(ctx context.Context, canvasID string, options ...slack.GetCanvasContentOption) (string, error)
}

// Canvas reads a canvas's whole content as markdown (canvases.getContent, canvases:read), up
// to the size limit (ErrTooLarge). Failures that may pass are tried again, as downloads are;
// Slack's refusals (canvas_not_found: deleted, or not visible to the app; missing_scope) are
// not. The error's text is fit for the model.
func (f *Fetcher) Canvas(ctx context.Context, canvasID string) ([]byte, int, error) {
	cr, ok := f.slack.(canvasReader)
	if !ok {
		return nil, 0, errors.New("canvases.getContent is not available to logbook here")
	}
	var last error
	for attempt := 1; ; attempt++ {
		md, err := cr.GetCanvasContentContext(ctx, canvasID, slack.GetCanvasContentOptionContentType("markdown"))
		if err == nil {
			if int64(len(md)) > f.max {
				return nil, attempt, ErrTooLarge
			}
			return []byte(md), attempt, nil
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && se.Err != "ratelimited" && se.Err != "internal_error" && se.Err != "service_unavailable" {
			if se.Err == "missing_scope" {
				return nil, attempt, errors.New("canvases.getContent answered missing_scope: the app needs canvases:read")
			}
			return nil, attempt, fmt.Errorf("canvases.getContent answered %s", se.Err)
		}
		last = describe(err)
		if attempt >= f.attempts || ctx.Err() != nil {
			return nil, attempt, last
		}
		if err := f.sleep(ctx, time.Duration(attempt)*time.Second); err != nil {
			return nil, attempt, last
		}
	}
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("files.info gave no file")
	}
	return err
}
