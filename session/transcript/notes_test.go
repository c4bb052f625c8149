package transcript_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// notesSession is a thread whose first turn was offered notes 1, 2 and 3 of the channel's
// memory, and whose second turn ran under the same settings (no turn_settings of its own).
func notesSession() []session.Event {
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "@logbook which database is staging?", "<@UB000001> which database is staging?", nil)
	b.add(session.TypeTurnStarted, sys, session.TurnStarted{Through: 1, Reason: "message"})
	b.add(session.TypeTurnSettings, sys, session.TurnSettings{Turn: 2, Hash: "ab12cd34ef56ab12cd34", Model: "offline", Memory: []int64{3, 2, 1}})
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "Staging is db-2.", Turn: 2})
	b.add(session.TypeDelivered, sys, session.Delivered{EventID: "x", Seq: 4, Channel: "C0000001", TS: []string{"1700000010.000100"}})
	b.add(session.TypeTurnCompleted, sys, session.TurnCompleted{Turn: 2, Status: "ok"})
	return b.evs
}

// The channel's memory now: note 1 as it was, note 2 forgotten since, note 3 purged; note 4
// (named by no turn) must not show.
func notesNow() []session.Note {
	at := time.Date(2023, 11, 10, 9, 30, 0, 0, time.UTC)
	return []session.Note{
		{ID: 1, Team: "T0000001", Channel: "C0000001", Text: "the staging database is db-2 <b>not db-1</b> *bold* @here", ByKind: session.NoteByUser, By: "U0000001", At: at},
		{ID: 2, Team: "T0000001", Channel: "C0000001", Text: "the deploy key is in vault", ByKind: session.NoteByAgent, By: "UB000001", At: at,
			Forgotten: true, ForgottenBy: "U0000002"},
		{ID: 3, Team: "T0000001", Channel: "C0000001", ByKind: session.NoteByUser, By: "U0000003", At: at, Purged: true},
		{ID: 4, Team: "T0000001", Channel: "C0000001", Text: "never offered", ByKind: session.NoteByUser, By: "U0000001", At: at},
	}
}

// Issue 49: the transcript of a turn shows the memory notes it was offered, with their text,
// author and date, in the conversation view too; a forgotten note's text only to auditors; a
// purged one says so.
func TestTranscriptShowsTheNotesATurnWasOffered(t *testing.T) {
	t.Parallel()
	evs := notesSession()
	if got := transcript.NoteIDs(evs); !slices.Equal(got, []int64{3, 2, 1}) {
		t.Fatalf("NoteIDs = %v, want [3 2 1]", got)
	}
	render := func(opts transcript.Options) string {
		t.Helper()
		opts.Notes = notesNow()
		var out bytes.Buffer
		if err := transcript.Render(&out, sess, evs, opts); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}

	text := render(transcript.Options{})
	for _, want := range []string{
		"turn settings: turn 2: model offline, settings ab12cd34ef56, 3 memory notes",
		"🧠 note 1 by U0000001, 2023-11-10 09:30 UTC:\n    | the staging database is db-2 <b>not db-1</b> *bold* @here",
		"🧠 note 2 by the agent, 2023-11-10 09:30 UTC (forgotten since by U0000002):",
		"🧠 note 3 by U0000003, 2023-11-10 09:30 UTC (text purged by retention):",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the conversation view lacks %q:\n%s", want, text)
		}
	}
	for _, not := range []string{"deploy key", "never offered"} {
		if strings.Contains(text, not) {
			t.Errorf("the transcript shows %q:\n%s", not, text)
		}
	}
	if strings.Index(text, "🧠 note 3") > strings.Index(text, "Staging is db-2.") {
		t.Errorf("the notes are not shown at the turn that was offered them, before its reply:\n%s", text)
	}

	auditor := render(transcript.Options{RevealDeleted: true})
	if !strings.Contains(auditor, "    | (auditor view) the deploy key is in vault") {
		t.Errorf("the auditor's view lacks the forgotten note's text:\n%s", auditor)
	}

	// The note's text is untrusted: escaped in HTML, inert in Markdown.
	html := render(transcript.Options{Format: transcript.FormatHTML})
	if !strings.Contains(html, "the staging database is db-2 &lt;b&gt;not db-1&lt;/b&gt;") || strings.Contains(html, "<b>not db-1") {
		t.Errorf("the HTML does not escape the note's text:\n%s", html)
	}
	if !strings.Contains(html, `data-note="1"`) || strings.Contains(html, "deploy key") {
		t.Errorf("the HTML lacks note 1 or shows the forgotten one:\n%s", html)
	}
	md := render(transcript.Options{Format: transcript.FormatMarkdown})
	if !strings.Contains(md, "> ```\n> the staging database is db-2 <b>not db-1</b> *bold* @here\n> ```") {
		t.Errorf("the Markdown does not show the note's text in a code block:\n%s", md)
	}

	var js struct {
		Entries []struct {
			Type  session.Type      `json:"type"`
			Notes []transcript.Note `json:"notes"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(render(transcript.Options{Format: transcript.FormatJSON})), &js); err != nil {
		t.Fatal(err)
	}
	var notes []transcript.Note
	for _, e := range js.Entries {
		if e.Type == session.TypeTurnSettings {
			notes = e.Notes
		}
	}
	if len(notes) != 3 || notes[2].ID != 1 || notes[2].Text != notesNow()[0].Text || notes[1].Status != transcript.NoteForgotten ||
		notes[1].Text != "" || notes[0].Status != transcript.NotePurged {
		t.Errorf("JSON notes = %+v", notes)
	}

	// Notes the caller could not read are named by id, never dropped.
	var out bytes.Buffer
	if err := transcript.Render(&out, sess, evs, transcript.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "🧠 note 1 (not found in the channel's memory)") {
		t.Errorf("an unread note is not named:\n%s", out.String())
	}
}

// A turn offered no notes keeps its turn_settings line out of the conversation view.
func TestTurnSettingsWithoutNotesStayAMarker(t *testing.T) {
	t.Parallel()
	b := &builder{t: time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)}
	b.user("1700000000.001200", "hi", "hi", nil)
	b.add(session.TypeTurnSettings, sys, session.TurnSettings{Turn: 2, Hash: "ab12cd34ef56ab12cd34", Model: "offline"})
	var out bytes.Buffer
	if err := transcript.Render(&out, sess, b.evs, transcript.Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "turn settings") {
		t.Errorf("the conversation view shows a turn_settings without notes:\n%s", out.String())
	}
	out.Reset()
	if err := transcript.Render(&out, sess, b.evs, transcript.Options{All: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "turn settings: turn 2: model offline") {
		t.Errorf("--all lacks turn_settings:\n%s", out.String())
	}
}
