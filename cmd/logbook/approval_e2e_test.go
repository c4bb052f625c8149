package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// cards is the approval cards in the thread.
func (e *e2e) cards(thread string) []slackemu.Message {
	var out []slackemu.Message
	for _, m := range e.emu.BotReplies(general, thread) {
		if strings.Contains(string(m.Metadata), bot.ApprovalMetadataType) {
			out = append(out, m)
		}
	}
	return out
}

// exported returns what `logbook audit export --actor actor` wrote for today, as text.
func (e *e2e) exported(actor string) string {
	e.t.Helper()
	dir := e.t.TempDir()
	today := time.Now().UTC().Format("2006-01-02")
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
	e.run("audit", "export", "--actor", actor, "--from", today, "--to", tomorrow, "--out", dir, "--format", "jsonl")
	var b strings.Builder
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".jsonl") {
			data, _ := os.ReadFile(path)
			b.Write(data)
		}
		return nil
	})
	return b.String()
}

// kill -9 of the process whose turn waits for an approval: the next process takes the turn
// up, finds the request in the log and the card in the thread (no second card), and the
// decision made afterwards runs the call once. The audit export shows the decision under the
// approver, and a stop under whoever pressed the button.
func TestE2EApprovalAfterKill(t *testing.T) {
	t.Parallel()
	e := newE2E(t, slackemu.Options{})
	hold := make(chan struct{}) // never closed: the second turn streams until it is stopped
	e.model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_e2e", Name: "run_command", Input: `{"command":"echo approved-after-kill"}`}}},
		fakeprovider.Reply{Text: "It printed approved-after-kill."},
		fakeprovider.Reply{Text: "A title"},
		fakeprovider.Reply{Text: "Working on the next thing and never finishing it",
			Stream: fakeprovider.Stream{Chunk: 6, Every: 10 * time.Millisecond, BeforeLast: hold}},
	)
	cfg := []string{"LOGBOOK_TOOL_APPROVAL=run_command=ask", "LOGBOOK_SANDBOX=process"}
	a := e.serve(cfg...)
	top := e.post(slackemu.Post{Channel: general, User: ada, Text: mention("print something")})
	e.waitFor("the approval card", func() bool { return len(e.cards(top.TS)) == 1 })
	s := e.session(top.TS)
	e.waitFor("approval_requested", func() bool { return len(e.events(s.ID, session.TypeApprovalRequested)) == 1 })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	woken := len(e.events(s.ID, session.TypeCellWoken))
	e.serve(cfg...)
	// The new process takes the open turn up (its first poll) and waits on the same card.
	e.waitFor("a new cell", func() bool { return len(e.events(s.ID, session.TypeCellWoken)) > woken })
	card := e.cards(top.TS)[0]
	if _, err := e.emu.ClickButton(slackemu.Click{Channel: general, TS: card.TS, ActionID: bot.ActionApprove, User: ada}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("turn_completed", func() bool { return len(e.events(s.ID, session.TypeTurnCompleted)) == 1 })
	var r session.ToolResult
	results := e.events(s.ID, session.TypeToolResult)
	if len(results) != 1 || results[0].Decode(&r) != nil || r.IsError || !strings.Contains(r.Content, "approved-after-kill") {
		t.Fatalf("tool results %+v", results)
	}
	if n := len(e.cards(top.TS)); n != 1 {
		t.Fatalf("%d approval cards after the kill; want 1", n)
	}
	shown := 0
	for _, m := range e.emu.BotReplies(general, top.TS) {
		if strings.Contains(m.Text, "It printed approved-after-kill.") {
			shown++
		}
	}
	if shown != 1 {
		t.Fatalf("the reply shows %d times: %+v", shown, e.emu.BotReplies(general, top.TS))
	}

	// A second turn, stopped with the stop button by someone else.
	const grace = "U0000002"
	e.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "now something long"})
	e.waitFor("a reply streaming", func() bool {
		for _, st := range e.emu.Streams() {
			if st.ThreadTS == top.TS && st.Streaming() && strings.Contains(st.Text, "Working") {
				return true
			}
		}
		return false
	})
	if _, err := e.emu.StopAgentSession(general, top.TS, grace); err != nil {
		t.Fatal(err)
	}
	e.waitFor("turn_stopped", func() bool { return len(e.events(s.ID, session.TypeTurnStopped)) == 1 })

	byAda := e.exported(ada)
	if !strings.Contains(byAda, `"approval_decided"`) || !strings.Contains(byAda, `"approved"`) {
		t.Fatalf("the export for %s lacks the approval:\n%s", ada, byAda)
	}
	byGrace := e.exported(grace)
	if !strings.Contains(byGrace, `"stop_requested"`) {
		t.Fatalf("the export for %s lacks the stop:\n%s", grace, byGrace)
	}
	for _, line := range strings.Split(strings.TrimSpace(byGrace), "\n") {
		var ev struct {
			EventID string `json:"event_id"`
			ActorID string `json:"actor_id"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("export line: %v: %s", err, line)
		}
		if ev.EventID != "" && ev.ActorID != grace { // the web access log's lines are not events
			t.Fatalf("the export for %s holds an event by someone else: %s", grace, line)
		}
	}
	if out := e.run("audit", "verify"); !strings.Contains(strings.ToLower(out), "ok") {
		t.Fatalf("audit verify:\n%s", out)
	}
}
