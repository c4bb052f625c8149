package slackemu

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

// canvasErr is the Slack error code of err ("" when it is not one).
func canvasErr(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// canvases.create, canvases.access.set, canvases.getContent and files.list through slack-go,
// as Slack documents them: a standalone canvas is the bot's alone until a channel is given
// access; its content reads back as markdown (or HTML); files.list lists it (filetype quip)
// with a permalink that opens it; the documented errors.
func TestCanvasesThroughSlackGo(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := context.Background()
	id, err := api.CreateCanvasContext(ctx, "Plan · lb-1234", slack.DocumentContent{Type: "markdown", Markdown: "# Plan\n\nship it"})
	if err != nil || id == "" {
		t.Fatalf("create: %q %v", id, err)
	}
	c, ok := emu.CanvasByID(id)
	if !ok || c.Title != "Plan · lb-1234" || c.Markdown != "# Plan\n\nship it" || c.Creator != "UB000001" || len(c.Access) != 0 {
		t.Fatalf("the canvas %+v %v", c, ok)
	}
	if got, err := api.GetCanvasContentContext(ctx, id); err != nil || got != "# Plan\n\nship it" {
		t.Fatalf("getContent: %q %v", got, err)
	}
	if got, err := api.GetCanvasContentContext(ctx, id, slack.GetCanvasContentOptionContentType("html")); err != nil || !strings.Contains(got, "<p>ship it</p>") {
		t.Fatalf("getContent html: %q %v", got, err)
	}
	if err := api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: id, AccessLevel: "read", ChannelIDs: []string{"C0000001"}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := emu.CanvasByID(id); c.Access["C0000001"] != "read" {
		t.Fatalf("access %v", c.Access)
	}
	files, paging, err := api.GetFilesContext(ctx, slack.GetFilesParameters{User: "UB000001", TimestampFrom: slack.JSONTime(time.Now().Add(-time.Minute).Unix()), Count: 10, Page: 1})
	if err != nil || len(files) != 1 || files[0].ID != id || files[0].Filetype != "quip" || files[0].Title != "Plan · lb-1234" ||
		!strings.HasSuffix(files[0].Permalink, "/docs/T0000001/"+id) || paging.Pages != 1 {
		t.Fatalf("files.list: %+v %+v %v", files, paging, err)
	}
	if files, _, err := api.GetFilesContext(ctx, slack.GetFilesParameters{User: "U0000001", Count: 10, Page: 1}); err != nil || len(files) != 0 {
		t.Fatalf("files.list of ada's files: %d %v", len(files), err)
	}
	other, err := emu.CreateCanvas("U0000002", "Grace's notes", "private")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"content not markdown", func() error {
			_, err := api.CreateCanvasContext(ctx, "x", slack.DocumentContent{Type: "html", Markdown: "x"})
			return err
		}, "invalid_arguments"},
		{"tab in an unknown channel", func() error {
			_, err := api.CreateCanvasContext(ctx, "x", slack.DocumentContent{}, slack.CreateCanvasOptionChannelID("C0000404"))
			return err
		}, "channel_not_found"},
		{"access: neither channels nor people", func() error {
			return api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: id, AccessLevel: "read"})
		}, "invalid_parameters"},
		{"access: both", func() error {
			return api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: id, AccessLevel: "read", ChannelIDs: []string{"C0000001"}, UserIDs: []string{"U0000001"}})
		}, "invalid_parameters"},
		{"access: a level Slack does not have", func() error {
			return api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: id, AccessLevel: "admin", ChannelIDs: []string{"C0000001"}})
		}, "invalid_arguments"},
		{"access: owner for a channel", func() error {
			return api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: id, AccessLevel: "owner", ChannelIDs: []string{"C0000001"}})
		}, "invalid_arguments"},
		{"access: a DM", func() error {
			return api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: id, AccessLevel: "read", ChannelIDs: []string{"D0000001"}})
		}, "channel_not_found"},
		{"access: a canvas the bot cannot see", func() error {
			return api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: other, AccessLevel: "read", ChannelIDs: []string{"C0000001"}})
		}, "canvas_not_found"},
		{"read a canvas the bot cannot see", func() error {
			_, err := api.GetCanvasContentContext(ctx, other)
			return err
		}, "canvas_not_found"},
		{"read an unknown canvas", func() error {
			_, err := api.GetCanvasContentContext(ctx, "F0000404")
			return err
		}, "canvas_not_found"},
		{"files.list of an unknown type", func() error {
			_, _, err := api.GetFilesContext(ctx, slack.GetFilesParameters{Types: "videos"})
			return err
		}, "unknown_type"},
	} {
		if got := canvasErr(c.call()); got != c.want {
			t.Errorf("%s: %q, want %s", c.name, got, c.want)
		}
	}
	// Shared in a channel the bot is in, a person's canvas is the bot's to read; not to
	// change.
	if _, err := emu.Post(Post{Channel: "C0000001", User: "U0000002", Text: "my notes", Files: []File{{ID: other}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := api.GetCanvasContentContext(ctx, other); err != nil || got != "private" {
		t.Fatalf("a shared canvas: %q %v", got, err)
	}
	if got := canvasErr(api.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: other, AccessLevel: "read", ChannelIDs: []string{"C0000001"}})); got != "restricted_action" {
		t.Fatalf("changing a person's canvas's access: %q", got)
	}
}

// A workspace with canvases off answers canvas_disabled_user_team; canvases.create is rate
// limited as Tier 2, through the emulator's limits (Retry-After).
func TestCanvasesDisabledAndRateLimited(t *testing.T) {
	t.Parallel()
	off := startEmu(t, Options{CanvasesDisabled: true})
	api := newAPI(off, off.BotToken(), off.AppToken())
	if _, err := api.CreateCanvasContext(context.Background(), "x", slack.DocumentContent{}); canvasErr(err) != "canvas_disabled_user_team" {
		t.Fatalf("canvases off: %v", err)
	}
	emu := startEmu(t, Options{RateLimits: map[string]RateLimit{"canvases.create": {Burst: 1, Every: time.Hour}}})
	api = newAPI(emu, emu.BotToken(), emu.AppToken())
	if _, err := api.CreateCanvasContext(context.Background(), "one", slack.DocumentContent{}); err != nil {
		t.Fatal(err)
	}
	_, err := api.CreateCanvasContext(context.Background(), "two", slack.DocumentContent{})
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter <= 0 || len(emu.Canvases()) != 1 {
		t.Fatalf("the second create within the limit: %v, %d canvases", err, len(emu.Canvases()))
	}
}
