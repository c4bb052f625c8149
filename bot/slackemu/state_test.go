package slackemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// A workspace kept in Options.StateFile survives a restart: a reply in a thread started
// before it is accepted, conversations.replies answers for the whole thread (metadata,
// edits, reactions and files included), and new ts values and ids never repeat old ones.
func TestStateFileKeepsTheWorkspaceAcrossRestarts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "workspace.json")
	ctx := context.Background()

	a, err := Start(Options{StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	top, err := a.Post(Post{Channel: "C0000001", User: "U0000001", Text: "<@UB000001> remember 7-alpha"})
	if err != nil {
		t.Fatal(err)
	}
	api := newAPI(a, a.BotToken(), a.AppToken())
	_, replyTS, err := api.PostMessageContext(ctx, "C0000001", slack.MsgOptionText("noted", false), slack.MsgOptionTS(top.TS),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "logbook_reply", EventPayload: map[string]any{"event_id": "e1"}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := api.AddReactionContext(ctx, "eyes", slack.ItemRef{Channel: "C0000001", Timestamp: top.TS}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Edit("C0000001", top.TS, "<@UB000001> remember 7-alpha, please"); err != nil {
		t.Fatal(err)
	}
	shared, err := a.ShareFile("C0000001", "U0000002", top.TS, "the log", File{Name: "build.log", Title: "build.log", Mimetype: "text/plain", Filetype: "text", Size: 12})
	if err != nil {
		t.Fatal(err)
	}
	a.AddUser(User{ID: "U0000003", Name: "linus", RealName: "Linus T", TZ: "UTC"})
	before, _ := a.Thread("C0000001", top.TS)
	a.Close()
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".workspace.json.*")); len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}

	b, err := Start(Options{StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	after, err := b.Thread("C0000001", top.TS)
	if err != nil {
		t.Fatalf("the old thread is gone after the restart: %v", err)
	}
	if len(after) != len(before) {
		t.Fatalf("thread has %d messages after the restart, %d before", len(after), len(before))
	}
	// A reply in the old thread is accepted and gets a ts after every old one.
	reply, err := b.Post(Post{Channel: "C0000001", User: "U0000001", ThreadTS: top.TS, Text: "what was the code?"})
	if err != nil {
		t.Fatalf("reply in the old thread: %v", err)
	}
	if reply.TS <= shared.TS {
		t.Errorf("new ts %s is not after the old %s", reply.TS, shared.TS)
	}
	if reply.EventIDs[0] <= top.EventIDs[len(top.EventIDs)-1] {
		t.Errorf("event id %s repeats an old one (%v)", reply.EventIDs[0], top.EventIDs)
	}
	// conversations.replies, as the bot reads it, has the whole thread.
	api = newAPI(b, b.BotToken(), b.AppToken())
	msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C0000001", Timestamp: top.TS, IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 4 {
		t.Fatalf("conversations.replies has %d messages, want 4: %+v", len(msgs), msgs)
	}
	if m := msgs[0]; m.Text != "<@UB000001> remember 7-alpha, please" || m.Edited == nil || len(m.Reactions) != 1 || m.ReplyCount != 3 {
		t.Errorf("parent after the restart: %+v", m)
	}
	if m := msgs[1]; m.Timestamp != replyTS || m.Metadata.EventType != "logbook_reply" || m.BotID != b.BotID() {
		t.Errorf("bot reply after the restart: %+v", m)
	}
	if m := msgs[2]; len(m.Files) != 1 || m.Files[0].Name != "build.log" {
		t.Errorf("file share after the restart: %+v", m)
	}
	if u, err := api.GetUserInfoContext(ctx, "U0000003"); err != nil || u.Name != "linus" {
		t.Errorf("users.info of a user added before the restart: %+v %v", u, err)
	}
}

// A state file that cannot be read, or a directory where it cannot be written, fails Start.
func TestStateFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Options{StateFile: bad}); err == nil || !strings.Contains(err.Error(), "move the file away") {
		t.Errorf("Start with a corrupt state file: %v", err)
	}
	other := filepath.Join(dir, "other.json")
	s, err := Start(Options{StateFile: other, TeamID: "T0000009"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Start(Options{StateFile: other}); err == nil || !strings.Contains(err.Error(), "T0000009") {
		t.Errorf("Start with another workspace's state: %v", err)
	}
	if _, err := Start(Options{StateFile: filepath.Join(dir, "missing", "state.json")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start with an unwritable state file: %v", err)
	}
}
