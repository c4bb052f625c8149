package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// kill -9 between Slack sharing an attached file and the log recording it: the next process
// learns from Slack (files.info) that the file is in the thread, records it, and never shares
// it again; the thread shows it once.
func TestE2EAttachSurvivesKillBetweenShareAndRecord(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	e.model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_w", Name: "write_file", Input: `{"path":"report.txt","content":"all green\n"}`}}},
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_a", Name: "attach_file", Input: `{"path":"report.txt"}`}}},
		fakeprovider.Reply{Text: "The report is attached."},
		fakeprovider.Reply{Text: "Report"},
	)
	// Between serve and the emulator: the share goes through, its answer never comes back.
	target, _ := url.Parse(e.emu.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	shared := make(chan struct{})
	var proxyURL string
	var once sync.Once
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/files.getUploadURLExternal") {
			// The upload URL points at Slack's host, here the emulator's: slack-go sends the
			// token only to the API's host, so the upload goes through this proxy too.
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			w.Header().Set("Content-Type", "application/json")
			w.Write(bytes.ReplaceAll(rec.Body.Bytes(), []byte(e.emu.URL()), []byte(proxyURL)))
			return
		}
		if strings.HasSuffix(r.URL.Path, "/files.completeUploadExternal") {
			rp.ServeHTTP(httptest.NewRecorder(), r)
			once.Do(func() { close(shared) })
			<-r.Context().Done()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	proxyURL = proxy.URL
	a := e.serve("SLACK_API_URL="+proxy.URL+"/api/", "LOGBOOK_SANDBOX=process")
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("attach a report")})
	select {
	case <-shared:
	case <-time.After(60 * time.Second):
		var types []string
		for _, ev := range e.events(e.session(top.TS).ID) {
			types = append(types, string(ev.Type)+":"+string(ev.Payload))
		}
		t.Fatalf("the file was never shared; the log: %s", strings.Join(types, "\n"))
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	e.serve("LOGBOOK_SANDBOX=process")
	s := e.session(top.TS)
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	var withFile []slackemu.Message
	for _, m := range e.emu.BotReplies(general, top.TS) {
		if len(m.Files) > 0 {
			withFile = append(withFile, m)
		}
	}
	if len(withFile) != 1 {
		t.Fatalf("%d messages share the file; want 1: %+v", len(withFile), e.emu.BotReplies(general, top.TS))
	}
	var recs []session.FileUpload
	for _, ev := range e.events(s.ID, session.TypeFileUpload) {
		var u session.FileUpload
		if err := ev.Decode(&u); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, u)
	}
	if len(recs) != 2 || recs[1].Status != "shared" || recs[1].TS != withFile[0].TS || recs[1].SHA256 != session.FileHash([]byte("all green\n")) {
		t.Fatalf("file_upload records %+v", recs)
	}
	if n := e.emu.Calls("files.completeUploadExternal"); n != 1 {
		t.Fatalf("files.completeUploadExternal called %d times: %+v\nmessages %+v", n, e.emu.Requests("files.completeUploadExternal"), e.emu.BotReplies(general, top.TS))
	}
}
