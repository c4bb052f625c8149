package transcript_test

import (
	"strings"
	"testing"

	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/transcript"
)

// A 👍/👎 on a reply is a marker of the full transcript: the rating, who gave it and the
// reply's Slack message; the conversation alone leaves it out.
func TestFeedbackIsAMarker(t *testing.T) {
	t.Parallel()
	b := &builder{}
	b.user("1700000000.001200", "hi", "", nil)
	b.add(session.TypeAssistantMessage, bot, session.AssistantMessage{Text: "hello", Turn: 2})
	b.add(session.TypeFeedback, session.Actor{Kind: session.ActorUser, ID: "U0000002"},
		session.Feedback{Reply: "r", Rating: session.FeedbackNegative, MessageTS: "1700000001.000300", ActionTS: "1"})
	var all, short strings.Builder
	if err := transcript.Build(sess, b.evs, transcript.Options{All: true}).Write(&all); err != nil {
		t.Fatal(err)
	}
	if err := transcript.Build(sess, b.evs, transcript.Options{}).Write(&short); err != nil {
		t.Fatal(err)
	}
	if want := "feedback: negative by U0000002 on the reply posted as 1700000001.000300"; !strings.Contains(all.String(), want) {
		t.Errorf("transcript --all lacks %q:\n%s", want, all.String())
	}
	if strings.Contains(short.String(), "feedback") {
		t.Errorf("the conversation shows the feedback marker:\n%s", short.String())
	}
}
