package forge_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

// A branch name is the model's (steered, perhaps, by a repository file or a pull request it
// read): "logbook/fix<!channel>" is refused as a branch, and the reply's footer escapes
// whatever branch it names, so no channel is pinged (found by a security review).
func TestABranchNameFromTheModelNeverPingsTheChannel(t *testing.T) {
	ctx := context.Background()
	const branch = "logbook/fix<!channel>"
	if !forge.ValidBranch(branch) {
		t.Skip("the branch is refused")
	}
	pool, err := session.Connect(ctx, pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := session.NewStore(pool, session.Options{})
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", Branches: []string{branch}})
	pulls := &forge.Pulls{Forge: forge.NewGitHub(gh.URL, "ghp_test", nil),
		Repo: func(context.Context, string, string) (forge.Repo, bool, error) {
			return forge.Repo{Owner: "acme", Name: "api", Base: "main"}, true, nil
		}}
	sess, err := st.Open(ctx, session.ThreadKey{Team: "T1", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: "U0000001"},
		Payload: session.UserMessage{Channel: "C0000001", User: "U0000001", Text: "fix it and open a PR"}})
	if err != nil {
		t.Fatal(err)
	}
	log := &storeLog{st: st, id: sess.ID, evs: evs}
	o, err := pulls.Offer(ctx, part.Scope{Session: sess, Through: evs[0].Seq, Requester: "U0000001", Log: log, Logger: zerolog.Nop()})
	if err != nil || len(o.Tools) != 1 {
		t.Fatalf("offer: %v", err)
	}
	in, _ := json.Marshal(map[string]string{"branch": branch, "title": "Fix", "body": "x"})
	out := o.Tools[0].Run(ctx, brain.ToolUse{ID: "call_1", Name: forge.ToolPullRequest, Input: in})
	if out.IsError {
		t.Fatalf("create_pull_request: %+v", out)
	}
	for _, l := range pulls.Footer(part.Scope{Session: sess, Log: log}) {
		if strings.Contains(l, "<!channel>") {
			t.Fatalf("the footer pings the channel: %s", l)
		}
	}
}
