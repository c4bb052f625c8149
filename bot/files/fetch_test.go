package files_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/files"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// downloads answers each GetFileContext with the next error (nil: the content).
type downloads struct {
	errs    []error
	content string
	calls   int
}

func (d *downloads) GetFileContext(ctx context.Context, u string, w io.Writer) error {
	d.calls++
	if len(d.errs) > 0 {
		err := d.errs[0]
		d.errs = d.errs[1:]
		if err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, d.content)
	return err
}

func noSleep(ctx context.Context, d time.Duration) error { return nil }

func TestFetch(t *testing.T) {
	t.Parallel()
	secretURL := "https://files.slack.com/files-pri/T1-F1/download/x.txt?t=xoxe-secret"
	for _, tc := range []struct {
		name     string
		d        *downloads
		max      int64
		want     string
		attempts int
		err      string
	}{
		{"content", &downloads{content: "hello"}, 0, "hello", 1, ""},
		{"retried, then stored", &downloads{errs: []error{slack.StatusCodeError{Code: 500}, nil}, content: "ok"}, 0, "ok", 2, ""},
		{"failing for good", &downloads{errs: []error{slack.StatusCodeError{Code: 503}, slack.StatusCodeError{Code: 503}, slack.StatusCodeError{Code: 503}}}, 0, "", 3, "HTTP 503"},
		{"gone: not retried", &downloads{errs: []error{slack.StatusCodeError{Code: 404}}}, 0, "", 1, "gone from Slack"},
		{"refused: files:read", &downloads{errs: []error{slack.StatusCodeError{Code: 403}, slack.StatusCodeError{Code: 403}, slack.StatusCodeError{Code: 403}}}, 0, "", 3, "files:read"},
		{"a remote file: not retried, no URL", &downloads{errs: []error{fmt.Errorf("refusing to send the token to %q: not an https Slack URL or the API URL", secretURL)}}, 0, "", 1, "remote file"},
		{"transport error without its URL", &downloads{errs: []error{&url.Error{Op: "Get", URL: secretURL, Err: errors.New("connection reset")}, &url.Error{Op: "Get", URL: secretURL, Err: errors.New("connection reset")}, &url.Error{Op: "Get", URL: secretURL, Err: errors.New("connection reset")}}}, 0, "", 3, "connection reset"},
		{"over the limit", &downloads{content: strings.Repeat("x", 11)}, 10, "", 1, "size limit"},
	} {
		f := files.NewFetcher(tc.d, files.FetchConfig{Max: tc.max, Sleep: noSleep})
		data, attempts, err := f.Fetch(context.Background(), secretURL)
		switch {
		case tc.err == "" && (err != nil || string(data) != tc.want):
			t.Errorf("%s: %q, %v", tc.name, data, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		case err != nil && (strings.Contains(err.Error(), "xoxe") || strings.Contains(err.Error(), "files-pri")):
			t.Errorf("%s: the error names the URL: %v", tc.name, err)
		case attempts != tc.attempts || tc.d.calls != tc.attempts:
			t.Errorf("%s: %d attempts (%d calls), want %d", tc.name, attempts, tc.d.calls, tc.attempts)
		}
	}
}

// A shared canvas is known by its mimetype, or, without one, by a permalink that opens a
// canvas; other files are not canvases.
func TestIsCanvas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mimetype, permalink string
		want                bool
	}{
		{"application/vnd.slack-docs", "", true},
		{"", "https://acme.slack.com/docs/T0000001/F000000001", true},
		{"text/plain", "https://acme.slack.com/docs/T0000001/F000000001", false},
		{"text/markdown", "https://acme.slack.com/files/U1/F2/notes.md", false},
		{"", "", false},
	} {
		if got := files.IsCanvas(c.mimetype, c.permalink); got != c.want {
			t.Errorf("IsCanvas(%q, %q) = %v", c.mimetype, c.permalink, got)
		}
	}
}
