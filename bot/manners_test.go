package bot_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/session"
)

// notAddressed returns the reasons of the session's not_addressed markers, in order.
func (h *harness) notAddressed(id session.ID) []string {
	h.t.Helper()
	var out []string
	for _, e := range h.events(id, session.TypeNotAddressed) {
		var m session.NotAddressed
		if err := e.Decode(&m); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, m.Reason)
	}
	return out
}

// Two people talking to each other in a session's thread get no reply from the bot; every
// message is recorded, the log says why each went unanswered, and the model's next turn sees
// them as context.
func TestMannersPeopleTalkingToEachOtherAreNotAnswered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, &echoAgent{}, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> why is the build red?"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)
	h.answered(s.ID)

	for _, p := range []slackemu.Post{
		{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + grace + "> did you touch the CI config?"},
		{Channel: general, User: grace, ThreadTS: top.TS, Text: "(aside) yes, yesterday"},
		{Channel: general, User: ada, ThreadTS: top.TS, Text: "!aside ok thanks"},
	} {
		h.acked(h.post(p))
	}
	// The signal that the bot heard all three and decided: each has its not_addressed marker
	// and every message is covered by a completed turn.
	h.waitFor("three not_addressed markers", func() bool { return len(h.notAddressed(s.ID)) == 3 })
	h.answered(s.ID)
	got := h.notAddressed(s.ID)
	slices.Sort(got)
	if strings.Join(got, " ") != "aside aside other_person" {
		t.Fatalf("reasons %q", got)
	}
	if n := len(h.emu.BotReplies(general, top.TS)); n != 1 {
		t.Fatalf("%d bot replies; the people talking to each other were answered", n)
	}
	if n := len(h.events(s.ID, session.TypeUserMessage)); n != 4 {
		t.Fatalf("%d user messages recorded, want 4", n)
	}

	// A message for the bot is answered, and the model sees what was said meanwhile.
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "so what do we do?"})
	msgs := h.replies(general, top.TS, 2)
	if last := msgs[len(msgs)-1].Text; !strings.Contains(last, "did you touch the CI config") || !strings.Contains(last, "yes, yesterday") {
		t.Fatalf("the model did not see the unanswered messages: %q", last)
	}
}

// mute silences the bot in the thread (still recorded); a mention while muted gets a one-line
// reminder; unmute resumes it.
func TestMannersMuteAndUnmute(t *testing.T) {
	t.Parallel()
	agent := &echoAgent{}
	h := newHarness(t, agent, harnessOptions{})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
	h.replies(general, top.TS, 1)
	s := h.session(general, top.TS)

	h.post(slackemu.Post{Channel: general, User: grace, ThreadTS: top.TS, Text: "mute"})
	msgs := h.replies(general, top.TS, 2)
	if !strings.Contains(msgs[1].Text, "unmute") {
		t.Fatalf("mute confirmation %q does not say how to unmute", msgs[1].Text)
	}
	if n := len(h.events(s.ID, session.TypeThreadMuted)); n != 1 {
		t.Fatalf("%d thread_muted events", n)
	}
	if muted := h.events(s.ID, session.TypeThreadMuted); muted[0].Actor.ID != grace {
		t.Fatalf("thread_muted by %q, want %s", muted[0].Actor.ID, grace)
	}

	h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "let's check the logs"}))
	h.waitFor("the muted message marked", func() bool { return len(h.notAddressed(s.ID)) == 1 })
	h.answered(s.ID)
	if n := len(h.emu.BotReplies(general, top.TS)); n != 2 {
		t.Fatalf("%d bot replies in a muted thread", n)
	}
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> are you there?"})
	msgs = h.replies(general, top.TS, 3)
	if !strings.Contains(msgs[2].Text, "muted") || !strings.Contains(msgs[2].Text, "unmute") {
		t.Fatalf("reminder %q", msgs[2].Text)
	}

	runs := agent.Runs()
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> unmute"})
	msgs = h.replies(general, top.TS, 4)
	if !strings.Contains(msgs[3].Text, "Unmuted") {
		t.Fatalf("unmute reply %q", msgs[3].Text)
	}
	if agent.Runs() != runs {
		t.Fatal("mute, unmute and the reminder called the model")
	}
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "what do the logs say?"})
	msgs = h.replies(general, top.TS, 5)
	if !strings.Contains(msgs[4].Text, "let's check the logs") {
		t.Fatalf("after unmute the model did not see what was said while muted: %q", msgs[4].Text)
	}
}

// LOGBOOK_THREAD_REPLIES=mentions answers only messages that mention the bot; all answers
// every message.
func TestMannersModes(t *testing.T) {
	t.Parallel()
	for mode, want := range map[bot.ThreadReplies]int{bot.RepliesMentions: 2, bot.RepliesAll: 4} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, &echoAgent{}, harnessOptions{threadReplies: mode})
			top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> hello"})
			h.replies(general, top.TS, 1)
			s := h.session(general, top.TS)
			for _, text := range []string{"plain follow-up", "<@" + grace + "> look at this"} {
				h.acked(h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: text}))
				h.answered(s.ID)
			}
			h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "<@" + botUser + "> and you?"})
			h.replies(general, top.TS, want)
			h.answered(s.ID)
			if n := len(h.emu.BotReplies(general, top.TS)); n != want {
				t.Fatalf("%d replies, want %d", n, want)
			}
		})
	}
}
