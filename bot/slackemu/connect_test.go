package slackemu

import (
	"encoding/json"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// A channel hosted by another organisation, as Slack shows it to an app: its events carry the
// host as team_id and context_team_id and our installation in authorizations; its files come
// as check_file_info stubs in events and conversations.history, whole in files.info;
// conversations.info says who hosts it. Converting it to private fires the subtype message and
// conversations.info changes; deleting it makes it channel_not_found.
func TestSlackConnectChannelAsSlackShowsIt(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{
		Users:    []User{{ID: "U0000001", Name: "ada"}, {ID: "U0000003", Name: "bob", Team: "T0000002"}},
		Channels: []Channel{{ID: "C0000007", Name: "partner", HostTeam: "T0000002", Members: []string{"U0000001", "U0000003", "UB000001"}}},
	})
	c := connect(t, emu)
	waitConnected(t, emu, 1)
	p, err := emu.ShareFile("C0000007", "U0000003", "", "the log", File{Name: "x.log", Content: []byte("boom\n")})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := asDelivered(c.waitEvent(t, "the file share", eventsAPI(ofEvent(p.EventIDs[0], 0))))
	var outer struct {
		TeamID         string `json:"team_id"`
		ContextTeamID  string `json:"context_team_id"`
		Shared         bool   `json:"is_ext_shared_channel"`
		Authorizations []struct {
			TeamID string `json:"team_id"`
		} `json:"authorizations"`
		Event struct {
			Team  string       `json:"team"`
			Files []slack.File `json:"files"`
		} `json:"event"`
	}
	if err := json.Unmarshal(d.req.Payload, &outer); err != nil {
		t.Fatal(err)
	}
	if outer.TeamID != "T0000002" || outer.ContextTeamID != "T0000002" || !outer.Shared || len(outer.Authorizations) != 1 ||
		outer.Authorizations[0].TeamID != "T0000001" || outer.Event.Team != "T0000002" {
		t.Fatalf("envelope %+v", outer)
	}
	if f := outer.Event.Files; len(f) != 1 || f[0].FileAccess != "check_file_info" || f[0].Name != "" || f[0].URLPrivate != "" {
		t.Fatalf("event files %+v; want a check_file_info stub", f)
	}
	ack(t, c, d.req)
	h, err := c.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: "C0000007"})
	if err != nil || len(h.Messages) != 1 || h.Messages[0].Files[0].FileAccess != "check_file_info" {
		t.Fatalf("history %+v %v", h, err)
	}
	f, _, _, err := c.api.GetFileInfo(h.Messages[0].Files[0].ID, 0, 0)
	if err != nil || f.Name != "x.log" || f.URLPrivateDownload == "" {
		t.Fatalf("files.info %+v %v", f, err)
	}
	info, err := c.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C0000007"})
	if err != nil || !info.IsExtShared || info.ContextTeamID != "T0000002" || info.IsPrivate {
		t.Fatalf("conversations.info %+v %v", info, err)
	}

	conv, err := emu.ConvertToPrivate("C0000007", "U0000001")
	if err != nil || len(conv.EventIDs) != 1 {
		t.Fatalf("convert: %+v %v", conv, err)
	}
	d, _ = asDelivered(c.waitEvent(t, "the conversion", eventsAPI(ofEvent(conv.EventIDs[0], 0))))
	if m, ok := d.inner.Data.(*slackevents.MessageEvent); !ok || m.SubType != "channel_convert_to_private" || m.ChannelType != "group" {
		t.Fatalf("conversion event %#v", d.inner.Data)
	}
	ack(t, c, d.req)
	if info, err := c.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C0000007"}); err != nil || !info.IsPrivate {
		t.Fatalf("after the conversion: %+v %v", info, err)
	}
	del, err := emu.DeleteChannel("C0000007")
	if err != nil || len(del.EventIDs) != 1 {
		t.Fatalf("delete: %+v %v", del, err)
	}
	d, _ = asDelivered(c.waitEvent(t, "the deletion", eventsAPI(ofEvent(del.EventIDs[0], 0))))
	if _, ok := d.inner.Data.(*slackevents.ChannelDeletedEvent); !ok {
		t.Fatalf("deletion event %#v", d.inner.Data)
	}
	ack(t, c, d.req)
	if _, err := c.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C0000007"}); err == nil || err.Error() != "channel_not_found" {
		t.Fatalf("a deleted channel: %v; want channel_not_found", err)
	}
}
