package webhooks_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/stream/webhooks"
)

// verify is docs/streams.md's Go snippet for receivers, character for character (the test
// below checks the page holds exactly this function).
func verify(secret string, r *http.Request, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false // a replay of an old delivery
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

// docBlock is the body of the first fenced block of language lang after the heading in page.
func docBlock(t *testing.T, page, heading, lang string) string {
	t.Helper()
	_, rest, ok := strings.Cut(page, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/streams.md has no heading %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/streams.md has no %s block under %q", lang, heading)
	}
	block, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("docs/streams.md: the %s block under %q is not closed", lang, heading)
	}
	return block
}

// signedDelivery is one POST as the receiver got it.
type signedDelivery struct {
	header http.Header
	body   []byte
	ok     bool // what the documented verify said
}

// The receiver's verification snippets of docs/streams.md, run against real signed deliveries
// (the tailer delivering a thread to a webhook): the Go function accepts each delivery and
// refuses a changed body, another secret and a replayed (re-signed, old) timestamp; the shell
// recipe computes each delivery's signature.
func TestDocsVerificationSnippetsVerifyARealDelivery(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "streams.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	self, err := os.ReadFile("docs_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, fn, _ := strings.Cut(string(self), "\nfunc verify(")
	fn, _, _ = strings.Cut(fn, "\n}\n")
	fn = "func verify(" + fn + "\n}\n"
	if got := docBlock(t, page, "### Verifying a delivery", "go"); got != fn {
		t.Fatalf("docs/streams.md's Go snippet is not the verify this test runs:\n%s\nwant\n%s", got, fn)
	}
	shell := docBlock(t, page, "### Verifying a delivery", "sh")

	r := newRig(t)
	var mu sync.Mutex
	var got []signedDelivery
	took := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ok := verify(secret, req, body)
		mu.Lock()
		got = append(got, signedDelivery{header: req.Header.Clone(), body: body, ok: ok})
		mu.Unlock()
		took <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	r.start(r.parse(`{"docs": {"url": "`+srv.URL+`", "secret": "`+secret+`"}}`), time.Hour)
	r.thread("1700000000.000900")
	deadline := time.After(3 * time.Minute) // a long transaction elsewhere holds the tailer back
	for range 6 {
		select {
		case <-took:
		case <-deadline:
			t.Fatalf("the receiver got %d deliveries, want 6", len(got))
		}
	}
	mu.Lock()
	defer mu.Unlock()

	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!"))
	for _, d := range got {
		id := d.header.Get("webhook-id")
		if !d.ok {
			t.Errorf("the documented verify refused the delivery %s", id)
		}
		req := &http.Request{Header: d.header}
		if verify(secret, req, append([]byte(nil), append(d.body, ' ')...)) {
			t.Errorf("the documented verify accepted %s with a changed body", id)
		}
		if verify(other, req, d.body) {
			t.Errorf("the documented verify accepted %s under another secret", id)
		}
		// A replay: the delivery signed properly, but ten minutes ago.
		old := time.Now().Add(-10 * time.Minute).Unix()
		replay := d.header.Clone()
		replay.Set("webhook-timestamp", strconv.FormatInt(old, 10))
		replay.Set("webhook-signature", webhooks.Sign(key, id, old, d.body))
		if verify(secret, &http.Request{Header: replay}, d.body) {
			t.Errorf("the documented verify accepted %s with a timestamp ten minutes old", id)
		}

		// The shell recipe, with the body in body.json.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "body.json"), d.body, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", shell)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SECRET="+secret, "WEBHOOK_ID="+id, "WEBHOOK_TIMESTAMP="+d.header.Get("webhook-timestamp"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the shell recipe: %v: %s", err, out)
		}
		if sig := strings.TrimPrefix(d.header.Get("webhook-signature"), "v1,"); strings.TrimSpace(string(out)) != sig {
			t.Errorf("the shell recipe computed %q for %s, the delivery's signature is v1,%s", strings.TrimSpace(string(out)), id, sig)
		}
	}
}
