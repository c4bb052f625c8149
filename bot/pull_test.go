package bot_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/forge/forgetest"
	"github.com/logbook/logbook/bot/hands"
	"github.com/logbook/logbook/bot/repo"
	"github.com/logbook/logbook/bot/slackemu"
	"github.com/logbook/logbook/sandbox"
	"github.com/logbook/logbook/sandbox/gittest"
	"github.com/logbook/logbook/session"
)

// newFakeGitHub is GitHub for acme/api, taking the token ghp_test, with branches besides main.
func newFakeGitHub(t *testing.T, branches ...string) *forgetest.Server {
	return forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", Branches: branches})
}

func prHarness(t *testing.T, gh *forgetest.Server, o harnessOptions) (*harness, *fakeprovider.Server) {
	t.Helper()
	repos, err := repo.ParseStatic(general + "=acme/api@main")
	if err != nil {
		t.Fatal(err)
	}
	o.repos, o.forge = repos, forge.NewGitHub(gh.URL, "ghp_test", nil)
	o.footer.PublicURL = "https://logbook.example.com"
	return modelHarness(t, o)
}

func prCall(id, branch string) fakeprovider.Reply {
	return fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: id, Name: "create_pull_request",
		Input: `{"branch":"` + branch + `","title":"Fix the flaky test","body":"It waited on a sleep."}`}}}
}

// create_pull_request opens one pull request; asked again for the branch — in a later turn,
// or from another thread — it returns that one; the reply links it, the log records it, and
// its body links the transcript.
func TestPullRequestOpenedOnce(t *testing.T) {
	t.Parallel()
	gh := newFakeGitHub(t, "fix-flaky")
	h, model := prHarness(t, gh, harnessOptions{})
	model.Push(prCall("toolu_1", "fix-flaky"), fakeprovider.Reply{Text: "Opened it."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> open the PR"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError || !strings.Contains(r.Content, "https://github.com/acme/api/pull/1") {
		t.Fatalf("result %+v", r)
	}
	if reply := cardText(h.replies(general, top.TS, 1)[0]); !strings.Contains(reply, "<https://github.com/acme/api/pull/1|acme/api#1>") {
		t.Fatalf("the reply does not link the pull request: %s", reply)
	}
	creates, pulls := gh.State()
	if creates != 1 || !strings.Contains(pulls[0]["body"].(string), "https://logbook.example.com/sessions/"+s.ID.String()) {
		t.Fatalf("%d creates; body %q", creates, pulls[0]["body"])
	}
	var pr session.PullRequest
	if evs := h.events(s.ID, session.TypePullRequest); len(evs) != 1 || evs[0].Decode(&pr) != nil || pr.Number != 1 || pr.Branch != "fix-flaky" || pr.Found {
		t.Fatalf("pull_request events %+v", evs)
	}

	// Again in the same thread: the log answers. From another thread: GitHub does.
	model.Push(prCall("toolu_2", "fix-flaky"), fakeprovider.Reply{Text: "Same one."})
	h.post(slackemu.Post{Channel: general, User: ada, ThreadTS: top.TS, Text: "open it again"})
	h.turns(s.ID, 2)
	model.Push(prCall("toolu_3", "fix-flaky"), fakeprovider.Reply{Text: "Already there."})
	other := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> open the PR for fix-flaky"})
	o := h.session(general, other.TS)
	h.answered(o.ID)
	if r := h.toolResult(o.ID, "toolu_3"); !strings.Contains(r.Content, "already there") {
		t.Fatalf("another thread: %+v", r)
	}
	if creates, _ := gh.State(); creates != 1 {
		t.Fatalf("%d pull requests created; want 1", creates)
	}
}

// GitHub creates the pull request and the answer is lost: the next look finds it, and no
// second one is opened. A branch GitHub does not have is refused in GitHub's words.
func TestPullRequestAfterALostAnswerAndARefusal(t *testing.T) {
	t.Parallel()
	gh := newFakeGitHub(t, "fix-flaky")
	gh.DropNext()
	h, model := prHarness(t, gh, harnessOptions{})
	model.Push(prCall("toolu_1", "fix-flaky"), prCall("toolu_2", "no-such-branch"), fakeprovider.Reply{Text: "done"})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> open the PRs"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if r := h.toolResult(s.ID, "toolu_1"); r.IsError || !strings.Contains(r.Content, "pull/1") {
		t.Fatalf("after the lost answer: %+v", r)
	}
	if r := h.toolResult(s.ID, "toolu_2"); !r.IsError || !strings.Contains(r.Content, "GitHub refused: Validation Failed") {
		t.Fatalf("unknown branch: %+v", r)
	}
	if creates, pulls := gh.State(); creates != 1 || len(pulls) != 1 {
		t.Fatalf("%d creates, %d pulls", creates, len(pulls))
	}
}

// Through the approvals policy like any tool: create_pull_request=ask shows the branch and
// title on the card, and nothing is opened before someone approves.
func TestPullRequestNeedsApproval(t *testing.T) {
	t.Parallel()
	gh := newFakeGitHub(t, "fix-flaky")
	h, model := prHarness(t, gh, harnessOptions{approval: bot.ApprovalConfig{Policy: askFor(t, "create_pull_request=ask")}})
	model.Push(prCall("toolu_1", "fix-flaky"), fakeprovider.Reply{Text: "Opened."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> open the PR"})
	card := h.card(top.TS)
	if !strings.Contains(cardText(card), "open a pull request from fix-flaky: Fix the flaky test") {
		t.Fatalf("card %s", cardText(card))
	}
	if creates, _ := gh.State(); creates != 0 {
		t.Fatal("opened before approval")
	}
	h.click(top.TS, bot.ActionApprove, ada)
	h.answered(h.session(general, top.TS).ID)
	if creates, _ := gh.State(); creates != 1 {
		t.Fatalf("%d creates", creates)
	}
}

// The whole way, with the network off: the agent edits the channel's repository, runs its
// test, commits and pushes a branch through logbook's egress proxy (which adds the token
// outside the sandbox), and opens one pull request; a host not on the allowlist is refused;
// every connection is in the log, and the token is in none of it.
func TestAgentPushesThroughEgressAndOpensPullRequest(t *testing.T) {
	t.Parallel()
	const token = "ghs_bot-level-T0KEN"
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	repo := gittest.ServeWith(t, gittest.Options{Path: "acme/api.git", Files: map[string]string{"README.md": "# api\n", "test.sh": "grep -q fixed fix.txt\n"}, Push: true, Auth: auth})
	gh := forgetest.New(t, forgetest.Options{Token: "ghp_test", Repo: "acme/api", HasBranch: func(b string) bool { return repo.Branch(b) != "" }})
	h, model := prHarness(t, gh, harnessOptions{bwrap: true, egress: &hands.Egress{},
		repo: &sandbox.RepoSpec{URL: repo.URL, Branch: "main", Header: "Authorization: " + auth}})
	model.Push(
		fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_c", Name: "run_command", Input: `{"command":` +
			`"echo fixed > fix.txt && sh test.sh && git checkout -q -b logbook/fix && git add fix.txt && git commit -q -m fix && git push -q origin logbook/fix 2>&1 && echo pushed; ` +
			`curl -s -o /dev/null -w 'connect %{http_connect}' https://example.com/"}`}}},
		prCall("toolu_p", "logbook/fix"),
		fakeprovider.Reply{Text: "Pushed and opened."})
	top := h.post(slackemu.Post{Channel: general, User: ada, Text: "<@" + botUser + "> fix it and open a PR"})
	s := h.session(general, top.TS)
	h.answered(s.ID)
	if r := h.toolResult(s.ID, "toolu_c"); !strings.Contains(r.Content, "pushed") || !strings.Contains(r.Content, "connect 403") {
		t.Fatalf("the command: %s", r.Content)
	}
	if repo.Branch("logbook/fix") == "" {
		t.Fatal("the branch was not pushed")
	}
	if r := h.toolResult(s.ID, "toolu_p"); r.IsError || !strings.Contains(r.Content, "pull/1") {
		t.Fatalf("create_pull_request: %+v", r)
	}
	if creates, _ := gh.State(); creates != 1 {
		t.Fatalf("%d pull requests", creates)
	}
	var push, refusal bool
	for _, e := range h.events(s.ID, session.TypeEgressConnection) {
		var c session.EgressConnection
		if err := e.Decode(&c); err != nil {
			t.Fatal(err)
		}
		push = push || c.Kind == "git" && c.Allowed && len(c.Refs) == 1 && c.Refs[0] == "refs/heads/logbook/fix"
		refusal = refusal || c.Kind == "connect" && !c.Allowed && c.Host == "example.com" && c.Port == 443
		if e.Actor.ID != "sandbox" {
			t.Errorf("egress_connection by %+v", e.Actor)
		}
	}
	if !push || !refusal {
		t.Fatalf("egress_connection events: push %v, refusal %v", push, refusal)
	}
	for _, e := range h.events(s.ID) {
		if strings.Contains(string(e.Payload), token) || strings.Contains(string(e.Payload), auth[len("Basic "):]) {
			t.Fatalf("%s holds the token: %s", e.Type, e.Payload)
		}
	}
}
