package slackemu

import (
	"slices"
	"testing"

	"github.com/slack-go/slack"
)

// ChangedSince returns what was stored or rewritten since a cursor, each message once and as
// it is now: a posted message, a stream's appends and stop, a chat.update, an edit; nothing
// when nothing changed; a deleted message not at all.
func TestChangedSinceReturnsWhatChanged(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	texts := func(ms []Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Text)
		}
		return out
	}

	thread := userThread(t, emu)
	got, cur := emu.ChangedSince(0)
	if want := []string{"<@UB000001> how?"}; !slices.Equal(texts(got), want) {
		t.Fatalf("from the start: %q, want %q", texts(got), want)
	}
	if got, next := emu.ChangedSince(cur); len(got) != 0 || next != cur {
		t.Fatalf("nothing changed: got %q and cursor %d, want none and %d", texts(got), next, cur)
	}

	ts := startStream(t, api, thread, slack.MsgOptionMarkdownText("hel"))
	if _, _, err := api.AppendStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText("lo")); err != nil {
		t.Fatal(err)
	}
	got, cur = emu.ChangedSince(cur)
	if want := []string{"hello"}; !slices.Equal(texts(got), want) || got[0].ThreadTS != thread || !got[0].Streaming {
		t.Fatalf("a stream started and appended to: %+v, want one streaming message %q in the thread", got, want)
	}
	if _, _, err := api.StopStreamContext(t.Context(), "C0000001", ts, slack.MsgOptionMarkdownText(" world")); err != nil {
		t.Fatal(err)
	}
	got, cur = emu.ChangedSince(cur)
	if want := []string{"hello world"}; !slices.Equal(texts(got), want) || got[0].Streaming {
		t.Fatalf("the stream stopped: %+v, want %q no longer streaming", got, want)
	}

	_, posted, err := api.PostMessageContext(t.Context(), "C0000001", slack.MsgOptionText("first", false), slack.MsgOptionTS(thread))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := api.UpdateMessageContext(t.Context(), "C0000001", posted, slack.MsgOptionText("second", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := emu.Edit("C0000001", thread, "<@UB000001> how, really?"); err != nil {
		t.Fatal(err)
	}
	got, cur = emu.ChangedSince(cur)
	if want := []string{"second", "<@UB000001> how, really?"}; !slices.Equal(texts(got), want) {
		t.Fatalf("posted and updated, then the question edited: %q, want %q", texts(got), want)
	}

	if _, _, err := api.DeleteMessageContext(t.Context(), "C0000001", posted); err != nil {
		t.Fatal(err)
	}
	if got, _ := emu.ChangedSince(cur - 2); !slices.Equal(texts(got), []string{"<@UB000001> how, really?"}) {
		t.Fatalf("the update deleted since: %q, want only the edited question", texts(got))
	}
}
