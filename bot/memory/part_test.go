package memory_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/memory"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/session"
)

// The part gives the system prompt the channel's notes (who asked, in words) and records
// their ids; its remember tool adds a note as the agent of this session, and says how to
// remove it. An empty note is refused without a write.
func TestPartOffersNotesAndRemember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memStore{}
	m := memory.New(st, memory.Config{})
	if _, err := m.Remember(ctx, session.Note{Team: "T1", Channel: "C1", Text: "staging is staging.example.com", By: "U2"}); err != nil {
		t.Fatal(err)
	}
	sess := session.Session{ID: uuid.New(), Key: session.ThreadKey{Team: "T1", Channel: "C1", ThreadTS: "1.2"}}
	o, err := m.Part().Offer(ctx, part.Scope{Session: sess, BotUser: "UBOT"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Guidance.Memory) != 1 || o.Guidance.Memory[0].By != "user U2" {
		t.Fatalf("guidance = %+v", o.Guidance)
	}
	var rec session.TurnSettings
	o.Settings(&rec)
	if !slices.Equal(rec.Memory, []int64{1}) {
		t.Fatalf("turn_settings memory = %v", rec.Memory)
	}
	if len(o.Tools) != 1 || o.Tools[0].Spec().Name != memory.ToolRemember {
		t.Fatalf("tools = %v", o.Tools)
	}
	call := func(id, text string) brain.Outcome {
		in, _ := json.Marshal(map[string]string{"text": text})
		return o.Tools[0].Run(ctx, brain.ToolUse{ID: id, Name: memory.ToolRemember, Input: in})
	}
	if out := call("call_1", "  tests run with make check  "); out.IsError || !strings.Contains(out.Content, "/logbook forget 2") {
		t.Fatalf("remember = %+v", out)
	}
	if out := call("call_2", "   "); !out.IsError {
		t.Fatalf("an empty note was kept: %+v", out)
	}
	n := st.notes[len(st.notes)-1]
	if len(st.notes) != 2 || n.Text != "tests run with make check" || n.ByKind != session.NoteByAgent || n.By != "UBOT" ||
		n.Session != sess.ID || n.CallID != "call_1" || n.ThreadTS != "1.2" {
		t.Fatalf("notes = %+v", st.notes)
	}
}
