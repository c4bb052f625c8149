package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/stream/webhooks"
	"github.com/logbook/logbook/bot/telemetry/otlptest"
	"github.com/logbook/logbook/session"
)

// hookDelivery is one POST the receiver took, signature checked.
type hookDelivery struct {
	id, typ string
	body    []byte
	session string
	seq     int64
}

// hookReceiver is a webhook receiver that checks every delivery's Standard Webhooks signature
// with its own HMAC code (not logbook's), answers 204, and keeps what arrived in order.
type hookReceiver struct {
	t      *testing.T
	key    []byte
	srv    *httptest.Server
	mu     sync.Mutex
	got    []hookDelivery
	bad    []string      // deliveries that failed the check, why
	notify chan struct{} // a token after each delivery
}

func newHookReceiver(t *testing.T, key []byte) *hookReceiver {
	r := &hookReceiver{t: t, key: key, notify: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	id, ts, sigs := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature")
	fail := func(why string) {
		r.mu.Lock()
		r.bad = append(r.bad, fmt.Sprintf("%s: %s", id, why))
		r.mu.Unlock()
		http.Error(w, why, http.StatusBadRequest)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		fail("timestamp " + ts)
		return
	}
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	ok := false
	for _, s := range strings.Fields(sigs) {
		ok = ok || hmac.Equal([]byte(s), []byte(want))
	}
	if !ok {
		fail("signature " + sigs)
		return
	}
	var d struct {
		Type string `json:"type"`
		Data struct {
			ID        string `json:"id"`
			SessionID string `json:"session_id"`
			Seq       int64  `json:"seq"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &d); err != nil || d.Data.ID != id {
		fail(fmt.Sprintf("body %v (data.id %q): %s", err, d.Data.ID, body))
		return
	}
	r.mu.Lock()
	r.got = append(r.got, hookDelivery{id: id, typ: d.Type, body: body, session: d.Data.SessionID, seq: d.Data.Seq})
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *hookReceiver) deliveries() []hookDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookDelivery(nil), r.got...)
}

// has reports whether a delivery of webhook type typ arrived.
func (r *hookReceiver) has(typ string) bool {
	for _, d := range r.deliveries() {
		if d.typ == typ {
			return true
		}
	}
	return false
}

// await waits, on the receiver's signal, until cond holds.
func (r *hookReceiver) await(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.NewTimer(45 * time.Second)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-r.notify:
		case <-deadline.C:
			r.t.Fatalf("timed out waiting for %s; deliveries: %v", what, r.types())
		}
	}
}

func (r *hookReceiver) types() []string {
	var out []string
	for _, d := range r.deliveries() {
		out = append(out, d.typ+"@"+d.id)
	}
	return out
}

// outageProxy is a TCP proxy in front of the test database that can be taken down: every
// connection through it is closed and new ones are closed at once, as when the database is
// unreachable; up lets connections through again.
type outageProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newOutageProxy(t *testing.T, dsn string) (*outageProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("the outage proxy needs a URL DSN")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{l: l, target: u.Host, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	u.Host = l.Addr().String()
	return p, u.String()
}

func (p *outageProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c) })
		p.wg.Go(func() { p.pipe(c, s) })
	}
}

func (p *outageProxy) pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// setDown takes the database away (closing every connection through the proxy) or brings it back.
func (p *outageProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *outageProxy) close() {
	p.l.Close()
	p.setDown(true)
	p.wg.Wait()
}

// streamLeases is each sink's lease owner's pid, by sink name (0: none held).
func (e *e2e) streamLeases() map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT sink, coalesce(owner, '') FROM stream_cursors WHERE lease_until > now()`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var sink, owner string
		if err := rows.Scan(&sink, &owner); err != nil {
			e.t.Fatal(err)
		}
		// The owner is host:pid:nonce.
		if f := strings.Split(owner, ":"); len(f) >= 3 {
			out[sink], _ = strconv.Atoi(f[len(f)-2])
		}
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// auditLine is what the test reads of an audit stream line.
type auditLine struct {
	raw       string
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	PrevHash  string `json:"prev_hash"`
	Hash      string `json:"hash"`
}

// chainRecord is one record of an audit stream as a receiver sees it: its id (session id and
// seq), its place in the chain, and the whole record (to compare repeats).
type chainRecord struct {
	session    string
	seq        int64
	prev, hash string
	raw        string
}

func fileRecords(lines []auditLine) []chainRecord {
	out := make([]chainRecord, len(lines))
	for i, l := range lines {
		out[i] = chainRecord{session: l.SessionID, seq: l.Seq, prev: l.PrevHash, hash: l.Hash, raw: l.raw}
	}
	return out
}

// otlpRecords reads the audit stream's OTLP log records by their attributes (the body is the
// export's line; the receiver needs only the attributes to check the chain).
func otlpRecords(t *testing.T, logs []otlptest.Log) []chainRecord {
	t.Helper()
	var out []chainRecord
	for _, l := range logs {
		if l.Scope != "logbook/audit" {
			continue
		}
		sid, _ := l.Attrs["logbook.session_id"].(string)
		seq, ok := l.Attrs["logbook.seq"].(int64)
		prev, _ := l.Attrs["logbook.prev_hash"].(string)
		hash, _ := l.Attrs["logbook.hash"].(string)
		if sid == "" || !ok || hash == "" {
			t.Fatalf("an OTLP audit record without its chain position: %+v", l)
		}
		out = append(out, chainRecord{session: sid, seq: seq, prev: prev, hash: hash,
			raw: fmt.Sprintf("%s|%s|%v|%s", l.EventName, l.Body, l.Time.UnixNano(), sid)})
	}
	return out
}

// hasEvery reports whether recs hold every event of evs.
func hasEvery(recs []chainRecord, evs []session.Event) bool {
	seen := map[string]bool{}
	for _, r := range recs {
		seen[fmt.Sprintf("%s.%d", r.session, r.seq)] = true
	}
	for _, ev := range evs {
		if !seen[fmt.Sprintf("%s.%d", ev.SessionID, ev.Seq)] {
			return false
		}
	}
	return true
}

// checkChain checks an audit stream as its receiver would: a repeat is the same record (same
// id, same body); each session's first arrivals come in seq order, each one's prev_hash the
// hash of the one before it (continuity, from the records alone); and, for the events of
// thread (the log's, all of them present), the hashes are the log's. It returns the repeats.
func checkChain(t *testing.T, sink string, recs []chainRecord, thread []session.Event) int {
	t.Helper()
	unx := func(h string) string { return strings.TrimPrefix(h, `\x`) }
	logHash := map[int64]string{}
	for _, ev := range thread {
		logHash[ev.Seq] = fmt.Sprintf("%x", ev.Hash)
	}
	first := map[string]string{}
	last := map[string]chainRecord{}
	repeats := 0
	for _, r := range recs {
		k := fmt.Sprintf("%s.%d", r.session, r.seq)
		if prev, ok := first[k]; ok {
			repeats++
			if prev != r.raw {
				t.Errorf("%s: record %s repeated with another body:\n%s\n%s", sink, k, prev, r.raw)
			}
			continue
		}
		first[k] = r.raw
		before, seen := last[r.session]
		if seen && r.seq <= before.seq {
			t.Errorf("%s: record %s arrived first after seq %d of its session", sink, k, before.seq)
		}
		// Continuity: the receiver has the record before this one (the thread's session is
		// streamed from its seq 1), so this one's prev_hash is that one's hash.
		if seen && (r.seq != before.seq+1 || unx(r.prev) != unx(before.hash)) {
			t.Errorf("%s: record %s (prev_hash %s) does not follow seq %d (hash %s)", sink, k, r.prev, before.seq, before.hash)
		}
		last[r.session] = r
		if len(thread) > 0 && r.session == thread[0].SessionID.String() {
			if !seen && r.seq != 1 {
				t.Errorf("%s: the thread's first record is seq %d, not 1", sink, r.seq)
			}
			if h, ok := logHash[r.seq]; ok && unx(r.hash) != h { // an event appended since thread was read has no hash to compare
				t.Errorf("%s: record %s: hash %s, the log's %s", sink, k, r.hash, logHash[r.seq])
			}
		}
	}
	if len(thread) > 0 && last[thread[0].SessionID.String()].seq < thread[len(thread)-1].Seq {
		t.Errorf("%s: the thread's last record is seq %d, before the log's last %d", sink, last[thread[0].SessionID.String()].seq, thread[len(thread)-1].Seq)
	}
	return repeats
}

func readAuditStream(t *testing.T, path string) []auditLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit stream line: %v: %s", err, sc.Text())
		}
		l.raw = sc.Text()
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Issue 51: a thread with an approval and a stop, streamed to a signed webhook, to an audit
// stream file and to the OTLP audit stream (the in-process OTLP receiver) by two `logbook
// serve` replicas, through a kill -9 of the replica holding
// the streams' leases and a 10 s database outage (the database unreachable: every connection
// through a proxy closed, new ones refused). Every event of the thread reaches each sink at
// least once, a repeat only with the same id and the same body, each session's first
// arrivals in seq order, nothing missing; the audit streams' records carry the chain, each
// record's prev_hash the hash of the one before it.
func TestE2EStreamThroughKillAndOutage(t *testing.T) {
	t.Parallel()
	// Slack redelivers the message posted during the outage until the database is back.
	e := newE2E(t, slackemu.Options{AckTimeout: time.Second,
		RetrySchedule: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}})
	key := make([]byte, 32)
	rand.Read(key)
	rcv := newHookReceiver(t, key)
	proxy, proxied := newOutageProxy(t, e.dbURL)
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	collector := otlptest.Start(t)
	hooks, _ := json.Marshal(map[string]any{"e2e": map[string]any{
		"url": rcv.srv.URL + "/hook", "secret": "whsec_" + base64.StdEncoding.EncodeToString(key)}})
	const hookSink, auditSink, otlpSink = "webhook:e2e", "audit:file:", "audit:otlp"

	hold := make(chan struct{}) // never closed: the second turn streams until it is stopped
	e.model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_stream", Name: "run_command", Input: `{"command":"echo streamed"}`}}},
		fakeprovider.Reply{Text: "It printed streamed."},
		fakeprovider.Reply{Text: "A title"},
		fakeprovider.Reply{Text: "Working on the next thing and never finishing it",
			Stream: fakeprovider.Stream{Chunk: 6, Every: 10 * time.Millisecond, BeforeLast: hold}},
	)
	cfg := []string{"DATABASE_URL=" + proxied, "LOGBOOK_TOOL_APPROVAL=run_command=ask", "LOGBOOK_SANDBOX=process",
		"LOGBOOK_WEBHOOKS=" + string(hooks), "LOGBOOK_AUDIT_STREAM=" + auditPath + ",otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL}
	procs := map[int]*proc{}
	for range 2 {
		p := e.serve(cfg...)
		procs[p.cmd.Process.Pid] = p
	}
	// A sink seen for the first time starts at the end of the log: the thread begins once
	// the three sinks' cursors are held.
	var leases map[string]int
	e.waitFor("the three sinks' leases", func() bool {
		leases = e.streamLeases()
		n := 0
		for sink, pid := range leases {
			if (sink == hookSink || sink == otlpSink || strings.HasPrefix(sink, auditSink)) && procs[pid] != nil {
				n++
			}
		}
		return n == 3
	})

	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("print something")})
	e.waitFor("the approval card", func() bool { return len(e.cards(top.TS)) == 1 })
	s := e.session(top.TS)
	rcv.await("approval.requested", func() bool { return rcv.has(webhooks.ApprovalRequested) })

	// kill -9 of the replica holding the webhook's lease, mid-thread.
	victim := procs[e.streamLeases()[hookSink]]
	if victim == nil {
		t.Fatalf("no live replica holds %s: %v", hookSink, e.streamLeases())
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	delete(procs, victim.cmd.Process.Pid)
	var survivor int
	for pid := range procs {
		survivor = pid
	}
	e.waitFor("the other replica to take the streams over", func() bool {
		l := e.streamLeases()
		if l[hookSink] != survivor {
			return false
		}
		for sink, pid := range l {
			if (sink == otlpSink || strings.HasPrefix(sink, auditSink)) && pid != survivor {
				return false
			}
		}
		return true
	})
	// The turn waiting for the approval is taken up by the survivor (its dead-owner poll);
	// the card is the same.
	e.waitFor("the survivor's cell", func() bool {
		for _, ev := range e.events(s.ID, session.TypeCellWoken) {
			var w session.CellWoken
			if ev.Decode(&w) == nil && w.PID == survivor {
				return true
			}
		}
		return false
	})
	card := e.cards(top.TS)[0]
	if _, err := e.emu.ClickButton(slackemu.Click{Channel: general, TS: card.TS, ActionID: bot.ActionApprove, User: ada}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	// The model answers in the order of the script: the thread's title is asked for before
	// the second turn's call, else the title would take the stopped turn's reply.
	e.waitFor("the title's model call", func() bool { return e.model.Pending() == 1 })

	// The database goes away for 10 s as soon as the turn's end is in the log (whether or not
	// the sinks have it yet); a message posted meanwhile is stored through Slack's retries.
	proxy.setDown(true)
	down := time.Now()
	e.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "now something long"})
	up := time.NewTimer(10 * time.Second)
	<-up.C
	proxy.setDown(false)
	t.Logf("STREAM database unreachable for %v", time.Since(down).Round(time.Millisecond))

	e.waitFor("a reply streaming", func() bool {
		for _, st := range e.emu.Streams() {
			if st.ThreadTS == top.TS && st.Streaming() && strings.Contains(st.Text, "Working") {
				return true
			}
		}
		return false
	})
	if _, err := e.emu.StopAgentSession(general, top.TS, ada); err != nil {
		t.Fatal(err)
	}
	e.waitFor("turn_stopped", func() bool { return len(e.events(s.ID, session.TypeTurnStopped)) == 1 })
	e.waitFor("the stopped turn's end", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 2 })

	// What each sink must have: every event of the thread (the audit stream), every event of
	// it that has a webhook type (the webhook).
	all := e.events(s.ID)
	var wantHook []session.Event
	for _, ev := range all {
		if _, ok := webhooks.TypeOf(ev); ok {
			wantHook = append(wantHook, ev)
		}
	}
	for _, typ := range []string{webhooks.SessionStarted, webhooks.ApprovalRequested, webhooks.ApprovalDecided,
		webhooks.SessionStopped, webhooks.TurnCompleted} {
		found := false
		for _, ev := range wantHook {
			if tp, _ := webhooks.TypeOf(ev); tp == typ {
				found = true
			}
		}
		if !found {
			t.Fatalf("the thread has no event of webhook type %s: %s", typ, typeList(all))
		}
	}
	rcv.await("every webhook event of the thread", func() bool {
		seen := map[string]bool{}
		for _, d := range rcv.deliveries() {
			seen[d.id] = true
		}
		for _, ev := range wantHook {
			if !seen[fmt.Sprintf("%s.%d", ev.SessionID, ev.Seq)] {
				return false
			}
		}
		return true
	})
	var lines []auditLine
	e.waitFor("every event of the thread in the audit stream", func() bool {
		lines = readAuditStream(t, auditPath)
		return hasEvery(fileRecords(lines), all)
	})
	var otlp []chainRecord
	waitOTLP := time.NewTimer(45 * time.Second)
	defer waitOTLP.Stop()
	for otlp = otlpRecords(t, collector.Logs()); !hasEvery(otlp, all); otlp = otlpRecords(t, collector.Logs()) {
		select {
		case <-collector.Received():
		case <-waitOTLP.C:
			t.Fatalf("timed out waiting for every event of the thread in the OTLP audit stream: %d records", len(otlp))
		}
	}

	// The webhook: signatures good, a repeat only with the same id and body, first arrivals
	// of each session in seq order, only events that have a webhook type.
	rcv.mu.Lock()
	bad := append([]string(nil), rcv.bad...)
	rcv.mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("deliveries that failed the signature check: %v", bad)
	}
	bodies := map[string][]byte{}
	lastSeq := map[string]int64{}
	hookRepeats := 0
	for _, d := range rcv.deliveries() {
		if b, ok := bodies[d.id]; ok {
			hookRepeats++
			if !bytes.Equal(b, d.body) {
				t.Errorf("delivery %s repeated with another body:\n%s\n%s", d.id, b, d.body)
			}
			continue
		}
		bodies[d.id] = d.body
		if d.id != fmt.Sprintf("%s.%d", d.session, d.seq) {
			t.Errorf("delivery id %s of session %s seq %d", d.id, d.session, d.seq)
		}
		if d.seq <= lastSeq[d.session] {
			t.Errorf("delivery %s arrived first after seq %d of its session", d.id, lastSeq[d.session])
		}
		lastSeq[d.session] = d.seq
	}
	for id := range bodies {
		if strings.HasPrefix(id, s.ID.String()+".") {
			seq, _ := strconv.ParseInt(strings.TrimPrefix(id, s.ID.String()+"."), 10, 64)
			ok := false
			for _, ev := range wantHook {
				ok = ok || ev.Seq == seq
			}
			if !ok {
				t.Errorf("delivery %s is of no webhook event of the thread", id)
			}
		}
	}
	// The audit streams: a repeat is the same record; first arrivals in seq order, each one's
	// prev_hash the hash of the one before; the thread's hashes are the log's.
	auditRepeats := checkChain(t, "audit file", fileRecords(lines), all)
	otlpRepeats := checkChain(t, "OTLP audit stream", otlp, all)
	t.Logf("STREAM thread of %d events (%d with a webhook type): webhook %d deliveries (%d repeats), audit stream %d lines (%d repeats), OTLP %d records (%d repeats)",
		len(all), len(wantHook), len(rcv.deliveries()), hookRepeats, len(lines), auditRepeats, len(otlp), otlpRepeats)
}
