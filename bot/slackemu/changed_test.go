package slackemu

import (
	"slices"
	"testing"

	"github.com/slack-go/slack"
)

// ChangedSince returns what was stored, rewritten or deleted since a cursor, each message once
// and as it is now: a posted message, a stream's appends and stop, a chat.update, an edit;
// nothing when nothing changed; a deleted message as deleted (conversations.history no longer
// shows it: a watcher that saw it must not count it).
func TestChangedSinceReturnsWhatChanged(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	texts := func(ms []Change) []string {
		var out []string
		for _, m := range ms {
			t := m.Text
			if m.Deleted {
				t = "deleted: " + t
			}
			out = append(out, t)
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
	got, next := emu.ChangedSince(cur)
	if want := []string{"deleted: second"}; !slices.Equal(texts(got), want) || got[0].TS != posted {
		t.Fatalf("the updated message deleted: %q, want %q", texts(got), want)
	}
	if want := []string{"deleted: second", "<@UB000001> how, really?"}; !slices.Equal(texts(changed(emu, cur-2)), want) {
		t.Fatalf("the update and the edit, then the delete, since: %q, want %q", texts(changed(emu, cur-2)), want)
	}
	if got, again := emu.ChangedSince(next); len(got) != 0 || again != next {
		t.Fatalf("nothing changed after the delete: %q", texts(got))
	}

	// Posted and deleted between two looks: reported once, as deleted.
	_, brief, err := api.PostMessageContext(t.Context(), "C0000001", slack.MsgOptionText("brief", false), slack.MsgOptionTS(thread))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.DeleteMessageContext(t.Context(), "C0000001", brief); err != nil {
		t.Fatal(err)
	}
	if got, _ := emu.ChangedSince(next); !slices.Equal(texts(got), []string{"deleted: brief"}) {
		t.Fatalf("posted and deleted since the last look: %q, want it once, deleted", texts(got))
	}
}

func changed(emu *Server, cursor int) []Change {
	got, _ := emu.ChangedSince(cursor)
	return got
}
