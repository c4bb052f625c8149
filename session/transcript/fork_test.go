package transcript_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// A fork's transcript names its parent at the seq it was branched at; a parent's lists its
// forks (Options.Forks) — in every format.
func TestTranscriptShowsForksBothWays(t *testing.T) {
	t.Parallel()
	parent, child, grandchild := uuid.MustParse("01a226cc-2ba6-7d4b-9f06-a738362db19d"),
		uuid.MustParse("01a226cc-2ba6-7d4b-9f06-a738362db1aa"), uuid.MustParse("01a226cc-2ba6-7d4b-9f06-a738362db1bb")
	ref, _ := json.Marshal(session.SessionForked{Parent: parent, Seq: 4, Hash: strings.Repeat("ab", 32),
		ParentChannel: "C0000001", ParentThreadTS: "1700000000.000100"})
	at := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	evs := []session.Event{{SessionID: child, Seq: 1, Type: session.TypeSessionForked, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
		CreatedAt: at, Payload: ref}}
	sess := session.Session{ID: child, Key: session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000001.000100"}}
	opts := transcript.Options{Forks: []session.Fork{{Session: grandchild, Channel: "C0000001", ThreadTS: "1700000002.000100", Seq: 3}}}
	for _, f := range []transcript.Format{transcript.FormatText, transcript.FormatMarkdown, transcript.FormatHTML, transcript.FormatJSON} {
		var b bytes.Buffer
		opts.Format = f
		if err := transcript.Render(&b, sess, evs, opts); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if f == transcript.FormatJSON {
			var got transcript.Transcript
			if err := json.Unmarshal(b.Bytes(), &got); err != nil || got.ForkOf == nil || got.ForkOf.Session != parent ||
				got.ForkOf.Seq != 4 || len(got.Forks) != 1 || got.Forks[0].Session != grandchild {
				t.Errorf("JSON: %v\n%s", err, out)
			}
			continue
		}
		if !strings.Contains(out, "Forked from session "+parent.String()+" (thread C0000001 1700000000.000100) at seq 4") ||
			!strings.Contains(out, "Forked into session "+grandchild.String()+" (thread C0000001 1700000002.000100) at seq 3") {
			t.Errorf("%s transcript lacks the fork links:\n%s", f, out)
		}
	}
}

// An eval record's transcript (a what-if) names the session whose turn it ran again, at the
// user message it ran from — in every format.
func TestTranscriptOfAnEvalRecordNamesItsOriginal(t *testing.T) {
	t.Parallel()
	orig, rec := uuid.MustParse("01a226cc-2ba6-7d4b-9f06-a738362db19d"), uuid.MustParse("01a226cc-2ba6-7d4b-9f06-a738362db1cc")
	link, _ := json.Marshal(session.ReplayStarted{Original: orig, Seq: 5, Hash: strings.Repeat("cd", 32), OriginalChannel: "C0000001",
		OriginalThreadTS: "1700000000.000100", Turn: 6, Model: "anthropic:claude-new", Tools: "recorded"})
	evs := []session.Event{{SessionID: rec, Seq: 1, Type: session.TypeReplayStarted, Actor: session.Actor{Kind: session.ActorSystem, ID: "cli/replay"},
		CreatedAt: time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC), Payload: link}}
	sess := session.Session{ID: rec, Key: session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "replay-" + rec.String()}}
	for _, f := range []transcript.Format{transcript.FormatText, transcript.FormatMarkdown, transcript.FormatHTML, transcript.FormatJSON} {
		var b bytes.Buffer
		if err := transcript.Render(&b, sess, evs, transcript.Options{Format: f}); err != nil {
			t.Fatal(err)
		}
		if f == transcript.FormatJSON {
			var got transcript.Transcript
			if err := json.Unmarshal(b.Bytes(), &got); err != nil || got.EvalOf == nil || got.EvalOf.Session != orig || got.EvalOf.Seq != 5 || got.ForkOf != nil {
				t.Errorf("JSON: %v\n%s", err, b.String())
			}
			continue
		}
		if !strings.Contains(b.String(), "What-if of session "+orig.String()+" (thread C0000001 1700000000.000100) at seq 5") {
			t.Errorf("%s:\n%s", f, b.String())
		}
	}
}
