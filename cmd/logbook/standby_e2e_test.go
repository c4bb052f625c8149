package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/cmd/logbook/localpg"
)

// startStandby starts a streaming standby of pg (pg_basebackup -R from the test's own primary
// cluster, on its own port), stopped at the end of the test.
func startStandby(t *testing.T, pg *localpg.Server) *localpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := localpg.StartStandby(ctx, pg, localpg.Options{Dir: clusterDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	return sb
}

// exec runs one statement on a fresh connection to url.
func execOn(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// runWith is e.runStderr with more environment.
func runWith(e *e2e, env []string, args ...string) (string, string) {
	e.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = e.env(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("logbook %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

const standbyToken = "standby-e2e-token-0123456789"

// getWithToken fetches path from serve's HTTP address with the test's bearer token.
func getWithToken(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+standbyToken)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func metricValue(t *testing.T, out, name string) float64 {
	t.Helper()
	v, _ := strconv.ParseFloat(metric(t, out, name), 64)
	return v
}

var transcriptLink = regexp.MustCompile(`https://logbook\.example\.com(/sessions/[0-9a-f-]{36})`)

// Issue 33, reads on a standby: serve reads the web pages from LOGBOOK_READ_DATABASE_URL, a
// real streaming standby of the test's own primary. The transcript link under a reply shows
// the reply at once — read on the caught-up standby; with the standby's replay paused, from
// the primary (read your writes by falling back), while /readyz and the metrics say how far
// it lags; with the standby gone, still (reads fall back, never fail). Audit exports and
// verification of a closed window read from the standby give the same bytes as from the
// primary.
func TestE2EReadsOnAStandby(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	pg := outageCluster(t, e)
	sb := startStandby(t, pg)
	for i := range 20 {
		e.model.Push(fakeprovider.Reply{Text: fmt.Sprintf("Answer number %d from the model.", i)})
	}
	p := e.serve("LOGBOOK_LOG_LEVEL=info", "LOGBOOK_READ_DATABASE_URL="+sb.URL(), "LOGBOOK_READ_MAX_WAIT=500ms",
		"LOGBOOK_WEB_TOKENS=e2e:"+standbyToken, "LOGBOOK_PUBLIC_URL=https://logbook.example.com")
	out := p.out.String()
	m := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*http: /healthz`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no http address in the output:\n%s", out)
	}
	addr := m[1]
	reads := func(server, reason string) float64 {
		return metricValue(t, p.out.String(), `logbook_standby_reads_total{reason="`+reason+`",server="`+server+`"}`)
	}
	// replyAndLink posts in the thread (a new one when thread is "") and returns the thread,
	// the newest final reply's text and the transcript link under it.
	replyAndLink := func(thread string, n int, text string) (string, string, string) {
		t.Helper()
		post := slackemu.Post{Channel: general, User: ada, Text: mention(text), ThreadTS: thread}
		r := e.post(post)
		if thread == "" {
			thread = r.TS
		}
		replies := e.replies(thread, n)
		last := replies[len(replies)-1]
		b, _ := json.Marshal(last)
		link := transcriptLink.FindStringSubmatch(string(b))
		if link == nil {
			t.Fatalf("no transcript link under the reply: %s", b)
		}
		reply := strings.TrimSpace(strings.SplitN(last.Text, "\n", 2)[0])
		return thread, reply, link[1]
	}
	shows := func(path, reply string) {
		t.Helper()
		code, body := getWithToken(t, addr, path)
		if code != http.StatusOK || !strings.Contains(html.UnescapeString(body), reply) {
			t.Fatalf("GET %s: %d, the reply %q missing:\n%s", path, code, reply, body)
		}
	}

	// Caught up: the link right after the reply shows it, read on the standby.
	thread, reply, link := replyAndLink("", 1, "first question")
	before := reads("standby", "")
	shows(link, reply)
	if got := reads("standby", ""); got <= before {
		t.Fatalf("the transcript was not read on the standby (standby reads %v, then %v)", before, got)
	}
	before = reads("standby", "")
	if code, body := getWithToken(t, addr, "/search?q=question"); code != http.StatusOK {
		t.Fatalf("search on the standby: %d\n%s", code, body)
	}
	if got := reads("standby", ""); got <= before {
		t.Fatalf("the search page was not read on the standby (standby reads %v, then %v)", before, got)
	}
	_, ready := getWithToken(t, addr, "/readyz")
	if !strings.Contains(ready, "ready\n") || !strings.Contains(ready, "standby: lag_bytes=") {
		t.Fatalf("/readyz with a standby:\n%s", ready)
	}

	// Lagging: replay paused; the next reply is still shown, read on the primary.
	execOn(t, sb.URL(), `SELECT pg_wal_replay_pause()`)
	_, reply2, link := replyAndLink(thread, 2, "second question")
	if reply2 == reply {
		t.Fatalf("the second reply is the first's: %q", reply)
	}
	shows(link, reply2)
	if got := reads("primary", "lagging"); got < 1 {
		t.Fatalf("no read went to the primary for a lagging standby (%v)", got)
	}
	_, ready = getWithToken(t, addr, "/readyz")
	lag := regexp.MustCompile(`standby: lag_bytes=(\d+) lag_seconds=(\S+) replay_paused=true`).FindStringSubmatch(ready)
	if lag == nil || lag[1] == "0" {
		t.Fatalf("/readyz does not say the paused standby lags:\n%s", ready)
	}
	if v := metricValue(t, p.out.String(), "logbook_standby_lag_bytes"); v <= 0 {
		t.Fatalf("logbook_standby_lag_bytes %v with replay paused", v)
	}
	t.Logf("STANDBY paused: /readyz %s", strings.TrimSpace(lag[0]))
	// logbook transcript reads your writes too: from the primary, saying so.
	text, note := runWith(e, []string{"LOGBOOK_READ_DATABASE_URL=" + sb.URL(), "LOGBOOK_READ_MAX_WAIT=300ms"},
		"transcript", strings.TrimPrefix(link, "/sessions/"))
	if !strings.Contains(text, reply2) || !strings.Contains(note, "has not caught up") {
		t.Fatalf("logbook transcript with replay paused:\n%s\nstderr:\n%s", text, note)
	}
	// So does logbook search, once it has synced the index (on the primary).
	hits, note := runWith(e, []string{"LOGBOOK_READ_DATABASE_URL=" + sb.URL(), "LOGBOOK_READ_MAX_WAIT=300ms"},
		"search", "--json", "second question")
	if !strings.Contains(hits, strings.TrimPrefix(link, "/sessions/")) || !strings.Contains(note, "has not caught up") {
		t.Fatalf("logbook search with replay paused:\n%s\nstderr:\n%s", hits, note)
	}

	// Exports and verification of a closed window: the same bytes from the standby as from
	// the primary. With replay paused the standby cannot catch up: the export says it read the
	// primary; resumed, it reads the standby and says nothing.
	to := time.Now().UTC().Truncate(time.Second) // closed: in the past (the export settles it)
	from := to.Add(-time.Hour)
	export := func(name string, env ...string) (string, string) {
		dir := filepath.Join(t.TempDir(), name)
		stdout, stderr := runWith(e, env, "audit", "export", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--out", dir)
		var manifest struct {
			WindowClosed bool `json:"window_closed"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err == nil {
			err = json.Unmarshal(b, &manifest)
		}
		if err != nil || !manifest.WindowClosed {
			t.Fatalf("export %s: %v, window closed %v\n%s\n%s", name, err, manifest.WindowClosed, stdout, stderr)
		}
		return dir, stderr
	}
	primaryDir, _ := export("primary")
	pausedDir, pausedErr := export("paused", "LOGBOOK_READ_DATABASE_URL="+sb.URL(), "LOGBOOK_READ_MAX_WAIT=300ms")
	if !strings.Contains(pausedErr, "has not caught up") {
		t.Fatalf("an export with replay paused did not say it read the primary:\n%s", pausedErr)
	}
	execOn(t, sb.URL(), `SELECT pg_wal_replay_resume()`)
	standbyDir, standbyErr := export("standby", "LOGBOOK_READ_DATABASE_URL="+sb.URL())
	if strings.Contains(standbyErr, "LOGBOOK_READ_DATABASE_URL") {
		t.Fatalf("the export did not read the caught-up standby:\n%s", standbyErr)
	}
	for _, dir := range []string{pausedDir, standbyDir} {
		sameExport(t, primaryDir, dir)
	}
	verifyPrimary := e.run("audit", "verify")
	verifyStandby, verifyErr := runWith(e, []string{"LOGBOOK_READ_DATABASE_URL=" + sb.URL()}, "audit", "verify")
	if !strings.HasPrefix(verifyPrimary, "OK: ") || verifyStandby != verifyPrimary || strings.Contains(verifyErr, "LOGBOOK_READ_DATABASE_URL") {
		t.Fatalf("verify: primary %q, standby %q\n%s", verifyPrimary, verifyStandby, verifyErr)
	}

	// Gone: the standby stops; the next reply's link still shows it, from the primary.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, reply3, link := replyAndLink(thread, 3, "third question")
	shows(link, reply3)
	if code, body := getWithToken(t, addr, "/search?q=question"); code != http.StatusOK {
		t.Fatalf("search with the standby gone: %d\n%s", code, body)
	}
	if got := reads("primary", "unreachable"); got < 1 {
		t.Fatalf("no read went to the primary for a standby that is gone (%v)", got)
	}
	if code, ready := getWithToken(t, addr, "/readyz"); code != http.StatusOK || !strings.Contains(ready, "standby: unreachable") {
		t.Fatalf("/readyz with the standby gone: %d\n%s", code, ready)
	}
	if !strings.Contains(p.out.String(), "does not answer: reads go to the primary") {
		t.Fatalf("no log line said the standby went away")
	}
}

// sameExport fails unless the two exports' files (all but the manifest, which says when each
// ran) hold the same bytes.
func sameExport(t *testing.T, a, b string) {
	t.Helper()
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ent := range entries {
		if strings.HasPrefix(ent.Name(), "manifest.json") {
			continue
		}
		x, err1 := os.ReadFile(filepath.Join(a, ent.Name()))
		y, err2 := os.ReadFile(filepath.Join(b, ent.Name()))
		if err1 != nil || err2 != nil || string(x) != string(y) {
			t.Fatalf("export file %s differs (%v, %v):\n%s\n---\n%s", ent.Name(), err1, err2, x, y)
		}
		if len(x) > 0 {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("the exports in %s hold nothing to compare", a)
	}
}
