package webhooks_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/stream"
	"github.com/logbook/logbook/bot/stream/webhooks"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	key    = []byte("a key of thirty-two bytes, really")
	secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
	user1  = session.Actor{Kind: session.ActorUser, ID: "U0000001"}
	botA   = session.Actor{Kind: session.ActorBot, ID: "B0000001"}
)

// delivery is what a receiver took.
type delivery struct {
	ID   string
	Type string `json:"type"`
	Data struct {
		SessionID string          `json:"session_id"`
		Seq       int64           `json:"seq"`
		EventType string          `json:"event_type"`
		Channel   string          `json:"channel_id"`
		Link      string          `json:"link"`
		Status    string          `json:"status"`
		Tool      string          `json:"tool"`
		Summary   string          `json:"summary"`
		Payload   json.RawMessage `json:"payload"`
	} `json:"data"`
}

// receiver is a webhook receiver that verifies each delivery's Standard Webhooks signature on
// its own (not with the package's Verify), answers status() and keeps what it took.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	status atomic.Int32
	mu     sync.Mutex
	got    []delivery
	bad    []string
	took   chan struct{}
	tried  chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, took: make(chan struct{}, 1000), tried: make(chan struct{}, 1000)}
	r.status.Store(200)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id, ts, sig := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature")
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	unix, err := strconv.ParseInt(ts, 10, 64)
	select {
	case r.tried <- struct{}{}:
	default:
	}
	if sig != want || err != nil || time.Since(time.Unix(unix, 0)).Abs() > 5*time.Minute || req.Header.Get("Content-Type") != "application/json" {
		r.mu.Lock()
		r.bad = append(r.bad, id)
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if st := int(r.status.Load()); st != 200 {
		w.WriteHeader(st)
		return
	}
	var d delivery
	if err := json.Unmarshal(body, &d); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	d.ID = id
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	r.took <- struct{}{}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// waitFor waits until the receiver took n deliveries.
func (r *receiver) waitFor(n int) []delivery {
	r.t.Helper()
	deadline := time.After(3 * time.Minute) // a long transaction elsewhere holds the tailer back
	for {
		if got := r.deliveries(); len(got) >= n {
			return got
		}
		select {
		case <-r.took:
		case <-deadline:
			r.t.Fatalf("the receiver took %d deliveries, want %d: %+v", len(r.deliveries()), n, r.deliveries())
		}
	}
}

func (r *receiver) waitTried() {
	r.t.Helper()
	select {
	case <-r.tried:
	case <-time.After(3 * time.Minute):
		r.t.Fatal("no delivery was tried")
	}
}

type rig struct {
	t     *testing.T
	store *session.Store
	now   atomic.Int64 // the sinks' clock, Unix nanoseconds
}

func newRig(t *testing.T) *rig {
	t.Helper()
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app", MaxConns: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r := &rig{t: t, store: session.NewStore(pool, session.Options{})}
	r.now.Store(time.Now().UnixNano())
	return r
}

func (r *rig) clock() time.Time        { return time.Unix(0, r.now.Load()) }
func (r *rig) advance(d time.Duration) { r.now.Add(int64(d)) }

func (r *rig) parse(cfg string) map[string]webhooks.Webhook {
	r.t.Helper()
	ws, err := webhooks.Parse(cfg, func(k string) string {
		if k == "ONCALL_WEBHOOK_SECRET" {
			return secret
		}
		return ""
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return ws
}

// start runs a tailer of ws's sinks and returns ws's sinks' options.
func (r *rig) start(ws map[string]webhooks.Webhook, maxAge time.Duration) webhooks.Options {
	r.t.Helper()
	o := webhooks.Options{MaxAge: maxAge, Timeout: 5 * time.Second, PublicURL: "https://logbook.example.com", Now: r.clock,
		Log: zerolog.New(zerolog.NewTestWriter(r.t))}
	sinks := webhooks.NewSinks(ws, r.store, o)
	ss := make([]stream.Sink, len(sinks))
	for i, s := range sinks {
		// Claim each sink's cursor now, so the thread appended next is streamed.
		if _, ok, err := r.store.ClaimStream(context.Background(), s.Name(), "test", time.Millisecond); err != nil || !ok {
			r.t.Fatal(ok, err)
		}
		ss[i] = s
	}
	ctx, cancel := context.WithCancel(context.Background())
	tl := stream.New(r.store, ss, stream.Options{Owner: "replica-1", Poll: 10 * time.Millisecond, Backoff: 5 * time.Millisecond,
		MaxBackoff: 20 * time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(r.t))})
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Error(err)
		}
	})
	return o
}

// thread appends a thread with an approval and a stop: 8 events, 6 of them a webhook's.
func (r *rig) thread(ts string) (session.Session, []session.Event) {
	r.t.Helper()
	ctx := context.Background()
	s, err := r.store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: ts})
	if err != nil {
		r.t.Fatal(err)
	}
	evs, err := r.store.Append(ctx, s.ID,
		session.NewEvent{Type: session.TypeUserMessage, Actor: user1, Payload: session.UserMessage{Text: "deploy it, secretly"}},
		session.NewEvent{Type: session.TypeTurnStarted, Actor: botA, Payload: session.TurnStarted{Through: 1}},
		session.NewEvent{Type: session.TypeApprovalRequested, Actor: botA, Payload: session.ApprovalRequested{Turn: 2, CallID: "call-1",
			Tool: "run_command", Summary: "rm -rf the secret", Channel: "C0000001", ExpiresAt: time.Now().Add(time.Hour)}},
		session.NewEvent{Type: session.TypeApprovalDecided, Actor: user1, Payload: session.ApprovalDecided{CallID: "call-1", Decision: session.DecisionApproved, Via: "button"}},
		session.NewEvent{Type: session.TypeStopRequested, Actor: user1, Payload: session.StopRequested{Source: "reaction"}},
		session.NewEvent{Type: session.TypeTurnStopped, Actor: botA, Payload: session.TurnStopped{Turn: 2, By: "U0000001", Source: "reaction", Request: 5}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: botA, Payload: session.TurnCompleted{Turn: 2, Status: session.StatusStopped, Through: 1}},
		session.NewEvent{Type: session.TypeTurnCompleted, Actor: botA, Payload: session.TurnCompleted{Turn: 2, Status: session.StatusError, Reason: "wall_time", Through: 1}},
	)
	if err != nil {
		r.t.Fatal(err)
	}
	return s, evs
}

// Every event of a thread with an approval and a stop reaches each webhook once, in order,
// signed; a webhook without content gets ids and links, never the text; one with events gets
// only those.
func TestEveryEventArrivesOncePerSinkInOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	all, oncall := newReceiver(t), newReceiver(t)
	r.start(r.parse(`{"all": {"url": "`+all.srv.URL+`", "secret": "`+secret+`"},
		"oncall": {"url": "`+oncall.srv.URL+`", "secret": "${ONCALL_WEBHOOK_SECRET}", "events": ["approval.requested", "turn.failed"], "content": true}}`), time.Hour)
	s, _ := r.thread("1700000000.000100")

	want := []struct {
		typ string
		seq int64
	}{{webhooks.SessionStarted, 1}, {webhooks.ApprovalRequested, 3}, {webhooks.ApprovalDecided, 4},
		{webhooks.SessionStopped, 6}, {webhooks.TurnCompleted, 7}, {webhooks.TurnFailed, 8}}
	got := all.waitFor(len(want))
	if len(got) != len(want) {
		t.Fatalf("all got %d deliveries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		d := got[i]
		if d.Type != w.typ || d.Data.Seq != w.seq || d.ID != s.ID.String()+"."+strconv.FormatInt(w.seq, 10) || d.Data.SessionID != s.ID.String() {
			t.Errorf("delivery %d: %s %s seq %d, want %s seq %d", i, d.ID, d.Type, d.Data.Seq, w.typ, w.seq)
		}
		if d.Data.Channel != "C0000001" || d.Data.Link != "https://logbook.example.com/sessions/"+s.ID.String() {
			t.Errorf("delivery %d: channel %q link %q", i, d.Data.Channel, d.Data.Link)
		}
		if d.Data.Payload != nil || d.Data.Summary != "" {
			t.Errorf("delivery %d of a webhook without content carries text: %+v", i, d.Data)
		}
	}
	if got[1].Data.Tool != "run_command" || got[4].Data.Status != session.StatusStopped {
		t.Errorf("ids of the payload missing: %+v %+v", got[1].Data, got[4].Data)
	}

	og := oncall.waitFor(2)
	if len(og) != 2 || og[0].Type != webhooks.ApprovalRequested || og[1].Type != webhooks.TurnFailed {
		t.Fatalf("oncall got %+v, want approval.requested and turn.failed", og)
	}
	if !strings.Contains(string(og[0].Data.Payload), "rm -rf the secret") {
		t.Errorf("a webhook with content gets the payload: %s", og[0].Data.Payload)
	}
	// Nothing more arrives: the next thread's first delivery is the next one each receiver takes.
	s2, _ := r.thread("1700000000.000200")
	got = all.waitFor(len(want) + 1)
	if got[len(want)].ID != s2.ID.String()+".1" {
		t.Errorf("after the thread, all took %s, want %s.1", got[len(want)].ID, s2.ID)
	}
	og = oncall.waitFor(3)
	if og[2].ID != s2.ID.String()+".3" {
		t.Errorf("after the thread, oncall took %s, want %s.3", og[2].ID, s2.ID)
	}
	for _, rc := range []*receiver{all, oncall} {
		if len(rc.bad) != 0 {
			t.Errorf("deliveries with a bad signature: %v", rc.bad)
		}
	}
}

// A receiver that answers 500 for a minute (the sinks' clock) gets everything afterwards, in
// order, and nothing is a dead letter.
func TestAReceiverDownForAMinuteGetsEverythingAfterwards(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rc := newReceiver(t)
	rc.status.Store(500)
	r.start(r.parse(`{"all": {"url": "`+rc.srv.URL+`", "secret": "`+secret+`"}}`), time.Hour)
	s, _ := r.thread("1700000000.000300")
	for range 3 {
		rc.waitTried()
		r.advance(30 * time.Second)
	}
	rc.status.Store(200)
	got := rc.waitFor(6)
	seqs := []int64{1, 3, 4, 6, 7, 8}
	for i, d := range got {
		if d.ID != s.ID.String()+"."+strconv.FormatInt(seqs[i], 10) {
			t.Fatalf("delivery %d is %s, want seq %d (in order, once): %+v", i, d.ID, seqs[i], got)
		}
	}
	dead, err := r.store.DeadLetters(context.Background(), session.DeadLetterFilter{})
	if err != nil || len(dead) != 0 {
		t.Fatalf("dead letters %+v, %v: want none", dead, err)
	}
}

// A webhook failing for longer than its max age turns what it cannot take into dead letters and
// moves on; an operator lists them and redelivers them, with their ids.
func TestADeadLetterIsListedAndRedelivered(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rc := newReceiver(t)
	rc.status.Store(503)
	ws := r.parse(`{"all": {"url": "` + rc.srv.URL + `", "secret": "` + secret + `", "events": ["session.started", "turn.failed"]}}`)
	o := r.start(ws, time.Minute)
	s, _ := r.thread("1700000000.000400")
	rc.waitTried()
	r.advance(2 * time.Minute)
	ctx := context.Background()
	var dead []session.DeadLetter
	deadline := time.Now().Add(3 * time.Minute)
	for len(dead) < 2 && time.Now().Before(deadline) {
		select { // each failed attempt is a chance to turn dead; the letter is recorded just after
		case <-rc.tried:
		case <-time.After(50 * time.Millisecond):
		}
		var err error
		if dead, err = r.store.DeadLetters(ctx, session.DeadLetterFilter{Sink: "all"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(dead) != 2 || dead[0].Seq != 1 || dead[1].Seq != 8 || dead[0].WebhookType != webhooks.SessionStarted ||
		dead[1].WebhookType != webhooks.TurnFailed || !strings.Contains(dead[1].LastError, "503") {
		t.Fatalf("dead letters %+v: want session.started (1) and turn.failed (8), answered 503", dead)
	}
	// The receiver is back: the next thread is delivered as it comes.
	rc.status.Store(200)
	s2, _ := r.thread("1700000000.000500")
	if got := rc.waitFor(1); got[0].ID != s2.ID.String()+".1" {
		t.Fatalf("after the outage the receiver took %s first, want %s.1", got[0].ID, s2.ID)
	}
	res, err := webhooks.Redeliver(ctx, r.store, ws, session.DeadLetterFilter{Sink: "all"}, o)
	if err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("redeliver: %+v, %v", res, err)
	}
	got := rc.waitFor(4)
	ids := map[string]bool{}
	for _, d := range got {
		ids[d.ID] = true
	}
	if !ids[s.ID.String()+".1"] || !ids[s.ID.String()+".8"] {
		t.Fatalf("redelivered %+v: want %s.1 and .8", got, s.ID)
	}
	if open, err := r.store.DeadLetters(ctx, session.DeadLetterFilter{Sink: "all"}); err != nil || len(open) != 0 {
		t.Fatalf("open dead letters after the redelivery: %+v, %v", open, err)
	}
	if all, err := r.store.DeadLetters(ctx, session.DeadLetterFilter{Redelivered: true}); err != nil || len(all) != 2 || all[0].Redelivered.IsZero() {
		t.Fatalf("dead letters with the redelivered: %+v, %v", all, err)
	}
}

func TestParseRefusesBadWebhooks(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct{ cfg, want string }{
		{`{"a": {"url": "http://example.com/h", "secret": "` + secret + `"}}`, "http only to a loopback or private address"},
		{`{"a": {"url": "ftp://10.0.0.1/h", "secret": "` + secret + `"}}`, "scheme must be https"},
		{`{"a": {"url": "https://user:pw@example.com/h", "secret": "` + secret + `"}}`, "credentials"},
		{`{"a": {"url": "https://example.com/h", "secret": "plain-secret-of-some-length"}}`, "whsec_"},
		{`{"a": {"url": "https://example.com/h", "secret": "whsec_c2hvcnQ="}}`, "at least 24 bytes"},
		{`{"a": {"url": "https://example.com/h", "secret": "${NOPE}"}}`, "${NOPE} is not set"},
		{`{"a": {"url": "https://example.com/h", "secret": "` + secret + `", "events": ["turn.done"]}}`, `unknown event type "turn.done"`},
		{`{"a": {"url": "https://example.com/h", "secret": "` + secret + `", "colour": 1}}`, "unknown field"},
		{`{"A B": {"url": "https://example.com/h", "secret": "` + secret + `"}}`, "a name is lowercase"},
		{`[1]`, "not a JSON object"},
	} {
		_, err := webhooks.Parse(tc.cfg, getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(key)) {
			t.Errorf("Parse(%s)'s error shows the secret: %v", tc.cfg, err)
		}
	}
	ws, err := webhooks.Parse(`{"a": {"url": "http://127.0.0.1:9/h", "secret": "`+secret+`"}, "b": {"url": "http://10.1.2.3/h", "secret": "`+secret+`"}}`, getenv)
	if err != nil || len(ws) != 2 {
		t.Fatalf("http to loopback and private addresses: %v", err)
	}
	if b, _ := json.Marshal(ws["a"]); strings.Contains(string(b), base64.StdEncoding.EncodeToString(key)) || !strings.Contains(string(b), "[redacted]") {
		t.Errorf("a webhook marshalled shows its secret: %s", b)
	}
}

// Sign and Verify follow the specification's example (standardwebhooks.com: the secret
// whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, id msg_p5jXN8AQM9LWM0D4loKWxJek, timestamp
// 1614265330, body {"test": 2432232314} signs to v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=).
func TestSignatureMatchesTheSpecification(t *testing.T) {
	k, err := webhooks.DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"test": 2432232314}`)
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := webhooks.Sign(k, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	at := time.Unix(1614265330, 0)
	if err := webhooks.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", "v0,x "+want, body, at, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := webhooks.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", want, body, at.Add(time.Hour), 5*time.Minute); err == nil {
		t.Fatal("a stale timestamp verified")
	}
	if err := webhooks.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_other", "1614265330", want, body, at, 5*time.Minute); err == nil {
		t.Fatal("another id verified")
	}
}
