package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/slackemu"
)

// chaosMsg is one message of the chaos run, as its poster saw it.
type chaosMsg struct {
	tag, thread, ts string
	posted          time.Time
	replied         time.Duration // 0: no reply seen while the poster waited
	events          []string      // the event ids its post fired (message, app_mention)
}

// chaosKill is one kill -9 of the chaos run: when, whom (pid and replica slot), and when the
// slot's new process had connected to Slack again.
type chaosKill struct {
	at, back time.Time
	pid      int
	slot     int
}

// chaosSlow is the latency above which breakdown explains a message (issue 33's gate is a
// 3 s p99).
const chaosSlow = 2500 * time.Millisecond

// msgTrace is what the log says about one message: when it was stored, the turns that
// started for it (with the pid of the cell that ran each, and the cell's wake reason), the
// answer and its delivery.
type msgTrace struct {
	stored    time.Time
	starts    []traceStart
	answer    time.Time
	delivered time.Time
	completed time.Time
	// titled: the session's title was appended after this message was stored and before its
	// turn started (the title's model call ran in between).
	titled bool
	// ownerPID is the pid of the session's last cell when the message was stored (0: none yet).
	ownerPID int
}

type traceStart struct {
	at      time.Time
	resumed bool // a new cell's cell_woken resuming the open turn (no turn_started of its own)
	pid     int
	reason  string // the cell_woken reason of the cell that started it
	woken   time.Time
}

// breakdown explains the slow messages of a chaos run (above chaosSlow, or never answered):
// for each, the steps posted → stored → turn started (again, after a takeover) → answered →
// delivered → seen, classified by what slowed it:
//
//	late_store         stored more than 1 s after it was posted (its envelope went to a
//	                   replica killed before it stored it: the ack window, then the retry)
//	takeover/R         a turn started for it in a process then killed; the cell that answered
//	                   woke for R (orphan, poll, notify, message, listen_catch_up, retake, wake)
//	late_start_title   its turn started more than 1 s after it was stored, after the session's
//	                   title (its model call) was appended
//	late_start_kill/R  its first turn started more than 1 s after it was stored, a kill in
//	                   between (e.g. stored by a replica killed before its cell took the lease)
//	late_start/R       the same with no kill in between
//	overhead_kill      none of those, a kill within 3 s of it (a restart's CPU burst)
//	overhead           none of those and no kill near
//
// It prints the count and median steps of each class, and a few examples.
func breakdown(t *testing.T, e *e2e, msgs []*chaosMsg, kills []chaosKill, connPID map[int]int) {
	t.Helper()
	traces, err := readTraces(e)
	if err != nil {
		t.Logf("CHAOS breakdown: read the log: %v", err)
		return
	}
	type classStats struct {
		n                                                     int
		store, start, rerun, answer, deliver, seen, killToNew []time.Duration
		examples                                              []string
	}
	classes := map[string]*classStats{}
	envelopes := newEnvelopeLog(e.emu.Deliveries(), e.emu.Acks(), connPID, kills)
	killedPID := map[int]chaosKill{}
	for _, k := range kills {
		killedPID[k.pid] = k
	}
	slow := 0
	for _, m := range msgs {
		if m.replied > 0 && m.replied <= chaosSlow {
			continue
		}
		slow++
		tr := traces[m.thread+"/"+m.ts]
		seenAt := m.posted.Add(m.replied)
		var class string
		var killNote string
		var killToNew time.Duration
		firstKilled := tr != nil && len(tr.starts) > 0 && killedBefore(killedPID, tr.starts[0].pid, tr.answer)
		switch {
		case tr == nil || tr.stored.IsZero():
			class = "not_stored"
		case tr.stored.Sub(m.posted) > time.Second:
			class = "late_store"
		case len(tr.starts) > 1 || firstKilled:
			last := tr.starts[len(tr.starts)-1]
			class = "takeover/" + last.reason
			if k, ok := killedPID[tr.starts[0].pid]; ok {
				killNote = fmt.Sprintf(" kill pid %d slot %d at +%s", k.pid, k.slot, secs(k.at.Sub(m.posted)))
				if !last.woken.IsZero() {
					killToNew = last.woken.Sub(k.at)
				}
			}
		case len(tr.starts) == 0:
			class = "never_started"
		case tr.starts[0].at.Sub(tr.stored) > time.Second && tr.titled:
			class = "late_start_title"
		case tr.starts[0].at.Sub(tr.stored) > time.Second:
			class = "late_start/" + tr.starts[0].reason
			if killBetween(kills, tr.stored, tr.starts[0].at) {
				class = "late_start_kill/" + tr.starts[0].reason
			}
		case killBetween(kills, m.posted.Add(-3*time.Second), seenAt.Add(time.Second)):
			class = "overhead_kill"
		default:
			class = "overhead"
		}
		cs := classes[class]
		if cs == nil {
			cs = &classStats{}
			classes[class] = cs
		}
		cs.n++
		if tr != nil && !tr.stored.IsZero() {
			cs.store = append(cs.store, tr.stored.Sub(m.posted))
			if len(tr.starts) > 0 {
				first, last := tr.starts[0], tr.starts[len(tr.starts)-1]
				cs.start = append(cs.start, first.at.Sub(tr.stored))
				cs.rerun = append(cs.rerun, last.at.Sub(first.at))
				if !tr.answer.IsZero() {
					cs.answer = append(cs.answer, tr.answer.Sub(last.at))
				}
			}
			if !tr.delivered.IsZero() && !tr.answer.IsZero() {
				cs.deliver = append(cs.deliver, tr.delivered.Sub(tr.answer))
				if m.replied > 0 {
					cs.seen = append(cs.seen, seenAt.Sub(tr.delivered))
				}
			}
		}
		if killToNew != 0 {
			cs.killToNew = append(cs.killToNew, killToNew)
		}
		if killNote == "" && tr != nil && len(tr.starts) > 0 {
			// The last kill before its first turn started, if within 10 s.
			for _, k := range slices.Backward(kills) {
				if k.at.Before(tr.starts[0].at) {
					if tr.starts[0].at.Sub(k.at) < 10*time.Second {
						owner := ""
						if k.pid == tr.ownerPID {
							owner = " (the session's cell)"
						}
						killNote = fmt.Sprintf(" last kill pid %d%s at +%s", k.pid, owner, secs(k.at.Sub(m.posted)))
					}
					break
				}
			}
		}
		switch {
		case class == "not_stored" && len(cs.examples) < 10:
			cs.examples = append(cs.examples, fmt.Sprintf("%s (thread %s, ts %s) posted at %s:%s", m.tag, m.thread, m.ts, m.posted.Format("15:04:05.000"), envelopes.of(m)))
		case len(cs.examples) < 4 && tr != nil:
			ex := fmt.Sprintf("%s %s: %s%s", m.tag, secs(m.replied), tr.steps(m.posted, seenAt), killNote)
			if class == "late_store" {
				ex += envelopes.of(m)
			}
			cs.examples = append(cs.examples, ex)
		}
	}
	var back []time.Duration
	for _, k := range kills {
		back = append(back, k.back.Sub(k.at))
	}
	t.Logf("CHAOS slow (> %v or unanswered): %d of %d messages; %d kills, kill→restarted replica connected median %s max %s",
		chaosSlow, slow, len(msgs), len(kills), med(back), pctl(back, 1))
	names := make([]string, 0, len(classes))
	for c := range classes {
		names = append(names, c)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(classes[b].n, classes[a].n), strings.Compare(a, b)) })
	for _, c := range names {
		cs := classes[c]
		line := fmt.Sprintf("CHAOS slow %-28s %4d  median post→stored %s stored→start %s start→restart %s start→answer %s answer→delivered %s delivered→seen %s",
			c, cs.n, med(cs.store), med(cs.start), med(cs.rerun), med(cs.answer), med(cs.deliver), med(cs.seen))
		if len(cs.killToNew) > 0 {
			line += fmt.Sprintf(" kill→new cell %s (max %s)", med(cs.killToNew), secs(slices.Max(cs.killToNew)))
		}
		t.Log(line)
		for _, ex := range cs.examples {
			t.Logf("CHAOS slow   e.g. %s", ex)
		}
	}
	// The same steps over every answered message, for the overhead's share.
	var store, start, answer, deliver []time.Duration
	for _, m := range msgs {
		tr := traces[m.thread+"/"+m.ts]
		if tr == nil || tr.stored.IsZero() || len(tr.starts) == 0 || tr.answer.IsZero() || tr.delivered.IsZero() {
			continue
		}
		store = append(store, tr.stored.Sub(m.posted))
		start = append(start, tr.starts[0].at.Sub(tr.stored))
		answer = append(answer, tr.answer.Sub(tr.starts[len(tr.starts)-1].at))
		deliver = append(deliver, tr.delivered.Sub(tr.answer))
	}
	t.Logf("CHAOS all messages: median (p90) post→stored %s (%s) stored→start %s (%s) start→answer %s (%s) answer→delivered %s (%s)",
		med(store), pctl(store, 0.9), med(start), pctl(start, 0.9), med(answer), pctl(answer, 0.9), med(deliver), pctl(deliver, 0.9))
}

// steps is one line of the trace's steps from posted, in seconds.
func (tr *msgTrace) steps(posted, seen time.Time) string {
	var b strings.Builder
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return "+" + secs(t.Sub(posted))
	}
	fmt.Fprintf(&b, "stored %s (cell pid %d)", at(tr.stored), tr.ownerPID)
	for i, s := range tr.starts {
		what := "start"
		if s.resumed {
			what = "resume"
		}
		fmt.Fprintf(&b, " %s%d %s (pid %d, %s, woken %s)", what, i+1, at(s.at), s.pid, s.reason, at(s.woken))
	}
	fmt.Fprintf(&b, " answer %s delivered %s seen %s", at(tr.answer), at(tr.delivered), at(seen))
	return b.String()
}

func killedBefore(killed map[int]chaosKill, pid int, by time.Time) bool {
	k, ok := killed[pid]
	return ok && (by.IsZero() || k.at.Before(by))
}

func killBetween(kills []chaosKill, from, to time.Time) bool {
	for _, k := range kills {
		if k.at.After(from) && k.at.Before(to) {
			return true
		}
	}
	return false
}

// readTraces reads every session's markers and builds each user message's trace, keyed by
// thread ts / message ts.
func readTraces(e *e2e) (map[string]*msgTrace, error) {
	rows, err := e.pool.Query(context.Background(), `SELECT s.thread_ts, e.type, e.created_at, e.event_id::text,
			coalesce(e.payload->>'ts', ''), coalesce((e.payload->>'through')::bigint, 0), coalesce(e.payload->>'event_id', ''),
			coalesce((e.payload->>'pid')::int, 0), coalesce(e.payload->>'reason', ''), coalesce(left(e.payload->>'text', 200), ''), e.seq
		FROM events e JOIN sessions s ON s.id = e.session_id
		WHERE e.type IN ('user_message', 'turn_started', 'assistant_message', 'delivered', 'turn_completed', 'cell_woken', 'title')
		ORDER BY e.session_id, e.seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	traces := map[string]*msgTrace{}
	type open struct {
		seq int64
		tag string
		tr  *msgTrace
	}
	var (
		thread    string
		pending   []open // this session's messages not answered yet
		answers   = map[string]*msgTrace{}
		pid       int
		reason    string
		wokenAt   time.Time
		answering *msgTrace // the last answered message, for its turn_completed
	)
	for rows.Next() {
		var th, typ, evID, ts, refID, why, text string
		var at time.Time
		var through, seq int64
		var p int
		if err := rows.Scan(&th, &typ, &at, &evID, &ts, &through, &refID, &p, &why, &text, &seq); err != nil {
			return nil, err
		}
		if th != thread {
			thread, pending, pid, reason, wokenAt, answering = th, nil, 0, "", time.Time{}, nil
		}
		switch typ {
		case "cell_woken":
			pid, reason, wokenAt = p, why, at
			// A new cell resumes an open turn with its cell_woken alone.
			for _, o := range pending {
				if len(o.tr.starts) > 0 && o.tr.answer.IsZero() {
					o.tr.starts = append(o.tr.starts, traceStart{at: at, resumed: true, pid: p, reason: why, woken: at})
				}
			}
		case "title":
			for _, o := range pending {
				if len(o.tr.starts) == 0 {
					o.tr.titled = true
				}
			}
		case "user_message":
			tr := &msgTrace{stored: at, ownerPID: pid}
			traces[th+"/"+ts] = tr
			tag := ""
			if m := questionTag.FindStringSubmatch(text); m != nil {
				tag = m[1]
			}
			pending = append(pending, open{seq: seq, tag: tag, tr: tr})
		case "turn_started":
			for _, o := range pending {
				if o.seq <= through {
					o.tr.starts = append(o.tr.starts, traceStart{at: at, pid: pid, reason: reason, woken: wokenAt})
				}
			}
		case "assistant_message":
			for i, o := range pending {
				if o.tag != "" && strings.Contains(text, "re: "+o.tag) {
					o.tr.answer = at
					answers[evID] = o.tr
					answering = o.tr
					pending = slices.Delete(pending, i, i+1)
					break
				}
			}
		case "delivered":
			if tr := answers[refID]; tr != nil && tr.delivered.IsZero() {
				tr.delivered = at
			}
		case "turn_completed":
			if answering != nil && answering.completed.IsZero() {
				answering.completed = at
			}
		}
	}
	return traces, rows.Err()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

func med(ds []time.Duration) string { return pctl(ds, 0.5) }

func pctl(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return secs(s[min(len(s)-1, int(q*float64(len(s))))])
}

// envelopeLog is the emulator's record of every envelope sent and acked, for the history of a
// late-stored message's envelopes: which socket each attempt went to, how old that socket was,
// and whether (and when) it was acked.
type envelopeLog struct {
	byEvent map[string][]slackemu.Delivery
	acks    map[string]slackemu.Ack // by envelope id, the settling ack
	opened  map[int]time.Time       // socket id -> first envelope sent to it (a lower bound on its age)
	pid     map[int]int             // socket id -> the process that opened it
	killed  map[int]time.Time       // pid -> when it was killed
}

func newEnvelopeLog(ds []slackemu.Delivery, acks []slackemu.Ack, connPID map[int]int, kills []chaosKill) envelopeLog {
	l := envelopeLog{byEvent: map[string][]slackemu.Delivery{}, acks: map[string]slackemu.Ack{}, opened: map[int]time.Time{},
		pid: connPID, killed: map[int]time.Time{}}
	for _, k := range kills {
		l.killed[k.pid] = k.at
	}
	for _, d := range ds {
		l.byEvent[d.EventID] = append(l.byEvent[d.EventID], d)
		if _, ok := l.opened[d.ConnID]; !ok {
			l.opened[d.ConnID] = d.At
		}
	}
	for _, a := range acks {
		if !a.Stale {
			l.acks[a.EnvelopeID] = a
		}
	}
	return l
}

// of describes the attempts of m's events, as offsets from its post.
func (l envelopeLog) of(m *chaosMsg) string {
	var b strings.Builder
	for _, id := range m.events {
		for _, d := range l.byEvent[id] {
			fmt.Fprintf(&b, " [%s a%d +%s conn %d (first envelope +%s", d.EventType, d.Attempt, secs(d.At.Sub(m.posted)), d.ConnID, secs(l.opened[d.ConnID].Sub(m.posted)))
			if pid, ok := l.pid[d.ConnID]; ok {
				fmt.Fprintf(&b, ", pid %d", pid)
				if at, ok := l.killed[pid]; ok {
					fmt.Fprintf(&b, " killed +%s", secs(at.Sub(m.posted)))
				}
			}
			b.WriteString(")")
			if a, ok := l.acks[d.EnvelopeID]; ok {
				fmt.Fprintf(&b, " acked +%s]", secs(a.At.Sub(m.posted)))
			} else {
				b.WriteString(" unacked]")
			}
		}
	}
	return b.String()
}
