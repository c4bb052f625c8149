package review_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/followup"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/review"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

const (
	general  = "C0000001"
	secretCh = "C0000002" // private
	random   = "C0000003"
	hookKey  = "whsec-test"
)

// trigger is a Trigger over the emulator, a real store and the fake GitHub (pull request #1 of
// acme/api at c1), behind followup's webhook endpoint, as serve wires it.
type trigger struct {
	t       *testing.T
	emu     *slackemu.Server
	st      *session.Store
	gh      *forgetest.Server
	tr      *review.Trigger
	hook    string
	signals chan session.ID
}

func newTrigger(t *testing.T) *trigger {
	t.Helper()
	ctx := context.Background()
	emu := slackemu.MustStart(t, slackemu.Options{})
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := session.NewStore(pool, session.Options{})
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", Branches: []string{"feature"}})
	api := forge.NewGitHub(gh.URL, "ghp_test", nil)
	repo := forge.Repo{Owner: "acme", Name: "api", Base: "main"}
	if _, err := api.CreatePull(ctx, repo, "feature", "Add the cache", ""); err != nil {
		t.Fatal(err)
	}
	gh.Push(1, c1, forgetest.File{Path: "app.go", Patch: "@@ -10,3 +10,5 @@\n ctx\n+a\n+b\n ctx\n ctx"})
	signals := make(chan session.ID, 100)
	slackAPI := slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL()))
	tr := &review.Trigger{Store: st, Starter: bot.NewStarter(slackAPI, st, func(id session.ID) { signals <- id }, emu.TeamID()),
		Signal: func(id session.ID) { signals <- id }, Login: func(context.Context) string { return "logbook-bot" }, Team: emu.TeamID(),
		Repo: func(_ context.Context, _, channel string) (forge.Repo, bool, error) {
			return repo, channel != random, nil
		}}
	f := followup.New(st, api, followup.Config{Secret: hookKey, Log: zerolog.Nop(), LookGap: time.Millisecond, Reviews: tr.Webhook})
	mux := http.NewServeMux()
	mux.Handle("POST "+followup.WebhookPath, f.Webhook())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &trigger{t: t, emu: emu, st: st, gh: gh, tr: tr, hook: srv.URL + followup.WebhookPath, signals: signals}
}

func (e *trigger) set(channel, value string) {
	e.t.Helper()
	if _, err := e.st.SetChannelSetting(context.Background(), session.ChannelSetting{Team: e.emu.TeamID(), Channel: channel,
		Name: "review_on", New: value, Set: true, SetBy: "U0000001"}); err != nil {
		e.t.Fatal(err)
	}
}

// posts are the review posts in channel.
func (e *trigger) posts(channel string) []slackemu.Message {
	var out []slackemu.Message
	for _, m := range e.emu.History(channel) {
		if m.ThreadTS == "" && strings.Contains(string(m.Metadata), review.MetadataEventType) {
			out = append(out, m)
		}
	}
	return out
}

// asks are the messages of the review thread in general asking for a review.
func (e *trigger) asks() []session.UserMessage {
	e.t.Helper()
	posts := e.posts(general)
	if len(posts) != 1 {
		e.t.Fatalf("%d review posts in general", len(posts))
	}
	s, err := e.st.SessionByThread(context.Background(), session.ThreadKey{Team: e.emu.TeamID(), Channel: general, ThreadTS: posts[0].TS})
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := e.st.Events(context.Background(), s.ID, session.Range{Types: []session.Type{session.TypeUserMessage}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []session.UserMessage
	for _, ev := range evs {
		var m session.UserMessage
		if ev.Decode(&m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Webhooks start reviews only where a channel opted in: review_on request takes a request for
// logbook's account's review and not a pull request opened; auto takes a push, which asks
// again in the pull request's thread of the channel; a private channel is never posted in; a
// delivery sent again starts nothing more.
func TestWebhookStartsReviewsWhereTheChannelOptedIn(t *testing.T) {
	t.Parallel()
	e := newTrigger(t)
	opened := e.gh.PullRequestEvent(1, "opened")
	if d := e.gh.Send(t, e.hook, hookKey, "pull_request", "", opened); d.Status != http.StatusOK || len(e.posts(general)) != 0 {
		t.Fatalf("no channel opted in: %d %q", d.Status, d.Body)
	}
	e.set(general, "request")
	e.set(secretCh, "auto")
	if d := e.gh.Send(t, e.hook, hookKey, "pull_request", "", e.gh.PullRequestEvent(1, "reopened")); d.Status != http.StatusOK || len(e.posts(general)) != 0 {
		t.Fatalf("request mode took a pull request opened: %d %q", d.Status, d.Body)
	}
	asked := e.gh.PullRequestEvent(1, "review_requested")
	asked["requested_reviewer"] = map[string]any{"login": "someone-else"}
	if d := e.gh.Send(t, e.hook, hookKey, "pull_request", "", asked); d.Status != http.StatusOK || len(e.posts(general)) != 0 {
		t.Fatalf("another reviewer's request started a review: %d %q", d.Status, d.Body)
	}
	asked = e.gh.PullRequestEvent(1, "review_requested")
	asked["requested_reviewer"] = map[string]any{"login": "logbook-bot"}
	if d := e.gh.Send(t, e.hook, hookKey, "pull_request", "", asked); d.Status != http.StatusAccepted || !strings.Contains(d.Body, "started 1 reviews") {
		t.Fatalf("logbook's review asked: %d %q", d.Status, d.Body)
	}
	if asks := e.asks(); len(asks) != 1 || asks[0].Text != "review "+prURL {
		t.Fatalf("asks %+v", asks)
	}
	if len(e.emu.History(secretCh)) != 0 {
		t.Fatal("a private channel was posted in")
	}
	if !strings.Contains(e.posts(general)[0].Text, "`octocat` on GitHub") {
		t.Fatalf("post %q", e.posts(general)[0].Text)
	}

	e.set(general, "auto")
	e.gh.Push(1, c2, forgetest.File{Path: "app.go", Patch: "@@ -30,2 +32,4 @@\n ctx\n+c\n+d\n ctx"})
	pushed := e.gh.PullRequestEvent(1, "synchronize")
	if d := e.gh.Send(t, e.hook, hookKey, "pull_request", "", pushed); d.Status != http.StatusAccepted {
		t.Fatalf("a push: %d %q", d.Status, d.Body)
	}
	if d := e.gh.Send(t, e.hook, hookKey, "pull_request", "", pushed); d.Status != http.StatusOK || !strings.Contains(d.Body, "already delivered") {
		t.Fatalf("the push sent again: %d %q", d.Status, d.Body)
	}
	if asks := e.asks(); len(asks) != 2 || len(e.posts(general)) != 1 {
		t.Fatalf("after the push: %d asks, %d posts", len(asks), len(e.posts(general)))
	}
	if len(e.signals) < 2 {
		t.Fatalf("%d signals", len(e.signals))
	}
}

// /logbook review starts a review of the channel's repository's pull request in its thread;
// another repository's, a channel without one, or no URL is refused with a reason.
func TestSlashReview(t *testing.T) {
	t.Parallel()
	e := newTrigger(t)
	table := slashcmd.New(e.emu.TeamID(), slashcmd.Help{}).Add(e.tr.Command())
	run := func(channel, text string) string {
		return table.Answer(context.Background(), slack.SlashCommand{TeamID: e.emu.TeamID(), ChannelID: channel, UserID: "U0000001",
			TriggerID: "trig-" + text, Text: text})
	}
	if out := run(general, "review"); !strings.Contains(out, "Say which pull request") {
		t.Fatalf("no url: %q", out)
	}
	if out := run(general, "review https://github.com/other/repo/pull/1"); !strings.Contains(out, "pull requests of `acme/api` only") {
		t.Fatalf("another repository: %q", out)
	}
	if out := run(random, "review "+prURL); !strings.Contains(out, "no repository") {
		t.Fatalf("no repository: %q", out)
	}
	if out := run(general, "review "+prURL); !strings.Contains(out, "Reviewing acme/api#1 in a new thread") {
		t.Fatalf("review: %q", out)
	}
	if out := run(general, "review  "+prURL+" "); !strings.Contains(out, "in its thread") {
		t.Fatalf("review again: %q", out)
	}
	if asks := e.asks(); len(asks) != 2 || !strings.Contains(e.posts(general)[0].Text, "<@U0000001>") {
		t.Fatalf("asks %+v", asks)
	}
}
