package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/hooks"
	"github.com/logbook/logbook/bot/schedule"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// tickPosts are the bot's top-level tick posts in general, by tick id.
func (e *e2e) tickPosts() map[string][]slackemu.Message {
	out := map[string][]slackemu.Message{}
	for _, m := range e.emu.History(general) {
		var md struct {
			EventType    string         `json:"event_type"`
			EventPayload map[string]any `json:"event_payload"`
		}
		if m.ThreadTS != "" || json.Unmarshal(m.Metadata, &md) != nil || md.EventType != schedule.MetadataEventType {
			continue
		}
		id, _ := md.EventPayload["id"].(string)
		out[id] = append(out[id], m)
	}
	return out
}

// A schedule every two seconds over two replicas of `logbook serve`, one of them killed -9
// midway: every tick from the first to the last is posted exactly once (none lost, none
// doubled, whichever replica had it when the other died), each post's thread is a session the
// model answers, and an audit export lists the schedule (added by the admin) and its ticks.
func TestE2EScheduleTwoReplicasPostOncePerTick(t *testing.T) {
	t.Parallel()
	scheduleKill(t, killPeer)
}

// One replica killed -9 during the schedule and started again at once: the tick it had
// claimed is taken over by the new process (its post looked for first), and every tick is
// posted exactly once.
func TestE2EScheduleRestartPostsOncePerTick(t *testing.T) {
	t.Parallel()
	scheduleKill(t, killRestart)
}

func scheduleKill(t *testing.T, kind failoverKind) {
	e := newE2E(t, slackemu.Options{})
	for range 60 {
		e.model.Push(fakeprovider.Reply{Text: "The queue is short."}, fakeprovider.Reply{Text: "Queue"})
	}
	env := []string{"LOGBOOK_ADMINS=" + ada, "LOGBOOK_SCHEDULE_GRACE=10s"}
	procs := []*proc{e.serve(env...)}
	if kind == killPeer {
		procs = append(procs, e.serve(env...))
	}
	if _, err := e.emu.SlashCommand(slackemu.SlashCommand{Command: "/logbook", Text: `schedule add "@every 2s" check the queue depth`}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the command's answer", func() bool {
		for _, m := range e.emu.Ephemerals() {
			if strings.Contains(m.Text, "Schedule 1 added") {
				return true
			}
		}
		return false
	})
	e.waitFor("three ticks", func() bool { return len(e.tickPosts()) >= 3 })
	if err := procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[0].done
	if kind == killRestart {
		procs = append(procs, e.serve(env...))
	}
	killed := len(e.tickPosts())
	e.waitFor("four more ticks after the kill", func() bool { return len(e.tickPosts()) >= killed+4 })
	procs[1].cmd.Process.Signal(syscall.SIGTERM)
	<-procs[1].done

	runs, err := e.store.TickRuns(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	posts := e.tickPosts()
	for i, r := range runs {
		if i > 0 && r.At.Sub(runs[i-1].At) != 2*time.Second {
			t.Errorf("ticks %v and %v: a tick is missing between them", runs[i-1].At, r.At)
		}
		if r.TS == "" && i < len(runs)-1 {
			t.Errorf("tick %s was claimed and never posted (attempt %d)", r.ID(), r.Attempt)
		}
		if n := len(posts[r.ID()]); n > 1 || (r.TS != "" && n != 1) {
			t.Errorf("tick %s posted %d times", r.ID(), n)
		}
		if r.Late {
			t.Errorf("tick %s ran late", r.ID())
		}
	}
	if len(posts) > len(runs) {
		t.Errorf("%d ticks posted, %d claimed", len(posts), len(runs))
	}
	// How long after its time each tick's post was recorded (a retried tick: after its
	// replica died and its attempt expired, LOGBOOK_LEASE_TTL=2s).
	var lags []time.Duration
	for _, r := range runs {
		if r.TS != "" {
			lags = append(lags, r.RanAt.Sub(r.At))
		}
	}
	slices.Sort(lags)
	if len(lags) > 0 {
		t.Logf("%d ticks, %d posted; tick → post recorded: median %v, max %v", len(runs), len(lags),
			lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	}
	// The first tick's thread was answered by the model.
	first := posts[runs[0].ID()][0]
	if !strings.Contains(first.Text, "Schedule 1") || !strings.Contains(first.Text, "check the queue depth") {
		t.Fatalf("tick post: %q", first.Text)
	}
	if r := e.replies(first.TS, 1); !strings.Contains(r[0].Text, "The queue is short.") {
		t.Fatalf("reply: %+v", r)
	}

	dir := t.TempDir()
	today := time.Now().UTC().Format("2006-01-02")
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
	e.run("audit", "export", "--from", today, "--to", tomorrow, "--out", dir, "--format", "jsonl")
	read := func(name string) string {
		var out string
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && filepath.Base(path) == name {
				b, _ := os.ReadFile(path)
				out += string(b)
			}
			return nil
		})
		return out
	}
	if s := read("schedules.jsonl"); !strings.Contains(s, `"change":"added"`) || !strings.Contains(s, `"actor":"`+ada+`"`) {
		t.Fatalf("schedules.jsonl:\n%s", s)
	}
	if s := read("schedule_ticks.jsonl"); strings.Count(s, "\n") != len(runs) || !strings.Contains(s, `"set_by":"`+ada+`"`) {
		t.Fatalf("schedule_ticks.jsonl (%d runs):\n%s", len(runs), s)
	}
	if s := read("events.jsonl"); !strings.Contains(s, "check the queue depth") {
		t.Fatal("events.jsonl lacks the ticks' sessions")
	}
}

// A signed POST /hooks/alerts to logbook serve starts a session in the hook's channel that the
// model answers; the same delivery again starts nothing; a bad signature gets 401; the
// deliveries are in the audit export.
func TestE2EHookStartsASession(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	e.model.Push(fakeprovider.Reply{Text: "Disk is full: rotate the logs."}, fakeprovider.Reply{Text: "Disk"})
	const secret = "e2e-hook-secret-0123456789"
	p := e.serve(`LOGBOOK_HOOKS={"alerts":{"channel":"`+general+`","secret":"${ALERTS_SECRET}","prompt":"An alert fired: {{payload}}"}}`,
		"ALERTS_SECRET="+secret)
	addr := e.httpAddr(p)
	body := []byte(`{"alert":"disk full","host":"db-1"}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	deliver := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/alerts", bytes.NewReader(body))
		req.Header.Set(hooks.SignatureHeader, sig)
		req.Header.Set(hooks.TimestampHeader, ts)
		req.Header.Set(hooks.DeliveryHeader, "delivery-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := "sha256=" + hex.EncodeToString(hooks.Sign(secret, ts, body))
	if code := deliver(good); code != http.StatusAccepted {
		t.Fatalf("signed delivery: %d", code)
	}
	if code := deliver(good); code != http.StatusOK {
		t.Fatalf("replay: %d", code)
	}
	if code := deliver("sha256=00"); code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d", code)
	}
	var top slackemu.Message
	for _, m := range e.emu.History(general) {
		if m.ThreadTS == "" && strings.Contains(string(m.Metadata), hooks.MetadataEventType) {
			if top.TS != "" {
				t.Fatal("the hook posted twice")
			}
			top = m
		}
	}
	if top.TS == "" || !strings.Contains(top.Text, "disk full") {
		t.Fatalf("hook post: %+v", top)
	}
	if r := e.replies(top.TS, 1); !strings.Contains(r[0].Text, "rotate the logs") {
		t.Fatalf("reply: %+v", r)
	}
	s := e.session(top.TS)
	if um := e.events(s.ID, session.TypeUserMessage); len(um) != 1 || um[0].Actor.ID != "hook/alerts" {
		t.Fatalf("first message: %+v", um)
	}
	if out := e.run("transcript", s.ID.String()); !strings.Contains(out, "An alert fired") || !strings.Contains(out, "rotate the logs") {
		t.Fatalf("transcript:\n%s", out)
	}
	dir := t.TempDir()
	today := time.Now().UTC().Format("2006-01-02")
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
	e.run("audit", "export", "--from", today, "--to", tomorrow, "--out", dir, "--format", "jsonl")
	var found string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && filepath.Base(path) == "hook_deliveries.jsonl" {
			b, _ := os.ReadFile(path)
			found += string(b)
		}
		return nil
	})
	for _, o := range []string{`"outcome":"accepted"`, `"outcome":"replay"`} {
		if !strings.Contains(found, o) {
			t.Fatalf("hook_deliveries.jsonl lacks %s:\n%s", o, found)
		}
	}
	// A refused request is counted, not stored.
	if strings.Contains(found, `"outcome":"bad_signature"`) {
		t.Fatalf("a refused request was stored:\n%s", found)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `logbook_hook_refused_total{reason="bad_signature"} 1`) {
		t.Fatalf("/metrics lacks the refused request:\n%s", metrics)
	}
}

// httpAddr is the address p serves HTTP on, from its startup log.
func (e *e2e) httpAddr(p *proc) string {
	e.t.Helper()
	re := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*http: /healthz`)
	var addr string
	e.waitFor("the http address", func() bool {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}
