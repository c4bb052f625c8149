package slackemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// statusOf returns the HTTP status slack-go reports for a failed download, 0 if none.
func statusOf(err error) int {
	var se slack.StatusCodeError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// get fetches u with the Authorization header auth ("" for none) and returns status and body.
func get(t *testing.T, u, auth string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(waitCtx(t), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// A file a user shares is downloadable from its url_private(_download) with the bot token only;
// deleted, it answers 404 and files.info file_deleted.
func TestSharedFileDownloadsWithTheBotToken(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)
	content := []byte("build failed\nexit 1\n")
	if _, err := emu.ShareFile("C0000001", "U0000001", "", "the log", File{Name: "build.log", Content: content}); err != nil {
		t.Fatal(err)
	}
	hist, err := api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C0000001"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Messages) != 1 || len(hist.Messages[0].Files) != 1 {
		t.Fatalf("history = %+v", hist.Messages)
	}
	f := hist.Messages[0].Files[0]
	if f.Size != len(content) || f.Mimetype != "text/plain" || f.Filetype != "text" || f.User != "U0000001" || f.Title != "build.log" {
		t.Errorf("file = %+v", f)
	}
	wantPrefix := emu.URL() + "/files-pri/T0000001-" + f.ID + "/"
	if f.URLPrivate != wantPrefix+"build.log" || f.URLPrivateDownload != wantPrefix+"download/build.log" || emu.FileURL(f.ID) != f.URLPrivateDownload {
		t.Errorf("urls = %s, %s", f.URLPrivate, f.URLPrivateDownload)
	}
	for _, u := range []string{f.URLPrivate, f.URLPrivateDownload} {
		var buf bytes.Buffer
		if err := api.GetFileContext(ctx, u, &buf); err != nil || !bytes.Equal(buf.Bytes(), content) {
			t.Errorf("GetFile %s = %q, %v", u, buf.String(), err)
		}
	}
	status, body, h := get(t, f.URLPrivateDownload, "Bearer "+emu.BotToken())
	if status != 200 || body != string(content) || h.Get("Content-Type") != "text/plain" || !strings.Contains(h.Get("Content-Disposition"), "build.log") {
		t.Errorf("download = %d %q %v", status, body, h)
	}
	if got := emu.Downloads(f.ID); got != 3 {
		t.Errorf("Downloads = %d, want 3", got)
	}

	if status, _, _ := get(t, f.URLPrivate, ""); status != http.StatusForbidden {
		t.Errorf("without a token: %d, want 403", status)
	}
	wrong := newAPI(emu, "xoxb-wrong", emu.AppToken())
	if err := wrong.GetFileContext(ctx, f.URLPrivate, io.Discard); statusOf(err) != http.StatusForbidden {
		t.Errorf("with a wrong token: %v, want 403", err)
	}
	if err := newAPI(emu, emu.AppToken(), "").GetFileContext(ctx, f.URLPrivate, io.Discard); statusOf(err) != http.StatusForbidden {
		t.Errorf("with the app token: %v, want 403", err)
	}
	unknown := strings.Replace(f.URLPrivate, f.ID, "F999999999", 1)
	if err := api.GetFileContext(ctx, unknown, io.Discard); statusOf(err) != http.StatusNotFound {
		t.Errorf("unknown file: %v, want 404", err)
	}
	if got, want := emu.Downloads(f.ID), 3; got != want || emu.DownloadAttempts(f.ID) != 6 {
		t.Errorf("Downloads = %d, attempts %d; want 3 and 6", got, emu.DownloadAttempts(f.ID))
	}

	// A file in a channel the bot is not in is not the bot's to read.
	if _, err := emu.ShareFile("C0000003", "U0000001", "", "", File{ID: "F000000777", Name: "secret.txt", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := api.GetFileContext(ctx, emu.FileURL("F000000777"), io.Discard); statusOf(err) != http.StatusForbidden {
		t.Errorf("file outside the bot's channels: %v, want 403", err)
	}
	if _, _, _, err := api.GetFileInfoContext(ctx, "F000000777", 0, 0); slackErr(t, err) != "file_not_found" {
		t.Errorf("files.info outside the bot's channels: %v", err)
	}

	if err := emu.DeleteFile(f.ID); err != nil {
		t.Fatal(err)
	}
	if err := api.GetFileContext(ctx, f.URLPrivateDownload, io.Discard); statusOf(err) != http.StatusNotFound {
		t.Errorf("deleted file: %v, want 404", err)
	}
	if _, _, _, err := api.GetFileInfoContext(ctx, f.ID, 0, 0); slackErr(t, err) != "file_deleted" {
		t.Errorf("files.info of a deleted file: %v", err)
	}
	if _, _, _, err := api.GetFileInfoContext(ctx, "F999999999", 0, 0); slackErr(t, err) != "file_not_found" {
		t.Errorf("files.info of an unknown file: %v", err)
	}
	hist, err = api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C0000001"})
	if err != nil || len(hist.Messages) != 1 || hist.Messages[0].Files[0].Mode != "tombstone" {
		t.Errorf("history after the deletion = %+v, %v", hist, err)
	}
	if _, ok := emu.UploadedFile(f.ID); ok || emu.DeleteFile(f.ID) == nil {
		t.Error("a deleted file is still stored")
	}
}

// InjectDownloadFault fails the next downloads with a status (or a dropped connection), then
// the file is served again.
func TestDownloadFaults(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)
	if _, err := emu.ShareFile("C0000001", "U0000001", "", "", File{ID: "F000000100", Name: "a.bin", Content: []byte{0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	u := emu.FileURL("F000000100")
	emu.InjectDownloadFault("F000000100", http.StatusServiceUnavailable, 2)
	emu.InjectDownloadFault("F000000999", http.StatusInternalServerError, 0) // another file
	for range 2 {
		if err := api.GetFileContext(ctx, u, io.Discard); statusOf(err) != http.StatusServiceUnavailable {
			t.Errorf("faulted download: %v, want 503", err)
		}
	}
	var buf bytes.Buffer
	if err := api.GetFileContext(ctx, u, &buf); err != nil || !bytes.Equal(buf.Bytes(), []byte{0, 1, 2}) {
		t.Errorf("download after the faults = %v, %v", buf.Bytes(), err)
	}
	emu.InjectDownloadFault("", 0, 1)
	if err := api.GetFileContext(ctx, u, io.Discard); err == nil || statusOf(err) != 0 {
		t.Errorf("dropped download: %v, want a transport error", err)
	}
	if got, attempts := emu.Downloads("F000000100"), emu.DownloadAttempts("F000000100"); got != 1 || attempts != 4 {
		t.Errorf("Downloads = %d, attempts = %d; want 1 and 4", got, attempts)
	}
	emu.InjectDownloadFault("", http.StatusTooManyRequests, 0)
	emu.ClearFaults()
	if err := api.GetFileContext(ctx, u, io.Discard); err != nil {
		t.Errorf("download after ClearFaults: %v", err)
	}
	if f, ok := emu.UploadedFile("F000000100"); !ok || f.Mimetype != "application/octet-stream" || f.Filetype != "bin" || f.Size != 3 {
		t.Errorf("UploadedFile = %+v, %v", f, ok)
	}
}

// With FileAuthRedirect an unauthorised download is sent to a sign-in page, as files.slack.com
// does, and slack-go reports it.
func TestFileAuthRedirect(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{FileAuthRedirect: true})
	if _, err := emu.ShareFile("C0000001", "U0000001", "", "", File{ID: "F000000100", Name: "a.txt", Content: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	err := newAPI(emu, "xoxb-wrong", emu.AppToken()).GetFileContext(waitCtx(t), emu.FileURL("F000000100"), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "sign-in page") {
		t.Errorf("redirected download: %v", err)
	}
	if err := newAPI(emu, emu.BotToken(), "").GetFileContext(waitCtx(t), emu.FileURL("F000000100"), io.Discard); err != nil {
		t.Errorf("authorised download: %v", err)
	}
}

// slack-go's UploadFileContext (getUploadURLExternal, the upload, completeUploadExternal) posts
// the bot's file_share message in the thread, fires its message event, and files.info lists
// the share.
func TestUploadFileIntoAThread(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	ctx := waitCtx(t)
	top, err := emu.Post(Post{Channel: "C0000001", Text: "<@UB000001> summarise please"})
	if err != nil {
		t.Fatal(err)
	}
	content := "# Summary\nAll good.\n"
	sum, err := c.api.UploadFileContext(ctx, slack.UploadFileParameters{
		Filename: "summary.md", FileSize: len(content), Reader: strings.NewReader(content), Title: "Summary",
		Channel: "C0000001", ThreadTimestamp: top.TS, InitialComment: "here it is",
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Title != "Summary" || !strings.HasPrefix(sum.ID, "F") {
		t.Errorf("summary = %+v", sum)
	}
	msgs, _, _, err := c.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: top.TS})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("thread = %+v", msgs)
	}
	m := msgs[1]
	if m.SubType != "file_share" || m.User != "UB000001" || m.BotID != "B0000001" || m.Text != "here it is" || m.ThreadTimestamp != top.TS ||
		len(m.Files) != 1 || m.Files[0].ID != sum.ID || m.Files[0].Title != "Summary" || m.Files[0].Name != "summary.md" ||
		m.Files[0].Size != len(content) || m.Files[0].Mimetype != "text/markdown" || m.Upload {
		t.Errorf("file share = %+v (files %+v)", m, m.Files)
	}
	var buf bytes.Buffer
	if err := c.api.GetFileContext(ctx, m.Files[0].URLPrivateDownload, &buf); err != nil || buf.String() != content {
		t.Errorf("download = %q, %v", buf.String(), err)
	}
	if f, ok := emu.UploadedFile(sum.ID); !ok || string(f.Content) != content {
		t.Errorf("UploadedFile = %+v, %v", f, ok)
	}
	if got := emu.Calls("files.completeUploadExternal"); got != 1 {
		t.Errorf("completeUploadExternal calls = %d", got)
	}
	if rs := emu.BotReplies("C0000001", top.TS); len(rs) != 1 || rs[0].Files[0].ID != sum.ID {
		t.Errorf("BotReplies = %+v", rs)
	}

	d, _ := asDelivered(c.waitEvent(t, "the bot's file_share", eventsAPI(func(d delivered) bool {
		me, ok := d.inner.Data.(*slackevents.MessageEvent)
		return ok && me.SubType == "file_share" && me.User == "UB000001"
	})))
	me := d.inner.Data.(*slackevents.MessageEvent)
	if me.ThreadTimeStamp != top.TS || me.TimeStamp != m.Timestamp || me.BotID != "B0000001" || me.Message == nil || len(me.Message.Files) != 1 || me.Message.Files[0].ID != sum.ID {
		t.Errorf("file_share event = %+v (message %+v)", me, me.Message)
	}

	f, _, _, err := c.api.GetFileInfoContext(ctx, sum.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	shares := f.Shares.Public["C0000001"]
	if len(shares) != 1 || shares[0].Ts != m.Timestamp || shares[0].ThreadTs != top.TS || shares[0].ChannelName != "general" ||
		shares[0].ReplyCount != 1 || shares[0].TeamID != "T0000001" || !f.IsPublic || len(f.Channels) != 1 || f.Channels[0] != "C0000001" {
		t.Errorf("files.info = shares %+v, public %v, channels %v", f.Shares, f.IsPublic, f.Channels)
	}
}

// The three steps called one by one: the upload URL takes the bytes, completing shares the
// file, completing again shares it again (files.info then lists both), and a file completed
// without a channel stays private.
func TestUploadStepByStepAndCompleteTwice(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)
	top, err := emu.Post(Post{Channel: "C0000002", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("col\n1\n")
	up, err := api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: "data.csv", FileSize: len(content)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(up.UploadURL, emu.URL()+"/upload/v1/") || up.FileID == "" {
		t.Fatalf("upload url = %+v", up)
	}
	if _, _, _, err := api.GetFileInfoContext(ctx, up.FileID, 0, 0); slackErr(t, err) != "file_not_found" {
		t.Errorf("files.info before completion: %v", err)
	}
	if _, err := api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: up.FileID}}, Channel: "C0000002"}); slackErr(t, err) != "file_not_found" {
		t.Errorf("completing before the upload: %v", err)
	}
	if err := api.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: up.UploadURL, Reader: bytes.NewReader(content), Filename: "data.csv"}); err != nil {
		t.Fatal(err)
	}
	if err := api.GetFileContext(ctx, emu.FileURL(up.FileID), io.Discard); statusOf(err) != http.StatusNotFound {
		t.Errorf("download before completion: %v, want 404", err)
	}
	for i := range 2 {
		res, err := api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{
			Files: []slack.FileSummary{{ID: up.FileID, Title: "Data"}}, Channel: "C0000002", ThreadTimestamp: top.TS,
		})
		if err != nil || len(res.Files) != 1 || res.Files[0].ID != up.FileID || res.Files[0].Title != "Data" {
			t.Fatalf("complete #%d = %+v, %v", i+1, res, err)
		}
	}
	thread, err := emu.Thread("C0000002", top.TS)
	if err != nil || len(thread) != 3 || thread[1].Files[0].ID != up.FileID || thread[2].Files[0].ID != up.FileID || thread[2].Subtype != "file_share" {
		t.Fatalf("thread = %+v, %v", thread, err)
	}
	f, _, _, err := api.GetFileInfoContext(ctx, up.FileID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh := f.Shares.Private["C0000002"]; len(sh) != 2 || sh[0].Ts != thread[1].TS || sh[1].Ts != thread[2].TS || sh[1].ThreadTs != top.TS ||
		len(f.Groups) != 1 || f.IsPublic || f.Size != len(content) || f.Mimetype != "text/csv" || f.User != "UB000001" {
		t.Errorf("files.info = %+v (shares %+v)", f, f.Shares)
	}
	if got := emu.Calls("files.completeUploadExternal"); got != 3 {
		t.Errorf("completeUploadExternal calls = %d, want 3", got)
	}
	// Once completed, the upload URL is spent.
	resp, err := http.Post(up.UploadURL, "application/octet-stream", strings.NewReader("again"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("upload after completion: %d", resp.StatusCode)
	}

	// Raw bytes, completed without a channel: private, unshared, but the bot's to download.
	up2, err := api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: "notes", FileSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post(up2.UploadURL, "application/octet-stream", strings.NewReader("notes"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "OK - 5" {
		t.Errorf("raw upload = %d %q", resp.StatusCode, body)
	}
	if _, err := api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: up2.FileID}}}); err != nil {
		t.Fatal(err)
	}
	f, _, _, err = api.GetFileInfoContext(ctx, up2.FileID, 0, 0)
	if err != nil || f.IsPublic || len(f.Shares.Public)+len(f.Shares.Private) != 0 || f.Filetype != "text" || f.Title != "notes" {
		t.Errorf("private file = %+v, %v", f, err)
	}
	var buf bytes.Buffer
	if err := api.GetFileContext(ctx, f.URLPrivateDownload, &buf); err != nil || buf.String() != "notes" {
		t.Errorf("private download = %q, %v", buf.String(), err)
	}
	if err := api.DeleteFileContext(ctx, up2.FileID); err != nil {
		t.Errorf("files.delete: %v", err)
	}
	if err := api.DeleteFileContext(ctx, up2.FileID); slackErr(t, err) != "file_deleted" {
		t.Errorf("files.delete again: %v", err)
	}
}

func TestUploadErrors(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)
	call := func(method string, form url.Values) map[string]any {
		t.Helper()
		form.Set("token", emu.BotToken())
		resp, err := http.PostForm(emu.APIURL()+method, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, form := range []url.Values{{"filename": {"a.txt"}}, {"filename": {"a.txt"}, "length": {"0"}}, {"length": {"3"}}} {
		if got := call("files.getUploadURLExternal", form); got["error"] != "invalid_arguments" {
			t.Errorf("getUploadURLExternal %v = %v", form, got)
		}
	}
	if got := call("files.getUploadURLExternal", url.Values{"filename": {"a.png"}, "length": {"3"}, "alt_txt": {strings.Repeat("x", 1001)}}); got["error"] != "alt_txt_too_large" {
		t.Errorf("long alt_txt = %v", got)
	}
	if got := call("files.completeUploadExternal", url.Values{"files": {"not json"}}); got["error"] != "invalid_arguments" {
		t.Errorf("bad files = %v", got)
	}
	complete := func(id, channel string) error {
		_, err := api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: id}}, Channel: channel})
		return err
	}
	if err := complete("F404040404", "C0000001"); slackErr(t, err) != "file_not_found" {
		t.Errorf("unknown id: %v", err)
	}
	up, err := api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: "a.txt", FileSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: up.UploadURL, Content: "a", Filename: "a.txt"}); err != nil {
		t.Fatal(err)
	}
	for channel, want := range map[string]string{
		"C0000003": "not_in_channel", "C0000004": "is_archived", "C0000009": "channel_not_found",
	} {
		if err := complete(up.FileID, channel); slackErr(t, err) != want {
			t.Errorf("complete in %s: %v, want %s", channel, err, want)
		}
	}
	// A user's file cannot be completed by the app.
	if _, err := emu.ShareFile("C0000001", "U0000001", "", "", File{ID: "F000000500", Name: "u.txt", Content: []byte("u")}); err != nil {
		t.Fatal(err)
	}
	if err := complete("F000000500", "C0000001"); slackErr(t, err) != "file_not_found" {
		t.Errorf("a user's file: %v", err)
	}
	if err := api.DeleteFileContext(ctx, "F000000500"); slackErr(t, err) != "cant_delete_file" {
		t.Errorf("deleting a user's file: %v", err)
	}
	// Nothing was shared by the refused calls; a DM by user id works.
	if h := emu.History("C0000001"); len(h) != 1 {
		t.Errorf("history = %+v", h)
	}
	if _, err := api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: up.FileID}}, Channels: []string{"U0000001"}}); err != nil {
		t.Errorf("complete to a user's DM: %v", err)
	}
	if h := emu.History("D0000001"); len(h) != 1 || h[0].Files[0].ID != up.FileID {
		t.Errorf("DM history = %+v", h)
	}
}

// An ambiguous failure: completeUploadExternal shares the file, then the answer is lost. The
// bot can tell from files.info that the file is already in the thread.
func TestCompleteUploadSharedThenAnswerDropped(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)
	top, err := emu.Post(Post{Channel: "C0000001", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	emu.InjectMethodFault(MethodFault{Method: "files.completeUploadExternal", ApplyFirst: true, Drop: true, Times: 1})
	_, err = api.UploadFileContext(ctx, slack.UploadFileParameters{
		Filename: "r.txt", FileSize: 2, Content: "ok", Channel: "C0000001", ThreadTimestamp: top.TS,
	})
	var se slack.SlackErrorResponse
	if err == nil || errors.As(err, &se) || statusOf(err) != 0 {
		t.Fatalf("upload with a dropped answer: %v, want a transport error", err)
	}
	replies := emu.BotReplies("C0000001", top.TS)
	if len(replies) != 1 || len(replies[0].Files) != 1 {
		t.Fatalf("bot replies = %+v", replies)
	}
	f, _, _, err := api.GetFileInfoContext(ctx, replies[0].Files[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh := f.Shares.Public["C0000001"]; len(sh) != 1 || sh[0].ThreadTs != top.TS {
		t.Errorf("shares = %+v", f.Shares)
	}
	if got := emu.Calls("files.completeUploadExternal"); got != 1 {
		t.Errorf("calls = %d", got)
	}
}

// Files, their content and their shares survive a restart with Options.StateFile.
func TestStateFileKeepsFiles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "workspace.json")
	a, err := Start(Options{StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	api := newAPI(a, a.BotToken(), a.AppToken())
	top, err := a.Post(Post{Channel: "C0000001", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := api.UploadFileContext(waitCtx(t), slack.UploadFileParameters{
		Filename: "r.bin", FileSize: 4, Reader: bytes.NewReader([]byte{0xff, 0, 0xfe, 1}), Channel: "C0000001", ThreadTimestamp: top.TS,
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()

	b := MustStart(t, Options{StateFile: path})
	api = newAPI(b, b.BotToken(), b.AppToken())
	var buf bytes.Buffer
	if err := api.GetFileContext(waitCtx(t), b.FileURL(sum.ID), &buf); err != nil || !bytes.Equal(buf.Bytes(), []byte{0xff, 0, 0xfe, 1}) {
		t.Errorf("download after the restart = %v, %v", buf.Bytes(), err)
	}
	f, _, _, err := api.GetFileInfoContext(waitCtx(t), sum.ID, 0, 0)
	if err != nil || len(f.Shares.Public["C0000001"]) != 1 {
		t.Errorf("files.info after the restart = %+v, %v", f, err)
	}
	up, err := api.GetUploadURLExternalContext(waitCtx(t), slack.GetUploadURLExternalParameters{FileName: "n.txt", FileSize: 1})
	if err != nil || up.FileID == sum.ID {
		t.Errorf("new upload after the restart = %+v, %v", up, err)
	}
}

// The control surface reads a file and injects download faults and deletions.
func TestControlSurfaceFiles(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	if _, err := emu.ShareFile("C0000001", "U0000001", "", "", File{ID: "F000000100", Name: "a.txt", Content: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) int {
		t.Helper()
		resp, err := http.Post(emu.URL()+"/_emu/"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	status, body, _ := get(t, emu.URL()+"/_emu/file?id=F000000100", "")
	var got struct {
		File      File   `json:"file"`
		Content   []byte `json:"content"`
		Downloads int    `json:"downloads"`
	}
	if err := json.Unmarshal([]byte(body), &got); status != 200 || err != nil || string(got.Content) != "abc" || got.File.Name != "a.txt" {
		t.Errorf("GET file = %d %s", status, body)
	}
	if code := post("download_fault", `{"file_id":"F000000100","status":500,"times":1}`); code != 200 {
		t.Errorf("download_fault = %d", code)
	}
	if status, _, _ := get(t, emu.FileURL("F000000100"), "Bearer "+emu.BotToken()); status != 500 {
		t.Errorf("faulted download = %d", status)
	}
	if code := post("delete_file", `{"file_id":"F000000100"}`); code != 200 {
		t.Errorf("delete_file = %d", code)
	}
	if code := post("delete_file", `{"file_id":"F000000100"}`); code != 404 {
		t.Errorf("delete_file again = %d", code)
	}
	if code := post("method_fault", `{"method":"files.info","drop":true}`); code != 200 {
		t.Errorf("method_fault drop = %d", code)
	}
}
