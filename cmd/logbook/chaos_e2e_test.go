package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// TestE2EChaos is issue 19's chaos run (bench/chaos.sh): 40 threads of 5 messages at a time,
// a model that answers in 0–2 s, and `logbook serve` killed with SIGKILL every 2–6 s and
// restarted at once, for LOGBOOK_CHAOS (e.g. 3m); then it settles and prints what was lost
// or doubled. Off unless LOGBOOK_CHAOS is set. It fails when a stored message is never
// answered, a reply shows twice, a turn is abandoned silently, or audit verify fails.
func TestE2EChaos(t *testing.T) {
	period, err := time.ParseDuration(os.Getenv("LOGBOOK_CHAOS"))
	if err != nil || period <= 0 {
		t.Skip("set LOGBOOK_CHAOS=3m (a duration) to run the chaos test")
	}
	// Slack retries an unacked envelope a few times (really: at once, after 1 min, after 5
	// min); the emulator's are shortened but outlast a restart.
	e := newE2E(t, slackemu.Options{RetrySchedule: []time.Duration{time.Second, 5 * time.Second, 20 * time.Second}})
	model := httptest.NewServer(http.HandlerFunc(slowModel))
	t.Cleanup(model.Close)
	e.extra = []string{"ANTHROPIC_BASE_URL=" + model.URL + "/"}
	env := append(slices.Clone(defaults), "LOGBOOK_LOG_LEVEL=info")

	var mu sync.Mutex
	var msgs []*chaosMsg
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers, perThread = 40, 5
	// The posters start once every replica is connected: a message posted before that finds
	// no socket open and waits for Slack's retry, which measures the start, not the chaos.
	startWorkers := func() {
		for w := range workers {
			wg.Go(func() {
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					thread := ""
					for j := range perThread {
						m := &chaosMsg{tag: fmt.Sprintf("t%d.%d-m%d", w, k, j)}
						p := slackemu.Post{Channel: general, User: ada, Text: "Q[" + m.tag + "]", ThreadTS: thread}
						if thread == "" {
							p.Text = mention(p.Text)
						}
						m.posted = time.Now()
						posted, err := e.emu.Post(p)
						if err != nil {
							t.Errorf("post: %v", err)
							return
						}
						if thread == "" {
							thread = posted.TS
						}
						m.thread, m.ts, m.events = thread, posted.TS, posted.EventIDs
						mu.Lock()
						msgs = append(msgs, m)
						mu.Unlock()
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						if e.emu.Wait(ctx, func() bool { return countReplies(e.emu, thread, m.tag) > 0 }) == nil {
							mu.Lock()
							m.replied = time.Since(m.posted)
							mu.Unlock()
						}
						cancel()
					}
				}
			})
		}
	}

	// LOGBOOK_CHAOS_REPLICAS (default 1) replicas run at once; each kill hits one of them.
	replicas := 1
	if n, err := strconv.Atoi(os.Getenv("LOGBOOK_CHAOS_REPLICAS")); err == nil && n > 1 {
		replicas = n
	}
	env = append(env, fmt.Sprintf("LOGBOOK_REPLICAS=%d", replicas)) // the fleet's size, as an operator sets it
	conns := sampleConnections(t, e.dbURL)
	procs := make([]*proc, replicas)
	slotOf := map[int]int{}  // pid -> replica slot (a slot's process is restarted after each kill)
	connPID := map[int]int{} // emulator socket id -> the pid that opened it (for the breakdown)
	noteConn := func(pid int) {
		if cs := e.emu.Connections(); len(cs) > 0 {
			connPID[cs[len(cs)-1].ID] = pid
		}
	}
	for i := range procs {
		procs[i] = e.serve(env...)
		slotOf[procs[i].cmd.Process.Pid] = i
		noteConn(procs[i].cmd.Process.Pid)
	}
	startWorkers()
	// Lease calls are counted by each process; a process's count is read just before it is
	// killed (what it does between that read and the kill is lost: a lower bound).
	var leaseCalls float64
	scrapeLeases := func(p *proc) {
		if n, err := scrapeCounter(p.out.String(), "logbook_lease_acquire_total"); err == nil {
			leaseCalls += n
		} else {
			t.Logf("CHAOS lease calls of pid %d not read: %v", p.cmd.Process.Pid, err)
		}
	}
	kills := 0
	var killed []chaosKill // for the breakdown of slow messages
	deadline := time.After(period)
chaos:
	for {
		select {
		case <-deadline:
			break chaos
		case <-time.After(2*time.Second + rand.N(4*time.Second)):
		}
		i := rand.N(len(procs))
		scrapeLeases(procs[i])
		k := chaosKill{at: time.Now(), pid: procs[i].cmd.Process.Pid, slot: i}
		procs[i].cmd.Process.Signal(syscall.SIGKILL)
		<-procs[i].done
		kills++
		procs[i] = e.serve(env...)
		slotOf[procs[i].cmd.Process.Pid] = i
		noteConn(procs[i].cmd.Process.Pid)
		k.back = time.Now()
		killed = append(killed, k)
	}
	close(stop)
	settleFrom := time.Now()
	wg.Wait()
	// Settle: every stored message answered by a completed turn.
	var pending int
	for settleBy := time.Now().Add(3 * time.Minute); time.Now().Before(settleBy); time.Sleep(100 * time.Millisecond) {
		err := e.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM session_work WHERE last_message_seq > answered_through`).Scan(&pending)
		if err == nil && pending == 0 {
			break
		}
	}
	settled := time.Since(settleFrom)
	for _, p := range procs {
		scrapeLeases(p)
	}
	peak, peakBy, samples := conns.result()
	if pending > 0 {
		t.Errorf("CHAOS %d sessions still have unanswered messages %v after the chaos ended", pending, settled.Round(time.Millisecond))
	}

	ctx := context.Background()
	var stored, turnsOK, turnsErr, abandoned, abandonedSilent int
	q := func(sql string, dst *int) {
		if err := e.pool.QueryRow(ctx, sql).Scan(dst); err != nil {
			t.Fatal(err)
		}
	}
	q(`SELECT count(*) FROM events WHERE type = 'user_message'`, &stored)
	q(`SELECT count(*) FROM events WHERE type = 'turn_completed' AND payload->>'status' = 'ok'`, &turnsOK)
	q(`SELECT count(*) FROM events WHERE type = 'turn_completed' AND payload->>'status' = 'error'`, &turnsErr)
	q(`SELECT count(*) FROM events WHERE type = 'turn_completed' AND payload->>'reason' = 'abandoned'`, &abandoned)
	// Abandoned without the notice delivered in its thread.
	q(`SELECT count(*) FROM events tc WHERE tc.type = 'turn_completed' AND tc.payload->>'reason' = 'abandoned'
	   AND NOT EXISTS (SELECT 1 FROM events a JOIN events d ON d.session_id = a.session_id AND d.type = 'delivered'
	                   AND d.payload->>'event_id' = a.event_id::text
	                   WHERE a.session_id = tc.session_id AND a.type = 'assistant_message'
	                   AND a.idempotency_key = 'abandoned/' || (tc.payload->>'turn'))`, &abandonedSilent)

	notices := 0 // threads told that a turn was abandoned
	told := map[string]bool{}
	for _, m := range msgs {
		if _, seen := told[m.thread]; seen {
			continue
		}
		told[m.thread] = false
		for _, r := range e.emu.BotReplies(general, m.thread) {
			if r.Text == bot.AbandonedText {
				notices++
				told[m.thread] = true
			}
		}
	}
	hist := map[int]int{}
	var lat []time.Duration
	var lost, doubled []string
	for _, m := range msgs {
		n := countReplies(e.emu, m.thread, m.tag)
		hist[min(n, 2)]++
		switch {
		case n == 0 && !told[m.thread]:
			lost = append(lost, m.tag)
		case n > 1:
			doubled = append(doubled, m.tag)
		}
		if m.replied > 0 {
			lat = append(lat, m.replied)
		}
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))].Round(time.Millisecond)
	}
	verify := e.run("audit", "verify")
	verifyOK := strings.Contains(strings.ToLower(verify), "ok")
	t.Logf("CHAOS %v, %d kill -9 with immediate restart, settled in %v", period, kills, settled.Round(time.Millisecond))
	t.Logf("CHAOS messages posted %d, stored %d", len(msgs), stored)
	t.Logf("CHAOS turns completed ok %d, error %d (abandoned %d, abandoned without the notice %d)", turnsOK, turnsErr, abandoned, abandonedSilent)
	t.Logf("CHAOS visible replies per message: 0 %d (of which lost, in a thread not told of an abandoned turn: %d), 1 %d, >=2 (duplicate) %d; threads told their turn was abandoned %d",
		hist[0], len(lost), hist[1], hist[2], notices)
	t.Logf("CHAOS post→reply p50 %v p99 %v max %v (n=%d)", pct(0.5), pct(0.99), pct(1), len(lat))
	// The posters' first messages are posted together, on replicas that have just started:
	// the start's cost, apart from the kills'.
	var first []time.Duration
	for _, m := range msgs {
		if strings.HasSuffix(m.tag, ".0-m0") && m.replied > 0 {
			first = append(first, m.replied)
		}
	}
	slices.Sort(first)
	if len(first) > 0 {
		t.Logf("CHAOS the posters' first messages, posted together on fresh replicas: post→reply p50 %v max %v (n=%d)",
			first[len(first)/2].Round(time.Millisecond), first[len(first)-1].Round(time.Millisecond), len(first))
	}
	t.Logf("CHAOS audit verify: ok=%v", verifyOK)
	breakdown(t, e, msgs, killed, connPID)
	perPID, moved := spread(t, e.dbURL)
	perSlot := make([]int, replicas)
	for pid, n := range perPID {
		perSlot[slotOf[pid]] += n
	}
	t.Logf("CHAOS spread: sessions started per replica slot %v; sessions whose cells woke in more than one process %d", perSlot, moved)
	t.Logf("CHAOS connections: peak %d over %d samples (%.1f per replica; by application %v)", peak, samples, float64(peak)/float64(replicas), peakBy)
	t.Logf("CHAOS lease calls %.0f (at least), %.2f per message", leaseCalls, leaseCalls/float64(max(len(msgs), 1)))
	// LOGBOOK_CHAOS_P99 (e.g. 3s, issue 33's target with five replicas) fails a run above it.
	if target, err := time.ParseDuration(os.Getenv("LOGBOOK_CHAOS_P99")); err == nil && pct(0.99) > target {
		t.Errorf("CHAOS post→reply p99 %v above the target %v", pct(0.99), target)
	}
	if len(lost) > 0 {
		t.Logf("CHAOS lost: %v", lost[:min(len(lost), 20)])
	}
	if len(doubled) > 0 {
		t.Errorf("CHAOS duplicated replies: %v", doubled[:min(len(doubled), 20)])
		for _, m := range msgs {
			if slices.Contains(doubled[:min(len(doubled), 5)], m.tag) {
				dumpThread(t, e, m.thread, m.tag)
			}
		}
	}
	if abandonedSilent > 0 || !verifyOK {
		t.Errorf("abandoned silently %d; audit verify:\n%s", abandonedSilent, verify)
	}
	if stored != len(msgs) {
		t.Errorf("posted %d, stored %d", len(msgs), stored)
	}
}

// countReplies counts the bot's replies in thread that answer the message tagged tag.
func countReplies(emu *slackemu.Server, thread, tag string) int {
	n := 0
	for _, r := range emu.BotReplies(general, thread) {
		if strings.Contains(r.Text, "re: "+tag) {
			n++
		}
	}
	return n
}

var questionTag = regexp.MustCompile(`Q\[(t[\d.]+-m\d+)\]`)

// slowModel speaks Anthropic's Messages API: after 0–2 s it answers "re: <tag>" for the last
// question tag in the request (the turn's user message; a title request gets the same).
func slowModel(w http.ResponseWriter, r *http.Request) { slowModelWithin(w, r, 2*time.Second) }

// slowModelWithin is slowModel answering after a random wait below within (0: at once).
func slowModelWithin(w http.ResponseWriter, r *http.Request, within time.Duration) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		_ = json.NewEncoder(w).Encode(map[string]any{"input_tokens": len(body) / 4})
		return
	}
	if within > 0 {
		select {
		case <-time.After(rand.N(within)):
		case <-r.Context().Done():
			return
		}
	}
	tag := "none"
	if m := questionTag.FindAllSubmatch(body, -1); len(m) > 0 {
		tag = string(m[len(m)-1][1])
	}
	if bytes.Contains(body, []byte(`"stream":true`)) {
		// The live turn streams: answer in Anthropic's server-sent events.
		w.Header().Set("Content-Type", "text/event-stream")
		in := len(body) / 4
		for _, ev := range []struct {
			name string
			data any
		}{
			{"message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_chaos", "type": "message",
				"role": "assistant", "model": "claude-e2e", "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
				"usage": map[string]any{"input_tokens": in, "output_tokens": 0}}}},
			{"content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}},
			{"content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "re: "}}},
			{"content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": tag}}},
			{"content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}},
			{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
				"usage": map[string]any{"output_tokens": 5}}},
			{"message_stop", map[string]any{"type": "message_stop"}},
		} {
			b, _ := json.Marshal(ev.data)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, b)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "msg_chaos", "type": "message", "role": "assistant", "model": "claude-e2e",
		"content":     []map[string]any{{"type": "text", "text": "re: " + tag}},
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": len(body) / 4, "output_tokens": 5},
	})
}

var _ = session.TypeUserMessage

// dumpThread logs what a doubled reply's thread shows and its session's log, to tell a
// reply posted twice from two replies to one message.
func dumpThread(t *testing.T, e *e2e, thread, tag string) {
	t.Helper()
	for _, r := range e.emu.BotReplies(general, thread) {
		t.Logf("CHAOS dup %s: reply ts=%s streaming=%v edited=%v metadata=%s text=%q", tag, r.TS, r.Streaming, r.Edited != nil, r.Metadata, r.Text)
	}
	rows, err := e.pool.Query(context.Background(), `SELECT e.seq, e.type, e.event_id::text, e.created_at, left(coalesce(e.payload::text, ''), 300)
		FROM events e JOIN sessions s ON s.id = e.session_id WHERE s.thread_ts = $1 ORDER BY e.seq`, thread)
	if err != nil {
		t.Logf("CHAOS dup %s: read log: %v", tag, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var typ, id, payload string
		var at time.Time
		if err := rows.Scan(&seq, &typ, &id, &at, &payload); err != nil {
			t.Logf("CHAOS dup %s: %v", tag, err)
			return
		}
		t.Logf("CHAOS dup %s: log %d %s %s %s %s", tag, seq, at.Format("15:04:05.000"), typ, id, payload)
	}
}
