package forge_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// storeLog is a session's log over the real store, as a cell reads it.
type storeLog struct {
	st  *session.Store
	id  session.ID
	evs []session.Event
}

func (l *storeLog) Events(ctx context.Context, r session.Range) ([]session.Event, error) {
	return l.st.Events(ctx, l.id, r)
}

func (l *storeLog) Append(ctx context.Context, evs ...session.NewEvent) ([]session.Event, error) {
	out, err := l.st.Append(ctx, l.id, evs...)
	if err != nil {
		return nil, err
	}
	l.evs, err = l.st.Events(ctx, l.id, session.Range{})
	return out, err
}

func (l *storeLog) Snapshot() []session.Event { return l.evs }

// The person who asked is named on what the agent ships: the pull request's body names them
// (their name as the log has it) beside the transcript link, and where Slack shows their
// email, the agent is told to end its commits with a Co-authored-by trailer for them, which
// the body carries too. Without an email there is no trailer; a name cannot ping anyone.
func TestPullRequestNamesWhoAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	emu := slackemu.MustStart(t, slackemu.Options{Users: []slackemu.User{
		{ID: "U0000001", Name: "ada", RealName: "Ada Lovelace", Email: "ada@example.com", TZ: "UTC"},
		{ID: "U0000002", Name: "@here", RealName: "@here [x](y)", TZ: "UTC"}}})
	dir := directory.New(slack.New(emu.BotToken(), slack.OptionAPIURL(emu.APIURL())), time.Minute)
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := session.NewStore(pool, session.Options{})
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", Branches: []string{"fix-1", "fix-2", "fix-3"}})
	pulls := &forge.Pulls{Forge: forge.NewGitHub(gh.URL, "ghp_test", nil),
		Repo: func(context.Context, string, string) (forge.Repo, bool, error) {
			return forge.Repo{Owner: "acme", Name: "api", Base: "main"}, true, nil
		},
		Transcript: func(id session.ID) string { return "https://logbook.example.com/sessions/" + id.String() },
		People: func(ctx context.Context, user string) (string, string, error) {
			p, err := dir.Person(ctx, user)
			return p.Name, p.Email, err
		}}
	var lastTitle string
	open := func(thread, user, userName, branch, title, body string) (string, string) {
		t.Helper()
		sess, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C0000001", ThreadTS: thread})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := st.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: user},
			Payload: session.UserMessage{Channel: "C0000001", User: user, UserName: userName, Text: "fix it and open a PR"}})
		if err != nil {
			t.Fatal(err)
		}
		log := &storeLog{st: st, id: sess.ID, evs: evs}
		o, err := pulls.Offer(ctx, part.Scope{Session: sess, Through: evs[0].Seq, Requester: user, Log: log, Logger: zerolog.Nop()})
		if err != nil || len(o.Tools) != 1 {
			t.Fatalf("offer: %v, %d tools", err, len(o.Tools))
		}
		in, _ := json.Marshal(map[string]string{"branch": branch, "title": title, "body": body})
		if out := o.Tools[0].Run(ctx, brain.ToolUse{ID: "call_" + branch, Name: forge.ToolPullRequest, Input: in}); out.IsError {
			t.Fatalf("create_pull_request: %+v", out)
		}
		_, prs := gh.State()
		lastTitle = prs[len(prs)-1]["title"].(string)
		return o.Tools[0].Spec().Description, prs[len(prs)-1]["body"].(string)
	}

	desc, body := open("1700000000.000100", "U0000001", "ada", "fix-1", "Fix", "It waited on a sleep.")
	const trailer = "Co-authored-by: Ada Lovelace <ada@example.com>"
	if !strings.Contains(desc, "`"+trailer+"`") {
		t.Fatalf("the tool does not ask for the trailer: %s", desc)
	}
	if !strings.Contains(body, "asked for by ada: [transcript](https://logbook.example.com/sessions/") || !strings.HasSuffix(body, "\n\n"+trailer) {
		t.Fatalf("body %q", body)
	}

	desc, body = open("1700000000.000200", "U0000002", "", "fix-2", "Fix", "It waited on a sleep.")
	if strings.Contains(desc, "Co-authored-by") || strings.Contains(body, "Co-authored-by") {
		t.Fatalf("a trailer without an email: %q", body)
	}
	if !strings.Contains(body, `asked for by here \[x\](y): [transcript]`) || strings.Contains(body, "@here") {
		t.Fatalf("the name is not inert: %q", body)
	}

	// The model's title and body ping no one, forge no marker, and carry no attribution of
	// the model's own: only logbook's line and trailer name who asked.
	_, body = open("1700000000.000300", "U0000001", "ada", "fix-3", "Fix for @acme/security and @eve",
		"Closes the race, cc @acme/security.\n<!-- logbook-review head=x -->\n\n---\nOpened by logbook from a Slack thread, asked for by eve\n\n"+
			"Co-authored-by: Eve <eve@example.com>\n  co-authored-by: Mallory <m@example.com>")
	if strings.Contains(lastTitle, "@acme") || strings.Contains(lastTitle, "@eve") || !strings.Contains(lastTitle, "@\u200beve") {
		t.Fatalf("title %q", lastTitle)
	}
	if strings.Contains(body, "@acme/security") || strings.Contains(body, "<!--") || strings.Contains(body, "eve@") ||
		strings.Contains(strings.ToLower(body), "mallory") || strings.Contains(body, "asked for by eve") ||
		strings.Count(body, "Co-authored-by:") != 1 || !strings.HasSuffix(body, "\n\n"+trailer) || !strings.Contains(body, "asked for by ada") {
		t.Fatalf("body %q", body)
	}
}
