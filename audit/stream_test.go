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

// injectedWait is one wait of the tailer on the test's clock.
type injectedWait struct {
	d    time.Duration
	fire chan time.Time
}

// The audit stream has no dead letters: an audit record with a hole is no record. A collector
// that answers 500 holds its stream, retried with backoff (1 s doubling, on an injected
// clock), the cursor not moving and nothing taken; once it answers again it gets every event
// of the thread (with an approval and a stop) once, in order, its chain unbroken.
func TestOTLPAuditStreamBlocksThroughAMinuteOfFailuresAndResumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	const sink = "audit:otlp"
	// The cursor at the end of the log, its lease released: the tailer claims it at once (no
	// lease wait on the injected clock).
	if _, ok, err := f.app.ClaimStream(ctx, sink, "nobody", time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := f.app.ReleaseStream(ctx, sink, "nobody"); err != nil {
		t.Fatal(err)
	}
	rcv := otlptest.Start(t)
	rcv.Fail(http.StatusInternalServerError)
	const poll = 10 * time.Millisecond
	waits := make(chan injectedWait, 64)
	after := func(d time.Duration) <-chan time.Time {
		if d == poll { // the idle poll before the thread is appended: real, short
			return time.After(d)
		}
		w := injectedWait{d: d, fire: make(chan time.Time, 1)}
		waits <- w
		return w.fire
	}
	// serve's backoff (the defaults: 1 s doubling to a minute), its time injected.
	tl := stream.New(f.app, []stream.Sink{audit.NewOTLPStream(sink, rcv.URL+"/v1/logs", nil, f.app)},
		stream.Options{Owner: "replica-1", Poll: poll, After: after})
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tl.Run(tctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	cursorOf := func() session.Cursor {
		t.Helper()
		sts, err := f.app.Streams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.Sink == sink {
				return st.Cursor
			}
		}
		t.Fatalf("no cursor of %s", sink)
		return session.Cursor{}
	}
	before := cursorOf()

	s := f.open(t, "C0000001", "1700000000.000100")
	alice := session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	botA := session.Actor{Kind: session.ActorBot, ID: "B0000001"}
	thread := []session.Event{
		f.append(t, s.ID, alice, session.TypeUserMessage, session.UserMessage{Text: "deploy it"}),
		f.append(t, s.ID, botA, session.TypeTurnStarted, session.TurnStarted{Through: 1}),
		f.append(t, s.ID, botA, session.TypeApprovalRequested, session.ApprovalRequested{Turn: 2, CallID: "call-1",
			Tool: "run_command", Summary: "deploy", Channel: "C0000001", ExpiresAt: time.Now().Add(time.Hour)}),
		f.append(t, s.ID, alice, session.TypeApprovalDecided, session.ApprovalDecided{CallID: "call-1", Decision: session.DecisionApproved, Via: "button"}),
		f.append(t, s.ID, alice, session.TypeStopRequested, session.StopRequested{Source: "reaction"}),
		f.append(t, s.ID, botA, session.TypeTurnStopped, session.TurnStopped{Turn: 2, By: "U0000001", Source: "reaction", Request: 5}),
		f.append(t, s.ID, botA, session.TypeTurnCompleted, session.TurnCompleted{Turn: 2, Status: session.StatusStopped, Through: 1}),
	}

	// A minute of injected time: each wait follows a refused export and doubles the last.
	deadline := time.After(3 * time.Minute) // a long transaction elsewhere on the server holds the stream back
	var injected time.Duration
	var last injectedWait
	refused := 0
	for want := time.Second; injected < time.Minute; want *= 2 {
		select {
		case last = <-waits:
		case <-deadline:
			t.Fatalf("the tailer waited %v in all; want a minute of retries", injected)
		}
		if last.d != want {
			t.Fatalf("the tailer's wait after %v of failures is %v, want %v", injected, last.d, want)
		}
		if r := rcv.Refused(); r <= refused {
			t.Fatalf("a wait of %v with no export refused before it (%d refused)", last.d, r)
		} else {
			refused = r
		}
		if got := rcv.Logs(); len(got) != 0 {
			t.Fatalf("the collector answering 500 kept %d records", len(got))
		}
		if c := cursorOf(); c != before {
			t.Fatalf("the cursor moved from %+v to %+v while the collector refused", before, c)
		}
		injected += last.d
		if injected < time.Minute {
			last.fire <- time.Now()
		}
	}

	// The collector answers again: the wait in progress ends and everything arrives.
	rcv.Fail(0)
	last.fire <- time.Now()
	for len(rcv.Logs()) < len(thread) {
		select {
		case <-rcv.Received():
		case w := <-waits:
			t.Fatalf("the tailer waited %v again after the collector came back (%d records)", w.d, len(rcv.Logs()))
		case <-deadline:
			t.Fatalf("the collector got %d records after it came back, want %d", len(rcv.Logs()), len(thread))
		}
	}
	logs := rcv.Logs()
	if len(logs) != len(thread) {
		t.Fatalf("the collector got %d records, want the thread's %d once each", len(logs), len(thread))
	}
	for i, l := range logs {
		e := thread[i]
		if l.Attrs["logbook.session_id"] != s.ID.String() || l.Attrs["logbook.seq"] != e.Seq || l.Attrs["logbook.hash"] != hex.EncodeToString(e.Hash) {
			t.Errorf("record %d is %v.%v (hash %v), want %s.%d in order (hash %x)", i, l.Attrs["logbook.session_id"], l.Attrs["logbook.seq"], l.Attrs["logbook.hash"], s.ID, e.Seq, e.Hash)
		}
		if i > 0 && l.Attrs["logbook.prev_hash"] != logs[i-1].Attrs["logbook.hash"] {
			t.Errorf("record %d's prev_hash %v is not record %d's hash %v", i, l.Attrs["logbook.prev_hash"], i-1, logs[i-1].Attrs["logbook.hash"])
		}
	}
	t.Logf("the collector refused %d exports over %v of injected time, then took the %d events in one", refused, injected, len(logs))
}
