package audit_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logbook/logbook/audit"
	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
	"github.com/logbook/logbook/session"
)

// lockedBuffer is the stream's file.
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The audit stream carries every event in the export's own JSON line, byte for byte, to a
// file and as OTLP logs whose attributes are the chain position.
func TestAuditStreamLinesAreTheExportsLines(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, name := range []string{"audit:file", "audit:otlp"} {
		if _, ok, err := f.app.ClaimStream(ctx, name, "nobody", time.Millisecond); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	file := &lockedBuffer{wrote: make(chan struct{}, 1)}
	rcv := otlptest.Start(t)
	sinks := []stream.Sink{audit.NewLineStream("audit:file", file, f.app),
		audit.NewOTLPStream("audit:otlp", rcv.URL+"/v1/logs", map[string]string{"x-tenant": "t1"}, f.app)}
	tctx, cancel := context.WithCancel(ctx)
	tl := stream.New(f.app, sinks, stream.Options{Owner: "replica-1", Poll: 10 * time.Millisecond, Backoff: 10 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- tl.Run(tctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	a, b := f.open(t, "C0000001", "1700000000.000100"), f.open(t, "C0000002", "1700000000.000200")
	alice := session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	var evs []session.Event
	for i, text := range []string{"plain", "quoted \"and\"\nnew line", "ünïcödé \u2028 and <!channel>", "last"} {
		sid := a.ID
		if i%2 == 1 {
			sid = b.ID
		}
		evs = append(evs, f.append(t, sid, alice, session.TypeUserMessage, session.UserMessage{Text: text}))
	}

	deadline := time.After(3 * time.Minute) // a long transaction elsewhere on the server holds the stream back
	for strings.Count(file.String(), "\n") < len(evs) || len(rcv.Logs()) < len(evs) {
		select {
		case <-file.wrote:
		case <-rcv.Received():
		case <-deadline:
			t.Fatalf("the stream has %d lines and %d logs, want %d", strings.Count(file.String(), "\n"), len(rcv.Logs()), len(evs))
		}
	}

	bucket, dir := newBucket(t)
	exp := audit.NewExporter(f.auditor, f.auditorPool, audit.ExporterOptions{})
	if _, err := exp.Export(ctx, audit.Query{From: evs[0].CreatedAt, To: evs[len(evs)-1].CreatedAt.Add(time.Microsecond)}, bucket, "x/"); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "x", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if got := file.String(); got != string(want) {
		t.Fatalf("the stream's lines differ from the export's:\n%s\nwant\n%s", got, want)
	}

	logs := rcv.Logs()
	lines := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
	for i, l := range logs {
		e := evs[i]
		if l.Body != lines[i] || l.EventName != "logbook.user_message" || l.Attrs["logbook.session_id"] != e.SessionID.String() ||
			l.Attrs["logbook.seq"] != e.Seq || l.Attrs["logbook.hash"] != hex.EncodeToString(e.Hash) ||
			l.Attrs["logbook.prev_hash"] != hex.EncodeToString(e.PrevHash) || !l.Time.Equal(e.CreatedAt) {
			t.Errorf("log %d: %+v, want the line of %s.%d with its chain position", i, l, e.SessionID, e.Seq)
		}
	}
}

// The OTLP audit stream follows no redirect: a collector that answers 307 gets neither the
// batch nor the headers (its API key) re-sent elsewhere; the delivery fails and is retried.
func TestAuditStreamFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	elsewhere := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere <- r.Header.Get("x-api-key")
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/logs", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	s := f.open(t, "C0000001", "1700000000.000100")
	ev := f.append(t, s.ID, session.Actor{Kind: session.ActorUser, ID: "U0000001"}, session.TypeUserMessage,
		session.UserMessage{Text: "hello", User: "U0000001", TS: "1700000000.000100"})
	sink := audit.NewOTLPStream("audit:otlp", redirecting.URL+"/v1/logs", map[string]string{"x-api-key": "secret-key"}, f.app)
	n, err := sink.Deliver(ctx, []session.Event{ev})
	if err == nil || n != 0 || !strings.Contains(err.Error(), "307") {
		t.Fatalf("a redirect answered: %d delivered, %v; want none and the 307 said", n, err)
	}
	select {
	case key := <-elsewhere:
		t.Fatalf("the redirect was followed with the key %q", key)
	default: // Deliver returned: had it followed the redirect, the other server would have been asked first.
	}
}
