package bot

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/logbook/logbook/session"
)

func TestHear(t *testing.T) {
	t.Parallel()
	other := map[string]string{"U0000002": "grace"}
	cases := []struct {
		name   string
		mode   ThreadReplies
		msg    session.UserMessage
		muted  bool
		first  bool
		answer bool
		reason string
		mute   int
		canned string
	}{
		{name: "plain", mode: RepliesAddressed, msg: session.UserMessage{Text: "what now?"}, answer: true},
		{name: "mentions another person", mode: RepliesAddressed, msg: session.UserMessage{Text: "@grace look", Names: other}, reason: reasonOtherPerson},
		{name: "mentions the bot and another person", mode: RepliesAddressed, msg: session.UserMessage{Text: "ask @grace", Names: other, Mentioned: true}, answer: true},
		{name: "aside", mode: RepliesAddressed, msg: session.UserMessage{Text: "(aside) lunch?"}, reason: reasonAside},
		{name: "aside uppercase", mode: RepliesAddressed, msg: session.UserMessage{Text: "(ASIDE) lunch?"}, reason: reasonAside},
		{name: "bang aside", mode: RepliesAddressed, msg: session.UserMessage{Text: "!aside lunch?"}, reason: reasonAside},
		{name: "aside with mention", mode: RepliesAddressed, msg: session.UserMessage{Text: "(aside) not for you", Mentioned: true}, reason: reasonAside},
		{name: "first message always", mode: RepliesMentions, msg: session.UserMessage{Text: "@grace hi", Names: other}, first: true, answer: true},
		{name: "mentions mode without mention", mode: RepliesMentions, msg: session.UserMessage{Text: "what now?"}, reason: reasonNotMentioned},
		{name: "mentions mode with mention", mode: RepliesMentions, msg: session.UserMessage{Text: "what now?", Mentioned: true}, answer: true},
		{name: "all mode answers asides", mode: RepliesAll, msg: session.UserMessage{Text: "(aside) lunch?"}, answer: true},
		{name: "all mode answers other person", mode: RepliesAll, msg: session.UserMessage{Text: "@grace", Names: other}, answer: true},
		{name: "mute", mode: RepliesAddressed, msg: session.UserMessage{Text: "Mute."}, answer: true, mute: +1, canned: mutedReply},
		{name: "mute in all mode", mode: RepliesAll, msg: session.UserMessage{Text: "mute"}, answer: true, mute: +1, canned: mutedReply},
		{name: "mute when muted", mode: RepliesAddressed, msg: session.UserMessage{Text: "mute"}, muted: true, reason: reasonMuted},
		{name: "unmute", mode: RepliesAddressed, msg: session.UserMessage{Text: "unmute!"}, muted: true, answer: true, mute: -1, canned: unmutedReply},
		{name: "unmute when not muted", mode: RepliesMentions, msg: session.UserMessage{Text: "unmute"}, answer: true, canned: unmutedReply},
		{name: "muted plain", mode: RepliesAll, msg: session.UserMessage{Text: "what now?"}, muted: true, reason: reasonMuted},
		{name: "muted mention gets a reminder", mode: RepliesAddressed, msg: session.UserMessage{Text: "hello?", Mentioned: true}, muted: true, answer: true, canned: stillMuted},
		{name: "mute as part of a sentence is a message", mode: RepliesAddressed, msg: session.UserMessage{Text: "mute the alerts"}, answer: true},
	}
	for _, c := range cases {
		h := hear(c.mode, c.msg, c.muted, c.first)
		if h.answer != c.answer || h.reason != c.reason || h.mute != c.mute || h.canned != c.canned {
			t.Errorf("%s: got %+v, want answer=%v reason=%q mute=%d canned=%q", c.name, h, c.answer, c.reason, c.mute, c.canned)
		}
	}
}

func TestParseThreadReplies(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]ThreadReplies{"": RepliesAddressed, "addressed": RepliesAddressed, " Mentions ": RepliesMentions, "ALL": RepliesAll} {
		if got, err := ParseThreadReplies(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := ParseThreadReplies("sometimes"); err == nil {
		t.Error("sometimes: accepted")
	}
}

func TestHearAllAnswersAQuestionThatCameWithUnmute(t *testing.T) {
	t.Parallel()
	user := func(seq int64, text string) session.Event {
		p, _ := json.Marshal(session.UserMessage{Text: text, User: "U1"})
		return session.Event{Seq: seq, Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"}, Payload: p}
	}
	muted := session.Event{Seq: 2, Type: session.TypeThreadMuted, Payload: json.RawMessage(`{"message_seq":1}`)}
	for _, c := range []struct {
		name    string
		evs     []session.Event
		through int64
		canned  string
	}{
		{"question then unmute", []session.Event{user(1, "hello"), user(2, "what failed?"), user(3, "unmute")}, 1, ""},
		{"unmute alone", []session.Event{user(1, "mute"), muted, user(3, "unmute")}, 2, unmutedReply},
		{"question then mute", []session.Event{user(1, "hello"), user(2, "what failed?"), user(3, "mute")}, 1, mutedReply},
	} {
		h := hearAll(RepliesAddressed, c.evs, c.through, c.evs[len(c.evs)-1].Seq)
		if !h.answer || h.canned != c.canned {
			t.Errorf("%s: answer %v canned %q, want %q", c.name, h.answer, h.canned, c.canned)
		}
	}
}

// "handback" from someone other than the holder is answered with who holds the thread
// (issue 29: after a takeover by a login name, as by default, every "handback" was silently
// ignored); from the holder it hands the thread back.
func TestHandbackFromSomeoneElseSaysWhoHoldsIt(t *testing.T) {
	t.Parallel()
	user := func(seq int64, who, text string) session.Event {
		p, _ := json.Marshal(session.UserMessage{Text: text, User: who})
		return session.Event{Seq: seq, Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: who}, Payload: p}
	}
	taken := func(seq int64, by string) session.Event {
		p, _ := json.Marshal(session.TakenOver{By: by})
		return session.Event{Seq: seq, Type: session.TypeTakenOver, Actor: session.Actor{Kind: session.ActorUser, ID: by}, Payload: p}
	}
	for _, c := range []struct {
		name, by, from string
		canned         string
		handedBack     bool
	}{
		{"the holder", "U1", "U1", handedBackReply, true},
		{"another person", "U1", "U2", fmt.Sprintf(notHolderReply, "U1"), false},
		{"anyone after a takeover by login name", "alice", "U1", fmt.Sprintf(notHolderReply, "alice"), false},
	} {
		evs := []session.Event{user(1, c.from, "hi"), taken(2, c.by), user(3, c.from, "handback")}
		h := hearAll(RepliesAddressed, evs, 2, 3)
		if !h.answer || h.canned != c.canned {
			t.Errorf("%s: answer %v canned %q; want %q", c.name, h.answer, h.canned, c.canned)
		}
		back := false
		for _, m := range h.marks {
			back = back || m.Type == session.TypeHandedBack
		}
		if back != c.handedBack {
			t.Errorf("%s: handed back %v, want %v (marks %+v)", c.name, back, c.handedBack, h.marks)
		}
	}
}

// Signals about a followed pull request: a failure or a review is the model's; the checks
// green is said without it (and the model answers when a failure or a question comes too);
// a muted or taken-over thread records them not addressed.
func TestHearAllTakesUpFollowupSignals(t *testing.T) {
	t.Parallel()
	user := func(seq int64, text string) session.Event {
		p, _ := json.Marshal(session.UserMessage{Text: text, User: "U1"})
		return session.Event{Seq: seq, Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U1"}, Payload: p}
	}
	signal := func(seq int64, kind string) session.Event {
		p, _ := json.Marshal(session.FollowupSignal{Repo: "acme/api", Number: 7, Branch: "logbook/fix", Kind: kind, HeadSHA: "abcdef123"})
		return session.Event{Seq: seq, Type: session.TypeFollowupSignal, Actor: session.Actor{Kind: session.ActorGitHub, ID: "ada"}, Payload: p}
	}
	muted := session.Event{Seq: 2, Type: session.TypeThreadMuted, Payload: json.RawMessage(`{"message_seq":1}`)}
	taken, _ := json.Marshal(session.TakenOver{By: "U2"})
	for _, c := range []struct {
		name         string
		evs          []session.Event
		answer       bool
		canned       string
		notAddressed int
	}{
		{"a failure", []session.Event{user(1, "open a PR"), signal(2, session.SignalCheckFailed)}, true, "", 0},
		{"the checks green", []session.Event{user(1, "open a PR"), signal(2, session.SignalSuccess)}, true, ":white_check_mark: All checks pass on acme/api#7 (`logbook/fix`, head `abcdef1`).", 0},
		{"green and a review", []session.Event{user(1, "open a PR"), signal(2, session.SignalSuccess), signal(3, session.SignalReview)}, true, "", 0},
		{"green and a question", []session.Event{user(1, "open a PR"), signal(2, session.SignalSuccess), user(3, "why?")}, true, "", 0},
		{"muted", []session.Event{user(1, "mute"), muted, signal(3, session.SignalCheckFailed)}, false, "", 1},
		{"taken over", []session.Event{user(1, "open a PR"), {Seq: 2, Type: session.TypeTakenOver, Payload: taken}, signal(3, session.SignalCheckFailed)}, false, "", 1},
	} {
		through := int64(1)
		if c.evs[1].Type != session.TypeFollowupSignal {
			through = 2
		}
		h := hearAll(RepliesAddressed, c.evs, through, c.evs[len(c.evs)-1].Seq)
		n := 0
		for _, m := range h.marks {
			if m.Type == session.TypeNotAddressed {
				n++
			}
		}
		if h.answer != c.answer || h.canned != c.canned || n != c.notAddressed {
			t.Errorf("%s: answer %v canned %q, %d not addressed; want %v %q %d", c.name, h.answer, h.canned, n, c.answer, c.canned, c.notAddressed)
		}
	}
}
