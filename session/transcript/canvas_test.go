package transcript_test

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// A reply written as a canvas is a marker of the full transcript — the intent, then the canvas
// with its id, channel, title, size and hash —; the conversation shows the reply whole.
func TestCanvasIsAMarker(t *testing.T) {
	t.Parallel()
	b := &builder{}
	b.user("1700000000.001200", "plan it", "", nil)
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "# Plan\nstep one", Turn: 2})
	canvasActor := session.Actor{Kind: session.ActorSystem, ID: "canvas"}
	sha := session.FileHash([]byte("# Plan\nstep one"))
	b.add(session.TypeCanvasStarted, canvasActor, session.CanvasStarted{Reply: "r", Channel: "C0000001", Title: "Plan · lb-1", Key: "lb-1", SHA256: sha, Chars: 15})
	b.add(session.TypeCanvasWritten, canvasActor, session.CanvasWritten{Reply: "r", CanvasID: "F000000009", Channel: "C0000001",
		Title: "Plan · lb-1", SHA256: sha, Chars: 15})
	var all, short strings.Builder
	if err := transcript.Build(sess, b.evs, transcript.Options{All: true}).Write(&all); err != nil {
		t.Fatal(err)
	}
	if err := transcript.Build(sess, b.evs, transcript.Options{}).Write(&short); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`canvas F000000009 "Plan · lb-1" written for C0000001: 15 characters, sha256 ` + sha[:12],
		`the reply's 15 characters to be written as the canvas "Plan · lb-1"`} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("transcript --all lacks %q:\n%s", want, all.String())
		}
	}
	if strings.Contains(short.String(), "canvas") || !strings.Contains(short.String(), "step one") {
		t.Errorf("the conversation:\n%s", short.String())
	}
}
