package codechannel_test

import (
	"encoding/json"
	"testing"

	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/codechannel"
	"github.com/logbook/logbook/session"
)

func ev(t *testing.T, seq int64, typ session.Type, payload any) session.Event {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return session.Event{Seq: seq, Type: typ, Payload: b}
}

// The bar is read from the log: the repository's owner/name (its link only when it is https
// without credentials), the pull request's branch, number and CI as follow-through last saw
// it (signals about another pull request ignored), the spend; text the model or GitHub wrote
// is made inert.
func TestBarIsReadFromTheLog(t *testing.T) {
	t.Parallel()
	p := &codechannel.Part{Spend: func([]session.Event) string { return "USD 0.42 spent" }}
	evs := []session.Event{
		ev(t, 1, session.TypeSandboxProvisioned, session.SandboxProvisioned{Repo: "https://x:tok@github.com/acme/api.git"}),
	}
	if bar := p.Bar(evs); len(bar) != 2 || bar[0] != (slack.AgentContextBarItem{Key: "repository", Label: "acme/api"}) || bar[1].Key != "spend" {
		t.Fatalf("before a pull request: %+v", bar)
	}
	evs = append(evs,
		ev(t, 2, session.TypePullRequest, session.PullRequest{Repo: "acme/api", Branch: "fix-<!channel>", Number: 7, URL: "https://github.com/acme/api/pull/7"}),
		ev(t, 3, session.TypeFollowupSubscribed, session.FollowupSubscribed{Repo: "acme/api", Number: 7}))
	bar := p.Bar(evs)
	if len(bar) != 5 || bar[1].Label != "fix-!channel" || bar[2] != (slack.AgentContextBarItem{Key: "pull_request", Label: "#7", URL: "https://github.com/acme/api/pull/7"}) ||
		bar[3].Label != "CI pending" || bar[4].Label != "USD 0.42 spent" {
		t.Fatalf("with its pull request: %+v", bar)
	}
	for _, c := range []struct {
		sig  session.FollowupSignal
		want string
	}{
		{session.FollowupSignal{Number: 7, Kind: session.SignalCheckFailed, Attempt: 1}, "CI failing (attempt 1)"},
		{session.FollowupSignal{Number: 8, Kind: session.SignalSuccess}, "CI failing (attempt 1)"},
		{session.FollowupSignal{Number: 7, Kind: session.SignalSuccess}, "CI passing"},
	} {
		evs = append(evs, ev(t, int64(len(evs)+1), session.TypeFollowupSignal, c.sig))
		if got := p.Bar(evs)[3].Label; got != c.want {
			t.Fatalf("after %+v: %q, want %q", c.sig, got, c.want)
		}
	}
}
